/* The CUDA KV-cache ops (kv_cache_write, kv_attention) against the CPU ops,
 * and inference on the CUDA backend end to end. Op inputs are random (never
 * zero) and rounded to bf16, so both backends see the same values; caches and
 * outputs start NaN-poisoned, so a row read past a slot's length or an
 * unwritten output fails. Tolerance: max|a-b| / max|b| <= 1e-2. Cases: several
 * sequences with different cache lengths (0 included), slots not in order,
 * 1 and 16 new rows, GQA ratios 1 and 4, head_dim 64 and 128, causal and
 * non-causal, with and without split-K. argmax_rows against the CPU op (ties,
 * NaNs, aligned and scalar paths). End to end: bf16 greedy generation on
 * coder-tiny against transformers' fp32 greedy fixture and `dflash generate
 * --device cuda` against the CPU, both equal up to near ties (see
 * check_near_ties), and with --no-graphs equal to its recorded steps;
 * `dflash eval --device cuda` lossless against the GPU's own greedy decoding.
 * Everything GPU skips when no GPU is present (or CUDA was not built in). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend/backend.h"
#include "base/numeric.h"
#include "infer/generate.h"
#include "model/drafter_io.h"
#include "model/target.h"
#include "text/tokenizer.h"
#ifdef DF_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_variants.h"
#endif

#define OP_TOL 1e-2
#define MAX_FIXTURES 16

/* the CPU and CUDA backends (test_util.h); gpu NULL without a GPU */
typedef DfTestBackendPair Fixture;

/* --- the ops ---------------------------------------------------------------- */

typedef struct KvCase {
    const char *name;
    int heads, kv_heads, head_dim, causal;
    int n_seqs, n_slots, capacity;
    const int32_t *slots, *cache_lens, *n_new;
} KvCase;

/* One backend's run of a case: caches filled to cache_lens by a prefill
 * step (sequences with cached rows only), then the step's K/V written and
 * its queries attended. Returns the output and the caches on the host. */
typedef struct KvRun {
    float *out, *k, *v;
} KvRun;

static void kv_batch(DfBackend *be, DfKvBatch *kb, const KvCase *c, int n, const int32_t *slots, const int32_t *lens,
                     const int32_t *counts) {
    int32_t starts[256];
    assert_true(n < 256);
    starts[0] = 0;
    for (int i = 0; i < n; i++) starts[i + 1] = starts[i] + counts[i];
    DfError err;
    if (df_kv_batch_init(kb, be, n, slots, lens, starts, c->n_slots, c->capacity, &err)) fail_msg("%s", err.msg);
}

static KvRun kv_run(DfBackend *be, const KvCase *c, const float *pre_k, const float *pre_v, const float *q,
                    const float *k, const float *v) {
    int kvd = c->kv_heads * c->head_dim, qd = c->heads * c->head_dim;
    size_t cache_n = (size_t)c->n_slots * c->capacity * kvd;
    DfBuffer kc = df_test_upload_poisoned(be, cache_n, DF_BUF_ACT), vc = df_test_upload_poisoned(be, cache_n, DF_BUF_ACT);
    /* prefill: the sequences that have cached rows */
    int32_t ps[256], pl[256], pc[256];
    int np = 0, pre_rows = 0;
    for (int i = 0; i < c->n_seqs; i++)
        if (c->cache_lens[i] > 0) ps[np] = c->slots[i], pl[np] = 0, pc[np++] = c->cache_lens[i], pre_rows += c->cache_lens[i];
    DfKvBatch kb;
    if (np) {
        kv_batch(be, &kb, c, np, ps, pl, pc);
        DfBuffer pk = df_test_upload(be, pre_k, (size_t)pre_rows * kvd, DF_BUF_ACT);
        DfBuffer pv = df_test_upload(be, pre_v, (size_t)pre_rows * kvd, DF_BUF_ACT);
        df_op_kv_cache_write(be, kc, pk, &kb, kvd);
        df_op_kv_cache_write(be, vc, pv, &kb, kvd);
        DfError err;
        if (be->ops->sync(be, &err)) fail_msg("%s", err.msg);
        df_buffer_free(be, &pk), df_buffer_free(be, &pv);
        df_kv_batch_free(&kb, be);
    }
    kv_batch(be, &kb, c, c->n_seqs, c->slots, c->cache_lens, c->n_new);
    int rows = kb.n_rows;
    DfBuffer qb = df_test_upload(be, q, (size_t)rows * qd, DF_BUF_ACT);
    DfBuffer kb_ = df_test_upload(be, k, (size_t)rows * kvd, DF_BUF_ACT);
    DfBuffer vb = df_test_upload(be, v, (size_t)rows * kvd, DF_BUF_ACT);
    DfBuffer out = df_test_upload_poisoned(be, (size_t)rows * qd, DF_BUF_ACT);
    df_op_kv_cache_write(be, kc, kb_, &kb, kvd);
    df_op_kv_cache_write(be, vc, vb, &kb, kvd);
    df_op_kv_attention(be, out, qb, kc, vc, &kb, c->heads, c->kv_heads, c->head_dim, 1.0f / sqrtf((float)c->head_dim),
                       c->causal);
    KvRun r = {df_test_download(be, out), df_test_download(be, kc), df_test_download(be, vc)};
    DfBuffer *bufs[] = {&kc, &vc, &qb, &kb_, &vb, &out};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) df_buffer_free(be, bufs[i]);
    df_kv_batch_free(&kb, be);
    return r;
}

