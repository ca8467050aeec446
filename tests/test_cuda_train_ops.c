/* The CUDA backend's drafter-training ops against the CPU backend's: random
 * (never zero) inputs already rounded to bf16, so both backends see the same
 * values; odd sizes and sizes that are not multiples of the tiles; outputs
 * NaN-poisoned before each run, so an unwritten element fails. Tolerance:
 * max|a-b| / max|b| <= 1e-2; NaN never passes. GPU tests skip when no GPU is
 * present (or CUDA was not built in).
 *
 * With DFLASH_BENCH_LM_HEAD=1 one more test times lm_head_ce at the Qwen3-8B
 * drafter shape (rows 8192, hidden 4096, vocab 151936) against a plain
 * cuBLASLt GEMM of the logits' shape, timed in the same run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend/backend.h"
#include "base/numeric.h"
#include "model/rope.h"
#ifdef DF_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_variants.h"
#endif

#define OP_TOL 1e-2

/* the CPU and CUDA backends (test_util.h); gpu NULL without a GPU */
typedef DfTestBackendPair Fixture;

static size_t peak_bytes(DfBackend *be) {
    DfMemoryInfo mem;
    df_backend_memory_info(be, &mem);
    return mem.peak;
}

static void sync_or_fail(DfBackend *be) {
    DfError err;
    if (be->ops->sync(be, &err)) fail_msg("sync: %s", err.msg);
}

typedef DfTestPair Pair;

/* --- memory helpers ------------------------------------------------------- */

static void test_download_i32(void **state) {
    Fixture *f = df_test_gpu_or_skip(state);
    int32_t src[37], back[37];
    for (int i = 0; i < 37; i++) src[i] = i * 7919 - 100000;
    DfBuffer b = df_test_upload_i32(f->gpu, src, 37);
    DfError err;
    memset(back, 0, sizeof back);
    if (f->gpu->ops->download_i32(f->gpu, back, b, &err)) fail_msg("%s", err.msg);
    assert_memory_equal(back, src, sizeof src);
    DfBuffer fl = df_test_upload(f->gpu, (float[2]){1, 2}, 2, DF_BUF_F32);
    assert_int_equal(f->gpu->ops->download_i32(f->gpu, back, fl, &err), -1); /* not an int32 buffer */
    df_buffer_free(f->gpu, &b);
    df_buffer_free(f->gpu, &fl);
}

/* fill_zero on every kind, and on a view: only the view's elements change. */
static void test_fill_zero(void **state) {
    Fixture *f = df_test_gpu_or_skip(state);
    const DfBufKind kinds[3] = {DF_BUF_ACT, DF_BUF_F32, DF_BUF_I32};
    size_t n = 1001;
    float *x = df_test_random_bf16(n, 5, 3.0f);
    int32_t *ids = malloc(n * sizeof *ids);
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)i + 1;
    for (int k = 0; k < 3; k++) {
        DfBuffer b = kinds[k] == DF_BUF_I32 ? df_test_upload_i32(f->gpu, ids, n) : df_test_upload(f->gpu, x, n, kinds[k]);
        for (int whole = 0; whole < 2; whole++) {
            df_op_fill_zero(f->gpu, whole ? b : df_buffer_view(b, 3, 500));
            sync_or_fail(f->gpu);
            float *got = malloc(n * sizeof *got);
            int32_t *got_i = malloc(n * sizeof *got_i);
            DfError err;
            if (kinds[k] == DF_BUF_I32 ? f->gpu->ops->download_i32(f->gpu, got_i, b, &err)
                                       : f->gpu->ops->download_f32(f->gpu, got, b, &err))
                fail_msg("%s", err.msg);
            for (size_t i = 0; i < n; i++) {
                double g = kinds[k] == DF_BUF_I32 ? got_i[i] : got[i], want = kinds[k] == DF_BUF_I32 ? ids[i] : x[i];
                if (whole || (i >= 3 && i < 503)) want = 0;
                if (g != want) fail_msg("fill_zero kind %d (whole %d) element %zu: %g, want %g", k, whole, i, g, want);
            }
            free(got), free(got_i);
        }
        df_buffer_free(f->gpu, &b);
    }
    free(x), free(ids);
}

