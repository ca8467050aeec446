/* The CUDA skinny GEMM (decoding's products: M <= 64 rows of activations
 * against [N,K] weights, src/backend/cuda/cuda_skinny_gemm.cu) against the
 * CPU backend's matmul. Inputs are random (never zero) and rounded to bf16,
 * so both backends see the same values; outputs start NaN-poisoned (beta 0)
 * or random (beta 1). Tolerance: max|a-b| / max|b| <= 1e-2; NaN never passes.
 * M in {1, 2, 3, 7, 8, 9, 16, 17, 31, 33, 64} (every n-tile count, partial
 * n-tiles) at shapes whose N and K are not multiples of the tiles (128
 * weight rows per block, 16 per warp, 128 k per stage, 32 per chunk), with
 * and without split-K; the Qwen3-8B decode shapes at M = 1 and 64. Each
 * product must have taken the skinny kernel (df_cuda_skinny_gemm_count), the
 * split-K sums must be the same bit for bit when repeated, and shapes the
 * kernel does not take (K not a multiple of 8, unaligned pointers, M = 65)
 * must still be right through cuBLASLt. DFLASH_SKINNY_QUICK=1 leaves out the
 * Qwen3-8B shapes (for compute-sanitizer).
 * With DFLASH_BENCH_SKINNY=1: times (CUDA events, median after warm-up) of
 * the Qwen3-8B shapes at M = 1, 16, 64 through the skinny kernel and through
 * cuBLASLt, with the weight bytes read per second; the weights rotate over
 * copies of at least 512 MiB in all so that they come from HBM, not L2.
 * Everything skips without a GPU (or without CUDA built in). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend/backend.h"
#ifdef DF_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_variants.h"
#endif

#define OP_TOL 1e-2

typedef DfTestBackendPair Fixture;

/* Every product the kernel fits takes it here (the default takes only the
 * shapes where it is faster: test_skinny_auto_routing). */
static Fixture *gpu_or_skip(void **state) {
    Fixture *f = df_test_gpu_or_skip(state);
#ifdef DF_HAVE_CUDA
    df_cuda_set_skinny_gemm(f->gpu, DF_SKINNY_GEMM_ALWAYS);
#endif
    return f;
}

#ifdef DF_HAVE_CUDA

static void sync_or_fail(DfBackend *be) {
    DfError err;
    if (be->ops->sync(be, &err)) fail_msg("sync: %s", err.msg);
}

/* The weights of one shape on both backends. */
typedef struct Weights {
    int n, k;
    DfBuffer cpu, gpu;
} Weights;

static Weights weights_upload(Fixture *f, int n, int k, uint64_t seed) {
    size_t count = (size_t)n * k;
    float *b = df_test_random_bf16(count, seed, 1.0f);
    Weights w = {n, k, df_test_upload(f->cpu, b, count, DF_BUF_ACT), df_test_upload(f->gpu, b, count, DF_BUF_ACT)};
    free(b);
    return w;
}

static void weights_free(Fixture *f, Weights *w) {
    df_buffer_free(f->cpu, &w->cpu);
    df_buffer_free(f->gpu, &w->gpu);
}

/* C = A W^T + beta C0 on both backends; the GPU's result (heap) and the
 * CPU's into *want (heap). expect_skinny: the GPU product must have taken
 * the skinny kernel (1), must not have (0). */
static float *run_pair(Fixture *f, const Weights *w, int m, float beta, uint64_t seed, int expect_skinny,
                       float **want) {
    size_t na = (size_t)m * w->k, nc = (size_t)m * w->n;
    float *a = df_test_random_bf16(na, seed, 1.0f), *c0 = df_test_random_bf16(nc, seed + 1, 1.0f);
    DfBuffer ac = df_test_upload(f->cpu, a, na, DF_BUF_ACT), ag = df_test_upload(f->gpu, a, na, DF_BUF_ACT);
    DfBuffer cc = beta != 0 ? df_test_upload(f->cpu, c0, nc, DF_BUF_ACT) : df_test_upload_poisoned(f->cpu, nc, DF_BUF_ACT);
    DfBuffer cg = beta != 0 ? df_test_upload(f->gpu, c0, nc, DF_BUF_ACT) : df_test_upload_poisoned(f->gpu, nc, DF_BUF_ACT);
    size_t before = df_cuda_skinny_gemm_count(f->gpu);
    df_op_matmul(f->cpu, cc, ac, w->cpu, m, w->n, w->k, 0, 1, beta);
    df_op_matmul(f->gpu, cg, ag, w->gpu, m, w->n, w->k, 0, 1, beta);
    sync_or_fail(f->gpu);
    int took = df_cuda_skinny_gemm_count(f->gpu) > before;
    if (took != expect_skinny)
        fail_msg("M=%d N=%d K=%d: the skinny kernel %s", m, w->n, w->k, took ? "was taken" : "was not taken");
    float *got = df_test_download(f->gpu, cg);
    *want = df_test_download(f->cpu, cc);
    df_buffer_free(f->cpu, &ac), df_buffer_free(f->gpu, &ag), df_buffer_free(f->cpu, &cc), df_buffer_free(f->gpu, &cg);
    free(a), free(c0);
    return got;
}