/* The written rows of every slot of the case (cache_lens + n_new), packed. */
static float *valid_rows(const KvCase *c, const float *cache, size_t *n) {
    int kvd = c->kv_heads * c->head_dim;
    size_t total = 0;
    for (int i = 0; i < c->n_seqs; i++) total += (size_t)(c->cache_lens[i] + c->n_new[i]) * kvd;
    float *x = malloc(total * sizeof *x), *p = x;
    for (int i = 0; i < c->n_seqs; i++) {
        size_t len = (size_t)(c->cache_lens[i] + c->n_new[i]) * kvd;
        memcpy(p, cache + (size_t)c->slots[i] * c->capacity * kvd, len * sizeof *x);
        p += len;
    }
    *n = total;
    return x;
}

static void check_case(Fixture *f, const KvCase *c, uint64_t seed) {
    int kvd = c->kv_heads * c->head_dim, qd = c->heads * c->head_dim, pre = 0, rows = 0;
    for (int i = 0; i < c->n_seqs; i++) pre += c->cache_lens[i], rows += c->n_new[i];
    float *pk = df_test_random_bf16((size_t)pre * kvd + 1, seed, 1.f), *pv = df_test_random_bf16((size_t)pre * kvd + 1, seed + 1, 1.f);
    float *q = df_test_random_bf16((size_t)rows * qd, seed + 2, 1.f), *k = df_test_random_bf16((size_t)rows * kvd, seed + 3, 1.f);
    float *v = df_test_random_bf16((size_t)rows * kvd, seed + 4, 1.f);
    /* larger q so that the softmax is far from uniform */
    for (size_t i = 0; i < (size_t)rows * qd; i++) q[i] = df_bf16_to_f32(df_f32_to_bf16(q[i] * 3.f));
    KvRun g = kv_run(f->gpu, c, pk, pv, q, k, v), r = kv_run(f->cpu, c, pk, pv, q, k, v);
    char what[160];
    size_t n;
    float *gk = valid_rows(c, g.k, &n), *rk = valid_rows(c, r.k, &n);
    snprintf(what, sizeof what, "%s: k cache", c->name);
    double e = df_rel_error(gk, rk, n);
    if (!(e <= 0)) fail_msg("%s: differs (%g): a copy must be exact", what, e);
    free(gk), free(rk);
    gk = valid_rows(c, g.v, &n), rk = valid_rows(c, r.v, &n);
    e = df_rel_error(gk, rk, n);
    if (!(e <= 0)) fail_msg("%s: v cache differs (%g)", c->name, e);
    free(gk), free(rk);
    e = df_rel_error(g.out, r.out, (size_t)rows * qd);
    if (!(e <= OP_TOL)) fail_msg("%s: kv_attention relative error %g (tolerance %g)", c->name, e, OP_TOL);
    free(g.out), free(g.k), free(g.v), free(r.out), free(r.k), free(r.v);
    free(pk), free(pv), free(q), free(k), free(v);
}

/* Five sequences, slots out of order, cache lengths 0 .. 650, one or a block
 * of 16 new rows: few blocks, so the key range is split. */
static void test_kv_ops_mixed(void **state) {
    Fixture *f = df_test_gpu_or_skip(state);
    static const int32_t slots[5] = {4, 0, 5, 2, 1}, lens[5] = {0, 37, 300, 650, 5};
    static const int32_t one[5] = {1, 1, 1, 1, 1}, block[5] = {16, 16, 3, 16, 1};
    const struct {
        int heads, kv_heads, hd;
    } shapes[] = {{4, 4, 64}, {8, 2, 128}, {8, 2, 64}, {4, 4, 128}, {24, 4, 256}, {4, 4, 256}};
    uint64_t seed = 100;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int causal = 0; causal < 2; causal++)
            for (int b = 0; b < 2; b++) {
                char name[96];
                snprintf(name, sizeof name, "%d/%d heads of %d, %s, %s", shapes[s].heads, shapes[s].kv_heads,
                         shapes[s].hd, causal ? "causal" : "block", b ? "16 new rows" : "1 new row");
                KvCase c = {name, shapes[s].heads, shapes[s].kv_heads, shapes[s].hd, causal, 5, 6, 700,
                            slots, lens, b ? block : one};
                check_case(f, &c, seed += 10);
            }
}