/* --- linear_weight_grad ----------------------------------------------------- */

static void check_weight_grad(Fixture *f, int m, int n, int k, uint64_t seed) {
    float *dy = df_test_random_bf16((size_t)m * n, seed, 1.0f), *x = df_test_random_bf16((size_t)m * k, seed + 1, 1.0f);
    float *dw0 = df_test_random_array((size_t)n * k, seed + 2, 4.0f); /* F32: the += must keep it */
    Pair pdy = df_test_pair_upload(f, dy, (size_t)m * n, DF_BUF_ACT), px = df_test_pair_upload(f, x, (size_t)m * k, DF_BUF_ACT);
    Pair pdw = df_test_pair_upload(f, dw0, (size_t)n * k, DF_BUF_F32);
    df_op_linear_weight_grad(f->cpu, pdw.c, pdy.c, px.c, m, n, k);
    df_op_linear_weight_grad(f->gpu, pdw.g, pdy.g, px.g, m, n, k);
    char what[96];
    snprintf(what, sizeof what, "linear_weight_grad M=%d N=%d K=%d", m, n, k);
    df_test_pair_compare(f, what, pdw, OP_TOL);
    df_test_pair_free(f, &pdy), df_test_pair_free(f, &px), df_test_pair_free(f, &pdw);
    free(dy), free(x), free(dw0);
}

static void test_linear_weight_grad(void **state) {
    Fixture *f = df_test_gpu_or_skip(state);
    const int shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {33, 65, 17}, {300, 257, 129}, {1000, 384, 256}, {4099, 64, 96}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        check_weight_grad(f, shapes[s][0], shapes[s][1], shapes[s][2], 100 + 3 * s);
}

/* --- rmsnorm_backward --------------------------------------------------------- */

static void check_rmsnorm_backward(Fixture *f, int rows, int dim, int mode, uint64_t seed) {
    /* mode 0: dx written to its own buffer; 1: added to dx; 2: dx is dy */
    size_t n = (size_t)rows * dim;
    float *x = df_test_random_bf16(n, seed, 3.0f), *dy = df_test_random_bf16(n, seed + 1, 1.0f);
    float *w = df_test_random_bf16((size_t)dim, seed + 2, 1.0f), *dx0 = df_test_random_bf16(n, seed + 3, 1.0f);
    float *dw0 = df_test_random_array((size_t)dim, seed + 4, 2.0f);
    Pair px = df_test_pair_upload(f, x, n, DF_BUF_ACT), pdy = df_test_pair_upload(f, dy, n, DF_BUF_ACT);
    Pair pw = df_test_pair_upload(f, w, (size_t)dim, DF_BUF_ACT), pdw = df_test_pair_upload(f, dw0, (size_t)dim, DF_BUF_F32);
    Pair pdx = mode == 0 ? df_test_pair_poisoned(f, n, DF_BUF_ACT) : mode == 1 ? df_test_pair_upload(f, dx0, n, DF_BUF_ACT) : pdy;
    df_op_rmsnorm_backward(f->cpu, pdx.c, pdw.c, pdy.c, px.c, pw.c, rows, dim, 1e-6f, mode == 1);
    df_op_rmsnorm_backward(f->gpu, pdx.g, pdw.g, pdy.g, px.g, pw.g, rows, dim, 1e-6f, mode == 1);
    char what[128];
    snprintf(what, sizeof what, "rmsnorm_backward rows=%d dim=%d mode=%d: dx", rows, dim, mode);
    df_test_pair_compare(f, what, pdx, OP_TOL);
    snprintf(what, sizeof what, "rmsnorm_backward rows=%d dim=%d mode=%d: dw", rows, dim, mode);
    df_test_pair_compare(f, what, pdw, OP_TOL);
    if (mode != 2) df_test_pair_free(f, &pdx);
    df_test_pair_free(f, &px), df_test_pair_free(f, &pdy), df_test_pair_free(f, &pw), df_test_pair_free(f, &pdw);
    free(x), free(dy), free(w), free(dx0), free(dw0);
}