static void check(Fixture *f, const Weights *w, int m, float beta, uint64_t seed) {
    float *want, *got = run_pair(f, w, m, beta, seed, 1, &want);
    double e = df_rel_error(got, want, (size_t)m * w->n);
    if (!(e <= OP_TOL))
        fail_msg("skinny matmul M=%d N=%d K=%d beta=%g: relative error %g (tolerance %g)", m, w->n, w->k, beta, e,
                 OP_TOL);
    free(got), free(want);
}

static const int M_CASES[] = {1, 2, 3, 7, 8, 9, 16, 17, 31, 33, 64};
#define N_M_CASES (int)(sizeof M_CASES / sizeof M_CASES[0])

#endif

/* Small shapes: N not a multiple of 128 or 16 (partial blocks, warps past
 * N, row r + 8 past N), K with a partial stage and a partial chunk, the
 * smallest K (8), and a split-K shape whose last split is short. */
static void test_skinny_small_shapes(void **state) {
    Fixture *f = gpu_or_skip(state);
#ifdef DF_HAVE_CUDA
    const int shapes[][2] = {{1000, 264}, {17, 8}, {200, 1032}, {131, 136}, {16, 4104}};
    uint64_t seed = 100;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        Weights w = weights_upload(f, shapes[s][0], shapes[s][1], seed++);
        for (int i = 0; i < N_M_CASES; i++)
            for (int beta = 0; beta < 2; beta++) check(f, &w, M_CASES[i], (float)beta, seed += 2);
        weights_free(f, &w);
    }
#else
    (void)f;
#endif
}

/* The Qwen3-8B decode shapes: q/o, k/v, gate/up, down, lm head (skipped
 * under DFLASH_SKINNY_QUICK=1: the sanitizer runs of scripts/gpu_check.sh). */
static void test_skinny_qwen3_8b_shapes(void **state) {
    Fixture *f = gpu_or_skip(state);
    const char *quick = getenv("DFLASH_SKINNY_QUICK");
    if (quick && strcmp(quick, "1") == 0) skip();
#ifdef DF_HAVE_CUDA
    const int shapes[][2] = {{4096, 4096}, {1024, 4096}, {12288, 4096}, {4096, 12288}, {151936, 4096}};
    const int ms[] = {1, 64};
    uint64_t seed = 300;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        Weights w = weights_upload(f, shapes[s][0], shapes[s][1], seed++);
        for (int i = 0; i < 2; i++)
            for (int beta = 0; beta < 2; beta++) check(f, &w, ms[i], (float)beta, seed += 2);
        weights_free(f, &w);
    }
#else
    (void)f;
#endif
}

/* Split-K shapes run three times: the same bits every time (the partial sums
 * are added in split order whichever split finishes last), and every run
 * writes its output (the arrival counters are back at 0 after each call;
 * outputs are re-poisoned before each run). */
