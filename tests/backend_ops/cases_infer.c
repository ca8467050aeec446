/* test_backend_ops: inference against KV caches (kv_cache_write,
 * kv_attention) and a dense layer's fused decode step (qkv_rope_cache). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"

/* ---- kv_cache_write, kv_attention --------------------------------------------- */

/* A step of several sequences against their slots' caches. With prefill,
 * the cached rows are written by a step of their own (kv_cache_write) into
 * NaN-poisoned caches, so that a row read past a slot's length fails;
 * otherwise the caches start random. Then the step's K/V rows are written
 * and its queries attend, causal and as a block. Paged: the caches hold
 * every slot's pages in reverse (DfTestKvLayout, tests/test_util.h). */
typedef struct KvShape {
    int heads, kvh, hd;
    int n_seqs, n_slots, capacity;
    const int32_t *slots, *cache_lens, *n_new; /* NULL: a decode batch of n_seqs (slots (7 i) % n_seqs,
                                                  (37 i) % 300 cached rows, batch_new new rows each) */
    int batch_new, prefill;
    OpsScope scope;
    int paged;
} KvShape;

typedef struct KvLayout {
    int32_t slots[64], lens[64], n_new[64], starts[65];
    int n_seqs, n_rows;
} KvLayout;

static KvLayout kv_layout(const KvShape *s) {
    KvLayout l = {.n_seqs = s->n_seqs};
    assert_true(s->n_seqs <= 64);
    for (int i = 0; i < s->n_seqs; i++) {
        l.slots[i] = s->slots ? s->slots[i] : (i * 7) % s->n_seqs;
        l.lens[i] = s->slots ? s->cache_lens[i] : (i * 37) % 300;
        l.n_new[i] = s->slots ? s->n_new[i] : s->batch_new;
        l.starts[i + 1] = l.starts[i] + l.n_new[i];
    }
    l.n_rows = l.starts[s->n_seqs];
    return l;
}

/* The shape's cache layout (tests/test_util.h): contiguous, or pages in reverse. */
static DfTestKvLayout kv_layout_of(const KvShape *s) {
    return (DfTestKvLayout){s->n_slots, s->capacity, s->paged};
}

/* The cache row holding row r of slot. */
static size_t kv_row(const KvShape *s, int slot, int r) {
    return df_test_kv_row(kv_layout_of(s), slot, r);
}

static void kv_batch(const Run *r, DfKvBatch *kb, const KvShape *s, int n, const int32_t *slots, const int32_t *lens,
                     const int32_t *counts) {
    int32_t starts[65] = {0};
    for (int i = 0; i < n; i++) starts[i + 1] = starts[i] + counts[i];
    DfError err;
    memset(kb, 0, sizeof *kb);
    if (df_test_kv_batch_set(kb, r->be, kv_layout_of(s), n, slots, lens, starts, &err))
        fail_msg("%s: %s", r->label, err.msg);
}

/* The cached rows of the sequences that have some, written by a step of their own. */
static void kv_prefill(Run *r, const KvShape *s, const KvLayout *l, DfBuffer kc, DfBuffer vc, float *host_k,
                       float *host_v) {
    int32_t ps[64], pl[64], pc[64];
    int np = 0, rows = 0, kvd = s->kvh * s->hd;
    for (int i = 0; i < l->n_seqs; i++)
        if (l->lens[i] > 0) ps[np] = l->slots[i], pl[np] = 0, pc[np++] = l->lens[i], rows += l->lens[i];
    if (!np) return;
    float *pk = ops_inputs(r, (size_t)rows * kvd, 300 + (uint64_t)rows, 1);
    float *pv = ops_inputs(r, (size_t)rows * kvd, 301 + (uint64_t)rows, 1);
    DfKvBatch kb;
    kv_batch(r, &kb, s, np, ps, pl, pc);
    df_op_kv_cache_write(r->be, kc, ops_up(r, pk, (size_t)rows * kvd, DF_BUF_ACT), &kb, kvd);
    df_op_kv_cache_write(r->be, vc, ops_up(r, pv, (size_t)rows * kvd, DF_BUF_ACT), &kb, kvd);
    ops_sync(r);
    df_kv_batch_free(&kb, r->be);
    for (int i = 0, row = 0; i < np; row += pc[i++]) /* what the caches must now hold */
        for (int j = 0; j < pc[i]; j++) {
            size_t at = kv_row(s, ps[i], j) * kvd, from = (size_t)(row + j) * kvd;
            memcpy(host_k + at, pk + from, (size_t)kvd * sizeof *pk);
            memcpy(host_v + at, pv + from, (size_t)kvd * sizeof *pv);
        }
}

