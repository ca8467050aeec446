/* A target model's lifetime beside its load: the layers a forward needs,
 * and freeing whatever a load or a random init built. */
#include "target/target.h"

#include <stdlib.h>
#include <string.h>

#include "target/target_layer_storage.h"
#include "target/target_workspace.h"

int df_target_layers_needed(const DfModelConfig *cfg, const int *tap_layer_ids, int n_taps, int with_logits) {
    if (with_logits) return cfg->num_layers;
    int max_tap = -1;
    for (int i = 0; i < n_taps; i++)
        if (tap_layer_ids[i] > max_tap) max_tap = tap_layer_ids[i];
    return max_tap + 1;
}

void df_target_free(DfTargetModel *m) {
    if (!m->be) return;
    DfBackend *be = m->be;
    for (int i = 0; m->layers && i < m->n_layers_loaded; i++) df_target_layer_free(be, &m->layers[i]);
    free(m->layers);
    if (!m->lm_head_tied) df_buffer_free(be, &m->lm_head);
    df_buffer_free(be, &m->embed);
    df_buffer_free(be, &m->final_norm);
    df_buffer_free(be, &m->rope_cos);
    df_buffer_free(be, &m->rope_sin);
    df_target_workspace_free(be, &m->ws);
    df_hybrid_workspace_free(be, &m->hws);
    free(m->dir);
    memset(m, 0, sizeof *m);
}