/* Many sequences (a decode batch): one split; and one long sequence: many. */
static void test_kv_ops_batch_and_long(void **state) {
    Fixture *f = df_test_gpu_or_skip(state);
    enum { N = 48 };
    int32_t slots[N], lens[N], one[N], block[N];
    for (int i = 0; i < N; i++) {
        slots[i] = (i * 7) % N;
        lens[i] = (i * 37) % 300;
        one[i] = 1;
        block[i] = 16;
    }
    uint64_t seed = 900;
    for (int causal = 0; causal < 2; causal++) {
        KvCase c = {"48 sequences, 32/8 heads of 128", 32, 8, 128, causal, N, N, 320, slots, lens, one};
        check_case(f, &c, seed += 10);
        KvCase d = {"48 sequences, 16/16 heads of 64, blocks", 16, 16, 64, causal, N, N, 320, slots, lens, block};
        check_case(f, &d, seed += 10);
        KvCase h = {"48 sequences, 24/4 heads of 256 (Qwen3.6's)", 24, 4, 256, causal, N, N, 320, slots, lens, one};
        check_case(f, &h, seed += 10);
        static const int32_t s1[1] = {1}, l1[1] = {3000}, n1[1] = {1}, n16[1] = {16};
        KvCase e = {"1 sequence of 3000, 32/8 heads of 128", 32, 8, 128, causal, 1, 2, 3100, s1, l1, n1};
        check_case(f, &e, seed += 10);
        KvCase g = {"1 sequence of 3000 + 16, 16/4 heads of 64", 16, 4, 64, causal, 1, 2, 3100, s1, l1, n16};
        check_case(f, &g, seed += 10);
    }
}

/* With DFLASH_BENCH_KV=1: kv_attention's time at the Qwen3-8B decode shapes
 * (32/8 heads of 128, caches of 576 keys, batch 64 and 1), CUDA events,
 * median of 11 after a warm-up, rotating over 4 layers' caches so that they
 * come from HBM, for several split-K targets; GB/s of K and V read next to
 * the device-to-device copy's bandwidth. Also the same bytes as 512
 * sequences of one kv head (4 query heads): each block's keys then lie
 * contiguous in the cache, as a head-major cache layout would give them.
 * Skipped otherwise. */
typedef struct KvSpeedShape {
    int n_seqs, heads, kv_heads;
} KvSpeedShape;

typedef struct KvSpeedRun {
    DfBackend *be;
    DfBuffer out, q;
    const DfBuffer *kc, *vc; /* [layers] */
    int layers, heads, kv_heads;
    const DfKvBatch *kb;
} KvSpeedRun;

static void kv_attention_layers(void *ctx) {
    const KvSpeedRun *r = ctx;
    for (int l = 0; l < r->layers; l++)
        df_op_kv_attention(r->be, r->out, r->q, r->kc[l], r->vc[l], r->kb, r->heads, r->kv_heads, 128, 0.088f, 1);
}

