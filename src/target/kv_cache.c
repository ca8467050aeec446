#include "target/kv_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int df_kv_cache_init(DfKvCache *c, DfBackend *be, int n_layers, int n_slots, int capacity, int kv_dim, DfError *err) {
    return df_kv_cache_init_layers(c, be, n_layers, NULL, n_slots, capacity, 0, kv_dim, err);
}

/* The pool: every page free (popped from the top: page 0 first), no slot holding any. */
static void init_pool(DfKvCache *c, int n_pages) {
    c->n_pages = n_pages;
    c->pages_per_slot = df_kv_pages_for(c->capacity);
    size_t entries = (size_t)c->n_slots * c->pages_per_slot;
    c->table = df_xmalloc(entries * sizeof *c->table, "kv cache page table");
    for (size_t i = 0; i < entries; i++) c->table[i] = -1;
    c->held = df_xcalloc((size_t)c->n_slots, sizeof *c->held, "kv cache pages held");
    c->free_pages = df_xmalloc((size_t)n_pages * sizeof *c->free_pages, "kv cache free pages");
    for (int i = 0; i < n_pages; i++) c->free_pages[i] = n_pages - 1 - i;
    c->n_free = n_pages;
}

int df_kv_cache_init_layers(DfKvCache *c, DfBackend *be, int n_layers, const unsigned char *cached, int n_slots,
                            int capacity, int n_pages, int kv_dim, DfError *err) {
    memset(c, 0, sizeof *c);
    if (n_layers <= 0 || n_slots <= 0 || capacity <= 0 || kv_dim <= 0 || n_pages < 0 ||
        n_pages > (int64_t)n_slots * df_kv_pages_for(capacity))
        return df_fail(err, "kv cache: bad shape (%d layers, %d slots, %d rows, %d pages, %d values)", n_layers,
                       n_slots, capacity, n_pages, kv_dim);
    c->n_layers = n_layers;
    c->n_slots = n_slots;
    c->capacity = capacity;
    c->kv_dim = kv_dim;
    c->k = df_xcalloc((size_t)n_layers, sizeof *c->k, "kv cache");
    c->v = df_xcalloc((size_t)n_layers, sizeof *c->v, "kv cache");
    c->lens = df_xcalloc((size_t)n_slots, sizeof *c->lens, "kv cache lengths");
    if (n_pages) init_pool(c, n_pages);
    size_t rows = n_pages ? (size_t)n_pages * DF_KV_PAGE_ROWS : (size_t)n_slots * capacity, n = rows * kv_dim;
    for (int l = 0; l < n_layers; l++)
        if ((!cached || cached[l]) && (df_buffer_alloc(be, &c->k[l], DF_BUF_ACT, n, err) || df_buffer_alloc(be, &c->v[l], DF_BUF_ACT, n, err))) {
            df_kv_cache_free(c, be);
            return n_pages ? df_context(err, "kv cache of %d pages of %d rows", n_pages, DF_KV_PAGE_ROWS)
                           : df_context(err, "kv cache of %d slots x %d rows", n_slots, capacity);
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
    free(c->table);
    free(c->held);
    free(c->free_pages);
    memset(c, 0, sizeof *c);
}

static void check_slot(const DfKvCache *c, int slot, const char *what) {
    if (slot < 0 || slot >= c->n_slots) {
        fprintf(stderr, "dflash: internal error: kv cache %s of slot %d (of %d)\n", what, slot, c->n_slots);
        abort();
    }
}

int df_kv_cache_hold(DfKvCache *c, int slot, int rows) {
    check_slot(c, slot, "hold");
    if (rows > c->capacity) return -1;
    if (!c->n_pages) return 0;
    int need = df_kv_pages_for(rows) - c->held[slot];
    if (need <= 0) return 0;
    if (need > c->n_free) return -1;
    int32_t *row = c->table + (size_t)slot * c->pages_per_slot;
    while (need-- > 0) row[c->held[slot]++] = c->free_pages[--c->n_free];
    return 0;
}

void df_kv_cache_release(DfKvCache *c, int slot) {
    check_slot(c, slot, "release");
    c->lens[slot] = 0;
    if (!c->n_pages) return;
    int32_t *row = c->table + (size_t)slot * c->pages_per_slot;
    while (c->held[slot] > 0) {
        int j = --c->held[slot];
        c->free_pages[c->n_free++] = row[j];
        row[j] = -1;
    }
}

const DfKvPageTable *df_kv_cache_page_table(const DfKvCache *c, DfKvPageTable *out) {
    if (!c->n_pages) return NULL;
    *out = (DfKvPageTable){c->table, c->n_pages};
    return out;
}

void df_kv_cache_truncate(DfKvCache *c, int slot, int len) {
    if (slot < 0 || slot >= c->n_slots || len < 0 || len > c->lens[slot]) {
        fprintf(stderr, "dflash: internal error: kv cache truncate of slot %d to %d rows\n", slot, len);
        abort();
    }
    c->lens[slot] = len;
}
