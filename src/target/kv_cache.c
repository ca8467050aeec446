#include "target/kv_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int df_kv_cache_init(DfKvCache *c, DfBackend *be, int n_layers, int n_slots, int capacity, int kv_dim, DfError *err) {
    return df_kv_cache_init_layers(c, be, n_layers, NULL, n_slots, capacity, kv_dim, err);
}

int df_kv_cache_init_layers(DfKvCache *c, DfBackend *be, int n_layers, const unsigned char *cached, int n_slots,
                            int capacity, int kv_dim, DfError *err) {
    memset(c, 0, sizeof *c);
    if (n_layers <= 0 || n_slots <= 0 || capacity <= 0 || kv_dim <= 0)
        return df_fail(err, "kv cache: bad shape (%d layers, %d slots, %d rows, %d values)", n_layers, n_slots,
                       capacity, kv_dim);
    c->n_layers = n_layers;
    c->n_slots = n_slots;
    c->capacity = capacity;
    c->kv_dim = kv_dim;
    c->k = df_xcalloc((size_t)n_layers, sizeof *c->k, "kv cache");
    c->v = df_xcalloc((size_t)n_layers, sizeof *c->v, "kv cache");
    c->lens = df_xcalloc((size_t)n_slots, sizeof *c->lens, "kv cache lengths");
    size_t n = (size_t)n_slots * capacity * kv_dim;
    for (int l = 0; l < n_layers; l++)
        if ((!cached || cached[l]) && (df_buffer_alloc(be, &c->k[l], DF_BUF_ACT, n, err) || df_buffer_alloc(be, &c->v[l], DF_BUF_ACT, n, err))) {
            df_kv_cache_free(c, be);
            return df_context(err, "kv cache of %d slots x %d rows", n_slots, capacity);
        }
    return 0;
}

void df_kv_cache_free(DfKvCache *c, DfBackend *be) {
    for (int l = 0; l < c->n_layers && c->k; l++) {
        df_buffer_free(be, &c->k[l]);
        df_buffer_free(be, &c->v[l]);
    }
    free(c->k);
    free(c->v);
    free(c->lens);
    memset(c, 0, sizeof *c);
}

void df_kv_cache_truncate(DfKvCache *c, int slot, int len) {
    if (slot < 0 || slot >= c->n_slots || len < 0 || len > c->lens[slot]) {
        fprintf(stderr, "dflash: internal error: kv cache truncate of slot %d to %d rows\n", slot, len);
        abort();
    }
    c->lens[slot] = len;
}