static void test_skinny_split_k_is_deterministic(void **state) {
    Fixture *f = gpu_or_skip(state);
#ifdef DF_HAVE_CUDA
    const int cases[][3] = {{1, 1024, 4096}, {64, 4096, 4096}, {9, 200, 1032}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        Weights w = weights_upload(f, cases[c][1], cases[c][2], 500 + c);
        float *first = NULL;
        for (int run = 0; run < 3; run++) {
            float *want, *got = run_pair(f, &w, cases[c][0], 0.0f, 600 + c, 1, &want);
            double e = df_rel_error(got, want, (size_t)cases[c][0] * w.n);
            if (!(e <= OP_TOL)) fail_msg("split-K run %d, M=%d N=%d: relative error %g", run, cases[c][0], w.n, e);
            if (first && memcmp(first, got, (size_t)cases[c][0] * w.n * sizeof *got) != 0)
                fail_msg("split-K M=%d N=%d K=%d: run %d differs from run 0", cases[c][0], w.n, w.k, run);
            free(want);
            if (first) free(got);
            else first = got;
        }
        free(first);
        weights_free(f, &w);
    }
#else
    (void)f;
#endif
}

/* What the kernel does not take goes to cuBLASLt, still right: K not a
 * multiple of 8, M past the bound, weights at an odd element offset, and
 * any product with the skinny path switched off. */
static void test_skinny_fallbacks(void **state) {
    Fixture *f = gpu_or_skip(state);
#ifdef DF_HAVE_CUDA
    Weights w = weights_upload(f, 300, 260, 700);
    float *want, *got = run_pair(f, &w, 65, 1.0f, 701, 0, &want);
    assert_true(df_rel_error(got, want, 65 * 300) <= OP_TOL);
    free(got), free(want);
    df_cuda_set_skinny_gemm(f->gpu, DF_SKINNY_GEMM_OFF);
    got = run_pair(f, &w, 5, 1.0f, 703, 0, &want);
    df_cuda_set_skinny_gemm(f->gpu, DF_SKINNY_GEMM_ALWAYS);
    assert_true(df_rel_error(got, want, 5 * 300) <= OP_TOL);
    free(got), free(want);
    weights_free(f, &w);

    Weights odd = weights_upload(f, 40, 30, 710); /* K = 30 */
    got = run_pair(f, &odd, 3, 0.0f, 711, 0, &want);
    assert_true(df_rel_error(got, want, 3 * 40) <= OP_TOL);
    free(got), free(want);
    weights_free(f, &odd);

    /* weights at element offset 1: 2-byte aligned */
    int m = 4, n = 24, k = 32;
    size_t nb = (size_t)n * k + 1;
    float *b = df_test_random_bf16(nb, 720, 1.0f);
    Weights view = {n, k, df_test_upload(f->cpu, b, nb, DF_BUF_ACT), df_test_upload(f->gpu, b, nb, DF_BUF_ACT)};
    DfBuffer bc = df_buffer_view(view.cpu, 1, nb - 1), bg = df_buffer_view(view.gpu, 1, nb - 1);
    Weights shifted = {n, k, bc, bg};
    got = run_pair(f, &shifted, m, 0.0f, 722, 0, &want);
    assert_true(df_rel_error(got, want, (size_t)m * n) <= OP_TOL);
    free(got), free(want), free(b);
    weights_free(f, &view);
#else
    (void)f;
#endif
}

#ifdef DF_HAVE_CUDA
/* Median ms of one product, the weights rotating over `copies` buffers. */
typedef struct ProductRun {
    DfBackend *be;
    DfBuffer c, a;
    const DfBuffer *w; /* [copies] */
    int copies, m, n, k;
} ProductRun;

static void products(void *ctx) {
    const ProductRun *r = ctx;
    for (int i = 0; i < r->copies; i++) df_op_matmul(r->be, r->c, r->a, r->w[i], r->m, r->n, r->k, 0, 1, 1.0f);
}

static double time_product(DfBackend *be, DfBuffer c, DfBuffer a, const DfBuffer *w, int copies, int m, int n, int k) {
    ProductRun run = {be, c, a, w, copies, m, n, k};
    return df_test_gpu_median_ms(be, products, &run, 3, 11, copies);
}
#endif

