/* The training step's matrix products at the Qwen3-8B bench shape (target
 * forward over 2 x 2048 tokens, 34 layers; drafter forward and backward over
 * 16,384 block rows and 4,096 context rows, 5 layers) under each of
 * cuBLASLt's heuristic algorithms (variant gemm_algo k = 1..8: the
 * heuristic's k-th candidate; 1 is the default) and under gemm_search, which
 * times the candidates of a large product once and keeps the fastest
 * (src/backend/cuda/gemm/cuda_matmul_search.cu). Prints each product's ms and
 * TFLOP/s per rank, the search's, and a step's products summed at their
 * multiplicities both ways.
 *
 * Every configuration is validated before it is timed: 512 sampled entries
 * of C (including C's last) against a double-precision dot product of the
 * same bf16 inputs on the host, within 1e-2 of the largest (a bf16 C), or
 * 1e-4 (the fp32 weight gradients); products that add to C (beta 1, the
 * residual projections and the weight gradients) start from a known C.
 *
 * After the step's products, the same for products the step does not run
 * (per_step 0, not summed): fusions it could make (one product for q, k and
 * v) and the lm head's per-chunk products (model/drafter_loss_rows.c,
 * cuda_lm_head_ce.cu; bf16 logits here, the op writes fp32).
 *
 * Usage: build/dev/cuda/bench_gemm [NAME] (make dev; scripts/test_gpu.sh part kernels): with NAME, only
 * the products whose name contains it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev_util.h"

enum { RANKS = 8, SAMPLES = 512, WARMUP = 2, REPS = 7 };

typedef enum Kind { LINEAR, LINEAR_ADD, DX, WEIGHT_GRAD } Kind;

/* One product of the step: LINEAR y[m,n] = x[m,k] W[n,k]^T (LINEAR_ADD: y +=),
 * DX dx[m,n] = dy[m,k] W[k,n], WEIGHT_GRAD dW[n,k] += dy[m,n]^T x[m,k] (fp32). */
typedef struct Product {
    const char *name;
    Kind kind;
    int m, n, k;
    int per_step; /* how many a step runs */
} Product;

enum { T = 4096, Q = 16384, H = 4096, KV = 1024, I = 12288, TL = 34, DL = 5 };

static const Product PRODUCTS[] = {
    {"target q", LINEAR, T, H, H, TL},
    {"target k, v", LINEAR, T, KV, H, 2 * TL},
    {"target o (+ residual)", LINEAR_ADD, T, H, H, TL},
    {"target gate, up", LINEAR, T, I, H, 2 * TL},
    {"target down (+ residual)", LINEAR_ADD, T, H, I, TL},
    {"drafter q", LINEAR, Q, H, H, DL},
    {"drafter k, v (block rows)", LINEAR, Q, KV, H, 2 * DL},
    {"drafter o (+ residual)", LINEAR_ADD, Q, H, H, DL},
    {"drafter gate, up", LINEAR, Q, I, H, 2 * DL},
    {"drafter down (+ residual)", LINEAR_ADD, Q, H, I, DL},
    {"drafter dx of down", DX, Q, I, H, DL},
    {"drafter dx of gate, up", DX, Q, H, I, 2 * DL},
    {"drafter dx of q, o", DX, Q, H, H, 2 * DL},
    {"drafter dx of k, v", DX, Q, H, KV, 2 * DL},
    {"drafter dW of down", WEIGHT_GRAD, Q, H, I, DL},
    {"drafter dW of gate, up", WEIGHT_GRAD, Q, I, H, 2 * DL},
    {"drafter dW of q, o", WEIGHT_GRAD, Q, H, H, 2 * DL},
    {"drafter dW of k, v (block rows)", WEIGHT_GRAD, Q, KV, H, 2 * DL},
    {"drafter dW of k, v (context rows)", WEIGHT_GRAD, T, KV, H, 2 * DL},
    /* not in the step (per_step 0) */
    {"fused: target q, k, v", LINEAR, T, H + 2 * KV, H, 0},
    {"fused: target gate and up", LINEAR, T, 2 * I, H, 0},
    {"fused: drafter k and v (block rows)", LINEAR, Q, 2 * KV, H, 0},
    {"lm-head chunk logits", LINEAR, 1024, 151936, H, 0},
    {"lm-head chunk d_x", DX, 1024, H, 151936, 0},
};

/* Host inputs and device buffers of one product. */
typedef struct Bufs {
    float *a, *b, *c0; /* host: the first operand, the second, C's start */
    DfBuffer da, db, dc;
    size_t na, nb, nc;
} Bufs;

static void sizes(const Product *p, size_t *na, size_t *nb, size_t *nc) {
    size_t m = p->m, n = p->n, k = p->k;
    if (p->kind == WEIGHT_GRAD) *na = m * n, *nb = m * k, *nc = n * k;
    else *na = m * k, *nb = (size_t)n * k, *nc = m * n;
}

static Bufs bufs_new(DfBackend *gpu, const Product *p, uint64_t seed) {
    Bufs u = {0};
    sizes(p, &u.na, &u.nb, &u.nc);
    u.a = dev_random(u.na, seed, 1.0f), u.b = dev_random(u.nb, seed + 1, 0.05f), u.c0 = dev_random(u.nc, seed + 2, 1.0f);
    u.da = dev_upload(gpu, u.a, u.na, DF_BUF_ACT), u.db = dev_upload(gpu, u.b, u.nb, DF_BUF_ACT);
    u.dc = dev_alloc(gpu, u.nc, p->kind == WEIGHT_GRAD ? DF_BUF_F32 : DF_BUF_ACT);
    return u;
}