static void test_rmsnorm_backward(void **state) {
    Fixture *f = df_test_gpu_or_skip(state);
    /* vector path (dim % 8 == 0) from one group per block to 32; scalar
     * path for odd dims; more rows than blocks (several rows per block) */
    const int shapes[][2] = {{5, 64}, {37, 4096}, {3, 100}, {1001, 128}, {9, 7}, {2000, 24}, {4100, 8}, {17, 2056}};
    uint64_t seed = 200;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int mode = 0; mode < 3; mode++) check_rmsnorm_backward(f, shapes[s][0], shapes[s][1], mode, seed += 5);
}

/* --- rope_backward ------------------------------------------------------------ */

static void check_rope_backward(Fixture *f, int n_tokens, int heads, int head_dim, uint64_t seed) {
    DfRopeConfig rc = {.theta = 1e6, .type = DF_ROPE_DEFAULT};
    int n_pos = 300, half = head_dim / 2;
    float *cs = malloc((size_t)n_pos * half * sizeof *cs), *sn = malloc((size_t)n_pos * half * sizeof *sn);
    df_rope_tables(&rc, head_dim, n_pos, cs, sn);
    int32_t *pos = malloc((size_t)n_tokens * sizeof *pos);
    for (int t = 0; t < n_tokens; t++) pos[t] = (t * 53 + 7) % n_pos;
    size_t n = (size_t)n_tokens * heads * head_dim;
    float *dx = df_test_random_bf16(n, seed, 2.0f);
    Pair pdx = df_test_pair_upload(f, dx, n, DF_BUF_ACT), ppos = df_test_pair_upload_i32(f, pos, (size_t)n_tokens);
    Pair pc = df_test_pair_upload(f, cs, (size_t)n_pos * half, DF_BUF_F32), ps = df_test_pair_upload(f, sn, (size_t)n_pos * half, DF_BUF_F32);
    df_op_rope_backward(f->cpu, pdx.c, ppos.c, pc.c, ps.c, n_tokens, heads, head_dim);
    df_op_rope_backward(f->gpu, pdx.g, ppos.g, pc.g, ps.g, n_tokens, heads, head_dim);
    char what[96];
    snprintf(what, sizeof what, "rope_backward T=%d heads=%d head_dim=%d", n_tokens, heads, head_dim);
    df_test_pair_compare(f, what, pdx, OP_TOL);
    /* and it undoes the forward rotation: rope then rope_backward is the identity */
    df_op_rope(f->gpu, pdx.g, ppos.g, pc.g, ps.g, n_tokens, heads, head_dim);
    df_op_rope_backward(f->gpu, pdx.g, ppos.g, pc.g, ps.g, n_tokens, heads, head_dim);
    df_test_pair_compare(f, "rope_backward then rope then rope_backward", pdx, 2 * OP_TOL);
    df_test_pair_free(f, &pdx), df_test_pair_free(f, &ppos), df_test_pair_free(f, &pc), df_test_pair_free(f, &ps);
    free(cs), free(sn), free(pos), free(dx);
}

static void test_rope_backward(void **state) {
    Fixture *f = df_test_gpu_or_skip(state);
    check_rope_backward(f, 37, 4, 128, 300); /* 16-byte path */
    check_rope_backward(f, 11, 3, 6, 301);   /* one pair per thread */
    check_rope_backward(f, 257, 2, 64, 302);
}

/* --- swiglu_backward ------------------------------------------------------------ */

