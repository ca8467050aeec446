/* test_backend_ops: a dense layer's ops (matrix products, norms, activations,
 * gathers and copies, rope, causal attention, the greedy choice), at odd
 * sizes, at sizes that are not multiples of the GPU kernels' tiles and at
 * the models' shapes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"

/* ---- matmul ------------------------------------------------------------------- */

static void ref_matmul(const float *a, const float *b, const float *c0, double *c, int m, int n, int k, int ta,
                       int tb, float beta) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = beta ? beta * (double)c0[(size_t)i * n + j] : 0;
            for (int p = 0; p < k; p++)
                s += (double)(ta ? a[(size_t)p * m + i] : a[(size_t)i * k + p]) *
                     (tb ? b[(size_t)j * k + p] : b[(size_t)p * n + j]);
            c[(size_t)i * n + j] = s;
        }
}

typedef struct MatmulShape {
    int m, n, k;
    OpsScope scope;
} MatmulShape;

/* Every transpose, beta 0 and 1: odd sizes, sizes that are not multiples of the tiles. */
static void run_matmul(Run *r, const void *shape) {
    const MatmulShape *s = shape;
    int m = s->m, n = s->n, k = s->k;
    ops_label(r, "M=%d N=%d K=%d", m, n, k);
    if (ops_skip(r, s->scope)) return;
    uint64_t seed = 10 + (uint64_t)m * 131 + (uint64_t)n * 17 + (uint64_t)k;
    for (int v = 0; v < 8; v++) {
        int ta = v & 1, tb = (v >> 1) & 1;
        float beta = v >> 2 ? 1.0f : 0.0f;
        float *a = ops_inputs(r, (size_t)m * k, seed + 3 * v, 1), *b = ops_inputs(r, (size_t)k * n, seed + 3 * v + 1, 1);
        float *c0 = ops_inputs(r, (size_t)m * n, seed + 3 * v + 2, 1);
        DfBuffer c = beta ? ops_up(r, c0, (size_t)m * n, DF_BUF_ACT) : ops_poisoned(r, (size_t)m * n, DF_BUF_ACT);
        df_op_matmul(r->be, c, ops_up(r, a, (size_t)m * k, DF_BUF_ACT), ops_up(r, b, (size_t)k * n, DF_BUF_ACT), m, n,
                     k, ta, tb, beta);
        char name[64];
        snprintf(name, sizeof name, "c (ta=%d tb=%d beta=%g)", ta, tb, beta);
        float *got = ops_result(r, name, c);
        if (!r->reference || s->scope != OPS_CHECKED) continue;
        double *want = ops_dvec(r, (size_t)m * n);
        ref_matmul(a, b, c0, want, m, n, k, ta, tb, beta);
        ops_near(r, name, got, want, (size_t)m * n, 1e-5);
    }
}

/* The last is large enough that CUDA, with gemm_search, times cuBLASLt's
 * candidates for it (cuda_matmul_search.cu): on the output, and with beta 1
 * on the C it adds to. */
static const MatmulShape MATMUL_SHAPES[] = {
    {5, 7, 13, OPS_CHECKED},   {1, 1, 1, OPS_CHECKED},          {7, 13, 5, OPS_CHECKED},
    {33, 65, 17, OPS_CHECKED}, {128, 256, 64, OPS_CHECKED},    {300, 257, 129, OPS_CHECKED},
    {1000, 384, 256, OPS_COMPARED}, {1024, 4096, 2048, OPS_COMPARED},
};

/* The GEMM algorithm choices (CUDA): the heuristic's first (the default), the fastest of its candidates timed
 * at large products, its fourth */
static const OpsVariant GEMM_ALGO_VARIANTS[] = {
    {"default variants", {NULL}, {0}},
    {"gemm_search 1", {"gemm_search"}, {1}},
    {"gemm_algo 4", {"gemm_algo"}, {4}},
};

const OpCase CASE_MATMUL = {"matmul (every transpose, beta 0 and 1)", "matmul", run_matmul, OPS_SHAPES(MATMUL_SHAPES),
                            1e-2, OPS_VARIANTS(GEMM_ALGO_VARIANTS)};

/* ---- linear_residual ----------------------------------------------------------- */

/* y = x W^T + r into a buffer of its own (r left as it was) and in place (r is y),
 * against the formula; the same sizes as matmul's, the search's large one included */
static void run_linear_residual(Run *r, const void *shape) {
    const MatmulShape *s = shape;
    int m = s->m, n = s->n, k = s->k;
    size_t mn = (size_t)m * n;
    ops_label(r, "M=%d N=%d K=%d", m, n, k);
    if (ops_skip(r, s->scope)) return;
    uint64_t seed = 700 + (uint64_t)m * 131 + (uint64_t)n * 17 + (uint64_t)k;
    float *x = ops_inputs(r, (size_t)m * k, seed, 1), *w = ops_inputs(r, (size_t)n * k, seed + 1, 1);
    float *res = ops_inputs(r, mn, seed + 2, 1);
    DfBuffer xb = ops_up(r, x, (size_t)m * k, DF_BUF_ACT), wb = ops_up(r, w, (size_t)n * k, DF_BUF_ACT);
    DfBuffer rb = ops_up(r, res, mn, DF_BUF_ACT), y = ops_poisoned(r, mn, DF_BUF_ACT), yr = ops_up(r, res, mn, DF_BUF_ACT);
    df_op_linear_residual(r->be, y, xb, wb, rb, m, n, k);
    df_op_linear_residual(r->be, yr, xb, wb, yr, m, n, k);
    float *got = ops_result(r, "y", y), *got_in_place = ops_result(r, "y (r is y)", yr);
    float *r_after = ops_result_exact(r, "r (unchanged)", rb);
    if (!r->reference || s->scope != OPS_CHECKED) return;
    double *want = ops_dvec(r, mn);
    ref_matmul(x, w, res, want, m, n, k, 0, 1, 1.0f);
    ops_near(r, "y", got, want, mn, 1e-5);
    ops_near(r, "y (r is y)", got_in_place, want, mn, 1e-5);
    for (size_t i = 0; i < mn; i++)
        if (r_after[i] != res[i]) fail_msg("%s: linear_residual changed r at %zu", r->label, i);
}

const OpCase CASE_LINEAR_RESIDUAL = {"linear_residual (into its own buffer and in place)", "linear_residual",
                                     run_linear_residual, OPS_SHAPES(MATMUL_SHAPES), 1e-2, OPS_NO_VARIANTS};

/* Decoding's products: M <= 65 rows of activations against [N,K] weights
 * (C = A W^T + beta C), every skinny-GEMM routing (auto, off, always: with
 * "always" every product the kernel fits takes it, tests/
 * test_cuda_skinny_gemm.c checks which do): N and K not multiples of its
 * tiles (128 weight rows per block, 16 per warp, 128 k per stage, 32 per
 * chunk), split-K, K not a multiple of 8, M past its bound, operands at odd
 * element offsets (2-byte aligned), and the Qwen3-8B decode shapes. */
typedef struct DecodeShape {
    int n, k;
    const int *ms; /* the M of the products, ended by 0 */
    int off_a, off_w, off_c;
    OpsScope scope;
} DecodeShape;