static void bufs_free(DfBackend *gpu, Bufs *u) {
    df_buffer_free(gpu, &u->da), df_buffer_free(gpu, &u->db), df_buffer_free(gpu, &u->dc);
    free(u->a), free(u->b), free(u->c0);
}

typedef struct Run {
    DfBackend *be;
    const Product *p;
    const Bufs *u;
} Run;

static void product_once(void *ctx) {
    const Run *r = ctx;
    const Product *p = r->p;
    const Bufs *u = r->u;
    switch (p->kind) {
    case LINEAR: df_op_linear(r->be, u->dc, u->da, u->db, p->m, p->n, p->k, 0); break;
    case LINEAR_ADD: df_op_linear(r->be, u->dc, u->da, u->db, p->m, p->n, p->k, 1); break;
    case DX: df_op_matmul(r->be, u->dc, u->da, u->db, p->m, p->n, p->k, 0, 0, 0.0f); break;
    case WEIGHT_GRAD: df_op_linear_weight_grad(r->be, u->dc, u->da, u->db, p->m, p->n, p->k, 1.0f); break;
    }
}

/* Entry (i, j) of the product on the host, in double, from C's start. */
static double exact_entry(const Product *p, const Bufs *u, size_t i, size_t j) {
    size_t m = p->m, n = p->n, k = p->k;
    double s = p->kind == LINEAR_ADD || p->kind == WEIGHT_GRAD ? u->c0[i * (p->kind == WEIGHT_GRAD ? k : n) + j] : 0;
    if (p->kind == LINEAR || p->kind == LINEAR_ADD)
        for (size_t q = 0; q < k; q++) s += (double)u->a[i * k + q] * u->b[j * k + q];
    else if (p->kind == DX)
        for (size_t q = 0; q < k; q++) s += (double)u->a[i * k + q] * u->b[q * n + j];
    else /* dW[i = n index, j = k index] += sum over rows t of dy[t, i] x[t, j] */
        for (size_t t = 0; t < m; t++) s += (double)u->a[t * n + i] * u->b[t * k + j];
    return s;
}

/* One run from C's start against the host at SAMPLES entries. */
static void validate(DfBackend *gpu, const Product *p, const Bufs *u, const char *what) {
    DfError err = {{0}};
    if (gpu->ops->upload_f32(gpu, u->dc, u->c0, &err)) dev_die("%s", err.msg);
    Run r = {gpu, p, u};
    product_once(&r);
    dev_sync(gpu);
    float *got = dev_download(gpu, u->dc), g[SAMPLES], w[SAMPLES];
    size_t cols = p->kind == WEIGHT_GRAD ? (size_t)p->k : (size_t)p->n;
    for (int s = 0; s < SAMPLES; s++) {
        size_t at = s == SAMPLES - 1 ? u->nc - 1 : ((size_t)s * 2654435761u + 12345u) % u->nc;
        g[s] = got[at], w[s] = (float)exact_entry(p, u, at / cols, at % cols);
    }
    free(got);
    char tag[160];
    snprintf(tag, sizeof tag, "%s, %s: %d entries", p->name, what, SAMPLES);
    dev_validate(tag, g, w, SAMPLES, p->kind == WEIGHT_GRAD ? 1e-4 : 1e-2);
}

static double time_product(DfBackend *gpu, const Product *p, const Bufs *u) {
    Run r = {gpu, p, u};
    return dev_median_ms(gpu, product_once, &r, WARMUP, REPS, 1);
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL;
    DevBackends be = dev_open("bench_gemm");
    DfBackend *gpu = be.gpu;
    double step_first = 0, step_searched = 0, step_best = 0;
    for (size_t i = 0; i < sizeof PRODUCTS / sizeof PRODUCTS[0]; i++) {
        const Product *p = &PRODUCTS[i];
        if (only && !strstr(p->name, only)) continue;
        double flop = 2.0 * p->m * p->n * p->k;
        Bufs u = bufs_new(gpu, p, 100 + 10 * i);
        printf("%s [%d x %d x %d], %d a step:\n", p->name, p->m, p->n, p->k, p->per_step);
        double first = 0, best = INFINITY;
        int best_rank = 1;
        char line[RANKS * 32] = "";
        for (int rank = 1; rank <= RANKS; rank++) {
            dev_variant(gpu, "gemm_algo", rank);
            char what[32];
            snprintf(what, sizeof what, "gemm_algo %d", rank);
            validate(gpu, p, &u, what);
            double ms = time_product(gpu, p, &u);
            if (rank == 1) first = ms;
            if (ms < best) best = ms, best_rank = rank;
            size_t used = strlen(line);
            snprintf(line + used, sizeof line - used, " %d: %.3f ms %.0f TF/s", rank, ms, flop / ms / 1e9);
        }
        printf("   %s\n", line); /* after the validations' lines */
        dev_variant(gpu, "gemm_algo", 0);
        dev_variant(gpu, "gemm_search", 1);
        validate(gpu, p, &u, "gemm_search 1");
        double searched = time_product(gpu, p, &u);
        dev_variant(gpu, "gemm_search", 0);
        printf("    gemm_search: %.3f ms %.0f TFLOP/s (%.3f of the heuristic's first); the best rank %d: %.3f ms\n",
               searched, flop / searched / 1e9, first / searched, best_rank, best);
        step_first += first * p->per_step, step_searched += searched * p->per_step, step_best += best * p->per_step;
        bufs_free(gpu, &u);
    }
    printf("a step's products: %.1f ms with the heuristic's first algorithms (the default), %.1f ms with gemm_search, "
           "%.1f ms with each product's best rank\n",
           step_first, step_searched, step_best);
    dev_variant(gpu, NULL, 0);
    dev_close(&be);
    return 0;
}