static void check_swiglu_backward(Fixture *f, size_t n, int in_place, uint64_t seed) {
    float *d = df_test_random_bf16(n, seed, 1.0f), *g = df_test_random_bf16(n, seed + 1, 4.0f), *u = df_test_random_bf16(n, seed + 2, 2.0f);
    Pair pd = df_test_pair_upload(f, d, n, DF_BUF_ACT), pg = df_test_pair_upload(f, g, n, DF_BUF_ACT), pu = df_test_pair_upload(f, u, n, DF_BUF_ACT);
    Pair pdg = in_place ? pg : df_test_pair_poisoned(f, n, DF_BUF_ACT), pdu = in_place ? pu : df_test_pair_poisoned(f, n, DF_BUF_ACT);
    df_op_swiglu_backward(f->cpu, pdg.c, pdu.c, pd.c, pg.c, pu.c);
    df_op_swiglu_backward(f->gpu, pdg.g, pdu.g, pd.g, pg.g, pu.g);
    char what[96];
    snprintf(what, sizeof what, "swiglu_backward n=%zu in_place=%d: d_gate", n, in_place);
    df_test_pair_compare(f, what, pdg, OP_TOL);
    snprintf(what, sizeof what, "swiglu_backward n=%zu in_place=%d: d_up", n, in_place);
    df_test_pair_compare(f, what, pdu, OP_TOL);
    if (!in_place) df_test_pair_free(f, &pdg), df_test_pair_free(f, &pdu);
    df_test_pair_free(f, &pd), df_test_pair_free(f, &pg), df_test_pair_free(f, &pu);
    free(d), free(g), free(u);
}

static void test_swiglu_backward(void **state) {
    Fixture *f = df_test_gpu_or_skip(state);
    for (int in_place = 0; in_place < 2; in_place++) {
        check_swiglu_backward(f, 8 * 1000, in_place, 400); /* 16-byte path */
        check_swiglu_backward(f, 1001, in_place, 410);
        check_swiglu_backward(f, 3, in_place, 420);
    }
}

/* --- lm_head_ce ------------------------------------------------------------------- */

typedef struct LmCase {
    int rows, hidden, vocab;
    int chunk_rows; /* 0: the backend's choice */
    int logits_bf16, with_dx;
} LmCase;

/* logit of row r for token v, in double, from the bf16-rounded inputs */
static double exact_logit(const float *x, const float *head, int hidden, int r, int v) {
    double s = 0;
    for (int i = 0; i < hidden; i++) s += (double)x[(size_t)r * hidden + i] * head[(size_t)v * hidden + i];
    return s;
}

/* The GPU argmax may differ from the CPU's only where the two tokens' logits
 * are equal up to the noise of the logits, measured on the exact (double)
 * logits: bf16 rounding of the logit (2^-8 relative) when the GPU keeps bf16
 * logits, fp32 accumulation-order noise (1e-4 relative, well above it)
 * otherwise. */
static void check_argmax(const LmCase *c, const float *x, const float *head, const int32_t *got,
                         const int32_t *want) {
    int mismatches = 0;
    for (int r = 0; r < c->rows; r++) {
        if (got[r] < 0 || got[r] >= c->vocab) fail_msg("lm_head_ce argmax[%d] = %d outside the vocabulary", r, got[r]);
        if (got[r] == want[r]) continue;
        double lg = exact_logit(x, head, c->hidden, r, got[r]), lw = exact_logit(x, head, c->hidden, r, want[r]);
        double top = fabs(lw) > 1 ? fabs(lw) : 1, margin = (c->logits_bf16 ? 1.0 / 256 : 1e-4) * top;
        if (!(fabs(lg - lw) <= margin))
            fail_msg("lm_head_ce argmax row %d: GPU %d (logit %.6f), CPU %d (logit %.6f): apart by more than %g", r,
                     got[r], lg, want[r], lw, margin);
        mismatches++;
    }
    if (mismatches) printf("    lm_head_ce: %d argmax ties within noise\n", mismatches);
}