/* Attention of each new row over its slot's rows (the caches as the reference holds them). */
static void ref_kv_attention(const KvShape *s, const KvLayout *l, const float *q, const float *kc, const float *vc,
                             int causal, double scale, double *out) {
    int hd = s->hd, kvd = s->kvh * hd, group = s->heads / s->kvh, max_n = 1;
    for (int i = 0; i < l->n_seqs; i++) max_n = l->lens[i] + l->n_new[i] > max_n ? l->lens[i] + l->n_new[i] : max_n;
    double *sc = malloc((size_t)max_n * sizeof *sc);
    assert_non_null(sc);
    for (int i = 0; i < l->n_seqs; i++)
        for (int j = 0; j < l->n_new[i]; j++) {
            int row = l->starts[i] + j, n = causal ? l->lens[i] + j + 1 : l->lens[i] + l->n_new[i];
            for (int h = 0; h < s->heads; h++) {
                const float *qv = q + ((size_t)row * s->heads + h) * hd;
                int g = h / group;
                double mx = -INFINITY, sum = 0;
                for (int k = 0; k < n; k++) {
                    double d = 0;
                    const float *key = kc + kv_row(s, l->slots[i], k) * kvd + g * hd;
                    for (int e = 0; e < hd; e++) d += (double)qv[e] * key[e];
                    sc[k] = d * scale, mx = fmax(mx, sc[k]);
                }
                for (int k = 0; k < n; k++) sum += sc[k] = exp(sc[k] - mx);
                double *o = out + ((size_t)row * s->heads + h) * hd;
                for (int e = 0; e < hd; e++) {
                    double acc = 0;
                    for (int k = 0; k < n; k++) acc += sc[k] * vc[kv_row(s, l->slots[i], k) * kvd + g * hd + e];
                    o[e] = acc / sum;
                }
            }
        }
    free(sc);
}

