/* The CUDA skinny GEMM's routing and determinism (decoding's products: M <=
 * 64 rows of activations against [N,K] weights,
 * src/backend/cuda/gemm/cuda_skinny_gemm.cu). Which products take the kernel
 * (df_cuda_skinny_gemm_count): under "always", every shape it fits, M in
 * {1, 2, 3, 7, 8, 9, 16, 17, 31, 33, 64} (every n-tile count, partial
 * n-tiles) at shapes whose N and K are not multiples of its tiles (128
 * weight rows per block, 16 per warp, 128 k per stage, 32 per chunk), with
 * and without split-K, and the Qwen3-8B decode shapes at M = 1 and 64;
 * under the default, only the shapes where it measured faster; never K not a
 * multiple of 8, unaligned weights, M = 65 or the kernel switched off (those
 * go to cuBLASLt). Its split-K sums must be the same bits when repeated, and
 * every run must write its output (re-poisoned before each). The values of
 * all these products against the CPU's, under every routing, are
 * test_backend_ops' "matmul at decoding's shapes" case.
 * DFLASH_SKINNY_QUICK=1 leaves out the Qwen3-8B shapes (for
 * compute-sanitizer). The kernel's timings against cuBLASLt:
 * dev/cuda/bench_skinny_gemm. Everything skips without a GPU (or without
 * CUDA built in). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend/backend.h"
#ifdef DF_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemm/cuda_skinny_gemm.h"
#endif

typedef DfTestBackendPair Fixture;

/* Every product the kernel fits takes it here, unless a test sets another mode. */
static Fixture *gpu_or_skip(void **state) {
    Fixture *f = df_test_gpu_or_skip(state);
#ifdef DF_HAVE_CUDA
    df_cuda_set_skinny_gemm(f->gpu, DF_SKINNY_GEMM_ALWAYS);
#endif
    return f;
}

#ifdef DF_HAVE_CUDA

/* Weights [n, k] on the GPU, at element offset `offset` of their buffer. */
typedef struct Weights {
    int n, k;
    DfBuffer buf, view;
} Weights;

static Weights weights_upload(DfBackend *gpu, int n, int k, size_t offset, uint64_t seed) {
    size_t count = (size_t)n * k + offset;
    float *b = df_test_random_bf16(count, seed, 1.0f);
    Weights w = {n, k, df_test_upload(gpu, b, count, DF_BUF_ACT), {0}};
    w.view = df_buffer_view(w.buf, offset, count - offset);
    free(b);
    return w;
}

/* C = A W^T + beta C0 on the GPU alone; whether the skinny kernel took it.
 * The output (heap) into *out when out is not NULL; it must be written
 * everywhere (no NaN left of the poison). */
static int takes_skinny(DfBackend *gpu, const Weights *w, int m, float beta, uint64_t seed, float **out) {
    size_t na = (size_t)m * w->k, nc = (size_t)m * w->n;
    float *a = df_test_random_bf16(na, seed, 1.0f), *c0 = df_test_random_bf16(nc, seed + 1, 1.0f);
    DfBuffer ab = df_test_upload(gpu, a, na, DF_BUF_ACT);
    DfBuffer cb = beta != 0 ? df_test_upload(gpu, c0, nc, DF_BUF_ACT) : df_test_upload_poisoned(gpu, nc, DF_BUF_ACT);
    size_t before = df_cuda_skinny_gemm_count(gpu);
    df_op_matmul(gpu, cb, ab, w->view, m, w->n, w->k, 0, 1, beta);
    float *got = df_test_download(gpu, cb); /* syncs */
    int took = df_cuda_skinny_gemm_count(gpu) > before;
    for (size_t i = 0; i < nc; i++)
        if (isnan(got[i])) fail_msg("M=%d N=%d K=%d: output %zu not written", m, w->n, w->k, i);
    if (out) *out = got;
    else free(got);
    df_buffer_free(gpu, &ab), df_buffer_free(gpu, &cb);
    free(a), free(c0);
    return took;
}

static void expect_route(DfBackend *gpu, const Weights *w, int m, float beta, uint64_t seed, int skinny) {
    int took = takes_skinny(gpu, w, m, beta, seed, NULL);
    if (took != skinny)
        fail_msg("M=%d N=%d K=%d beta=%g: the skinny kernel %s", m, w->n, w->k, beta, took ? "was taken" : "was not taken");
}

static const int M_CASES[] = {1, 2, 3, 7, 8, 9, 16, 17, 31, 33, 64};
#define N_M_CASES (int)(sizeof M_CASES / sizeof M_CASES[0])

#endif

/* Small shapes: N not a multiple of 128 or 16 (partial blocks, warps past
 * N, row r + 8 past N), K with a partial stage and a partial chunk, the
 * smallest K (8), and a split-K shape whose last split is short: every M
 * takes the kernel. */