static void run_matmul_decode(Run *r, const void *shape) {
    const DecodeShape *s = shape;
    int n = s->n, k = s->k;
    ops_label(r, "N=%d K=%d, operands at offsets %d/%d/%d", n, k, s->off_a, s->off_w, s->off_c);
    if (ops_skip(r, s->scope)) return;
    size_t nw = (size_t)n * k;
    float *w = ops_inputs(r, nw + s->off_w, 100 + (uint64_t)n + (uint64_t)k, 1);
    DfBuffer wb = df_buffer_view(ops_up(r, w, nw + s->off_w, DF_BUF_ACT), s->off_w, nw);
    for (int i = 0; s->ms[i]; i++)
        for (int beta = 0; beta < 2; beta++) {
            int m = s->ms[i];
            size_t na = (size_t)m * k, nc = (size_t)m * n;
            uint64_t seed = 1000 + 10 * (uint64_t)i + 5 * (uint64_t)beta + (uint64_t)n;
            float *a = ops_inputs(r, na + s->off_a, seed, 1), *c0 = ops_inputs(r, nc + s->off_c, seed + 1, 1);
            DfBuffer ab = df_buffer_view(ops_up(r, a, na + s->off_a, DF_BUF_ACT), s->off_a, na);
            DfBuffer cb = beta ? ops_up(r, c0, nc + s->off_c, DF_BUF_ACT) : ops_poisoned(r, nc + s->off_c, DF_BUF_ACT);
            cb = df_buffer_view(cb, s->off_c, nc);
            df_op_matmul(r->be, cb, ab, wb, m, n, k, 0, 1, (float)beta);
            char name[64];
            snprintf(name, sizeof name, "c (M=%d beta=%d)", m, beta);
            float *got = ops_result(r, name, cb);
            if (!r->reference || s->scope != OPS_CHECKED) continue;
            double *want = ops_dvec(r, nc);
            ref_matmul(a + s->off_a, w + s->off_w, c0 + s->off_c, want, m, n, k, 0, 1, (float)beta);
            ops_near(r, name, got, want, nc, 1e-5);
        }
}

static const int M_ALL[] = {1, 2, 3, 7, 8, 9, 16, 17, 31, 33, 64, 0}, M_1_64[] = {1, 64, 0};
static const int M_5_65[] = {5, 65, 0}, M_3[] = {3, 0}, M_4[] = {4, 0}, M_19[] = {19, 0};
static const int M_AUTO[] = {1, 16, 17, 64, 0}, M_1[] = {1, 0};

static const DecodeShape DECODE_SHAPES[] = {
    /* partial blocks, warps past N, row r + 8 past N; K with a partial stage and chunk; the smallest K (8);
     * a split-K shape whose last split is short */
    {1000, 264, M_ALL, 0, 0, 0, OPS_CHECKED},
    {17, 8, M_ALL, 0, 0, 0, OPS_CHECKED},
    {200, 1032, M_ALL, 0, 0, 0, OPS_CHECKED},
    {131, 136, M_ALL, 0, 0, 0, OPS_CHECKED},
    {16, 4104, M_ALL, 0, 0, 0, OPS_CHECKED},
    /* what the kernel does not take: M past 64, K not a multiple of 8, odd offsets (cuBLASLt's) */
    {300, 260, M_5_65, 0, 0, 0, OPS_CHECKED},
    {40, 30, M_3, 0, 0, 0, OPS_CHECKED},
    {24, 32, M_4, 0, 1, 0, OPS_CHECKED},
    {23, 31, M_19, 1, 3, 5, OPS_CHECKED},
    /* the automatic routing's edges: at most 16 rows against at most 2048 weight rows */
    {1024, 512, M_AUTO, 0, 0, 0, OPS_CHECKED},
    {2048, 264, M_AUTO, 0, 0, 0, OPS_CHECKED},
    {2049, 264, M_1, 0, 0, 0, OPS_CHECKED},
    /* Qwen3-8B: q/o, k/v, gate/up, down, the lm head */
    {4096, 4096, M_1_64, 0, 0, 0, OPS_MODEL},
    {1024, 4096, M_1_64, 0, 0, 0, OPS_MODEL},
    {12288, 4096, M_1_64, 0, 0, 0, OPS_MODEL},
    {4096, 12288, M_1_64, 0, 0, 0, OPS_MODEL},
    {151936, 4096, M_1_64, 0, 0, 0, OPS_MODEL},
};

static const OpsVariant SKINNY_VARIANTS[] = {
    {"skinny_gemm auto (the default)", {NULL}, {0}},
    {"skinny_gemm off", {"skinny_gemm"}, {1}},
    {"skinny_gemm always", {"skinny_gemm"}, {2}},
};

const OpCase CASE_MATMUL_DECODE = {"matmul at decoding's shapes (the skinny-GEMM routings)", "matmul",
                                   run_matmul_decode, OPS_SHAPES(DECODE_SHAPES), 1e-2, OPS_VARIANTS(SKINNY_VARIANTS)};

/* ---- rmsnorm -------------------------------------------------------------------- */

static void ref_rmsnorm(const float *x, const float *w, double *out, int rows, int dim, double eps) {
    for (int i = 0; i < rows; i++) {
        double ss = 0;
        for (int j = 0; j < dim; j++) ss += (double)x[(size_t)i * dim + j] * x[(size_t)i * dim + j];
        double s = 1 / sqrt(ss / dim + eps);
        for (int j = 0; j < dim; j++) out[(size_t)i * dim + j] = x[(size_t)i * dim + j] * s * w[j];
    }
}

typedef struct NormShape {
    int rows, dim, in_place;
    int weight; /* 0: ACT; 1: F32 near 1; 2: F32 1 + 0.0039 in odd columns (bf16 would round it to one) */
} NormShape;

/* The F32 weight's unrounded 1 + 0.0039 (1 in bf16, whose steps above 1 are
 * 2^-7): a backend rounding it would shift those columns' outputs by -0.0039
 * relative, where output rounding (unbiased) keeps their mean relative
 * deviation from the reference near 0 (|mean| < 1e-3). Every backend. */
static void check_weight_not_rounded(const Run *r, const float *got, const float *x, const float *w, int rows, int dim) {
    double *want = calloc((size_t)rows * dim, sizeof *want), sum = 0;
    assert_non_null(want);
    ref_rmsnorm(x, w, want, rows, dim, 1e-6);
    int counted = 0;
    for (size_t i = 1; i < (size_t)rows * dim; i += 2)
        if (fabs(want[i]) > 1e-3) sum += (got[i] - want[i]) / want[i], counted++;
    free(want);
    if (!(fabs(sum / counted) < 1e-3))
        fail_msg("%s: rmsnorm with an F32 weight on the %s backend: mean relative deviation %g over %d values (the "
                 "weight rounded to bf16?)",
                 r->label, r->be->ops->name, sum / counted, counted);
}