static void test_kv_attention_speed(void **state) {
    Fixture *f = df_test_gpu_or_skip(state);
    df_test_skip_unless_env("DFLASH_BENCH_KV");
#ifdef DF_HAVE_CUDA
    enum { LAYERS = 4, LEN = 576, CAP = 640, MAX_SEQS = 512, CACHE_ROWS_X_KVD = 64 * CAP * 8 * 128 };
    DfBackend *be = f->gpu;
    DfError err;
    double copy_gbs = 0;
    if (be->ops->copy_bandwidth(be, (size_t)2 << 30, 10, &copy_gbs, &err)) fail_msg("%s", err.msg);
    size_t cache_n = CACHE_ROWS_X_KVD;
    float *host = df_test_random_bf16(cache_n, 77, 1.f);
    DfBuffer kc[LAYERS], vc[LAYERS];
    for (int l = 0; l < LAYERS; l++) kc[l] = df_test_upload(be, host, cache_n, DF_BUF_ACT), vc[l] = df_test_upload(be, host, cache_n, DF_BUF_ACT);
    DfBuffer q = df_test_upload(be, host, (size_t)64 * 32 * 128, DF_BUF_ACT);
    DfBuffer out = df_test_upload_poisoned(be, (size_t)64 * 32 * 128, DF_BUF_ACT);
    static int32_t slots[MAX_SEQS], lens[MAX_SEQS], starts[MAX_SEQS + 1];
    for (int i = 0; i < MAX_SEQS; i++) slots[i] = i, lens[i] = LEN;
    printf("kv_attention, heads of 128, %d cached keys + 1 new, copy bandwidth %.0f GB/s\n", LEN, copy_gbs);
    static const KvSpeedShape shapes[] = {{64, 32, 8}, {512, 4, 1}, {1, 32, 8}};
    static const int per_sm[] = {2, 4, 8};
    for (size_t b = 0; b < sizeof shapes / sizeof shapes[0]; b++) {
        const KvSpeedShape *s = &shapes[b];
        for (int i = 0; i <= s->n_seqs; i++) starts[i] = i;
        int kvd = s->kv_heads * 128, capacity = (int)(cache_n / ((size_t)s->n_seqs * kvd));
        if (capacity > CAP) capacity = CAP;
        DfKvBatch kb;
        if (df_kv_batch_init(&kb, be, s->n_seqs, slots, lens, starts, s->n_seqs, capacity, &err)) fail_msg("%s", err.msg);
        double bytes = 2.0 * s->n_seqs * (LEN + 1) * kvd * 2;
        for (size_t i = 0; i < sizeof per_sm / sizeof per_sm[0]; i++) {
            df_cuda_set_kv_attention_blocks_per_sm(be, per_sm[i]);
            KvSpeedRun run = {be, out, q, kc, vc, LAYERS, s->heads, s->kv_heads, &kb};
            double ms = df_test_gpu_median_ms(be, kv_attention_layers, &run, 3, 11, LAYERS);
            printf("  %3d sequences, %d/%d heads, split-K target %2d blocks/SM: %7.1f us, %6.0f GB/s, %.2f of the copy\n",
                   s->n_seqs, s->heads, s->kv_heads, per_sm[i], ms * 1e3, bytes / (ms * 1e-3) / 1e9,
                   bytes / (ms * 1e-3) / 1e9 / copy_gbs);
        }
        df_kv_batch_free(&kb, be);
    }
    df_cuda_set_kv_attention_blocks_per_sm(be, 0);
    if (be->ops->sync(be, &err)) fail_msg("%s", err.msg);
    for (int l = 0; l < LAYERS; l++) df_buffer_free(be, &kc[l]), df_buffer_free(be, &vc[l]);
    df_buffer_free(be, &q), df_buffer_free(be, &out);
    free(host);
#else
    (void)f;
#endif
}

/* --- argmax_rows ------------------------------------------------------------ */

/* One case of the greedy op: GPU index and value against the CPU op on the
 * same (bf16-rounded) values; offset shifts the matrix inside its buffer
 * (an unaligned start takes the scalar path, as cols % 8 != 0 does). */
static void argmax_case(Fixture *f, int rows, int cols, size_t offset, uint64_t seed) {
    size_t n = (size_t)rows * cols;
    float *x = df_test_random_bf16(n + offset, seed, 6.f);
    /* small integers: many ties, the maximum repeated in most rows */
    for (size_t i = 0; i < n + offset; i++) x[i] = roundf(x[i]);
    float *m = x + offset;
    if (rows > 3) {
        m[0] = NAN;                                            /* row 0: NaN in column 0 wins */
        m[(size_t)1 * cols + cols / 2] = NAN;                  /* row 1: skipped */
        for (int c = 0; c < cols; c++) m[(size_t)2 * cols + c] = c % 3 ? NAN : -INFINITY;
        m[(size_t)3 * cols + cols - 1] = 100.f, m[(size_t)3 * cols + cols - 2] = 100.f; /* tie at the end */
    }
    int32_t *idx[2];
    float *val[2];
    DfBackend *bes[2] = {f->cpu, f->gpu};
    for (int b = 0; b < 2; b++) {
        DfError err;
        DfBackend *be = bes[b];
        DfBuffer bx = df_test_upload(be, x, n + offset, DF_BUF_ACT), bi, bv;
        if (df_buffer_alloc(be, &bi, DF_BUF_I32, (size_t)rows, &err) ||
            df_buffer_alloc(be, &bv, DF_BUF_F32, (size_t)rows, &err))
            fail_msg("%s", err.msg);
        df_op_argmax_rows(be, bi, bv, df_buffer_view(bx, offset, n), rows, cols);
        idx[b] = malloc((size_t)rows * sizeof *idx[b]);
        val[b] = malloc((size_t)rows * sizeof *val[b]);
        if (be->ops->sync(be, &err) || be->ops->download_i32(be, idx[b], bi, &err) ||
            be->ops->download_f32(be, val[b], bv, &err))
            fail_msg("%s", err.msg);
        df_buffer_free(be, &bx), df_buffer_free(be, &bi), df_buffer_free(be, &bv);
    }
    for (int r = 0; r < rows; r++) {
        if (idx[1][r] != idx[0][r])
            fail_msg("argmax %d x %d (offset %zu), row %d: GPU %d, CPU %d", rows, cols, offset, r, (int)idx[1][r],
                     (int)idx[0][r]);
        if (memcmp(&val[1][r], &val[0][r], sizeof(float)) != 0 && !(isnan(val[1][r]) && isnan(val[0][r])))
            fail_msg("argmax %d x %d, row %d: value %g on the GPU, %g on the CPU", rows, cols, r, val[1][r], val[0][r]);
    }
    for (int b = 0; b < 2; b++) free(idx[b]), free(val[b]);
    free(x);
}