static void check_lm_head_ce(Fixture *f, const LmCase *c, uint64_t seed) {
#ifdef DF_HAVE_CUDA
    df_cuda_set_lm_head_chunk_rows(f->gpu, c->chunk_rows);
    df_cuda_set_lm_head_logits_bf16(f->gpu, c->logits_bf16);
#endif
    size_t R = (size_t)c->rows, H = (size_t)c->hidden, V = (size_t)c->vocab;
    float *x = df_test_random_bf16(R * H, seed, 1.0f), *head = df_test_random_bf16(V * H, seed + 1, 0.5f);
    float *w = df_test_random_array(R, seed + 2, 1.0f);
    int32_t *labels = malloc(R * sizeof *labels);
    for (size_t r = 0; r < R; r++) {
        w[r] = 1.0f + w[r];                                      /* weights in [0, 2] */
        labels[r] = r % 5 == 3 ? -1 : (int32_t)((r * 7919 + seed) % V); /* some rows without a label */
    }
    Pair px = df_test_pair_upload(f, x, R * H, DF_BUF_ACT), phead = df_test_pair_upload(f, head, V * H, DF_BUF_ACT);
    Pair pw = df_test_pair_upload(f, w, R, DF_BUF_F32), plab = df_test_pair_upload_i32(f, labels, R);
    Pair pce = df_test_pair_poisoned(f, R, DF_BUF_F32);
    int32_t *poison = malloc(R * sizeof *poison);
    for (size_t r = 0; r < R; r++) poison[r] = -7;
    Pair parg = df_test_pair_upload_i32(f, poison, R);
    Pair pdx = c->with_dx ? df_test_pair_poisoned(f, R * H, DF_BUF_ACT) : (Pair){{0}, {0}};
    DfLmHeadCeArgs a = {.rows = c->rows, .hidden = c->hidden, .vocab = c->vocab, .grad_scale = 1.0f / (float)c->rows};
    a.x = px.c, a.head = phead.c, a.labels = plab.c, a.weights = pw.c, a.ce = pce.c, a.argmax = parg.c, a.d_x = pdx.c;
    df_op_lm_head_ce(f->cpu, &a);
    a.x = px.g, a.head = phead.g, a.labels = plab.g, a.weights = pw.g, a.ce = pce.g, a.argmax = parg.g, a.d_x = pdx.g;
    df_op_lm_head_ce(f->gpu, &a);
    char what[160];
    snprintf(what, sizeof what, "lm_head_ce rows=%d hidden=%d vocab=%d chunk=%d bf16 logits=%d d_x=%d", c->rows,
             c->hidden, c->vocab, c->chunk_rows, c->logits_bf16, c->with_dx);
    char tag[192];
    snprintf(tag, sizeof tag, "%s: ce", what);
    df_test_pair_compare(f, tag, pce, OP_TOL);
    float *ce = df_test_download(f->gpu, pce.g);
    for (size_t r = 0; r < R; r++)
        if (labels[r] < 0 && ce[r] != 0.0f) fail_msg("%s: ce[%zu] = %g for a row without a label", what, r, ce[r]);
    free(ce);
    int32_t *got = malloc(R * sizeof *got), *want = malloc(R * sizeof *want);
    DfError err;
    sync_or_fail(f->gpu);
    if (f->gpu->ops->download_i32(f->gpu, got, parg.g, &err) || f->cpu->ops->download_i32(f->cpu, want, parg.c, &err))
        fail_msg("%s", err.msg);
    check_argmax(c, x, head, got, want);
    if (c->with_dx) {
        snprintf(tag, sizeof tag, "%s: d_x", what);
        df_test_pair_compare(f, tag, pdx, OP_TOL);
        df_test_pair_free(f, &pdx);
    }
    df_test_pair_free(f, &px), df_test_pair_free(f, &phead), df_test_pair_free(f, &pw), df_test_pair_free(f, &plab), df_test_pair_free(f, &pce);
    df_test_pair_free(f, &parg);
    free(x), free(head), free(w), free(labels), free(got), free(want), free(poison);
#ifdef DF_HAVE_CUDA
    df_cuda_set_lm_head_chunk_rows(f->gpu, 0);
    df_cuda_set_lm_head_logits_bf16(f->gpu, 0);
#endif
}