static void run_rmsnorm(Run *r, const void *shape) {
    const NormShape *s = shape;
    int rows = s->rows, dim = s->dim;
    size_t n = (size_t)rows * dim;
    ops_label(r, "rows=%d dim=%d%s%s", rows, dim, s->in_place ? " in place" : "", s->weight ? ", F32 weight" : "");
    float *x = ops_inputs(r, n, 40 + n, 3), *w;
    if (s->weight == 0) w = ops_inputs(r, dim, 41 + dim, 1);
    else if (s->weight == 1) w = ops_inputs_around(r, dim, 42 + dim, 1.0f, 0.3f);
    else {
        w = ops_fvec(r, dim);
        for (int i = 0; i < dim; i++) w[i] = 1.0f + 0.0039f * (float)(i % 2);
    }
    DfBuffer xb = ops_up(r, x, n, DF_BUF_ACT), out = s->in_place ? xb : ops_poisoned(r, n, DF_BUF_ACT);
    df_op_rmsnorm(r->be, out, xb, ops_up(r, w, dim, s->weight ? DF_BUF_F32 : DF_BUF_ACT), rows, dim, 1e-6f);
    float *got = ops_result(r, "out", out);
    if (s->weight == 2) check_weight_not_rounded(r, got, x, w, rows, dim);
    if (!r->reference) return;
    double *want = ops_dvec(r, n);
    ref_rmsnorm(x, w, want, rows, dim, 1e-6);
    ops_near(r, "rmsnorm", got, want, n, 1e-5);
}

static const NormShape NORM_SHAPES[] = {
    {3, 19, 0, 0},   {3, 19, 0, 1},   {5, 64, 0, 0},     {37, 4096, 0, 0},  {3, 100, 0, 0},
    {1001, 128, 1, 0}, {9, 7, 1, 0}, {19, 256, 0, 2}, {1, 5120, 0, 1}, {5, 5120, 0, 1},
    /* rows past a warp's 256 values: 2 to 32 units of 8 a lane held (the last one of 264, 2056 and 3000 in part), 16384 past that */
    {2, 264, 0, 0}, {5, 1024, 0, 0}, {7, 2056, 1, 0}, {6, 3000, 0, 0}, {37, 4096, 1, 0}, {3, 8192, 0, 0},
    {2, 16384, 0, 0},
};

const OpCase CASE_RMSNORM = {"rmsnorm (ACT and F32 weights)", "rmsnorm rmsnorm_f32_weight", run_rmsnorm,
                             OPS_SHAPES(NORM_SHAPES), 1e-2, OPS_NO_VARIANTS};

/* ---- elementwise ------------------------------------------------------------------ */

static void run_add_swiglu(Run *r, const void *shape) {
    size_t n = ((const OpsCount *)shape)->n;
    ops_label(r, "n=%zu", n);
    float *y0 = ops_inputs(r, n, 50 + n, 2), *x = ops_inputs(r, n, 51 + n, 4), *g = ops_inputs(r, n, 52 + n, 4);
    float *u = ops_inputs(r, n, 53 + n, 2);
    DfBuffer y = ops_up(r, y0, n, DF_BUF_ACT), out = ops_poisoned(r, n, DF_BUF_ACT);
    df_op_add_inplace(r->be, y, ops_up(r, x, n, DF_BUF_ACT));
    df_op_swiglu(r->be, out, ops_up(r, g, n, DF_BUF_ACT), ops_up(r, u, n, DF_BUF_ACT));
    float *sum = ops_result(r, "add_inplace", y), *sw = ops_result(r, "swiglu", out);
    if (!r->reference) return;
    double *w1 = ops_dvec(r, n), *w2 = ops_dvec(r, n);
    for (size_t i = 0; i < n; i++) w1[i] = (double)y0[i] + x[i], w2[i] = ops_silu(g[i]) * u[i];
    ops_near(r, "add_inplace", sum, w1, n, 1e-6);
    ops_near(r, "swiglu", sw, w2, n, 1e-5);
}

static const OpsCount ELEMENTWISE_SHAPES[] = {{41}, {4096}, {999}, {1}};

const OpCase CASE_ADD_SWIGLU = {"add_inplace, swiglu", "add_inplace swiglu", run_add_swiglu,
                                OPS_SHAPES(ELEMENTWISE_SHAPES), 1e-2, OPS_NO_VARIANTS};

typedef struct PackedShape {
    int rows, inter;
} PackedShape;

/* swiglu on the fused product [gate | up] rows; its output holds rows x inter values only. */
static void run_swiglu_packed(Run *r, const void *shape) {
    const PackedShape *s = shape;
    int rows = s->rows, inter = s->inter;
    size_t n = (size_t)rows * inter;
    ops_label(r, "rows=%d inter=%d", rows, inter);
    float *packed = ops_inputs(r, 2 * n, 54 + n, 4);
    DfBuffer out = ops_poisoned(r, n, DF_BUF_ACT);
    df_op_swiglu_packed(r->be, out, ops_up(r, packed, 2 * n, DF_BUF_ACT), rows, inter);
    float *got = ops_result(r, "out", out);
    if (!r->reference) return;
    double *want = ops_dvec(r, n);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < inter; j++)
            want[(size_t)i * inter + j] =
                ops_silu(packed[(size_t)i * 2 * inter + j]) * packed[(size_t)i * 2 * inter + inter + j];
    ops_near(r, "swiglu_packed", got, want, n, 1e-5);
}

static const PackedShape PACKED_SHAPES[] = {{3, 7}, {1, 64}, {5, 37}, {16, 256}, {3, 12288}};

const OpCase CASE_SWIGLU_PACKED = {"swiglu_packed", "swiglu_packed", run_swiglu_packed, OPS_SHAPES(PACKED_SHAPES), 1e-2,
                                   OPS_NO_VARIANTS};

/* ---- gathers, copies, zeros ---------------------------------------------------------- */

typedef struct EmbeddingShape {
    int vocab, dim, t;
} EmbeddingShape;

static void run_embedding(Run *r, const void *shape) {
    const EmbeddingShape *s = shape;
    ops_label(r, "vocab=%d dim=%d tokens=%d", s->vocab, s->dim, s->t);
    size_t nt = (size_t)s->vocab * s->dim, no = (size_t)s->t * s->dim;
    float *table = ops_inputs(r, nt, 60 + nt, 1);
    int32_t *ids = ops_track(r, malloc((size_t)s->t * sizeof *ids));
    for (int i = 0; i < s->t; i++) ids[i] = (int32_t)(((int64_t)i * 7919 + 3) % s->vocab);
    DfBuffer out = ops_poisoned(r, no, DF_BUF_ACT);
    df_op_embedding(r->be, out, ops_up(r, table, nt, DF_BUF_ACT), ops_up_i32(r, ids, (size_t)s->t), s->t, s->dim);
    float *e = ops_result_exact(r, "embedding", out); /* a gather is exact */
    if (!r->reference) return;
    for (int i = 0; i < s->t; i++)
        for (int j = 0; j < s->dim; j++) assert_true(e[(size_t)i * s->dim + j] == table[(size_t)ids[i] * s->dim + j]);
}

static const EmbeddingShape EMBEDDING_SHAPES[] = {{11, 9, 6}, {1000, 64, 37}, {101, 70, 5}};

const OpCase CASE_EMBEDDING = {"embedding", "embedding", run_embedding, OPS_SHAPES(EMBEDDING_SHAPES), 0,
                               OPS_NO_VARIANTS};

typedef struct Copy2dShape {
    DfBufKind kind;
    int rows, cols, ld_src, ld_dst, dst_off;
    int poisoned; /* the destination starts NaN (else random values, which must stay) */
} Copy2dShape;

