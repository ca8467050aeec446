/* Per-sequence key/value caches for incremental inference: for each layer
 * one K and one V buffer, and the number of valid rows of each of n_slots
 * slots. Rolling back a speculative step is lowering that number: rows past
 * it are overwritten by the next step.
 *
 * Two layouts (DfKvBatch describes both to the ops): contiguous, every slot
 * owning capacity rows; or paged, as a serving engine keeps it: a pool of
 * n_pages pages of DF_KV_PAGE_ROWS rows, handed to a slot as it grows
 * (df_kv_cache_hold) and back to the pool when it is emptied
 * (df_kv_cache_release), so that memory goes to the rows that exist rather
 * than to every slot's worst case. */
#ifndef DF_TARGET_KV_CACHE_H
#define DF_TARGET_KV_CACHE_H

#include "backend/backend.h"

typedef struct DfKvCache {
    int n_layers, n_slots, capacity, kv_dim;
    DfBuffer *k, *v; /* [n_layers], ACT [rows * kv_dim] each, rows: n_slots * capacity or n_pages * DF_KV_PAGE_ROWS
                      * (or empty: see init_layers) */
    int *lens;       /* [n_slots] valid rows */
    /* paged (n_pages > 0): */
    int n_pages, pages_per_slot; /* pages_per_slot: df_kv_pages_for(capacity) */
    int32_t *table;              /* [n_slots * pages_per_slot]: page j of slot s, -1 where it holds none */
    int *held;                   /* [n_slots]: pages slot s holds, table entries 0 .. held[s]-1 */
    int32_t *free_pages;         /* the pool's free pages, a stack of n_free */
    int n_free;
} DfKvCache;

int df_kv_cache_init(DfKvCache *c, DfBackend *be, int n_layers, int n_slots, int capacity, int kv_dim, DfError *err);
/* The same with buffers only for the layers l where cached[l] is nonzero
 * (the others stay empty: a hybrid target's linear layers); cached NULL: all.
 * n_pages 0: contiguous; otherwise paged, a pool of n_pages pages (at most
 * n_slots * df_kv_pages_for(capacity), which never runs short). */
int df_kv_cache_init_layers(DfKvCache *c, DfBackend *be, int n_layers, const unsigned char *cached, int n_slots,
                            int capacity, int n_pages, int kv_dim, DfError *err);
void df_kv_cache_free(DfKvCache *c, DfBackend *be);

/* Pages for the first `rows` rows of slot (rows <= capacity), taken from the
 * pool where it holds fewer: 0, or -1 when the pool has too few free pages
 * (then it takes none). Contiguous: always 0. */
int df_kv_cache_hold(DfKvCache *c, int slot, int rows);
/* Empties slot (length 0) and gives its pages back to the pool. */
void df_kv_cache_release(DfKvCache *c, int slot);
/* The page tables for df_kv_batch_set_paged; NULL when contiguous. */
const DfKvPageTable *df_kv_cache_page_table(const DfKvCache *c, DfKvPageTable *out);

/* Keeps the first len rows of slot (len <= its current length); a paged
 * slot keeps its pages. */
void df_kv_cache_truncate(DfKvCache *c, int slot, int len);

#endif
