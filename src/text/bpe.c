#include "text/bpe.h"

#include <string.h>

#include "base/error.h"

static size_t pair_slot(uint64_t pair, size_t mask) {
    uint64_t h = pair * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 20) & mask;
}

void df_bpe_init(DfBpe *bpe, size_t n_vocab, size_t n_merges) {
    memset(bpe, 0, sizeof *bpe);
    df_str_map_init(&bpe->vocab, n_vocab);
    size_t cap = 16;
    while (cap < n_merges * 2) cap *= 2;
    bpe->merges = df_xmalloc(cap * sizeof *bpe->merges, "BPE merge map");
    for (size_t i = 0; i < cap; i++) bpe->merges[i].pair = UINT64_MAX;
    bpe->merges_mask = cap - 1;
    bpe->unk_id = -1;
    df_byte_level_init(&bpe->byte_level);
}

void df_bpe_free(DfBpe *bpe) {
    df_str_map_free(&bpe->vocab);
    free(bpe->merges);
    memset(bpe, 0, sizeof *bpe);
}

static void grow_merges(DfBpe *bpe) {
    size_t old_cap = bpe->merges_mask + 1, cap = old_cap * 2;
    DfMergeSlot *old = bpe->merges;
    bpe->merges = df_xmalloc(cap * sizeof *bpe->merges, "BPE merge map");
    for (size_t i = 0; i < cap; i++) bpe->merges[i].pair = UINT64_MAX;
    bpe->merges_mask = cap - 1;
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i].pair == UINT64_MAX) continue;
        size_t j = pair_slot(old[i].pair, bpe->merges_mask);
        while (bpe->merges[j].pair != UINT64_MAX) j = (j + 1) & bpe->merges_mask;
        bpe->merges[j] = old[i];
    }
    free(old);
}

void df_bpe_add_merge(DfBpe *bpe, int32_t left, int32_t right, int32_t new_id, uint32_t rank) {
    if ((bpe->n_merges + 1) * 2 > bpe->merges_mask + 1) grow_merges(bpe);
    uint64_t pair = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t i = pair_slot(pair, bpe->merges_mask);
    while (bpe->merges[i].pair != UINT64_MAX && bpe->merges[i].pair != pair) i = (i + 1) & bpe->merges_mask;
    if (bpe->merges[i].pair == UINT64_MAX) bpe->n_merges++;
    bpe->merges[i] = (DfMergeSlot){pair, rank, (uint32_t)new_id};
}

static const DfMergeSlot *find_merge(const DfBpe *bpe, int32_t left, int32_t right) {
    uint64_t pair = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t i = pair_slot(pair, bpe->merges_mask);
    for (;;) {
        const DfMergeSlot *m = &bpe->merges[i];
        if (m->pair == pair) return m;
        if (m->pair == UINT64_MAX) return NULL;
        i = (i + 1) & bpe->merges_mask;
    }
}

void df_bpe_finish(DfBpe *bpe) {
    for (int b = 0; b < 256; b++)
        bpe->byte_id[b] = df_str_map_get(&bpe->vocab, bpe->byte_level.utf8[b], bpe->byte_level.utf8_len[b]);
}

void df_bpe_scratch_free(DfBpeScratch *s) {
    free(s->symbols);
    free(s->heap);
    df_bytebuf_free(&s->mapped);
    memset(s, 0, sizeof *s);
}

/* ---- the min-heap of candidate merges, ordered by (rank, position) ---- */

static int merge_before(const DfBpeMerge *a, const DfBpeMerge *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(DfBpeScratch *s, DfBpeMerge m) {
    size_t i = s->heap_len++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!merge_before(&m, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = m;
}

static DfBpeMerge heap_pop(DfBpeScratch *s) {
    DfBpeMerge top = s->heap[0], last = s->heap[--s->heap_len];
    size_t i = 0, n = s->heap_len;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && merge_before(&s->heap[child + 1], &s->heap[child])) child++;
        if (!merge_before(&s->heap[child], &last)) break;
        s->heap[i] = s->heap[child];
        i = child;
    }
    if (n) s->heap[i] = last;
    return top;
}