static void run_kv(Run *r, const void *shape) {
    const KvShape *s = shape;
    KvLayout l = kv_layout(s);
    int kvd = s->kvh * s->hd, qd = s->heads * s->hd;
    ops_label(r, "%d sequences, %d new rows, %d/%d heads of %d, %s %scaches of %d", l.n_seqs, l.n_rows, s->heads,
              s->kvh, s->hd, s->prefill ? "prefilled" : "random", s->paged ? "paged " : "", s->capacity);
    if (ops_skip(r, s->scope)) return;
    size_t cache_n = df_test_kv_rows(kv_layout_of(s)) * kvd;
    uint64_t seed = 170 + (uint64_t)l.n_rows + (uint64_t)s->hd * 3 + (uint64_t)s->heads;
    float *host_k, *host_v; /* the caches as they must be after the step */
    if (s->prefill) {
        host_k = ops_fvec(r, cache_n), host_v = ops_fvec(r, cache_n);
        for (size_t i = 0; i < cache_n; i++) host_k[i] = host_v[i] = NAN;
    } else {
        host_k = ops_inputs(r, cache_n, seed, 1), host_v = ops_inputs(r, cache_n, seed + 1, 1);
    }
    DfBuffer kc = s->prefill ? ops_poisoned(r, cache_n, DF_BUF_ACT) : ops_up(r, host_k, cache_n, DF_BUF_ACT);
    DfBuffer vc = s->prefill ? ops_poisoned(r, cache_n, DF_BUF_ACT) : ops_up(r, host_v, cache_n, DF_BUF_ACT);
    if (s->prefill) kv_prefill(r, s, &l, kc, vc, host_k, host_v);
    float *q = ops_inputs(r, (size_t)l.n_rows * qd, seed + 2, 3); /* far from a uniform softmax */
    float *kn = ops_inputs(r, (size_t)l.n_rows * kvd, seed + 3, 1), *vn = ops_inputs(r, (size_t)l.n_rows * kvd, seed + 4, 1);
    DfKvBatch kb;
    kv_batch(r, &kb, s, l.n_seqs, l.slots, l.lens, l.n_new);
    df_op_kv_cache_write(r->be, kc, ops_up(r, kn, (size_t)l.n_rows * kvd, DF_BUF_ACT), &kb, kvd);
    df_op_kv_cache_write(r->be, vc, ops_up(r, vn, (size_t)l.n_rows * kvd, DF_BUF_ACT), &kb, kvd);
    float *outs[2];
    double scale = 1.0 / sqrt((double)s->hd);
    DfBuffer qb = ops_up(r, q, (size_t)l.n_rows * qd, DF_BUF_ACT);
    for (int causal = 0; causal < 2; causal++) {
        DfBuffer out = ops_poisoned(r, (size_t)l.n_rows * qd, DF_BUF_ACT);
        df_op_kv_attention(r->be, out, qb, kc, vc, &kb, s->heads, s->kvh, s->hd, (float)scale, causal);
        outs[causal] = ops_result(r, causal ? "kv_attention causal" : "kv_attention block", out);
    }
    float *gk = ops_result_exact(r, "k cache", kc), *gv = ops_result_exact(r, "v cache", vc); /* copies: exact */
    df_kv_batch_free(&kb, r->be);
    if (!r->reference) return;
    for (int i = 0; i < l.n_seqs; i++) /* the new rows in place, everything else as it was */
        for (int j = 0; j < l.n_new[i]; j++) {
            size_t at = kv_row(s, l.slots[i], l.lens[i] + j) * kvd, from = (size_t)(l.starts[i] + j) * kvd;
            memcpy(host_k + at, kn + from, (size_t)kvd * sizeof *kn);
            memcpy(host_v + at, vn + from, (size_t)kvd * sizeof *vn);
        }
    for (size_t i = 0; i < cache_n; i++)
        if (!((gk[i] == host_k[i] || (isnan(gk[i]) && isnan(host_k[i]))) &&
              (gv[i] == host_v[i] || (isnan(gv[i]) && isnan(host_v[i])))))
            fail_msg("%s: cache element %zu: k %g v %g, want %g %g", r->label, i, gk[i], gv[i], host_k[i], host_v[i]);
    if (s->scope != OPS_CHECKED) return;
    for (int causal = 0; causal < 2; causal++) {
        double *want = ops_dvec(r, (size_t)l.n_rows * qd);
        ref_kv_attention(s, &l, q, host_k, host_v, causal, scale, want);
        ops_near(r, causal ? "kv_attention causal" : "kv_attention block", outs[causal], want, (size_t)l.n_rows * qd, 1e-5);
    }
}

static const int32_t S_TWO[] = {2, 0}, C_TWO[] = {5, 0}, N_TWO[] = {3, 1};
/* five sequences, slots out of order, cache lengths 0 .. 650: few blocks, so the key range is split */
static const int32_t S_FIVE[] = {4, 0, 5, 2, 1}, C_FIVE[] = {0, 37, 300, 650, 5};
static const int32_t N_ONE[] = {1, 1, 1, 1, 1}, N_BLOCK[] = {16, 16, 3, 16, 1};
static const int32_t S_LONG[] = {1}, C_LONG[] = {3000}, N_LONG1[] = {1}, N_LONG16[] = {16};
/* a hybrid decode step's layout: slots (5 i + 3) % 9, (7 i) % 5 cached rows, 1 to 4 new rows */
static const int32_t S_STEP[] = {3, 8, 4, 0}, C_STEP[] = {0, 2, 4, 1}, N_STEP[] = {1, 4, 2, 1};