static void run_copy2d(Run *r, const void *shape) {
    const Copy2dShape *s = shape;
    ops_label(r, "%s %dx%d, ld %d -> %d, destination offset %d", s->kind == DF_BUF_F32 ? "F32" : "ACT", s->rows,
              s->cols, s->ld_src, s->ld_dst, s->dst_off);
    size_t ns = (size_t)s->rows * s->ld_src, nd = (size_t)s->rows * s->ld_dst + s->dst_off;
    float *src = ops_inputs(r, ns, 61 + ns, 1), *d0 = ops_inputs(r, nd, 62 + nd, 1);
    DfBuffer dst = s->poisoned ? ops_poisoned(r, nd, s->kind) : ops_up(r, d0, nd, s->kind);
    df_op_copy2d(r->be, df_buffer_view(dst, s->dst_off, nd - s->dst_off), s->ld_dst, ops_up(r, src, ns, s->kind),
                 s->ld_src, s->rows, s->cols);
    float *c = ops_result_exact(r, "destination", dst);
    if (!r->reference) return;
    for (size_t i = 0; i < nd; i++) {
        long at = (long)i - s->dst_off, row = at / s->ld_dst, col = at % s->ld_dst;
        if (at >= 0 && col < s->cols) assert_true(c[i] == src[(size_t)row * s->ld_src + col]);
        else if (s->poisoned) assert_true(isnan(c[i])); /* outside the copied block: untouched */
        else assert_true(c[i] == d0[i]);
    }
}

static const Copy2dShape COPY2D_SHAPES[] = {
    {DF_BUF_ACT, 4, 5, 13, 17, 0, 1},
    {DF_BUF_ACT, 37, 64, 64, 192, 64, 0},
    {DF_BUF_ACT, 5, 7, 13, 9, 1, 0},
    {DF_BUF_F32, 9, 3, 5, 11, 2, 0},
};

const OpCase CASE_COPY2D = {"copy2d", "copy2d", run_copy2d, OPS_SHAPES(COPY2D_SHAPES), 0, OPS_NO_VARIANTS};

typedef struct FillShape {
    DfBufKind kind;
    size_t n, view_off, view_n; /* view_n 0: the whole buffer */
} FillShape;

/* fill_zero on every kind, and on a view: only the view's elements change. */
static void run_fill_zero(Run *r, const void *shape) {
    const FillShape *s = shape;
    static const char *const kinds[] = {"ACT", "F32", "I32"};
    ops_label(r, "%s, %zu values, %s", kinds[s->kind == DF_BUF_ACT ? 0 : s->kind == DF_BUF_F32 ? 1 : 2], s->n,
              s->view_n ? "a view" : "whole");
    float *x = ops_inputs(r, s->n, 63 + s->n, 3);
    int32_t *ids = ops_track(r, malloc(s->n * sizeof *ids));
    for (size_t i = 0; i < s->n; i++) ids[i] = (int32_t)i + 1;
    DfBuffer b = s->kind == DF_BUF_I32 ? ops_up_i32(r, ids, s->n) : ops_up(r, x, s->n, s->kind);
    df_op_fill_zero(r->be, s->view_n ? df_buffer_view(b, s->view_off, s->view_n) : b);
    float *got = s->kind == DF_BUF_I32 ? ops_result_i32(r, "buffer", b) : ops_result_exact(r, "buffer", b);
    if (!r->reference) return;
    for (size_t i = 0; i < s->n; i++) {
        int zeroed = !s->view_n || (i >= s->view_off && i < s->view_off + s->view_n);
        double want = zeroed ? 0 : s->kind == DF_BUF_I32 ? (double)ids[i] : (double)x[i];
        if (got[i] != want) fail_msg("%s: element %zu is %g, not %g", r->label, i, got[i], want);
    }
}

static const FillShape FILL_SHAPES[] = {
    {DF_BUF_ACT, 52, 0, 0},     {DF_BUF_F32, 52, 0, 0},     {DF_BUF_I32, 5, 0, 0},
    {DF_BUF_ACT, 1001, 0, 0},   {DF_BUF_F32, 1001, 0, 0},   {DF_BUF_I32, 1001, 0, 0},
    {DF_BUF_ACT, 1001, 3, 500}, {DF_BUF_F32, 1001, 3, 500}, {DF_BUF_I32, 1001, 3, 500},
};

const OpCase CASE_FILL_ZERO = {"fill_zero (every kind, views)", "fill_zero", run_fill_zero, OPS_SHAPES(FILL_SHAPES), 0,
                               OPS_NO_VARIANTS};

/* ---- rope ------------------------------------------------------------------------ */

/* rope tables [n_pos, half] from theta 1e4 */
static void rope_tables(Run *r, int n_pos, int half, float **cos_t, float **sin_t) {
    *cos_t = ops_fvec(r, (size_t)n_pos * half);
    *sin_t = ops_fvec(r, (size_t)n_pos * half);
    for (int p = 0; p < n_pos; p++)
        for (int i = 0; i < half; i++) {
            double f = p * pow(1e4, -2.0 * i / (2 * half));
            (*cos_t)[p * half + i] = (float)cos(f), (*sin_t)[p * half + i] = (float)sin(f);
        }
}

static void ref_rope(const float *x, const int32_t *pos, const float *c, const float *s, double *out, int t, int heads,
                     int hd, int rot, double sign) {
    int half = rot / 2;
    for (int i = 0; i < t; i++)
        for (int h = 0; h < heads; h++) {
            const float *xv = x + ((size_t)i * heads + h) * hd;
            double *o = out + ((size_t)i * heads + h) * hd;
            for (int j = 0; j < hd; j++) o[j] = xv[j];
            for (int j = 0; j < half; j++) {
                double cc = c[pos[i] * half + j], ss = sign * s[pos[i] * half + j];
                o[j] = xv[j] * cc - xv[j + half] * ss;
                o[j + half] = xv[j + half] * cc + xv[j] * ss;
            }
        }
}

typedef struct RopeShape {
    int t, heads, hd, n_pos;
} RopeShape;

/* rope, its backward (the inverse rotation), and the backward of the
 * forward (the identity, to two bf16 roundings). */
static void run_rope(Run *r, const void *shape) {
    const RopeShape *s = shape;
    int t = s->t, heads = s->heads, hd = s->hd, n_pos = s->n_pos;
    size_t n = (size_t)t * heads * hd, nt = (size_t)n_pos * hd / 2;
    ops_label(r, "T=%d heads=%d head_dim=%d, %d positions", t, heads, hd, n_pos);
    int32_t *pos = ops_track(r, malloc((size_t)t * sizeof *pos));
    for (int i = 0; i < t; i++) pos[i] = (i * 37 + 11) % n_pos;
    float *x = ops_inputs(r, n, 70 + n, 2), *c, *sn;
    rope_tables(r, n_pos, hd / 2, &c, &sn);
    DfBuffer p = ops_up_i32(r, pos, t), ct = ops_up(r, c, nt, DF_BUF_F32), st = ops_up(r, sn, nt, DF_BUF_F32);
    DfBuffer a = ops_up(r, x, n, DF_BUF_ACT), b = ops_up(r, x, n, DF_BUF_ACT), ab = ops_up(r, x, n, DF_BUF_ACT);
    df_op_rope(r->be, a, p, ct, st, t, heads, hd);
    df_op_rope_backward(r->be, b, p, ct, st, t, heads, hd);
    df_op_rope(r->be, ab, p, ct, st, t, heads, hd);
    df_op_rope_backward(r->be, ab, p, ct, st, t, heads, hd);
    float *ga = ops_result(r, "rope", a), *gb = ops_result(r, "rope_backward", b);
    float *gab = ops_result(r, "rope then rope_backward", ab);
    ops_last_tol(r, 2e-2); /* two bf16 roundings */
    if (!r->reference) return;
    double *want = ops_dvec(r, n);
    ref_rope(x, pos, c, sn, want, t, heads, hd, hd, 1);
    ops_near(r, "rope", ga, want, n, 1e-5);
    ref_rope(x, pos, c, sn, want, t, heads, hd, hd, -1);
    ops_near(r, "rope_backward (the inverse rotation)", gb, want, n, 1e-5);
    for (size_t i = 0; i < n; i++) want[i] = x[i];
    ops_near(r, "rope then rope_backward (the identity)", gab, want, n, 1e-5);
}