static void test_argmax_rows_matches_cpu(void **state) {
    Fixture *f = df_test_gpu_or_skip(state);
    argmax_case(f, 64, 151936, 0, 11); /* a Qwen3 decode batch: 16-byte loads */
    argmax_case(f, 5, 4096, 0, 12);
    argmax_case(f, 5, 4096, 1, 13);    /* unaligned start: scalar path */
    argmax_case(f, 37, 1003, 0, 14);   /* cols % 8 != 0: scalar path */
    argmax_case(f, 1, 7, 0, 15);       /* fewer columns than threads */
}

/* --- end to end: bf16 greedy against fp32 greedy ----------------------------- */

/* bf16 greedy decoding cannot equal fp32 greedy token for token: where the
 * two largest fp32 logits are closer than the bf16 forward's error, the GPU
 * may pick the other one, and from there the continuations differ. What must
 * hold instead: at every generated position, the token the GPU chose is,
 * under the CPU's fp32 forward of prompt + the GPU's own tokens (teacher
 * forcing), within a near-tie margin of the fp32 maximum; and such flips are
 * rare (NEAR_TIE_FLIPS_PER_TOKEN).
 *
 * The margin, for a row whose largest fp32 logit is L, with ulp(L) the bf16
 * spacing at |L| (2^(floor(log2 |L|) - 7), i.e. 2^-8 to 2^-7 of |L|):
 *   - the GPU stores logits in bf16: each is rounded by at most ulp/2, so
 *     the order of two logits can swap when their gap is below 1 ulp;
 *   - the head's inputs (final hidden state, lm head weights) are bf16, each
 *     factor off by at most 2^-9 relative: about 1 ulp on the logit where its
 *     terms do not cancel;
 *   - the error carried in by the hidden state through every bf16 layer:
 *     test_cuda_ops bounds the whole forward's logits at 3e-2 of the largest
 *     logit (a worst case over the matrix); 2 ulp (0.8% to 1.6% of |L|) per
 *     pair of logits is allowed here.
 * Total 4 ulp(L) (1.6% to 3.1% of |L|), with |L| taken as at least 1. A
 * token far from the top (a wrong kernel, a stale cache row) misses it by
 * orders of magnitude. */
#define NEAR_TIE_ULPS 4
/* At most one flip (GPU token not the fp32 argmax) per this many generated
 * positions, and never more than 3 in a run of fewer positions. */
#define NEAR_TIE_FLIPS_PER_TOKEN 25

static double near_tie_margin(float l_max) {
    double a = fabs((double)l_max) > 1 ? fabs((double)l_max) : 1;
    int e;
    frexp(a, &e); /* a = m 2^e, m in [0.5, 1): floor(log2 a) = e - 1 */
    return NEAR_TIE_ULPS * ldexp(1.0, e - 1 - 7);
}

typedef struct TieStats {
    int positions, flips;
    double worst; /* largest gap / margin seen */
} TieStats;

/* The CPU fp32 target over prompt + out in one step; checks every generated
 * position (and, when the output stopped before the limit, the EOS that
 * ended it). Returns the flips of this sequence. */
static int check_near_ties(DfTargetModel *cpu, const char *what, const int32_t *prompt, int np, const int32_t *out,
                           int n_out, const DfGenerateOptions *opt, TieStats *ts) {
    int n = np + n_out, vocab = cpu->cfg.vocab_size, stopped = n_out < opt->max_new_tokens, flips = 0;
    DfError err;
    DfTargetDecoder d;
    if (df_target_decoder_init(&d, cpu, 1, n + 1, NULL, 0, &err)) fail_msg("%s", err.msg);
    int32_t *ids = malloc((size_t)n * sizeof *ids), slot = 0, starts[2] = {0, n};
    memcpy(ids, prompt, (size_t)np * sizeof *ids);
    memcpy(ids + np, out, (size_t)n_out * sizeof *ids);
    float *logits = malloc((size_t)n * vocab * sizeof *logits);
    DfDecodeStep step = {1, &slot, ids, starts, DF_LOGITS_ALL, logits, NULL, NULL, 0};
    if (df_target_decode(&d, &step, &err)) fail_msg("%s", err.msg);
    for (int j = 0; j < n_out + stopped; j++) {
        const float *row = logits + (size_t)(np - 1 + j) * vocab;
        int best = df_argmax_f32(row, vocab), chosen = j < n_out ? out[j] : -1;
        if (chosen < 0) /* the stop: the best of the EOS ids */
            for (int e = 0; e < opt->n_eos; e++)
                if (chosen < 0 || row[opt->eos_ids[e]] > row[chosen]) chosen = opt->eos_ids[e];
        double gap = (double)row[best] - row[chosen], margin = near_tie_margin(row[best]);
        int flip = j < n_out ? chosen != best : !df_is_eos(opt, best);
        flips += flip;
        ts->positions++;
        if (gap / margin > ts->worst) ts->worst = gap / margin;
        if (!(gap <= margin))
            fail_msg("%s: generated position %d: the GPU chose %s%d, whose fp32 logit %.6g is %.4g below the "
                     "maximum %.6g (token %d); a bf16 near tie allows %.4g",
                     what, j, j < n_out ? "token " : "EOS ", chosen, row[chosen], gap, row[best], best, margin);
    }
    ts->flips += flips;
    free(ids), free(logits);
    df_target_decoder_free(&d);
    return flips;
}