static void test_lm_head_ce(void **state) {
    Fixture *f = df_test_gpu_or_skip(state);
    const LmCase cases[] = {
        {37, 64, 1001, 0, 0, 1},   /* odd vocab: scalar row kernel, one chunk */
        {300, 128, 1001, 64, 0, 1}, /* 5 chunks, the last of 44 rows */
        {300, 128, 1001, 64, 0, 0}, /* no d_x: CE and argmax only */
        {129, 96, 2048, 50, 0, 1},  /* 16-byte row kernel, chunks of 50 */
        {129, 96, 2048, 50, 1, 1},  /* bf16 logits */
        {77, 40, 1001, 16, 1, 1},   /* bf16 logits, odd vocab */
        {1, 17, 5, 0, 0, 1},        /* one row, tiny vocab */
        {513, 256, 4000, 0, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_lm_head_ce(f, &cases[i], 500 + 10 * i);
}

/* A label past the vocabulary is reported by sync. */
static void test_lm_head_ce_bad_label(void **state) {
    Fixture *f = df_test_gpu_or_skip(state);
    int rows = 4, hidden = 8, vocab = 10;
    float *x = df_test_random_bf16((size_t)rows * hidden, 1, 1.0f), *head = df_test_random_bf16((size_t)vocab * hidden, 2, 1.0f);
    int32_t labels[4] = {1, 2, 10, -1};
    DfBuffer bx = df_test_upload(f->gpu, x, (size_t)rows * hidden, DF_BUF_ACT);
    DfBuffer bh = df_test_upload(f->gpu, head, (size_t)vocab * hidden, DF_BUF_ACT);
    DfBuffer bl = df_test_upload_i32(f->gpu, labels, 4), bw = df_test_upload(f->gpu, (float[4]){1, 1, 1, 1}, 4, DF_BUF_F32);
    DfBuffer bce = df_test_upload(f->gpu, (float[4]){0}, 4, DF_BUF_F32), barg = df_test_upload_i32(f->gpu, labels, 4);
    DfLmHeadCeArgs a = {.x = bx, .head = bh, .labels = bl, .weights = bw, .ce = bce, .argmax = barg,
                        .rows = rows, .hidden = hidden, .vocab = vocab, .grad_scale = 1};
    df_op_lm_head_ce(f->gpu, &a);
    DfError err;
    assert_int_equal(f->gpu->ops->sync(f->gpu, &err), -1);
    assert_non_null(strstr(err.msg, "label 10 of row 2"));
    sync_or_fail(f->gpu); /* reported once */
    DfBuffer bufs[6] = {bx, bh, bl, bw, bce, barg};
    for (int i = 0; i < 6; i++) df_buffer_free(f->gpu, &bufs[i]);
    free(x), free(head);
}

/* --- timing at the Qwen3-8B drafter shape (DFLASH_BENCH_LM_HEAD=1) --------------- */

#ifdef DF_HAVE_CUDA
typedef struct LmHeadRun {
    DfBackend *be;
    const DfLmHeadCeArgs *a;
    DfBuffer logits;
    int gemm_only;
} LmHeadRun;

static void lm_head_once(void *ctx) {
    const LmHeadRun *r = ctx;
    if (r->gemm_only)
        df_op_linear(r->be, r->logits, r->a->x, r->a->head, r->a->rows, r->a->vocab, r->a->hidden, 0);
    else
        df_op_lm_head_ce(r->be, r->a);
}

/* Median ms of `reps` runs of lm_head_ce (gemm_only: the plain logits GEMM), after two warm-up runs. */
static double time_median(DfBackend *be, const DfLmHeadCeArgs *a, DfBuffer logits, int gemm_only, int reps) {
    LmHeadRun run = {be, a, logits, gemm_only};
    return df_test_gpu_median_ms(be, lm_head_once, &run, 2, reps, 1);
}
#endif

static void test_lm_head_ce_speed(void **state) {
    Fixture *f = df_test_gpu_or_skip(state);
    df_test_skip_unless_env("DFLASH_BENCH_LM_HEAD");
#ifdef DF_HAVE_CUDA
    DfBackend *be = f->gpu;
    const int rows = 8192, hidden = 4096, vocab = 151936, reps = 9;
    size_t R = rows, H = hidden, V = vocab;
    float *x = df_test_random_bf16(R * H, 1, 1.0f), *head = df_test_random_array(V * H, 2, 0.05f);
    float *w = df_test_random_array(R, 3, 0.5f);
    int32_t *labels = malloc(R * sizeof *labels);
    for (size_t r = 0; r < R; r++) w[r] += 1.0f, labels[r] = r % 7 == 0 ? -1 : (int32_t)((r * 7919) % V);
    DfLmHeadCeArgs a = {.rows = rows, .hidden = hidden, .vocab = vocab, .grad_scale = 1.0f / rows};
    a.x = df_test_upload(be, x, R * H, DF_BUF_ACT);
    a.head = df_test_upload(be, head, V * H, DF_BUF_ACT);
    a.weights = df_test_upload(be, w, R, DF_BUF_F32);
    a.labels = df_test_upload_i32(be, labels, R);
    a.ce = df_test_upload(be, w, R, DF_BUF_F32);
    a.argmax = df_test_upload_i32(be, labels, R);
    DfBuffer d_x = df_test_upload(be, x, R * H, DF_BUF_ACT), logits;
    DfError err;
    if (df_buffer_alloc(be, &logits, DF_BUF_ACT, R * V, &err)) fail_msg("%s", err.msg);
    double flop1 = 2.0 * R * H * V;
    double gemm = time_median(be, &a, logits, 1, reps);
    printf("    plain GEMM %dx%dx%d (bf16 out): %.2f ms, %.0f TFLOP/s\n", rows, (int)V, hidden, gemm,
           flop1 / gemm / 1e9);
    for (int bf = 0; bf < 2; bf++) {
        df_cuda_set_lm_head_logits_bf16(be, bf);
        for (int with_dx = 1; with_dx >= 0; with_dx--) {
            a.d_x = with_dx ? d_x : (DfBuffer){0};
            double ms = time_median(be, &a, logits, 0, reps), flop = flop1 * (with_dx ? 2 : 1);
            printf("    lm_head_ce logits %s, d_x %s: %.2f ms, %.0f TFLOP/s, %.3f of the plain GEMM's rate\n",
                   bf ? "bf16" : "fp32", with_dx ? "yes" : "no ", ms, flop / ms / 1e9, (flop / ms) / (flop1 / gemm));
        }
    }
    df_cuda_set_lm_head_logits_bf16(be, 0);
    /* rows per chunk: the d_x product of one chunk has rows x hidden outputs
     * only, so its tiles fill whole waves of the SMs at some chunk sizes and
     * leave most of a last wave idle at others */
    static const int chunk_rows[] = {1024, 1280, 1536, 1664, 2048, 2560, 4096};
    a.d_x = d_x;
    for (size_t i = 0; i < sizeof chunk_rows / sizeof chunk_rows[0]; i++) {
        df_cuda_set_lm_head_chunk_rows(be, chunk_rows[i]);
        double ms = time_median(be, &a, logits, 0, reps), flop = 2 * flop1;
        printf("    lm_head_ce logits fp32, d_x yes, %4d rows a chunk (%.2f GiB of logits): %.2f ms, %.0f TFLOP/s, "
               "%.3f of the plain GEMM's rate\n",
               chunk_rows[i], chunk_rows[i] * V * 4.0 / (1 << 30), ms, flop / ms / 1e9, (flop / ms) / (flop1 / gemm));
    }
    df_cuda_set_lm_head_chunk_rows(be, 0);
    printf("    peak GPU memory %.2f GiB\n", peak_bytes(be) / (1024.0 * 1024 * 1024));
    DfBuffer bufs[8] = {a.x, a.head, a.weights, a.labels, a.ce, a.argmax, d_x, logits};
    for (int i = 0; i < 8; i++) df_buffer_free(be, &bufs[i]);
    free(x), free(head), free(w), free(labels);
#else
    (void)f;
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_download_i32),
        cmocka_unit_test(test_fill_zero),
        cmocka_unit_test(test_linear_weight_grad),
        cmocka_unit_test(test_rmsnorm_backward),
        cmocka_unit_test(test_rope_backward),
        cmocka_unit_test(test_swiglu_backward),
        cmocka_unit_test(test_lm_head_ce),
        cmocka_unit_test(test_lm_head_ce_bad_label),
        cmocka_unit_test(test_lm_head_ce_speed),
    };
    return cmocka_run_group_tests(tests, df_test_backend_pair_setup, df_test_backend_pair_teardown);
}