static const RopeShape ROPE_SHAPES[] = {
    {5, 3, 10, 16},   {37, 3, 64, 512},  {5, 8, 128, 512}, {11, 2, 6, 512},
    {3, 1, 24, 512}, {37, 4, 128, 300}, {11, 3, 6, 300}, {257, 2, 64, 300},
};

const OpCase CASE_ROPE = {"rope, rope_backward", "rope rope_backward", run_rope, OPS_SHAPES(ROPE_SHAPES), 1e-2,
                          OPS_NO_VARIANTS};

/* ---- rmsnorm_rope ------------------------------------------------------------------ */

/* x_ld 0: x packed (heads * hd values a token); otherwise its tokens x_ld
 * values apart, x_offset values into its buffer (the q or k columns of a
 * fused q/k/v product). */
typedef struct NormRopeShape {
    int t, heads, hd, n_pos, in_place, x_ld, x_offset;
} NormRopeShape;

/* The positions and rope tables of a shape, on the host and on the run's backend. */
typedef struct NormRopeInputs {
    int32_t *pos;
    float *c, *sn;
    DfBuffer p, ct, st;
} NormRopeInputs;

/* Both cases' start: the run's label, then the shape's positions and tables. */
static NormRopeInputs norm_rope_inputs(Run *r, const NormRopeShape *s) {
    if (s->x_ld)
        ops_label(r, "T=%d heads=%d head_dim=%d x_ld=%d x_offset=%d", s->t, s->heads, s->hd, s->x_ld, s->x_offset);
    else
        ops_label(r, "T=%d heads=%d head_dim=%d%s", s->t, s->heads, s->hd, s->in_place ? " in place" : "");
    NormRopeInputs in;
    size_t nt = (size_t)s->n_pos * s->hd / 2;
    in.pos = ops_track(r, malloc((size_t)s->t * sizeof *in.pos));
    for (int i = 0; i < s->t; i++) in.pos[i] = (i * 29 + 5) % s->n_pos;
    rope_tables(r, s->n_pos, s->hd / 2, &in.c, &in.sn);
    in.p = ops_up_i32(r, in.pos, s->t), in.ct = ops_up(r, in.c, nt, DF_BUF_F32), in.st = ops_up(r, in.sn, nt, DF_BUF_F32);
    return in;
}

/* x's buffer on the host: x_offset values, then the rows x_ld apart (the
 * values between them inputs too, which the op must not read), ending
 * where the last row does; *x_ld its token stride, *packed the rows alone. */
static float *norm_rope_strided_x(Run *r, const NormRopeShape *s, size_t *n_buf, int *x_ld, float **packed) {
    int row = s->heads * s->hd;
    *x_ld = s->x_ld ? s->x_ld : row;
    *n_buf = (size_t)s->x_offset + (size_t)(s->t - 1) * *x_ld + row;
    float *buf = ops_inputs(r, *n_buf, 90 + *n_buf, 3);
    *packed = ops_fvec(r, (size_t)s->t * row);
    for (int i = 0; i < s->t; i++)
        memcpy(*packed + (size_t)i * row, buf + s->x_offset + (size_t)i * *x_ld, (size_t)row * sizeof **packed);
    return buf;
}

/* The fused op against the formula on the packed rows (the reference run),
 * and on every backend bit for bit against its own ops on the same inputs:
 * rmsnorm then rope, with copy2d first where x is strided. A strided x
 * must be left as it was. */
static void run_rmsnorm_rope(Run *r, const void *shape) {
    const NormRopeShape *s = shape;
    int t = s->t, heads = s->heads, hd = s->hd, rows = t * heads, row = heads * hd, x_ld;
    size_t n = (size_t)rows * hd, n_buf;
    NormRopeInputs in = norm_rope_inputs(r, s);
    float *x; /* the packed rows */
    float *xbuf = norm_rope_strided_x(r, s, &n_buf, &x_ld, &x), *w = ops_inputs(r, hd, 91 + hd, 1);
    DfBuffer wb = ops_up(r, w, hd, DF_BUF_ACT), xbuf_b = ops_up(r, xbuf, n_buf, DF_BUF_ACT);
    DfBuffer xb = df_buffer_view(xbuf_b, (size_t)s->x_offset, n_buf - (size_t)s->x_offset);
    DfBuffer fused = s->in_place ? xb : ops_poisoned(r, n, DF_BUF_ACT), apart = ops_poisoned(r, n, DF_BUF_ACT);
    DfBuffer x2 = df_buffer_view(ops_up(r, xbuf, n_buf, DF_BUF_ACT), (size_t)s->x_offset, xb.count);
    df_op_rmsnorm_rope(r->be, fused, xb, x_ld, wb, in.p, in.ct, in.st, t, heads, hd, 1e-6f);
    if (x_ld != row) {
        df_op_copy2d(r->be, apart, row, x2, x_ld, t, row);
        x2 = apart;
    }
    df_op_rmsnorm(r->be, apart, x2, wb, rows, hd, 1e-6f);
    df_op_rope(r->be, apart, in.p, in.ct, in.st, t, heads, hd);
    float *got = ops_result(r, "out", fused), *want_ops = ops_result(r, "rmsnorm then rope", apart);
    if (memcmp(got, want_ops, n * sizeof *got) != 0)
        fail_msg("%s: rmsnorm_rope on the %s backend differs from its %srmsnorm then rope", r->label,
                 r->be->ops->name, x_ld != row ? "copy2d, " : "");
    if (x_ld != row && memcmp(ops_result_exact(r, "x (left as it was)", xbuf_b), xbuf, n_buf * sizeof *xbuf) != 0)
        fail_msg("%s: x was changed", r->label);
    if (!r->reference) return;
    double *normed = ops_dvec(r, n), *want = ops_dvec(r, n);
    float *normed_f = ops_fvec(r, n);
    ref_rmsnorm(x, w, normed, rows, hd, 1e-6);
    for (size_t i = 0; i < n; i++) normed_f[i] = (float)normed[i];
    ref_rope(normed_f, in.pos, in.c, in.sn, want, t, heads, hd, hd, 1);
    ops_near(r, "rmsnorm_rope", got, want, n, 1e-5);
}

/* head dims 64, 128 (2 rows a warp; 37 x 3 rows: the last warp's second row
 * past the end) and 256 take the fused CUDA kernel; 10 and 24 the two ops.
 * Packed x: the backward's shapes too. */