static void check_flip_rate(const char *what, const TieStats *ts) {
    int allowed = ts->positions / NEAR_TIE_FLIPS_PER_TOKEN > 3 ? ts->positions / NEAR_TIE_FLIPS_PER_TOKEN : 3;
    fprintf(stderr, "%s: %d generated positions, %d near-tie flips (at most %d), largest gap %.2f of the margin\n", what,
            ts->positions, ts->flips, allowed, ts->worst);
    if (ts->flips > allowed) fail_msg("%s: %d flips in %d positions (at most %d)", what, ts->flips, ts->positions, allowed);
}

static void load_coder_tiny(DfTargetModel *m, DfBackend *be) {
    DfError err;
    DfModelConfig cfg;
    const char *dir = df_test_path("assets/coder-tiny");
    if (df_model_config_load(&cfg, dir, &err) || df_target_load(m, be, dir, cfg.num_layers, 1, &err))
        fail_msg("%s", err.msg);
}

/* Greedy generation on coder-tiny in bf16 on the GPU, batch 4 (continuous
 * batching), against transformers' fp32 greedy output: equal up to the
 * first divergence, and every GPU choice a near tie in fp32. */
static void test_greedy_generate_matches_transformers(void **state) {
    Fixture *f = df_test_gpu_or_skip(state);
    DfGreedyFixture fx[MAX_FIXTURES];
    int n = df_test_load_greedy_fixtures(fx, MAX_FIXTURES);
    DfError err;
    DfTargetModel m, cm;
    load_coder_tiny(&m, f->gpu);
    load_coder_tiny(&cm, f->cpu);
    DfGenerateOptions opt = {0};
    opt.top_p = 1.0;
    opt.max_new_tokens = fx[0].max_new_tokens;
    if (df_generation_eos_ids(df_test_path("assets/coder-tiny"), &m.cfg, opt.eos_ids, &opt.n_eos, &err))
        fail_msg("%s", err.msg);
    const int32_t *prompts[MAX_FIXTURES];
    int lens[MAX_FIXTURES], cap = 0;
    for (int i = 0; i < n; i++) {
        prompts[i] = fx[i].prompt.data;
        lens[i] = (int)fx[i].prompt.len;
        if (lens[i] + opt.max_new_tokens > cap) cap = lens[i] + opt.max_new_tokens;
    }
    DfTargetDecoder d;
    if (df_target_decoder_init(&d, &m, 4, cap, NULL, 0, &err)) fail_msg("%s", err.msg);
    DfI32Vec out[MAX_FIXTURES] = {{0}};
    if (df_generate_batch(&d, n, prompts, lens, &opt, out, NULL, &err)) fail_msg("%s", err.msg);
    TieStats ts = {0};
    int equal = 0;
    for (int i = 0; i < n; i++) {
        size_t k = 0;
        while (k < out[i].len && k < fx[i].output.len && out[i].data[k] == fx[i].output.data[k]) k++;
        int same = k == out[i].len && k == fx[i].output.len;
        equal += same;
        if (!same)
            fprintf(stderr, "prompt %s: first difference from transformers at token %zu of %zu\n", fx[i].id, k,
                    fx[i].output.len);
        char what[160];
        snprintf(what, sizeof what, "prompt %.63s", fx[i].id);
        check_near_ties(&cm, what, prompts[i], lens[i], out[i].data, (int)out[i].len, &opt, &ts);
    }
    fprintf(stderr, "%d of %d prompts equal transformers' greedy output token for token\n", equal, n);
    check_flip_rate("greedy generate on the GPU", &ts);
    for (int i = 0; i < n; i++) df_i32vec_free(&out[i]);
    df_target_decoder_free(&d);
    df_target_free(&m);
    df_target_free(&cm);
    df_test_free_greedy_fixtures(fx, n);
}