static void push_pair(const DfBpe *bpe, DfBpeScratch *s, int32_t pos) {
    const DfBpeSymbol *sym = &s->symbols[pos];
    if (sym->next < 0) return;
    const DfMergeSlot *m = find_merge(bpe, sym->id, s->symbols[sym->next].id);
    if (m) heap_push(s, (DfBpeMerge){m->rank, (uint32_t)pos, m->new_id});
}

static void reserve(DfBpeScratch *s, size_t n) {
    if (n <= s->cap) return;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < n) cap *= 2;
    s->symbols = df_xrealloc(s->symbols, cap * sizeof *s->symbols, "BPE symbols");
    /* each merge pushes at most two entries: 3n bounds the heap */
    s->heap = df_xrealloc(s->heap, 3 * cap * sizeof *s->heap, "BPE heap");
    s->cap = cap;
}

/* The initial symbols: one per byte; a byte without a token becomes the unk
 * token (fused with its neighbours when fuse_unk), or is dropped when the
 * model has none, as `tokenizers` does. */
static size_t initial_symbols(const DfBpe *bpe, const unsigned char *w, size_t n, DfBpeScratch *s) {
    size_t count = 0;
    int prev_unk = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = bpe->byte_id[w[i]];
        int is_unk = id < 0;
        if (is_unk) {
            if (bpe->unk_id < 0) continue;
            if (prev_unk && bpe->fuse_unk) continue;
            id = bpe->unk_id;
        }
        prev_unk = is_unk;
        s->symbols[count] = (DfBpeSymbol){id, (int32_t)count - 1, (int32_t)count + 1, 0};
        count++;
    }
    if (count) s->symbols[count - 1].next = -1;
    return count;
}

static void merge_all(const DfBpe *bpe, DfBpeScratch *s, size_t count) {
    s->heap_len = 0;
    for (size_t i = 0; i + 1 < count; i++) push_pair(bpe, s, (int32_t)i);
    while (s->heap_len) {
        DfBpeMerge top = heap_pop(s);
        DfBpeSymbol *left = &s->symbols[top.pos];
        if (left->removed || left->next < 0) continue;
        DfBpeSymbol *right = &s->symbols[left->next];
        /* a stale entry: the pair at this position is no longer the one queued */
        const DfMergeSlot *m = find_merge(bpe, left->id, right->id);
        if (!m || m->new_id != top.new_id) continue;
        left->id = (int32_t)top.new_id;
        left->next = right->next;
        right->removed = 1;
        if (right->next >= 0) s->symbols[right->next].prev = (int32_t)top.pos;
        if (left->prev >= 0) push_pair(bpe, s, left->prev);
        push_pair(bpe, s, (int32_t)top.pos);
    }
}

void df_bpe_encode_word(const DfBpe *bpe, const unsigned char *w, size_t n, DfBpeScratch *s, DfI32Vec *out) {
    if (n == 0) return;
    if (n == 1 && bpe->byte_id[w[0]] >= 0) {
        df_i32vec_push(out, bpe->byte_id[w[0]]);
        return;
    }
    if (bpe->ignore_merges) {
        s->mapped.len = 0;
        for (size_t i = 0; i < n; i++)
            df_bytebuf_append(&s->mapped, bpe->byte_level.utf8[w[i]], bpe->byte_level.utf8_len[w[i]]);
        int32_t id = df_str_map_get(&bpe->vocab, s->mapped.data, s->mapped.len);
        if (id >= 0) {
            df_i32vec_push(out, id);
            return;
        }
    }
    reserve(s, n);
    size_t count = initial_symbols(bpe, w, n, s);
    merge_all(bpe, s, count);
    for (size_t i = 0; i < count; i++)
        if (!s->symbols[i].removed) df_i32vec_push(out, s->symbols[i].id);
}