static void test_skinny_speed(void **state) {
    Fixture *f = gpu_or_skip(state);
    df_test_skip_unless_env("DFLASH_BENCH_SKINNY");
#ifdef DF_HAVE_CUDA
    DfBackend *be = f->gpu;
    const int shapes[][2] = {{4096, 4096}, {1024, 4096}, {12288, 4096}, {4096, 12288}, {151936, 4096}};
    /* uses per decode step: q and o, k and v, gate and up, down (36 layers each), the lm head */
    const int per_step[] = {2 * 36, 2 * 36, 2 * 36, 36, 1};
    const int ms[] = {1, 16, 64};
    double step_skinny[3] = {0}, step_lt[3] = {0};
    DfError err;
    double copy_gbs = 0;
    if (be->ops->copy_bandwidth(be, (size_t)2 << 30, 10, &copy_gbs, &err)) fail_msg("%s", err.msg);
    printf("    device-to-device copy: %.0f GB/s (read + write)\n", copy_gbs);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int n = shapes[s][0], k = shapes[s][1];
        size_t count = (size_t)n * k, bytes = 2 * count;
        int copies = (int)(((size_t)512 << 20) / bytes) + 1;
        float *host = df_test_random_bf16(count, 800 + s, 1.0f);
        DfBuffer *w = malloc((size_t)copies * sizeof *w);
        for (int i = 0; i < copies; i++) w[i] = df_test_upload(be, host, count, DF_BUF_ACT);
        free(host);
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            int m = ms[mi];
            float *xa = df_test_random_bf16((size_t)m * k, 900 + mi, 1.0f);
            float *xc = df_test_random_bf16((size_t)m * n, 950 + mi, 0.01f);
            DfBuffer a = df_test_upload(be, xa, (size_t)m * k, DF_BUF_ACT), c = df_test_upload(be, xc, (size_t)m * n, DF_BUF_ACT);
            double t_skinny = time_product(be, c, a, w, copies, m, n, k);
            df_cuda_set_skinny_gemm(be, DF_SKINNY_GEMM_OFF);
            double t_lt = time_product(be, c, a, w, copies, m, n, k);
            df_cuda_set_skinny_gemm(be, DF_SKINNY_GEMM_ALWAYS);
            printf("    M=%2d N=%6d K=%5d: skinny %8.1f us %5.0f GB/s (%.2f of the copy) | cuBLASLt %8.1f us %5.0f GB/s"
                   " | %.2fx\n",
                   m, n, k, t_skinny * 1e3, bytes / t_skinny / 1e6, bytes / t_skinny / 1e6 / copy_gbs, t_lt * 1e3,
                   bytes / t_lt / 1e6, t_lt / t_skinny);
            step_skinny[mi] += per_step[s] * t_skinny, step_lt[mi] += per_step[s] * t_lt;
            df_buffer_free(be, &a), df_buffer_free(be, &c);
            free(xa), free(xc);
        }
        for (int i = 0; i < copies; i++) df_buffer_free(be, &w[i]);
        free(w);
    }
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
        printf("    Qwen3-8B decode step at M=%2d, products only: skinny %.2f ms, cuBLASLt %.2f ms\n", ms[mi],
               step_skinny[mi], step_lt[mi]);
    fflush(stdout);
#else
    (void)f;
#endif
}

/* The default mode takes the kernel only where it measured faster (few rows
 * against at most 2048 weight rows), and the products stay right. */
static void test_skinny_auto_routing(void **state) {
    Fixture *f = gpu_or_skip(state);
#ifdef DF_HAVE_CUDA
    df_cuda_set_skinny_gemm(f->gpu, DF_SKINNY_GEMM_AUTO);
    const struct {
        int m, n, k, skinny;
    } cases[] = {{1, 1024, 512, 1}, {16, 2048, 264, 1}, {17, 1024, 512, 0}, {1, 2049, 264, 0}, {64, 1024, 512, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Weights w = weights_upload(f, cases[i].n, cases[i].k, 730 + i);
        float *want, *got = run_pair(f, &w, cases[i].m, 0.0f, 740 + i, cases[i].skinny, &want);
        assert_true(df_rel_error(got, want, (size_t)cases[i].m * cases[i].n) <= OP_TOL);
        free(got), free(want);
        weights_free(f, &w);
    }
    df_cuda_set_skinny_gemm(f->gpu, DF_SKINNY_GEMM_ALWAYS);
#else
    (void)f;
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_skinny_auto_routing),
        cmocka_unit_test(test_skinny_small_shapes),
        cmocka_unit_test(test_skinny_qwen3_8b_shapes),
        cmocka_unit_test(test_skinny_split_k_is_deterministic),
        cmocka_unit_test(test_skinny_fallbacks),
        cmocka_unit_test(test_skinny_speed),
    };
    return cmocka_run_group_tests(tests, df_test_backend_pair_setup, df_test_backend_pair_teardown);
}