static char *read_text(const char *path) {
    char *t = df_test_read_file(path, NULL);
    if (!t) fail_msg("cannot read %s", path);
    return t;
}

/* The "response" of each line of a JSONL output file, in order. */
static int read_responses(const char *path, char **resp, int max) {
    char *text = read_text(path), *line = text;
    int n = 0;
    while (*line) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        if (*line) {
            cJSON *rec = cJSON_Parse(line);
            const cJSON *r = rec ? cJSON_GetObjectItemCaseSensitive(rec, "response") : NULL;
            if (!cJSON_IsString(r) || n == max) fail_msg("%s: line %d has no \"response\" string", path, n + 1);
            resp[n++] = strdup(r->valuestring);
            cJSON_Delete(rec);
        }
        if (!nl) break;
        line = nl + 1;
    }
    free(text);
    return n;
}

static void run_ok(const char *cmd, const char *what) {
    char log[16384];
    if (df_test_run(cmd, log, sizeof log) != 0) fail_msg("%s failed: %s\n%s", what, cmd, log);
    fprintf(stderr, "--- %s:\n%s", what, log);
}

enum { CMD_PROMPTS = 3, CMD_NEW = 40, CMD_BATCH = 2 };
static const char *const CMD_PROMPT_TEXT[CMD_PROMPTS] = {
    "def add(a, b):\n", "import os\nimport sys\n\ndef main():\n", "class Stack:\n    def __init__(self):\n"};

/* `dflash generate --device cuda` against the CPU: its responses are the
 * GPU's greedy tokens (the same generation in this process, batch 2 like the
 * command, decoded), every one a near tie in fp32; a response differs from
 * the CPU's only for a prompt where the GPU made a near-tie flip. */
static void check_generate_command(Fixture *f, const char *dir, const char *input) {
    char cmd[4096], out[3][600];
    /* the third run queues every op of every step: the same kernels, so the same text as the second */
    const char *dev[3] = {"cpu", "cuda", "cuda --no-graphs"};
    char *resp[3][CMD_PROMPTS];
    for (int i = 0; i < 3; i++) {
        snprintf(out[i], sizeof out[i], "%s/gen-%d.jsonl", dir, i);
        snprintf(cmd, sizeof cmd, "%s generate --target %s --input %s --output %s --max-new-tokens %d --batch %d --device %s",
                 df_test_path("dflash"), df_test_path("assets/coder-tiny"), input, out[i], CMD_NEW, CMD_BATCH, dev[i]);
        run_ok(cmd, dev[i]);
        if (read_responses(out[i], resp[i], CMD_PROMPTS) != CMD_PROMPTS) fail_msg("%s: not %d records", out[i], CMD_PROMPTS);
    }
    for (int i = 0; i < CMD_PROMPTS; i++)
        if (strcmp(resp[2][i], resp[1][i]) != 0)
            fail_msg("prompt %d: generate --device cuda wrote %s with recorded steps, %s with --no-graphs", i,
                     resp[1][i], resp[2][i]);
    DfError err;
    const char *target = df_test_path("assets/coder-tiny");
    DfTokenizer *tok = df_tokenizer_load(target, &err);
    if (!tok) fail_msg("%s", err.msg);
    DfTargetModel m, cm;
    load_coder_tiny(&m, f->gpu);
    load_coder_tiny(&cm, f->cpu);
    DfGenerateOptions opt = {0};
    opt.top_p = 1.0;
    opt.max_new_tokens = CMD_NEW;
    if (df_generation_eos_ids(target, &m.cfg, opt.eos_ids, &opt.n_eos, &err)) fail_msg("%s", err.msg);
    DfI32Vec ids[CMD_PROMPTS] = {{0}}, gen[CMD_PROMPTS] = {{0}};
    const int32_t *prompts[CMD_PROMPTS];
    int lens[CMD_PROMPTS], cap = 0;
    for (int i = 0; i < CMD_PROMPTS; i++) {
        if (df_tokenizer_encode(tok, CMD_PROMPT_TEXT[i], strlen(CMD_PROMPT_TEXT[i]), &ids[i], &err)) fail_msg("%s", err.msg);
        prompts[i] = ids[i].data;
        lens[i] = (int)ids[i].len;
        cap = lens[i] + CMD_NEW > cap ? lens[i] + CMD_NEW : cap;
    }
    DfTargetDecoder d;
    if (df_target_decoder_init(&d, &m, CMD_BATCH, cap, NULL, 0, &err) ||
        df_generate_batch(&d, CMD_PROMPTS, prompts, lens, &opt, gen, NULL, &err))
        fail_msg("%s", err.msg);
    TieStats ts = {0};
    for (int i = 0; i < CMD_PROMPTS; i++) {
        DfByteBuf text = {0};
        if (df_tokenizer_decode(tok, gen[i].data, gen[i].len, &text, &err)) fail_msg("%s", err.msg);
        const char *t = text.data ? text.data : "";
        if (strcmp(t, resp[1][i]) != 0)
            fail_msg("prompt %d: generate --device cuda wrote %s, the same greedy generation here gives %s", i,
                     resp[1][i], t);
        df_bytebuf_free(&text);
        char what[64];
        snprintf(what, sizeof what, "generate --device cuda, prompt %d", i);
        int flips = check_near_ties(&cm, what, prompts[i], lens[i], gen[i].data, (int)gen[i].len, &opt, &ts);
        if (flips == 0 && strcmp(resp[0][i], resp[1][i]) != 0)
            fail_msg("prompt %d: cpu and cuda responses differ without a near-tie flip:\n%s\n---\n%s", i, resp[0][i],
                     resp[1][i]);
    }
    check_flip_rate("generate --device cuda", &ts);
    for (int i = 0; i < CMD_PROMPTS; i++) {
        df_i32vec_free(&ids[i]), df_i32vec_free(&gen[i]);
        free(resp[0][i]), free(resp[1][i]), free(resp[2][i]);
    }
    df_target_decoder_free(&d);
    df_target_free(&m);
    df_target_free(&cm);
    df_tokenizer_free(tok);
}