#define NORM_ROPE_PACKED_SHAPES                                                                                       \
    {37, 3, 128, 512, 0, 0, 0}, {16, 8, 128, 300, 1, 0, 0}, {9, 4, 64, 64, 0, 0, 0}, {5, 2, 256, 512, 0, 0, 0},      \
        {7, 3, 10, 16, 0, 0, 0}, {3, 2, 24, 512, 1, 0, 0}, {301, 8, 128, 512, 0, 0, 0}

/* Strided x: the q and k columns of fused q/k/v rows (the prefill's: heads
 * then 2 * kv_heads heads a row, k at offset heads * hd), a token stride
 * that is a multiple of 8 (CUDA: the fused kernel) and odd ones (CUDA:
 * copy2d and the two ops), a single token, head dims the kernel does not
 * take. */
static const NormRopeShape NORM_ROPE_SHAPES[] = {
    NORM_ROPE_PACKED_SHAPES,
    {37, 3, 128, 512, 0, 5 * 128, 0},         /* q of 3 + 2 * 1 heads */
    {37, 1, 128, 512, 0, 5 * 128, 3 * 128},   /* its k */
    {301, 8, 128, 512, 0, 12 * 128, 0},       /* q of 8 + 2 * 2 heads */
    {301, 2, 128, 512, 0, 12 * 128, 8 * 128}, /* its k */
    {9, 2, 64, 64, 0, 8 * 64, 4 * 64},        /* k of 4 + 2 * 2 heads of 64 */
    {5, 2, 256, 512, 0, 6 * 256, 0},
    {17, 3, 128, 512, 0, 3 * 128 + 3, 0},     /* an odd stride */
    {13, 2, 64, 64, 0, 2 * 64 + 1, 5},        /* and an odd offset */
    {1, 4, 128, 16, 0, 7 * 128, 2 * 128},     /* one token: x ends with its row */
    {7, 3, 10, 16, 0, 37, 3},                 /* head dims the kernel does not take */
    {3, 2, 24, 512, 0, 6 * 24, 2 * 24},
};

const OpCase CASE_RMSNORM_ROPE = {"rmsnorm_rope (packed and strided x, against rmsnorm then rope)", "rmsnorm_rope",
                                  run_rmsnorm_rope, OPS_SHAPES(NORM_ROPE_SHAPES), 1e-2, OPS_NO_VARIANTS};

/* qk_norm_rope: q heads then k heads a token of x (the q and k columns of fused q/k/v rows, x_ld values
 * apart, x_offset values into the buffer). */
typedef struct QkNormRopeShape {
    int t, q_heads, k_heads, hd, n_pos, x_ld, x_offset;
} QkNormRopeShape;

/* The one op on every backend bit for bit against its own rmsnorm_rope of the q columns and of the k
 * columns (x left as it was); the reference run also against the formula on the packed rows. */
static void run_qk_norm_rope(Run *r, const void *shape) {
    const QkNormRopeShape *s = shape;
    int t = s->t, qh = s->q_heads, kh = s->k_heads, hd = s->hd, x_ld = s->x_ld;
    NormRopeShape ns = {t, qh + kh, hd, s->n_pos, 0, x_ld, s->x_offset};
    NormRopeInputs in = norm_rope_inputs(r, &ns);
    ops_label(r, "T=%d q_heads=%d k_heads=%d head_dim=%d x_ld=%d x_offset=%d", t, qh, kh, hd, x_ld, s->x_offset);
    size_t nq = (size_t)t * qh * hd, nk = (size_t)t * kh * hd, n_buf;
    int ld;
    float *x; /* the packed q and k heads, (qh + kh) * hd a token */
    float *xbuf = norm_rope_strided_x(r, &ns, &n_buf, &ld, &x);
    float *qw = ops_inputs(r, hd, 95 + hd, 1), *kw = ops_inputs(r, hd, 96 + hd, 1);
    DfBuffer qwb = ops_up(r, qw, hd, DF_BUF_ACT), kwb = ops_up(r, kw, hd, DF_BUF_ACT);
    DfBuffer xbuf_b = ops_up(r, xbuf, n_buf, DF_BUF_ACT);
    DfBuffer xb = df_buffer_view(xbuf_b, (size_t)s->x_offset, n_buf - (size_t)s->x_offset);
    DfBuffer kx = df_buffer_view(xb, (size_t)qh * hd, xb.count - (size_t)qh * hd);
    DfBuffer q = ops_poisoned(r, nq, DF_BUF_ACT), k = ops_poisoned(r, nk, DF_BUF_ACT);
    DfBuffer q2 = ops_poisoned(r, nq, DF_BUF_ACT), k2 = ops_poisoned(r, nk, DF_BUF_ACT);
    df_op_qk_norm_rope(r->be, q, k, xb, x_ld, qwb, kwb, in.p, in.ct, in.st, t, qh, kh, hd, 1e-6f);
    df_op_rmsnorm_rope(r->be, q2, xb, x_ld, qwb, in.p, in.ct, in.st, t, qh, hd, 1e-6f);
    df_op_rmsnorm_rope(r->be, k2, kx, x_ld, kwb, in.p, in.ct, in.st, t, kh, hd, 1e-6f);
    float *got_q = ops_result(r, "q", q), *got_k = ops_result(r, "k", k);
    float *want_q = ops_result(r, "q of rmsnorm_rope", q2), *want_k = ops_result(r, "k of rmsnorm_rope", k2);
    if (memcmp(got_q, want_q, nq * sizeof *got_q) != 0 || memcmp(got_k, want_k, nk * sizeof *got_k) != 0)
        fail_msg("%s: qk_norm_rope on the %s backend differs from its rmsnorm_rope of q and of k", r->label,
                 r->be->ops->name);
    if (memcmp(ops_result_exact(r, "x (left as it was)", xbuf_b), xbuf, n_buf * sizeof *xbuf) != 0)
        fail_msg("%s: x was changed", r->label);
    if (!r->reference) return;
    int row = (qh + kh) * hd;
    const int heads[2] = {qh, kh}, first[2] = {0, qh * hd};
    const float *ws[2] = {qw, kw}, *got[2] = {got_q, got_k};
    for (int part = 0; part < 2; part++) { /* the formula on the packed q (k) heads */
        size_t n = (size_t)t * heads[part] * hd;
        float *rows = ops_fvec(r, n), *normed_f = ops_fvec(r, n);
        double *normed = ops_dvec(r, n), *want = ops_dvec(r, n);
        for (int i = 0; i < t; i++)
            memcpy(rows + (size_t)i * heads[part] * hd, x + (size_t)i * row + first[part],
                   (size_t)heads[part] * hd * sizeof *rows);
        ref_rmsnorm(rows, ws[part], normed, t * heads[part], hd, 1e-6);
        for (size_t i = 0; i < n; i++) normed_f[i] = (float)normed[i];
        ref_rope(normed_f, in.pos, in.c, in.sn, want, t, heads[part], hd, hd, 1);
        ops_near(r, part ? "qk_norm_rope k" : "qk_norm_rope q", got[part], want, n, 1e-5);
    }
}