static void test_skinny_small_shapes_take_it(void **state) {
    Fixture *f = gpu_or_skip(state);
#ifdef DF_HAVE_CUDA
    const int shapes[][2] = {{1000, 264}, {17, 8}, {200, 1032}, {131, 136}, {16, 4104}};
    uint64_t seed = 100;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        Weights w = weights_upload(f->gpu, shapes[s][0], shapes[s][1], 0, seed++);
        for (int i = 0; i < N_M_CASES; i++)
            for (int beta = 0; beta < 2; beta++) expect_route(f->gpu, &w, M_CASES[i], (float)beta, seed += 2, 1);
        df_buffer_free(f->gpu, &w.buf);
    }
#else
    (void)f;
#endif
}

/* The Qwen3-8B decode shapes: q/o, k/v, gate/up, down, lm head (skipped
 * under DFLASH_SKINNY_QUICK=1: sanitizer runs). */
static void test_skinny_qwen3_8b_shapes_take_it(void **state) {
    Fixture *f = gpu_or_skip(state);
    const char *quick = getenv("DFLASH_SKINNY_QUICK");
    if (quick && strcmp(quick, "1") == 0) skip();
#ifdef DF_HAVE_CUDA
    const int shapes[][2] = {{4096, 4096}, {1024, 4096}, {12288, 4096}, {4096, 12288}, {151936, 4096}};
    const int ms[] = {1, 64};
    uint64_t seed = 300;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        Weights w = weights_upload(f->gpu, shapes[s][0], shapes[s][1], 0, seed++);
        for (int i = 0; i < 2; i++)
            for (int beta = 0; beta < 2; beta++) expect_route(f->gpu, &w, ms[i], (float)beta, seed += 2, 1);
        df_buffer_free(f->gpu, &w.buf);
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
        Weights w = weights_upload(f->gpu, cases[c][1], cases[c][2], 0, 500 + c);
        float *first = NULL;
        for (int run = 0; run < 3; run++) {
            float *got;
            if (!takes_skinny(f->gpu, &w, cases[c][0], 0.0f, 600 + c, &got))
                fail_msg("split-K M=%d N=%d: the skinny kernel was not taken", cases[c][0], w.n);
            if (first && memcmp(first, got, (size_t)cases[c][0] * w.n * sizeof *got) != 0)
                fail_msg("split-K M=%d N=%d K=%d: run %d differs from run 0", cases[c][0], w.n, w.k, run);
            if (first) free(got);
            else first = got;
        }
        free(first);
        df_buffer_free(f->gpu, &w.buf);
    }
#else
    (void)f;
#endif
}

/* What the kernel does not take goes to cuBLASLt: K not a multiple of 8, M
 * past the bound, weights at an odd element offset, and any product with
 * the skinny path switched off. */
static void test_skinny_fallbacks(void **state) {
    Fixture *f = gpu_or_skip(state);
#ifdef DF_HAVE_CUDA
    Weights w = weights_upload(f->gpu, 300, 260, 0, 700);
    expect_route(f->gpu, &w, 65, 1.0f, 701, 0);
    df_cuda_set_skinny_gemm(f->gpu, DF_SKINNY_GEMM_OFF);
    expect_route(f->gpu, &w, 5, 1.0f, 703, 0);
    df_cuda_set_skinny_gemm(f->gpu, DF_SKINNY_GEMM_ALWAYS);
    df_buffer_free(f->gpu, &w.buf);

    Weights odd = weights_upload(f->gpu, 40, 30, 0, 710); /* K = 30 */
    expect_route(f->gpu, &odd, 3, 0.0f, 711, 0);
    df_buffer_free(f->gpu, &odd.buf);

    Weights shifted = weights_upload(f->gpu, 24, 32, 1, 720); /* at element offset 1: 2-byte aligned */
    expect_route(f->gpu, &shifted, 4, 0.0f, 722, 0);
    df_buffer_free(f->gpu, &shifted.buf);
#else
    (void)f;
#endif
}

/* The default mode takes the kernel only where it measured faster (few rows
 * against at most 2048 weight rows). */
static void test_skinny_auto_routing(void **state) {
    Fixture *f = gpu_or_skip(state);
#ifdef DF_HAVE_CUDA
    df_cuda_set_skinny_gemm(f->gpu, DF_SKINNY_GEMM_AUTO);
    const struct {
        int m, n, k, skinny;
    } cases[] = {{1, 1024, 512, 1}, {16, 2048, 264, 1}, {17, 1024, 512, 0}, {1, 2049, 264, 0}, {64, 1024, 512, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Weights w = weights_upload(f->gpu, cases[i].n, cases[i].k, 0, 730 + i);
        expect_route(f->gpu, &w, cases[i].m, 0.0f, 740 + i, cases[i].skinny);
        df_buffer_free(f->gpu, &w.buf);
    }
    df_cuda_set_skinny_gemm(f->gpu, DF_SKINNY_GEMM_ALWAYS);
#else
    (void)f;
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_skinny_auto_routing),
        cmocka_unit_test(test_skinny_small_shapes_take_it),
        cmocka_unit_test(test_skinny_qwen3_8b_shapes_take_it),
        cmocka_unit_test(test_skinny_split_k_is_deterministic),
        cmocka_unit_test(test_skinny_fallbacks),
    };
    return cmocka_run_group_tests(tests, df_test_backend_pair_setup, df_test_backend_pair_teardown);
}