/* `dflash eval --device cuda` with a random drafter: lossless against the
 * GPU's own greedy decoding (eval compares the two token for token and fails
 * on any difference: that invariant holds exactly on any device). */
static void check_eval_command(const char *dir, const char *input) {
    DfError err;
    DfModelConfig tcfg;
    if (df_model_config_load(&tcfg, df_test_path("assets/coder-tiny"), &err)) fail_msg("%s", err.msg);
    DfDrafterConfig cfg;
    DfDrafterOptions dopt = {.num_layers = 1, .intermediate_size = 128, .block_size = 8, .mask_token_id = 8190};
    if (df_drafter_config_from_target(&cfg, &tcfg, &dopt, &err)) fail_msg("%s", err.msg);
    DfDrafterLayout layout;
    df_drafter_layout_build(&layout, &cfg);
    float *params = malloc(layout.total * sizeof *params);
    df_drafter_init_params(&layout, params, 5);
    char draft[512], cmd[4096], out[600];
    snprintf(draft, sizeof draft, "%s/draft", dir);
    if (df_drafter_export(draft, &cfg, &layout, params, &err)) fail_msg("%s", err.msg);
    free(params);
    df_drafter_layout_free(&layout);
    snprintf(out, sizeof out, "%s/eval-cuda.jsonl", dir);
    snprintf(cmd, sizeof cmd, "%s eval --target %s --draft %s --input %s --output %s --max-new-tokens %d --device cuda",
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), draft, input, out, CMD_NEW);
    run_ok(cmd, "eval --device cuda");
    char *resp[CMD_PROMPTS];
    if (read_responses(out, resp, CMD_PROMPTS) != CMD_PROMPTS) fail_msg("%s: not %d records", out, CMD_PROMPTS);
    for (int i = 0; i < CMD_PROMPTS; i++) free(resp[i]);
}

static void test_generate_and_eval_commands_on_cuda(void **state) {
    Fixture *f = df_test_gpu_or_skip(state);
    char *dir = df_test_tmpdir("cuda_infer_cmd");
    char input[512];
    snprintf(input, sizeof input, "%s/prompts.jsonl", dir);
    DfByteBuf jsonl = {0};
    for (int i = 0; i < CMD_PROMPTS; i++) {
        cJSON *rec = cJSON_CreateObject();
        cJSON_AddNumberToObject(rec, "id", i);
        cJSON_AddStringToObject(rec, "prompt", CMD_PROMPT_TEXT[i]);
        char *line = cJSON_PrintUnformatted(rec);
        df_bytebuf_append(&jsonl, line, strlen(line));
        df_bytebuf_append(&jsonl, "\n", 1);
        free(line);
        cJSON_Delete(rec);
    }
    df_test_write_file(input, jsonl.data);
    df_bytebuf_free(&jsonl);
    check_generate_command(f, dir, input);
    check_eval_command(dir, input);
    df_test_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_ops_mixed),
        cmocka_unit_test(test_kv_ops_batch_and_long),
        cmocka_unit_test(test_kv_attention_speed),
        cmocka_unit_test(test_argmax_rows_matches_cpu),
        cmocka_unit_test(test_greedy_generate_matches_transformers),
        cmocka_unit_test(test_generate_and_eval_commands_on_cuda),
    };
    /* DFLASH_TEST_FILTER=test_kv_*: only those (the sanitizers' runs, which the end-to-end tests make slow) */
    const char *filter = getenv("DFLASH_TEST_FILTER");
    if (filter) cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, df_test_backend_pair_setup, df_test_backend_pair_teardown);
}