#define FIVE(h, kv, hd, nn) {h, kv, hd, 5, 6, 700, S_FIVE, C_FIVE, nn, 0, 1, OPS_CHECKED, 0}
#define BATCH(h, kv, hd, nn) {h, kv, hd, 48, 48, 320, NULL, NULL, NULL, nn, 1, OPS_COMPARED, 0}
#define STEP(h, kv, hd) {h, kv, hd, 4, 9, 64, S_STEP, C_STEP, N_STEP, 0, 0, OPS_CHECKED, 0}
#define FIVE_PAGED(h, kv, hd, nn) {h, kv, hd, 5, 6, 700, S_FIVE, C_FIVE, nn, 0, 1, OPS_CHECKED, 1}

static const KvShape KV_SHAPES[] = {
    {4, 2, 64, 2, 4, 16, S_TWO, C_TWO, N_TWO, 0, 0, OPS_CHECKED, 0},
    FIVE(4, 4, 64, N_ONE),   FIVE(4, 4, 64, N_BLOCK),   FIVE(8, 2, 128, N_ONE), FIVE(8, 2, 128, N_BLOCK),
    FIVE(8, 2, 64, N_ONE),   FIVE(8, 2, 64, N_BLOCK),   FIVE(4, 4, 128, N_ONE), FIVE(4, 4, 128, N_BLOCK),
    FIVE(24, 4, 256, N_ONE), FIVE(24, 4, 256, N_BLOCK), FIVE(4, 4, 256, N_ONE), FIVE(4, 4, 256, N_BLOCK),
    /* a decode batch (one split), and one long sequence (many) */
    BATCH(32, 8, 128, 1), BATCH(16, 16, 64, 16), BATCH(24, 4, 256, 1),
    {32, 8, 128, 1, 2, 3100, S_LONG, C_LONG, N_LONG1, 0, 1, OPS_COMPARED, 0},
    {16, 4, 64, 1, 2, 3100, S_LONG, C_LONG, N_LONG16, 0, 1, OPS_COMPARED, 0},
    /* the head dims of hybrid targets: 16 (the fixture's), 40 (the generic kernel), 256 (Qwen3.6's) */
    STEP(4, 2, 16), STEP(6, 3, 40), STEP(8, 2, 256),
    /* paged caches: the tensor-core kernel at each head dim, a decode batch, one long sequence, the generic kernel */
    FIVE_PAGED(8, 2, 128, N_ONE), FIVE_PAGED(8, 2, 128, N_BLOCK), FIVE_PAGED(4, 4, 64, N_BLOCK),
    FIVE_PAGED(24, 4, 256, N_ONE), FIVE_PAGED(24, 4, 256, N_BLOCK),
    {32, 8, 128, 48, 48, 320, NULL, NULL, NULL, 1, 1, OPS_COMPARED, 1},
    {16, 4, 64, 1, 2, 3100, S_LONG, C_LONG, N_LONG16, 0, 1, OPS_COMPARED, 1},
    {6, 3, 40, 4, 9, 64, S_STEP, C_STEP, N_STEP, 0, 0, OPS_CHECKED, 1},
};

static const OpsVariant KV_VARIANTS[] = {
    {"split-K automatic (the default)", {NULL}, {0}},
    {"split-K for 2 blocks a SM", {"kv_attention_blocks_per_sm"}, {2}},
    {"split-K for 8 blocks a SM", {"kv_attention_blocks_per_sm"}, {8}},
};