/* CUDA: head dims 64, 128 and 256 at token strides that are multiples of 8 take the one kernel over both
 * segments (301 and 513 tokens: the q segment's last grid block partial, then k's blocks); an odd stride
 * or offset, or head dims it does not take, the two rmsnorm_rope calls. */
static const QkNormRopeShape QK_NORM_ROPE_SHAPES[] = {
    {37, 3, 1, 128, 512, 5 * 128, 0},  {301, 8, 2, 128, 512, 12 * 128, 0}, {513, 32, 8, 128, 1024, 48 * 128, 0},
    {9, 4, 2, 64, 64, 8 * 64, 0},      {5, 2, 1, 256, 512, 4 * 256, 0},    {1, 4, 2, 128, 16, 8 * 128, 0},
    {17, 3, 1, 128, 512, 5 * 128 + 3, 0}, {13, 2, 1, 64, 64, 4 * 64, 5},  {7, 3, 1, 10, 16, 43, 3},
};

const OpCase CASE_QK_NORM_ROPE = {"qk_norm_rope (against rmsnorm_rope of q and of k)", "qk_norm_rope",
                                  run_qk_norm_rope, OPS_SHAPES(QK_NORM_ROPE_SHAPES), 1e-2, OPS_NO_VARIANTS};

static const NormRopeShape NORM_ROPE_BACKWARD_SHAPES[] = {NORM_ROPE_PACKED_SHAPES};

/* rmsnorm_rope_backward into dx of its own (dy left as it was) and in place,
 * on every backend bit for bit against its rope_backward then
 * rmsnorm_backward; the other backends against the CPU's. */
static void run_rmsnorm_rope_backward(Run *r, const void *shape) {
    const NormRopeShape *s = shape;
    int t = s->t, heads = s->heads, hd = s->hd, rows = t * heads;
    size_t n = (size_t)rows * hd;
    NormRopeInputs in = norm_rope_inputs(r, s);
    float *x = ops_inputs(r, n, 190 + n, 3), *w = ops_inputs(r, hd, 191 + hd, 1), *dy = ops_inputs(r, n, 192 + n, 1);
    float *dw0 = ops_inputs(r, hd, 193 + hd, 2);
    DfBuffer xb = ops_up(r, x, n, DF_BUF_ACT), wb = ops_up(r, w, hd, DF_BUF_ACT);
    DfBuffer dyb = ops_up(r, dy, n, DF_BUF_ACT), dx = s->in_place ? dyb : ops_poisoned(r, n, DF_BUF_ACT);
    DfBuffer dw = ops_up(r, dw0, hd, DF_BUF_F32);
    df_op_rmsnorm_rope_backward(r->be, dx, dw, dyb, xb, wb, in.p, in.ct, in.st, t, heads, hd, 1e-6f);
    DfBuffer apart = ops_up(r, dy, n, DF_BUF_ACT), dw_apart = ops_up(r, dw0, hd, DF_BUF_F32);
    df_op_rope_backward(r->be, apart, in.p, in.ct, in.st, t, heads, hd);
    df_op_rmsnorm_backward(r->be, apart, dw_apart, apart, xb, wb, rows, hd, 1e-6f, 0);
    float *got = ops_result(r, "dx", dx), *got_dw = ops_result(r, "dw", dw);
    float *want = ops_result(r, "dx of rope_backward then rmsnorm_backward", apart);
    float *want_dw = ops_result(r, "dw of rope_backward then rmsnorm_backward", dw_apart);
    if (memcmp(got, want, n * sizeof *got) != 0 || memcmp(got_dw, want_dw, (size_t)hd * sizeof *got_dw) != 0)
        fail_msg("%s: rmsnorm_rope_backward on the %s backend differs from its rope_backward then rmsnorm_backward",
                 r->label, r->be->ops->name);
    if (s->in_place) return;
    float *dy_after = ops_result(r, "dy (left as it was)", dyb);
    if (r->reference && memcmp(dy_after, dy, n * sizeof *dy) != 0) fail_msg("%s: dy was changed", r->label);
}

const OpCase CASE_RMSNORM_ROPE_BACKWARD = {"rmsnorm_rope_backward (against rope_backward then rmsnorm_backward)",
                                           "rmsnorm_rope_backward", run_rmsnorm_rope_backward,
                                           OPS_SHAPES(NORM_ROPE_BACKWARD_SHAPES), 1e-2, OPS_NO_VARIANTS};

/* ---- attention ------------------------------------------------------------------------- */

/* Naive causal GQA attention over packed sequences; lse per [head, row]. */
static void ref_attention(const float *q, const float *k, const float *v, const int32_t *starts, int n_seqs,
                          int heads, int kvh, int hd, double scale, double *out, double *lse, int t) {
    int max_len = 0;
    for (int s = 0; s < n_seqs; s++) max_len = starts[s + 1] - starts[s] > max_len ? starts[s + 1] - starts[s] : max_len;
    double *sc = malloc((size_t)(max_len ? max_len : 1) * sizeof *sc);
    assert_non_null(sc);
    for (int s = 0; s < n_seqs; s++)
        for (int i = starts[s]; i < starts[s + 1]; i++)
            for (int h = 0; h < heads; h++) {
                int g = h / (heads / kvh), n = i - starts[s] + 1;
                const float *qv = q + ((size_t)i * heads + h) * hd;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < n; j++) {
                    const float *kv = k + ((size_t)(starts[s] + j) * kvh + g) * hd;
                    double d = 0;
                    for (int e = 0; e < hd; e++) d += (double)qv[e] * kv[e];
                    sc[j] = d * scale, mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j < n; j++) sum += sc[j] = exp(sc[j] - mx);
                double *o = out + ((size_t)i * heads + h) * hd;
                for (int e = 0; e < hd; e++) o[e] = 0;
                for (int j = 0; j < n; j++) {
                    const float *vv = v + ((size_t)(starts[s] + j) * kvh + g) * hd;
                    for (int e = 0; e < hd; e++) o[e] += sc[j] * vv[e];
                }
                for (int e = 0; e < hd; e++) o[e] /= sum;
                lse[(size_t)h * t + i] = mx + log(sum);
            }
    free(sc);
}

typedef struct AttentionShape {
    const int *lens; /* ended by 0 */
    int heads, kvh, hd;
    double lse_tol;
    OpsScope scope;
} AttentionShape;

