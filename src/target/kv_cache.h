/* Per-sequence key/value caches for incremental inference: for each layer
 * one K and one V buffer of n_slots slots x capacity rows x kv_dim values
 * (the layout DfKvBatch describes), and the number of valid rows of each
 * slot. Rolling back a speculative step is lowering that number: rows past
 * it are overwritten by the next step. */
#ifndef DF_TARGET_KV_CACHE_H
#define DF_TARGET_KV_CACHE_H

#include "backend/backend.h"

typedef struct DfKvCache {
    int n_layers, n_slots, capacity, kv_dim;
    DfBuffer *k, *v; /* [n_layers], ACT [n_slots * capacity * kv_dim] each (or empty: see init_layers) */
    int *lens;       /* [n_slots] valid rows */
} DfKvCache;

int df_kv_cache_init(DfKvCache *c, DfBackend *be, int n_layers, int n_slots, int capacity, int kv_dim, DfError *err);
/* The same with buffers only for the layers l where cached[l] is nonzero
 * (the others stay empty: a hybrid target's linear layers); cached NULL: all. */
int df_kv_cache_init_layers(DfKvCache *c, DfBackend *be, int n_layers, const unsigned char *cached, int n_slots,
                            int capacity, int kv_dim, DfError *err);
void df_kv_cache_free(DfKvCache *c, DfBackend *be);

/* Keeps the first len rows of slot (len <= its current length). */
void df_kv_cache_truncate(DfKvCache *c, int slot, int len);

#endif
