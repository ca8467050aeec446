/* The skinny GEMM (decoding's products: M <= 64 rows of activations against
 * [N,K] weights, src/backend/cuda/gemm/cuda_skinny_gemm.cu) against cuBLASLt at
 * the Qwen3-8B decode shapes (q/o, k/v, gate/up, down, the lm head) at
 * M = 1, 16, 64: device events, median of 11 after 3 warm-up runs, the
 * weights rotating over copies of at least 512 MiB in all so that they come
 * from HBM, not L2; GB/s of weights read next to the device-to-device
 * copy's bandwidth, and the products of one decode step summed.
 *
 * Each product (C = A W^T + C) is validated first through both paths
 * (variant skinny_gemm: 2 always, 1 off) against the CPU backend's matmul at
 * the same shape: within 1e-2 relative. Which products the kernel takes is
 * tests/test_cuda_skinny_gemm.c's.
 *
 * Usage: build/dev/cuda/bench_skinny_gemm (make dev; scripts/test_gpu.sh part kernels). */
#include <stdio.h>
#include <stdlib.h>

#include "dev_util.h"

enum { SKINNY_ALWAYS = 2, SKINNY_OFF = 1 };

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
    return dev_median_ms(be, products, &run, 3, 11, copies);
}

/* A W^T + C0 on one backend (heap), through the given skinny_gemm routing on a backend with knobs. */
static float *product(DfBackend *be, DfBuffer w, const float *xa, const float *xc, int m, int n, int k, int routing) {
    size_t na = (size_t)m * k, nc = (size_t)m * n;
    DfBuffer a = dev_upload(be, xa, na, DF_BUF_ACT), c = dev_upload(be, xc, nc, DF_BUF_ACT);
    if (be->ops->set_variant) dev_variant(be, "skinny_gemm", routing);
    df_op_matmul(be, c, a, w, m, n, k, 0, 1, 1.0f);
    float *got = dev_download(be, c);
    df_buffer_free(be, &a), df_buffer_free(be, &c);
    return got;
}

/* Both routings of one product against the CPU backend's. */
static void validate(DevBackends *be, DfBuffer w_gpu, DfBuffer w_cpu, const float *xa, const float *xc, int m, int n,
                     int k) {
    float *want = product(be->cpu, w_cpu, xa, xc, m, n, k, 0);
    static const int routings[2] = {SKINNY_ALWAYS, SKINNY_OFF};
    for (int i = 0; i < 2; i++) {
        float *got = product(be->gpu, w_gpu, xa, xc, m, n, k, routings[i]);
        char what[96];
        snprintf(what, sizeof what, "M=%d N=%d K=%d through %s", m, n, k, i ? "cuBLASLt" : "the skinny GEMM");
        dev_validate(what, got, want, (size_t)m * n, 1e-2);
        free(got);
    }
    free(want);
}

int main(void) {
    DevBackends be = dev_open("bench_skinny_gemm");
    DfBackend *gpu = be.gpu;
    const int shapes[][2] = {{4096, 4096}, {1024, 4096}, {12288, 4096}, {4096, 12288}, {151936, 4096}};
    /* uses per decode step: q and o, k and v, gate and up, down (36 layers each), the lm head */
    const int per_step[] = {2 * 36, 2 * 36, 2 * 36, 36, 1};
    const int ms[] = {1, 16, 64};
    double step_skinny[3] = {0}, step_lt[3] = {0};
    DfError err;
    double copy_gbs = 0;
    if (gpu->ops->copy_bandwidth(gpu, (size_t)2 << 30, 10, &copy_gbs, &err)) dev_die("%s", err.msg);
    printf("    device-to-device copy: %.0f GB/s (read + write)\n", copy_gbs);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int n = shapes[s][0], k = shapes[s][1];
        size_t count = (size_t)n * k, bytes = 2 * count;
        int copies = (int)(((size_t)512 << 20) / bytes) + 1;
        float *host = dev_random(count, 800 + s, 1.0f);
        DfBuffer *w = malloc((size_t)copies * sizeof *w), w_cpu = dev_upload(be.cpu, host, count, DF_BUF_ACT);
        if (!w) dev_die("out of host memory");
        for (int i = 0; i < copies; i++) w[i] = dev_upload(gpu, host, count, DF_BUF_ACT);
        free(host);
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            int m = ms[mi];
            float *xa = dev_random((size_t)m * k, 900 + mi, 1.0f);
            float *xc = dev_random((size_t)m * n, 950 + mi, 0.01f);
            validate(&be, w[0], w_cpu, xa, xc, m, n, k);
            DfBuffer a = dev_upload(gpu, xa, (size_t)m * k, DF_BUF_ACT), c = dev_upload(gpu, xc, (size_t)m * n, DF_BUF_ACT);
            dev_variant(gpu, "skinny_gemm", SKINNY_ALWAYS);
            double t_skinny = time_product(gpu, c, a, w, copies, m, n, k);
            dev_variant(gpu, "skinny_gemm", SKINNY_OFF);
            double t_lt = time_product(gpu, c, a, w, copies, m, n, k);
            printf("    M=%2d N=%6d K=%5d: skinny %8.1f us %5.0f GB/s (%.2f of the copy) | cuBLASLt %8.1f us %5.0f GB/s"
                   " | %.2fx\n",
                   m, n, k, t_skinny * 1e3, bytes / t_skinny / 1e6, bytes / t_skinny / 1e6 / copy_gbs, t_lt * 1e3,
                   bytes / t_lt / 1e6, t_lt / t_skinny);
            step_skinny[mi] += per_step[s] * t_skinny, step_lt[mi] += per_step[s] * t_lt;
            df_buffer_free(gpu, &a), df_buffer_free(gpu, &c);
            free(xa), free(xc);
        }
        for (int i = 0; i < copies; i++) df_buffer_free(gpu, &w[i]);
        df_buffer_free(be.cpu, &w_cpu);
        free(w);
    }
    dev_variant(gpu, NULL, 0);
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
        printf("    Qwen3-8B decode step at M=%2d, products only: skinny %.2f ms, cuBLASLt %.2f ms\n", ms[mi],
               step_skinny[mi], step_lt[mi]);
    dev_close(&be);
    return 0;
}