static void run_attention(Run *r, const void *shape) {
    const AttentionShape *s = shape;
    int32_t starts[17] = {0};
    int n_seqs = 0;
    while (s->lens[n_seqs]) {
        assert_true(n_seqs < 16);
        starts[n_seqs + 1] = starts[n_seqs] + s->lens[n_seqs];
        n_seqs++;
    }
    int t = starts[n_seqs], heads = s->heads, kvh = s->kvh, hd = s->hd;
    ops_label(r, "T=%d in %d sequences, heads=%d/%d head_dim=%d", t, n_seqs, heads, kvh, hd);
    if (ops_skip(r, s->scope)) return;
    size_t nq = (size_t)t * heads * hd, nk = (size_t)t * kvh * hd;
    uint64_t seed = 80 + (uint64_t)t + 7 * (uint64_t)hd + (uint64_t)heads;
    float *q = ops_inputs(r, nq, seed, 2), *k = ops_inputs(r, nk, seed + 1, 2), *v = ops_inputs(r, nk, seed + 2, 1);
    DfPackedBatch pb;
    DfError err;
    if (df_packed_batch_init(&pb, r->be, starts, n_seqs, &err)) fail_msg("%s", err.msg);
    DfBuffer out = ops_poisoned(r, nq, DF_BUF_ACT), lse = ops_poisoned(r, (size_t)heads * t, DF_BUF_F32);
    float scale = 1.0f / sqrtf((float)hd);
    df_op_attention(r->be, out, lse, ops_up(r, q, nq, DF_BUF_ACT), ops_up(r, k, nk, DF_BUF_ACT),
                    ops_up(r, v, nk, DF_BUF_ACT), &pb, heads, kvh, hd, scale);
    float *go = ops_result(r, "out", out), *gl = ops_result(r, "lse", lse);
    ops_last_tol(r, s->lse_tol); /* fp32 statistics */
    df_packed_batch_free(&pb, r->be);
    if (!r->reference || s->scope != OPS_CHECKED) return;
    double *wo = ops_dvec(r, nq), *wl = ops_dvec(r, (size_t)heads * t);
    ref_attention(q, k, v, starts, n_seqs, heads, kvh, hd, scale, wo, wl, t);
    ops_near(r, "attention out", go, wo, nq, 1e-5);
    ops_near(r, "attention lse", gl, wl, (size_t)heads * t, 1e-5);
}

static const int L_4_7[] = {4, 7, 0}, L_MIXED[] = {1, 7, 130, 300, 0}, L_1000[] = {1000, 0};
static const int L_MANY[] = {64, 65, 63, 128, 2, 129, 255, 256, 257, 0}, L_HYBRID[] = {1, 40, 7, 100, 300, 0};

static const AttentionShape ATTENTION_SHAPES[] = {
    {L_4_7, 4, 2, 64, 1e-3, OPS_CHECKED},
    {L_MIXED, 4, 2, 64, 1e-3, OPS_CHECKED},
    {L_MIXED, 4, 2, 128, 1e-3, OPS_CHECKED},
    {L_MIXED, 8, 1, 64, 1e-3, OPS_CHECKED},
    {L_MIXED, 3, 3, 128, 1e-3, OPS_CHECKED},
    {L_1000, 2, 1, 128, 1e-3, OPS_COMPARED},
    {L_MANY, 4, 2, 64, 1e-3, OPS_COMPARED},
    {L_MANY, 2, 1, 128, 1e-3, OPS_COMPARED},
    /* a hybrid target's head dims: 16 (the fixture) and 40 take the generic kernel, 256 the tensor cores */
    {L_HYBRID, 6, 2, 16, 1e-4, OPS_CHECKED},
    {L_HYBRID, 6, 2, 256, 1e-4, OPS_COMPARED},
    {L_HYBRID, 6, 2, 40, 1e-4, OPS_CHECKED},
};

/* On CUDA, head_dim 128 takes the wgmma kernel by default; the mma.sync one (rows per warp 16 or 32) under
 * attention_mma_sync */
static const OpsVariant ATTENTION_VARIANTS[] = {
    {"default variants (rows per warp automatic)", {NULL}, {0}},
    {"attention rows per warp 16, on mma.sync", {"attention_rows_per_warp", "attention_mma_sync"}, {16, 1}},
    {"attention rows per warp 32, on mma.sync", {"attention_rows_per_warp", "attention_mma_sync"}, {32, 1}},
};

const OpCase CASE_ATTENTION = {"attention (packed, GQA)", "attention", run_attention, OPS_SHAPES(ATTENTION_SHAPES), 1e-2,
                               OPS_VARIANTS(ATTENTION_VARIANTS)};

/* ---- argmax_rows ------------------------------------------------------------------------ */

typedef struct ArgmaxShape {
    int rows, cols, offset; /* offset: the matrix's start in its buffer (1: an unaligned start) */
    int ties;               /* small integers (the maximum repeated in most rows) and NaN rows */
} ArgmaxShape;

static void run_argmax(Run *r, const void *shape) {
    const ArgmaxShape *s = shape;
    int rows = s->rows, cols = s->cols;
    size_t n = (size_t)rows * cols;
    ops_label(r, "%d x %d at offset %d%s", rows, cols, s->offset, s->ties ? ", ties and NaNs" : "");
    float *x;
    if (!s->ties) {
        x = ops_inputs(r, n + s->offset, 90 + n, 1);
        float *m = x + s->offset;
        if (rows > 1) m[1 * cols + 5] = m[1 * cols + 9] = 3.0f; /* a tie: the first wins */
    } else {
        x = ops_track(r, df_test_random_array(n + s->offset, 91 + n, 6.0f));
        for (size_t i = 0; i < n + s->offset; i++) x[i] = roundf(x[i]);
        float *m = x + s->offset;
        if (rows > 3) {
            m[0] = NAN;                           /* row 0: NaN in column 0 wins */
            m[(size_t)1 * cols + cols / 2] = NAN; /* row 1: one NaN among numbers: chosen */
            for (int c = 0; c < cols; c++) m[(size_t)2 * cols + c] = c % 3 ? NAN : -INFINITY;
            m[(size_t)3 * cols + cols - 1] = 100.f, m[(size_t)3 * cols + cols - 2] = 100.f; /* a tie at the end */
        }
    }
    DfBuffer idx = ops_poisoned(r, rows, DF_BUF_I32), val = ops_poisoned(r, rows, DF_BUF_F32);
    DfBuffer xb = ops_up(r, x, n + s->offset, DF_BUF_ACT);
    df_op_argmax_rows(r->be, idx, val, df_buffer_view(xb, s->offset, n), rows, cols);
    float *gi = ops_result_i32(r, "index", idx), *gv = ops_result_exact(r, "value", val);
    if (!r->reference) return;
    const float *m = x + s->offset;
    for (int i = 0; i < rows; i++) { /* the left-to-right scan with >, a NaN ranked as +inf */
        const float *row = m + (size_t)i * cols;
        int best = 0;
        for (int j = 1; j < cols; j++)
            if ((isnan(row[j]) ? INFINITY : row[j]) > (isnan(row[best]) ? INFINITY : row[best])) best = j;
        float want = row[best];
        int flagged = isfinite(want) ? best : -1 - best;
        if (!(gi[i] == (float)flagged && (gv[i] == want || (isnan(gv[i]) && isnan(want)))))
            fail_msg("%s: row %d: index %g value %g, the scan gives %d (%g)", r->label, i, gi[i], gv[i], flagged, want);
    }
    if (s->ties && rows > 3) assert_true(gi[1] == (float)(-1 - cols / 2)); /* the NaN among numbers, flagged */
    if (!s->ties && rows > 1) assert_true(gi[1] == 5.0f);
}

static const ArgmaxShape ARGMAX_SHAPES[] = {
    {4, 23, 0, 0},
    {64, 151936, 0, 1}, /* a Qwen3 decode batch: 16-byte loads */
    {5, 4096, 0, 1},
    {5, 4096, 1, 1},  /* an unaligned start: the scalar path */
    {37, 1003, 0, 1}, /* cols % 8 != 0: the scalar path */
    {1, 7, 0, 1},     /* fewer columns than threads */
};

const OpCase CASE_ARGMAX = {"argmax_rows", "argmax_rows", run_argmax, OPS_SHAPES(ARGMAX_SHAPES), 0, OPS_NO_VARIANTS};
