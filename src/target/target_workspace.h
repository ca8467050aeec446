/* The forward's activations kept in the model between calls
 * (DfTargetWorkspace, and a hybrid family's DfHybridWorkspace), grown when a
 * larger batch comes; their sizes are target_memory.h's specs. */
#ifndef DF_TARGET_TARGET_WORKSPACE_H
#define DF_TARGET_TARGET_WORKSPACE_H

#include "target/target.h"

/* m->ws, and m->hws where the family's layers use it, hold n_tokens rows. */
int df_target_workspace_ensure(DfTargetModel *m, int n_tokens, DfError *err);

/* m->hws holds n_tokens rows (m->ws must hold them too). */
int df_hybrid_workspace_ensure(DfTargetModel *m, int n_tokens, DfError *err);
void df_hybrid_workspace_free(DfBackend *be, DfHybridWorkspace *ws);

#endif