const OpCase CASE_KV = {"kv_cache_write, kv_attention", "kv_cache_write kv_attention", run_kv, OPS_SHAPES(KV_SHAPES),
                        1e-2, OPS_VARIANTS(KV_VARIANTS)};

/* ---- qkv_rope_cache ------------------------------------------------------------- */

/* The fused op against the CPU's, and on the CPU against the ops it fuses
 * (tests/test_util.c runs them on one backend): q and the k cache within the
 * tolerance, the v cache (copies) exact, the caches' untouched rows NaN. */
static void run_qkv_rope_cache(Run *r, const void *shape) {
    const DfTestQkvCase *c = shape;
    ops_label(r, "%s", c->name);
    uint64_t seed = 180 + (uint64_t)c->head_dim + (uint64_t)c->heads * 5 + (uint64_t)c->n_new[0] * 3;
    DfTestQkvRun fused = df_test_qkv_run(r->be, c, seed, 1);
    ops_result_host(r, "q", fused.q, fused.q_count, OPS_REL);
    ops_result_host(r, "k cache", fused.k_cache, fused.cache_count, OPS_PARTIAL);
    ops_result_host(r, "v cache", fused.v_cache, fused.cache_count, OPS_EXACT);
    if (r->reference) {
        DfTestQkvRun sep = df_test_qkv_run(r->be, c, seed, 0);
        df_test_qkv_compare(c, &fused, &sep, 1e-6, 0);
        df_test_qkv_run_free(&sep);
    }
    df_test_qkv_run_free(&fused);
}

static const int32_t S3[3] = {3, 0, 2}, C3[3] = {5, 0, 17}, ONE3[3] = {1, 1, 1}, MANY3[3] = {4, 9, 1};
static const int32_t S1[1] = {1}, C1[1] = {0}, MANY1[1] = {40};
static const int32_t S_ODD[2] = {1, 3}, C_ODD[2] = {2, 0}, N_ODD[2] = {3, 1};
static const int32_t C_PAGE3[3] = {61, 0, 100}; /* 61 + 4 and 0 + 9 new rows: the first crosses a page's end */

static const DfTestQkvCase QKV_SHAPES[] = {
    {"odd: 2 sequences, qk norm, gqa 2, hd 64", 4, 2, 64, 1, 2, 4, 8, S_ODD, C_ODD, N_ODD},
    {"decode, qk norm, gqa 4, hd 128", 8, 2, 128, 1, 3, 4, 64, S3, C3, ONE3},
    {"block, qk norm, gqa 4, hd 128", 8, 2, 128, 1, 3, 4, 64, S3, C3, MANY3},
    {"block, no norm, gqa 1, hd 64", 2, 2, 64, 0, 3, 4, 64, S3, C3, MANY3},
    {"decode, no norm, gqa 4, hd 64", 8, 2, 64, 0, 3, 4, 64, S3, C3, ONE3},
    {"prompt, qk norm, gqa 1, hd 64", 4, 4, 64, 1, 1, 2, 64, S1, C1, MANY1},
    {"block, qk norm, gqa 4, hd 256", 4, 1, 256, 1, 3, 4, 64, S3, C3, MANY3},
    {"decode, no norm, gqa 1, hd 256", 2, 2, 256, 0, 3, 4, 64, S3, C3, ONE3},
    {"paged, block crossing a page, qk norm, gqa 4, hd 128", 8, 2, 128, 1, 3, 4, 160, S3, C_PAGE3, MANY3, 1},
    {"paged, decode, no norm, gqa 1, hd 256", 2, 2, 256, 0, 3, 4, 160, S3, C_PAGE3, ONE3, 1},
};

const OpCase CASE_QKV_ROPE_CACHE = {"qkv_rope_cache (against the ops it fuses)", "qkv_rope_cache", run_qkv_rope_cache,
                                    OPS_SHAPES(QKV_SHAPES), 1e-2, OPS_NO_VARIANTS};
