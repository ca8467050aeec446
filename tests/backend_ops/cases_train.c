/* test_backend_ops: the drafter's training ops: the backward ops (against
 * their formulas in double and, at small shapes, central finite differences
 * of the forward), the block attention and its backward, the fused lm-head
 * cross-entropy, and the optimizer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"

#include "backend/optim_math.h"
#include "base/numeric.h"
#include "train/optimizer.h"

/* ---- finite differences ------------------------------------------------------- */

/* Central difference of L(x) = sum_i g[i] * f(x)[i] in coordinate j of x,
 * with f run on the CPU (fp32) through `forward`. */
typedef void (*ForwardFn)(Run *r, const float *x, float *out, void *ctx);
static double fd_grad(Run *r, ForwardFn f, void *ctx, float *x, const float *g, size_t nout, size_t j, float h) {
    float *out = malloc(nout * sizeof *out), keep_x = x[j];
    assert_non_null(out);
    double l[2];
    for (int side = 0; side < 2; side++) {
        x[j] = keep_x + (side ? h : -h);
        f(r, x, out, ctx);
        l[side] = 0;
        for (size_t i = 0; i < nout; i++) l[side] += (double)g[i] * out[i];
    }
    x[j] = keep_x;
    free(out);
    return (l[1] - l[0]) / (2.0 * h);
}

/* The gradient got[j] against finite differences at a spread of coordinates. */
static void check_fd(Run *r, const char *what, ForwardFn f, void *ctx, float *x, size_t nx, const float *g,
                     size_t nout, const float *got, double tol) {
    double scale = 1e-3;
    for (size_t j = 0; j < nx; j++) scale = fmax(scale, fabs(got[j]));
    for (size_t j = 0; j < nx; j += 1 + nx / 23) {
        double want = fd_grad(r, f, ctx, x, g, nout, j, 1e-2f);
        if (!(fabs(got[j] - want) <= tol * scale))
            fail_msg("%s: %s[%zu]: %.6g, finite differences %.6g (tolerance %g x %g)", r->label, what, j, got[j], want,
                     tol, scale);
    }
}

/* got minus the initial values of a buffer that was added to (scratch of the run). */
static float *increment(Run *r, const float *got, const float *init, size_t n) {
    float *d = ops_fvec(r, n);
    for (size_t i = 0; i < n; i++) d[i] = got[i] - (init ? init[i] : 0);
    return d;
}

/* ---- rmsnorm_backward ------------------------------------------------------------- */

typedef struct NormCtx {
    const float *w;
    int rows, dim;
} NormCtx;

static void rmsnorm_fwd(Run *r, const float *x, float *out, void *ctx) {
    const NormCtx *c = ctx;
    size_t n = (size_t)c->rows * c->dim;
    DfBuffer bx = df_test_upload(r->be, x, n, DF_BUF_ACT), bw = df_test_upload(r->be, c->w, c->dim, DF_BUF_ACT);
    DfBuffer bo = df_test_upload_poisoned(r->be, n, DF_BUF_ACT);
    df_op_rmsnorm(r->be, bo, bx, bw, c->rows, c->dim, 1e-6f);
    float *h = df_test_download(r->be, bo);
    memcpy(out, h, n * sizeof *out);
    free(h);
    df_buffer_free(r->be, &bx), df_buffer_free(r->be, &bw), df_buffer_free(r->be, &bo);
}

static void rmsnorm_w_fwd(Run *r, const float *w, float *out, void *ctx) {
    const NormCtx *c = ctx; /* ctx->w is x here */
    NormCtx swapped = {w, c->rows, c->dim};
    rmsnorm_fwd(r, c->w, out, &swapped);
}

/* The backward from its formula (backend_ops.def), in double: dx (added to dx0 when given), dw += sum dy * xh. */
static void ref_rmsnorm_backward(const float *x, const float *w, const float *dy, const float *dx0, const float *dw0,
                                 int rows, int dim, double *dx, double *dw) {
    for (int j = 0; j < dim; j++) dw[j] = dw0[j];
    for (int i = 0; i < rows; i++) {
        const float *xr = x + (size_t)i * dim, *dyr = dy + (size_t)i * dim;
        double ss = 0, dot = 0;
        for (int j = 0; j < dim; j++) ss += (double)xr[j] * xr[j];
        double rr = 1 / sqrt(ss / dim + 1e-6);
        for (int j = 0; j < dim; j++) dot += (double)dyr[j] * w[j] * xr[j] * rr;
        for (int j = 0; j < dim; j++) {
            double xh = xr[j] * rr, g = (double)dyr[j] * w[j];
            dx[(size_t)i * dim + j] = rr * (g - xh * dot / dim) + (dx0 ? dx0[(size_t)i * dim + j] : 0);
            dw[j] += (double)dyr[j] * xh;
        }
    }
}

/* mode 0: dx into a buffer of its own; 1: added to dx; 2: dx is dy. */
static void run_rmsnorm_backward(Run *r, const void *shape) {
    const OpsRowsDim *s = shape;
    int rows = s->rows, dim = s->dim;
    size_t n = (size_t)rows * dim;
    ops_label(r, "rows=%d dim=%d", rows, dim);
    float *x = ops_inputs(r, n, 100 + n, 3), *w = ops_inputs(r, dim, 101 + dim, 1), *dy = ops_inputs(r, n, 102 + n, 1);
    float *dx0 = ops_inputs(r, n, 103 + n, 1), *dw0 = ops_inputs(r, dim, 104 + dim, 2);
    for (int mode = 0; mode < 3; mode++) {
        DfBuffer dyb = ops_up(r, dy, n, DF_BUF_ACT);
        DfBuffer dx = mode == 0 ? ops_poisoned(r, n, DF_BUF_ACT) : mode == 1 ? ops_up(r, dx0, n, DF_BUF_ACT) : dyb;
        DfBuffer dw = ops_up(r, dw0, dim, DF_BUF_F32); /* dw is added to */
        df_op_rmsnorm_backward(r->be, dx, dw, dyb, ops_up(r, x, n, DF_BUF_ACT), ops_up(r, w, dim, DF_BUF_ACT), rows,
                               dim, 1e-6f, mode == 1);
        static const char *const dx_names[3] = {"dx", "dx (accumulated)", "dx (in dy)"};
        float *gdx = ops_result(r, dx_names[mode], dx), *gdw = ops_result(r, mode == 1 ? "dw (dx accumulated)" : "dw", dw);
        if (!r->reference) continue;
        double *wdx = ops_dvec(r, n), *wdw = ops_dvec(r, dim);
        ref_rmsnorm_backward(x, w, dy, mode == 1 ? dx0 : NULL, dw0, rows, dim, wdx, wdw);
        ops_near(r, dx_names[mode], gdx, wdx, n, 1e-5);
        ops_near(r, "dw", gdw, wdw, dim, 1e-5);
        if (n > 64 || mode == 2) continue;
        NormCtx cx = {w, rows, dim}, cw = {x, rows, dim};
        check_fd(r, "rmsnorm_backward dx", rmsnorm_fwd, &cx, x, n, dy, n, increment(r, gdx, mode ? dx0 : NULL, n), 2e-3);
        check_fd(r, "rmsnorm_backward dw", rmsnorm_w_fwd, &cw, w, dim, dy, n, increment(r, gdw, dw0, dim), 2e-3);
    }
}

/* the vector path (dim % 8 == 0) from one group a block to 32; the scalar
 * path at odd dims; more rows than blocks (several rows a block); at
 * 2056, 5120 and 6144 a thread's last unit of a row is past its end (the
 * CUDA kernel that holds rows in registers masks it), 8192 its widest row,
 * 16384 too wide for it; the last two at the drafter's widths with more
 * partial rows than the column sums' 32 threads a column, so each of those
 * adds several */
static const OpsRowsDim NORM_BACKWARD_SHAPES[] = {
    {3, 17}, {5, 64}, {37, 4096}, {3, 100}, {1001, 128}, {9, 7}, {2000, 24}, {4100, 8}, {17, 2056},
    {13, 5120}, {7, 6144}, {5, 8192}, {3, 16384}, {3001, 4096}, {40000, 128},
};

/* On CUDA, rows of at most 8192 held in registers by default; the two-pass kernel under rmsnorm_backward_two_pass */
static const OpsVariant NORM_BACKWARD_VARIANTS[] = {
    {"default variants", {NULL}, {0}},
    {"the two-pass kernel", {"rmsnorm_backward_two_pass"}, {1}},
};

const OpCase CASE_RMSNORM_BACKWARD = {"rmsnorm_backward", "rmsnorm_backward", run_rmsnorm_backward,
                                      OPS_SHAPES(NORM_BACKWARD_SHAPES), 1e-2, OPS_VARIANTS(NORM_BACKWARD_VARIANTS)};

/* ---- swiglu_backward ------------------------------------------------------------ */

typedef struct SwigluCtx {
    const float *other;
    size_t n;
    int gate; /* x is the gate (else the up input) */
} SwigluCtx;

static void swiglu_fwd(Run *r, const float *x, float *out, void *ctx) {
    const SwigluCtx *c = ctx;
    DfBuffer a = df_test_upload(r->be, c->gate ? x : c->other, c->n, DF_BUF_ACT);
    DfBuffer b = df_test_upload(r->be, c->gate ? c->other : x, c->n, DF_BUF_ACT);
    DfBuffer o = df_test_upload_poisoned(r->be, c->n, DF_BUF_ACT);
    df_op_swiglu(r->be, o, a, b);
    float *h = df_test_download(r->be, o);
    memcpy(out, h, c->n * sizeof *out);
    free(h);
    df_buffer_free(r->be, &a), df_buffer_free(r->be, &b), df_buffer_free(r->be, &o);
}

/* d_gate and d_up into buffers of their own, then in place (d_gate in gate, d_up in up). */
static void run_swiglu_backward(Run *r, const void *shape) {
    size_t n = ((const OpsCount *)shape)->n;
    ops_label(r, "n=%zu", n);
    float *g = ops_inputs(r, n, 110 + n, 4), *u = ops_inputs(r, n, 111 + n, 2), *d = ops_inputs(r, n, 112 + n, 1);
    for (int in_place = 0; in_place < 2; in_place++) {
        DfBuffer gb = ops_up(r, g, n, DF_BUF_ACT), ub = ops_up(r, u, n, DF_BUF_ACT);
        DfBuffer dg = in_place ? gb : ops_poisoned(r, n, DF_BUF_ACT), du = in_place ? ub : ops_poisoned(r, n, DF_BUF_ACT);
        df_op_swiglu_backward(r->be, dg, du, ops_up(r, d, n, DF_BUF_ACT), gb, ub);
        float *gdg = ops_result(r, in_place ? "d_gate (in place)" : "d_gate", dg);
        float *gdu = ops_result(r, in_place ? "d_up (in place)" : "d_up", du);
        if (!r->reference) continue;
        double *wg = ops_dvec(r, n), *wu = ops_dvec(r, n);
        for (size_t i = 0; i < n; i++) {
            double sg = ops_sigmoid(g[i]);
            wg[i] = (double)d[i] * u[i] * sg * (1 + g[i] * (1 - sg)), wu[i] = (double)d[i] * ops_silu(g[i]);
        }
        ops_near(r, "swiglu_backward d_gate", gdg, wg, n, 1e-5);
        ops_near(r, "swiglu_backward d_up", gdu, wu, n, 1e-5);
        if (n > 64 || in_place) continue;
        SwigluCtx cg = {u, n, 1}, cu = {g, n, 0};
        check_fd(r, "swiglu_backward d_gate", swiglu_fwd, &cg, g, n, d, n, gdg, 2e-3);
        check_fd(r, "swiglu_backward d_up", swiglu_fwd, &cu, u, n, d, n, gdu, 2e-3);
    }
}

static const OpsCount SWIGLU_BACKWARD_SHAPES[] = {{29}, {8000}, {1001}, {3}}; /* 8000: the 16-byte path */

const OpCase CASE_SWIGLU_BACKWARD = {"swiglu_backward", "swiglu_backward", run_swiglu_backward,
                                     OPS_SHAPES(SWIGLU_BACKWARD_SHAPES), 1e-2, OPS_NO_VARIANTS};

/* ---- linear_weight_grad ---------------------------------------------------------- */

typedef struct WgCtx {
    const float *x;
    int m, n, k;
} WgCtx;

/* y = x W^T as a function of W */
static void linear_fwd(Run *r, const float *w, float *out, void *ctx) {
    const WgCtx *c = ctx;
    DfBuffer bx = df_test_upload(r->be, c->x, (size_t)c->m * c->k, DF_BUF_ACT);
    DfBuffer bw = df_test_upload(r->be, w, (size_t)c->n * c->k, DF_BUF_ACT);
    DfBuffer by = df_test_upload_poisoned(r->be, (size_t)c->m * c->n, DF_BUF_ACT);
    df_op_linear(r->be, by, bx, bw, c->m, c->n, c->k, 0);
    float *h = df_test_download(r->be, by);
    memcpy(out, h, (size_t)c->m * c->n * sizeof *out);
    free(h);
    df_buffer_free(r->be, &bx), df_buffer_free(r->be, &bw), df_buffer_free(r->be, &by);
}

typedef struct MnkShape {
    int m, n, k;
    OpsScope scope;
} MnkShape;

static void run_linear_weight_grad(Run *r, const void *shape) {
    const MnkShape *s = shape;
    int m = s->m, n = s->n, k = s->k;
    ops_label(r, "M=%d N=%d K=%d", m, n, k);
    if (ops_skip(r, s->scope)) return;
    size_t nw = (size_t)n * k;
    float *dy = ops_inputs(r, (size_t)m * n, 120 + nw, 1), *x = ops_inputs(r, (size_t)m * k, 121 + nw, 1);
    float *dw0 = ops_inputs(r, nw, 122 + nw, 4); /* F32: the += must keep it */
    DfBuffer dw = ops_up(r, dw0, nw, DF_BUF_F32), dw_set = ops_poisoned(r, nw, DF_BUF_F32); /* beta 0: never read */
    DfBuffer dyb = ops_up(r, dy, (size_t)m * n, DF_BUF_ACT), xb = ops_up(r, x, (size_t)m * k, DF_BUF_ACT);
    df_op_linear_weight_grad(r->be, dw, dyb, xb, m, n, k, 1.0f);
    df_op_linear_weight_grad(r->be, dw_set, dyb, xb, m, n, k, 0.0f);
    float *got = ops_result(r, "dw", dw), *got_set = ops_result(r, "dw (beta 0)", dw_set);
    if (!r->reference || s->scope != OPS_CHECKED) return;
    double *want = ops_dvec(r, nw), *want_set = ops_dvec(r, nw);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < k; j++) {
            double sum = 0;
            for (int p = 0; p < m; p++) sum += (double)dy[(size_t)p * n + i] * x[(size_t)p * k + j];
            want_set[(size_t)i * k + j] = sum;
            want[(size_t)i * k + j] = sum + dw0[(size_t)i * k + j];
        }
    ops_near(r, "linear_weight_grad", got, want, nw, 1e-5);
    ops_near(r, "linear_weight_grad (beta 0)", got_set, want_set, nw, 1e-5);
    if (nw > 64) return;
    float *w = ops_inputs(r, nw, 123 + nw, 1);
    WgCtx c = {x, m, n, k};
    check_fd(r, "linear_weight_grad", linear_fwd, &c, w, nw, dy, (size_t)m * n, increment(r, got, dw0, nw), 2e-3);
}

/* The last is large enough that CUDA, with gemm_search, times cuBLASLt's
 * candidates for it (cuda_matmul_search.cu) into the gradient it adds to:
 * the += must survive. */
static const MnkShape WEIGHT_GRAD_SHAPES[] = {
    {7, 5, 9},        {1, 1, 1},       {7, 13, 5},   {33, 65, 17}, {300, 257, 129}, {1000, 384, 256},
    {4099, 64, 96},   {2048, 4096, 2048, OPS_COMPARED},
};

/* The GEMM algorithm choices (CUDA): the heuristic's first (the default), the fastest of its candidates timed
 * at large products, its fourth */
static const OpsVariant GEMM_ALGO_VARIANTS[] = {
    {"default variants", {NULL}, {0}},
    {"gemm_search 1", {"gemm_search"}, {1}},
    {"gemm_algo 4", {"gemm_algo"}, {4}},
};

const OpCase CASE_LINEAR_WEIGHT_GRAD = {"linear_weight_grad", "linear_weight_grad", run_linear_weight_grad,
                                        OPS_SHAPES(WEIGHT_GRAD_SHAPES), 1e-2, OPS_VARIANTS(GEMM_ALGO_VARIANTS)};

/* ---- block attention ------------------------------------------------------------------ */

/* A block-attention problem. Sequence s has lens[s] context rows and
 * blocks[s] blocks; anchors as given, or generated: a sequence's first block
 * at 0 (no context), its second at its last row, the rest at random rows
 * (sorted when `sorted`). */
typedef struct BlockShape {
    const int *lens, *blocks; /* ended by -1 */
    const int32_t *anchors;   /* NULL: generated */
    int B, heads, kvh, hd, sorted, window;
    OpsScope scope;
    int fd; /* also dq against finite differences (small shapes) */
} BlockShape;

typedef struct BlockProblem {
    int n_seqs, n_blocks, n_ctx;
    int32_t ctx_starts[17], block_starts[17], *anchors;
    float *q, *kc, *vc, *kb, *vb, *d_out, *dk_ctx0, *dv_ctx0, *dk_blk0, *dv_blk0;
    size_t n_qd, n_ckv, n_bkv; /* element counts of q-like, context K/V, block K/V buffers */
} BlockProblem;

static BlockProblem block_problem(Run *r, const BlockShape *s, uint64_t seed) {
    BlockProblem p = {0};
    while (s->lens[p.n_seqs] >= 0) {
        assert_true(p.n_seqs < 16);
        p.ctx_starts[p.n_seqs + 1] = p.ctx_starts[p.n_seqs] + s->lens[p.n_seqs];
        p.block_starts[p.n_seqs + 1] = p.block_starts[p.n_seqs] + s->blocks[p.n_seqs];
        p.n_seqs++;
    }
    p.n_ctx = p.ctx_starts[p.n_seqs], p.n_blocks = p.block_starts[p.n_seqs];
    p.anchors = ops_track(r, malloc((size_t)(p.n_blocks ? p.n_blocks : 1) * sizeof *p.anchors));
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 7;
    for (int q = 0; q < p.n_seqs; q++) {
        int b0 = p.block_starts[q], nb = s->blocks[q];
        for (int i = 0; i < nb; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            p.anchors[b0 + i] = s->anchors ? s->anchors[b0 + i]
                                : i == 0   ? 0
                                : i == 1   ? s->lens[q] - 1
                                           : (int32_t)(x % (uint64_t)s->lens[q]);
        }
        if (s->sorted && !s->anchors)
            for (int i = 1; i < nb; i++) /* insertion sort: small layouts */
                for (int k = b0 + i; k > b0 && p.anchors[k - 1] > p.anchors[k]; k--) {
                    int32_t t = p.anchors[k];
                    p.anchors[k] = p.anchors[k - 1], p.anchors[k - 1] = t;
                }
    }
    size_t n_q = (size_t)p.n_blocks * s->B;
    p.n_qd = n_q * s->heads * s->hd, p.n_ckv = (size_t)p.n_ctx * s->kvh * s->hd, p.n_bkv = n_q * s->kvh * s->hd;
    p.q = ops_inputs(r, p.n_qd, seed + 1, 1), p.kc = ops_inputs(r, p.n_ckv, seed + 2, 1);
    p.vc = ops_inputs(r, p.n_ckv, seed + 3, 1), p.kb = ops_inputs(r, p.n_bkv, seed + 4, 1);
    p.vb = ops_inputs(r, p.n_bkv, seed + 5, 1), p.d_out = ops_inputs(r, p.n_qd, seed + 6, 1);
    p.dk_ctx0 = ops_inputs(r, p.n_ckv, seed + 7, 0.2f), p.dv_ctx0 = ops_inputs(r, p.n_ckv, seed + 8, 0.2f);
    p.dk_blk0 = ops_inputs(r, p.n_bkv, seed + 9, 0.2f), p.dv_blk0 = ops_inputs(r, p.n_bkv, seed + 10, 0.2f);
    return p;
}

/* The forward's output alone, for the finite differences: q replaced. */
typedef struct BlockFdCtx {
    const BlockShape *s;
    const BlockProblem *p;
} BlockFdCtx;

static DfBlockAttnArgs block_args(Run *r, const BlockShape *s, const BlockProblem *p, const DfBlockAttnLayout *l,
                                  const float *q) {
    DfBlockAttnArgs a = {.layout = l, .heads = s->heads, .kv_heads = s->kvh, .head_dim = s->hd,
                         .scale = 1.0f / sqrtf((float)s->hd), .window = s->window};
    a.q = ops_up(r, q, p->n_qd, DF_BUF_ACT);
    a.k_ctx = ops_up(r, p->kc, p->n_ckv, DF_BUF_ACT), a.v_ctx = ops_up(r, p->vc, p->n_ckv, DF_BUF_ACT);
    a.k_blk = ops_up(r, p->kb, p->n_bkv, DF_BUF_ACT), a.v_blk = ops_up(r, p->vb, p->n_bkv, DF_BUF_ACT);
    a.out = ops_poisoned(r, p->n_qd, DF_BUF_ACT);
    a.lse = ops_poisoned(r, (size_t)p->n_blocks * s->B * s->heads, DF_BUF_F32);
    return a;
}

static void block_q_fwd(Run *r, const float *q, float *out, void *ctx) {
    const BlockFdCtx *c = ctx;
    DfBlockAttnLayout l;
    DfError err;
    if (df_block_attn_layout_init(&l, r->be, c->p->n_seqs, c->p->ctx_starts, c->p->block_starts, c->p->anchors,
                                  c->s->B, &err))
        fail_msg("%s", err.msg);
    Run scratch = {.be = r->be};
    DfBlockAttnArgs a = block_args(&scratch, c->s, c->p, &l, q);
    df_op_block_attention(r->be, &a);
    float *h = df_test_download(r->be, a.out);
    memcpy(out, h, c->p->n_qd * sizeof *out);
    free(h);
    ops_run_release(&scratch);
    df_block_attn_layout_free(&l, r->be);
}

/* The op from its definition, in double: out, lse, and the gradients of
 * sum(d_out * out); dk/dv start from the problem's initial values. */
typedef struct BlockReference {
    double *out, *lse, *dq, *dk_ctx, *dv_ctx, *dk_blk, *dv_blk;
} BlockReference;

/* The offset of key i's kv head g in the context (*is_ctx) or block K/V. */
static size_t key_off(const BlockShape *s, int c0, int n_ctx, int j, int g, int i, int *is_ctx) {
    *is_ctx = i < n_ctx;
    size_t row = i < n_ctx ? (size_t)(c0 + i) : (size_t)j * s->B + (size_t)(i - n_ctx);
    return (row * s->kvh + (size_t)g) * s->hd;
}

/* One (block j, head h, row r): key i of its visible list is context row
 * c0 + i below n_ctx, then block row j*B + i - n_ctx. pr, dpr: scratch. */
static void reference_row(const BlockShape *s, const BlockProblem *p, BlockReference *o, double *pr, double *dpr, int j,
                          int c0, int n_ctx, int h, int r) {
    int hd = s->hd, g = h / (s->heads / s->kvh), n = n_ctx + s->B, ctx;
    size_t qi = (size_t)j * s->B + r, qo = (qi * s->heads + h) * hd;
    double scale = 1.0 / sqrt(hd), mx = -INFINITY, sum = 0, dsum = 0;
    for (int i = 0; i < n; i++) { /* scores */
        size_t ko = key_off(s, c0, n_ctx, j, g, i, &ctx);
        const float *k = (ctx ? p->kc : p->kb) + ko;
        double d = 0;
        for (int e = 0; e < hd; e++) d += (double)p->q[qo + e] * k[e];
        pr[i] = d * scale;
        mx = pr[i] > mx ? pr[i] : mx;
    }
    for (int i = 0; i < n; i++) sum += pr[i] = exp(pr[i] - mx);
    o->lse[(size_t)h * p->n_blocks * s->B + qi] = mx + log(sum);
    for (int i = 0; i < n; i++) { /* P, out, dP = dO V^T, rowsum(P dP) */
        size_t ko = key_off(s, c0, n_ctx, j, g, i, &ctx);
        const float *v = (ctx ? p->vc : p->vb) + ko;
        double d = 0;
        pr[i] /= sum;
        for (int e = 0; e < hd; e++) o->out[qo + e] += pr[i] * v[e], d += (double)p->d_out[qo + e] * v[e];
        dpr[i] = d;
        dsum += pr[i] * d;
    }
    for (int i = 0; i < n; i++) { /* dS; dq += dS K, dk += dS^T q, dv += P^T dO */
        size_t ko = key_off(s, c0, n_ctx, j, g, i, &ctx);
        const float *k = (ctx ? p->kc : p->kb) + ko;
        double *dk = (ctx ? o->dk_ctx : o->dk_blk) + ko, *dv = (ctx ? o->dv_ctx : o->dv_blk) + ko;
        double ds = pr[i] * (dpr[i] - dsum) * scale;
        for (int e = 0; e < hd; e++) {
            o->dq[qo + e] += ds * k[e];
            dk[e] += ds * p->q[qo + e];
            dv[e] += pr[i] * p->d_out[qo + e];
        }
    }
}

static double *doubles_from(Run *r, const float *x, size_t n) {
    double *d = ops_dvec(r, n);
    for (size_t i = 0; i < n; i++) d[i] = x ? x[i] : 0.0;
    return d;
}

static BlockReference block_reference(Run *r, const BlockShape *s, const BlockProblem *p) {
    size_t n_q = (size_t)p->n_blocks * s->B;
    BlockReference o = {doubles_from(r, NULL, p->n_qd),       doubles_from(r, NULL, n_q * s->heads),
                        doubles_from(r, NULL, p->n_qd),       doubles_from(r, p->dk_ctx0, p->n_ckv),
                        doubles_from(r, p->dv_ctx0, p->n_ckv), doubles_from(r, p->dk_blk0, p->n_bkv),
                        doubles_from(r, p->dv_blk0, p->n_bkv)};
    int max_n = s->B;
    for (int j = 0; j < p->n_blocks; j++) max_n = p->anchors[j] + s->B > max_n ? p->anchors[j] + s->B : max_n;
    double *pr = ops_dvec(r, (size_t)max_n), *dpr = ops_dvec(r, (size_t)max_n);
    for (int q = 0; q < p->n_seqs; q++)
        for (int j = p->block_starts[q]; j < p->block_starts[q + 1]; j++) {
            int a = p->anchors[j], lo = s->window > 0 && a > s->window ? a - s->window : 0;
            for (int h = 0; h < s->heads; h++)
                for (int row = 0; row < s->B; row++)
                    reference_row(s, p, &o, pr, dpr, j, p->ctx_starts[q] + lo, a - lo, h, row);
        }
    return o;
}

/* Forward and backward; out, lse, dq and the added-to dk/dv, both their
 * totals and their increments over the initial values. */
static void run_block_attention(Run *r, const void *shape) {
    const BlockShape *s = shape;
    uint64_t seed = 130 + (uint64_t)s->B * 7 + (uint64_t)s->heads * 3 + (uint64_t)s->hd + (uint64_t)s->window * 11 +
                    (uint64_t)s->sorted + (uint64_t)s->lens[0];
    BlockProblem p = block_problem(r, s, seed);
    ops_label(r, "%d sequences, %d blocks of %d%s, heads=%d/%d head_dim=%d window=%d", p.n_seqs, p.n_blocks, s->B,
              s->sorted ? " (sorted anchors)" : "", s->heads, s->kvh, s->hd, s->window);
    if (ops_skip(r, s->scope)) return;
    DfBlockAttnLayout l;
    DfError err;
    if (df_block_attn_layout_init(&l, r->be, p.n_seqs, p.ctx_starts, p.block_starts, p.anchors, s->B, &err))
        fail_msg("%s", err.msg);
    DfBlockAttnArgs a = block_args(r, s, &p, &l, p.q);
    DfBlockAttnGrads g = {.d_out = ops_up(r, p.d_out, p.n_qd, DF_BUF_ACT), .dq = ops_poisoned(r, p.n_qd, DF_BUF_ACT),
                          .dk_ctx = ops_up(r, p.dk_ctx0, p.n_ckv, DF_BUF_ACT),
                          .dv_ctx = ops_up(r, p.dv_ctx0, p.n_ckv, DF_BUF_ACT),
                          .dk_blk = ops_up(r, p.dk_blk0, p.n_bkv, DF_BUF_ACT),
                          .dv_blk = ops_up(r, p.dv_blk0, p.n_bkv, DF_BUF_ACT)};
    df_op_block_attention(r->be, &a);
    df_op_block_attention_backward(r->be, &a, &g);
    float *out = ops_result(r, "out", a.out), *lse = ops_result(r, "lse", a.lse), *dq = ops_result(r, "dq", g.dq);
    DfBuffer added[4] = {g.dk_ctx, g.dv_ctx, g.dk_blk, g.dv_blk};
    const float *init[4] = {p.dk_ctx0, p.dv_ctx0, p.dk_blk0, p.dv_blk0};
    static const char *const names[4] = {"dk_ctx", "dv_ctx", "dk_blk", "dv_blk"};
    float *total[4], *inc[4];
    for (int i = 0; i < 4; i++) {
        char name[64];
        total[i] = ops_result(r, names[i], added[i]);
        snprintf(name, sizeof name, "%s increment", names[i]);
        inc[i] = ops_result_host(r, name, increment(r, total[i], init[i], added[i].count), added[i].count, OPS_REL);
    }
    df_block_attn_layout_free(&l, r->be);
    if (!r->reference || s->scope != OPS_CHECKED) return;
    /* the fp32 CPU op against the definition in double, totals and increments */
    BlockReference want = block_reference(r, s, &p);
    double *refs[4] = {want.dk_ctx, want.dv_ctx, want.dk_blk, want.dv_blk};
    ops_near(r, "block_attention out", out, want.out, p.n_qd, 1e-5);
    ops_near_rel(r, "block_attention out", out, want.out, p.n_qd, 1e-4);
    ops_near_rel(r, "block_attention lse", lse, want.lse, (size_t)p.n_blocks * s->B * s->heads, 1e-4);
    ops_near_rel(r, "block_attention_backward dq", dq, want.dq, p.n_qd, 1e-4);
    for (int i = 0; i < 4; i++) {
        size_t n = added[i].count;
        ops_near_rel(r, names[i], total[i], refs[i], n, 1e-4);
        double *d = ops_dvec(r, n);
        for (size_t e = 0; e < n; e++) d[e] = refs[i][e] - init[i][e];
        ops_near_rel(r, names[i], inc[i], d, n, 1e-4);
    }
    if (!s->fd) return;
    BlockFdCtx c = {s, &p};
    check_fd(r, "block_attention_backward dq", block_q_fwd, &c, p.q, p.n_qd, p.d_out, p.n_qd, dq, 5e-3);
}

/* lengths and blocks of the layouts, ended by -1 */
static const int L_SMALL[] = {5, 7, -1}, B_SMALL[] = {2, 1, -1};
static const int32_t A_SMALL[] = {1, 4, 6};
/* one row only (anchor 0), no blocks at all, odd lengths around the 64-row tiles */
static const int L_ODD[] = {37, 1, 150, 64, 129, -1}, B_ODD[] = {5, 1, 9, 0, 6, -1};
static const int L_THREE[] = {37, 1, 150, -1}, B_THREE[] = {5, 1, 9, -1};
/* more blocks in a sequence than a key-major item of a context tile takes (128) */
static const int L_MANY[] = {300, 71, -1}, B_MANY[] = {290, 40, -1};

#define ODD(B, h, kv, hd, sorted, w) {L_ODD, B_ODD, NULL, B, h, kv, hd, sorted, w, OPS_COMPARED, 0}
#define MANY(B, h, kv, hd, sorted, w) {L_MANY, B_MANY, NULL, B, h, kv, hd, sorted, w, OPS_COMPARED, 0}
#define THREE(B, h, kv, hd, w) {L_THREE, B_THREE, NULL, B, h, kv, hd, 1, w, OPS_CHECKED, 0}

static const BlockShape BLOCK_SHAPES[] = {
    {L_SMALL, B_SMALL, A_SMALL, 3, 4, 2, 64, 0, 0, OPS_CHECKED, 1},
    {L_SMALL, B_SMALL, A_SMALL, 3, 4, 2, 64, 0, 2, OPS_CHECKED, 1},
    /* the CPU op at head_dim 256 (GQA 8/2 and 4/4, a window) and at 64 against the definition */
    THREE(5, 8, 2, 256, 0), THREE(16, 4, 4, 256, 50), THREE(5, 8, 2, 64, 0),
    /* block sizes 16 and odd ones, GQA groups of 1, 2, 4 and 8 heads (8 x 16 rows: two row chunks) */
    ODD(16, 8, 2, 128, 0, 0), ODD(16, 4, 4, 64, 1, 0), ODD(5, 4, 2, 64, 0, 0), ODD(7, 8, 2, 128, 1, 0),
    ODD(16, 16, 2, 64, 0, 0), ODD(3, 2, 1, 128, 1, 0), ODD(16, 2, 1, 64, 0, 0),
    MANY(16, 8, 2, 128, 1, 0), MANY(7, 4, 1, 64, 0, 0),
    /* sliding windows: shorter than a tile, a tile exactly, across tiles */
    ODD(16, 8, 2, 128, 0, 1), ODD(5, 4, 2, 64, 1, 1), ODD(16, 8, 2, 128, 1, 50), ODD(5, 4, 2, 64, 0, 50),
    ODD(16, 8, 2, 128, 0, 64), ODD(5, 4, 2, 64, 1, 64), ODD(16, 8, 2, 128, 1, 100), ODD(5, 4, 2, 64, 0, 100),
    MANY(16, 8, 2, 128, 1, 70), MANY(7, 4, 1, 64, 0, 100),
    /* head_dim 256: Q re-read from shared memory, the key-major kernel as a dV pass and a dK pass */
    ODD(16, 8, 2, 256, 1, 0), ODD(7, 8, 2, 256, 0, 0), ODD(5, 4, 4, 256, 1, 0), ODD(16, 16, 2, 256, 0, 0),
    ODD(16, 8, 2, 256, 1, 50), MANY(7, 8, 2, 256, 1, 0),
};

/* At head_dim 128 (CUDA): wgmma (the default) and the mma.sync kernels of the other head dims */
static const OpsVariant BLOCK_ATTENTION_VARIANTS[] = {
    {"default variants", {NULL}, {0}},
    {"block_attention_mma_sync 1", {"block_attention_mma_sync"}, {1}},
};

const OpCase CASE_BLOCK_ATTENTION = {"block_attention and its backward", "block_attention block_attention_backward",
                                     run_block_attention, OPS_SHAPES(BLOCK_SHAPES), 1e-2,
                                     OPS_VARIANTS(BLOCK_ATTENTION_VARIANTS)};

/* ---- lm_head_ce ----------------------------------------------------------------------- */

typedef struct LmShape {
    int rows, hidden, vocab, with_dx;
} LmShape;

static double exact_logit(const float *x, const float *head, int hidden, int r, int v) {
    double s = 0;
    for (int i = 0; i < hidden; i++) s += (double)x[(size_t)r * hidden + i] * head[(size_t)v * hidden + i];
    return s;
}

/* Every step-th row, and the last. */
static int next_sampled_row(int i, int rows, int step) { return i + step >= rows && i != rows - 1 ? rows - 1 : i + step; }

/* The naive lm head + weighted cross-entropy on every few rows (the op is
 * row by row): ce, the argmax (its logit within fp32 noise of the row's
 * largest) and d_x. */
static void lm_reference(const Run *r, const LmShape *s, const float *x, const float *head, const float *w,
                         const int32_t *labels, float grad_scale, const float *ce, const float *argmax,
                         const float *dx) {
    int V = s->vocab, H = s->hidden, step = s->rows > 64 ? 7 : 1;
    double *logit = malloc((size_t)V * sizeof *logit), *want_dx = malloc((size_t)H * sizeof *want_dx);
    assert_non_null(logit);
    assert_non_null(want_dx);
    for (int i = 0; i < s->rows; i = next_sampled_row(i, s->rows, step)) {
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < V; v++) logit[v] = exact_logit(x, head, H, i, v), mx = fmax(mx, logit[v]);
        for (int v = 0; v < V; v++) sum += exp(logit[v] - mx);
        double lse = mx + log(sum), want_ce = labels[i] < 0 ? 0 : lse - logit[labels[i]];
        double got_logit = logit[(int)argmax[i]];
        if (!(fabs(ce[i] - want_ce) <= 1e-5 * fmax(1, fabs(want_ce))))
            fail_msg("%s: ce[%d] %.8g, reference %.8g", r->label, i, ce[i], want_ce);
        if (!(mx - got_logit <= 1e-5 * fmax(1, fabs(mx))))
            fail_msg("%s: argmax[%d] = %g, whose logit %.8g is below the maximum %.8g", r->label, i, argmax[i],
                     got_logit, mx);
        if (!dx) continue;
        for (int e = 0; e < H; e++) {
            double d = 0;
            for (int v = 0; v < V; v++) d += (exp(logit[v] - lse) - (v == labels[i])) * head[(size_t)v * H + e];
            want_dx[e] = grad_scale * (double)w[i] * d; /* (softmax - onehot) head, onehot 0 without a label */
        }
        ops_near(r, "lm_head_ce d_x (the gradient of grad_scale * sum w ce)", dx + (size_t)i * H, want_dx, (size_t)H,
                 1e-5);
    }
    free(logit), free(want_dx);
}

/* The argmax's output is the exact (double) logit of the token each backend
 * chose, compared element by element: a backend's argmax may differ from the
 * CPU's only where the two tokens' logits are equal up to the logits' noise,
 * fp32 accumulation order (1e-4 relative, well above it). */
static void run_lm_head_ce(Run *r, const void *shape) {
    const LmShape *s = shape;
    int R = s->rows, H = s->hidden, V = s->vocab;
    ops_label(r, "rows=%d hidden=%d vocab=%d%s", R, H, V, s->with_dx ? "" : ", no d_x");
    uint64_t seed = 150 + (uint64_t)R + (uint64_t)V;
    float *x = ops_inputs(r, (size_t)R * H, seed, 1), *head = ops_inputs(r, (size_t)V * H, seed + 1, 0.5f);
    float *w = ops_inputs_around(r, (size_t)R, seed + 2, 1.0f, 1.0f); /* weights in [0, 2] */
    int32_t *labels = ops_track(r, malloc((size_t)R * sizeof *labels));
    for (int i = 0; i < R; i++) labels[i] = i % 5 == 3 ? -1 : (int32_t)(((int64_t)i * 7919 + (int64_t)seed) % V);
    DfLmHeadCeArgs a = {.x = ops_up(r, x, (size_t)R * H, DF_BUF_ACT), .head = ops_up(r, head, (size_t)V * H, DF_BUF_ACT),
                        .labels = ops_up_i32(r, labels, (size_t)R), .weights = ops_up(r, w, (size_t)R, DF_BUF_F32),
                        .ce = ops_poisoned(r, (size_t)R, DF_BUF_F32), .argmax = ops_poisoned(r, (size_t)R, DF_BUF_I32),
                        .d_x = s->with_dx ? ops_poisoned(r, (size_t)R * H, DF_BUF_ACT) : (DfBuffer){0},
                        .rows = R, .hidden = H, .vocab = V, .grad_scale = 1.0f / (float)R};
    df_op_lm_head_ce(r->be, &a);
    float *ce = ops_result(r, "ce", a.ce);
    int32_t *idx = ops_track(r, malloc((size_t)R * sizeof *idx));
    DfError err;
    if (r->be->ops->download_i32(r->be, idx, a.argmax, &err)) fail_msg("%s", err.msg);
    float *argmax = ops_fvec(r, (size_t)R), *chosen = ops_fvec(r, (size_t)R);
    for (int i = 0; i < R; i++) {
        argmax[i] = (float)idx[i];
        if (!(argmax[i] >= 0 && argmax[i] < V))
            fail_msg("%s: argmax[%d] = %g on the %s backend: outside the vocabulary", r->label, i, argmax[i],
                     r->be->ops->name);
        if (labels[i] < 0 && ce[i] != 0.0f)
            fail_msg("%s: ce[%d] = %g on the %s backend for a row without a label", r->label, i, ce[i], r->be->ops->name);
        chosen[i] = (float)exact_logit(x, head, H, i, (int)argmax[i]);
    }
    ops_result_host(r, "the argmax's logit", chosen, (size_t)R, OPS_PER_ELEMENT);
    ops_last_tol(r, 1e-4);
    float *dx = s->with_dx ? ops_result(r, "d_x", a.d_x) : NULL;
    if (!r->reference) return;
    lm_reference(r, s, x, head, w, labels, a.grad_scale, ce, argmax, dx);
}

static const LmShape LM_SHAPES[] = {
    {5, 12, 37, 1},
    {37, 64, 1001, 1},  /* an odd vocab: the scalar row kernel */
    {300, 128, 1001, 1}, /* several chunks under the chunk variants, the last a part */
    {300, 128, 1001, 0}, /* no d_x: the CE and argmax only */
    {129, 96, 2048, 1},  /* the 16-byte row kernel */
    {77, 40, 1001, 1},
    {1, 17, 5, 1}, /* one row, a tiny vocab */
    {513, 256, 4000, 1},
    {2100, 64, 1001, 1}, /* past 1024 rows at a small hidden size: one chunk by default (4M / hidden rows) */
    {1100, 32, 16384, 1}, /* by default one chunk in sub-chunks of 512, 512 and 76 rows whose logits stay in L2 */
    /* large vocabularies, the targets' among them: rows of many passes of the row kernel's block */
    {70, 32, 16384, 1},
    {33, 20, 100004, 0},
    {40, 24, 151936, 1}, /* Qwen3's */
    {9, 16, 248320, 1},  /* Qwen3.5's */
};

static const OpsVariant LM_VARIANTS[] = {
    {"one chunk, fp32 logits (the defaults)", {NULL}, {0}},
    {"chunks of 64 rows", {"lm_head_chunk_rows"}, {64}},
    {"chunks of 50 rows", {"lm_head_chunk_rows"}, {50}},
    {"chunks of 16 rows", {"lm_head_chunk_rows"}, {16}},
    {"sub-chunks of 16 rows", {"lm_head_l2_rows"}, {16}},
    {"chunks of 50 rows in sub-chunks of 16", {"lm_head_chunk_rows", "lm_head_l2_rows"}, {50, 16}},
};

const OpCase CASE_LM_HEAD_CE = {"lm_head_ce", "lm_head_ce", run_lm_head_ce, OPS_SHAPES(LM_SHAPES), 1e-2,
                                OPS_VARIANTS(LM_VARIANTS)};

/* ---- optimizer --------------------------------------------------------------------------- */

typedef struct AdamShape {
    size_t n, offset; /* the step runs on elements offset .. n-1 (1: misaligned views, the scalar kernel) */
    double beta1, wd;
    int moments; /* the moments start random (else zero, as a run starts) */
} AdamShape;

/* torch's AdamW step on the clipped gradient, in double, from the CPU's state before it. */
static void ref_adamw(const float *p0, const float *m0, const float *v0, const float *g, double coef,
                      const DfAdamWScalars *s, size_t n, double *p) {
    for (size_t i = 0; i < n; i++) {
        double gi = (double)g[i] * coef, pi = s->apply_decay ? p0[i] * (double)s->decay : p0[i];
        double mi = m0[i] + s->lerp_weight * (gi - m0[i]), vi = s->beta2 * (double)v0[i] + s->one_minus_beta2 * gi * gi;
        p[i] = pi + s->neg_step_size * mi / (sqrt(vi) / s->bc2_sqrt + s->eps);
    }
}

/* Three steps (weight decay, clipping, both lerp branches): the master
 * weights and both moments the same bits on every backend after each, and
 * the ACT parameters the backend's rounding of the master. */
static void run_adamw(Run *r, const void *shape) {
    const AdamShape *s = shape;
    size_t n = s->n, off = s->offset, used = n - off;
    ops_label(r, "%zu parameters from %zu, beta1 %g, weight decay %g%s", n, off, s->beta1, s->wd,
              s->moments ? ", random moments" : "");
    float *init = ops_inputs(r, n, 160 + n, 0.5f), *zeros = ops_fvec(r, n);
    float *m0 = s->moments ? ops_inputs(r, n, 161 + n, 0.1f) : zeros, *v0 = zeros;
    if (s->moments) {
        v0 = ops_inputs(r, n, 162 + n, 0.01f);
        for (size_t i = 0; i < n; i++) v0[i] = fabsf(v0[i]);
    }
    DfBuffer master = ops_up(r, init, n, DF_BUF_F32), m = ops_up(r, m0, n, DF_BUF_F32), v = ops_up(r, v0, n, DF_BUF_F32);
    DfBuffer grads = ops_up(r, zeros, n, DF_BUF_F32), params = ops_up(r, init, n, DF_BUF_ACT);
    DfAdamWConfig cfg = {.beta1 = s->beta1, .beta2 = 0.999, .eps = 1e-8, .weight_decay = s->wd};
    static const double lrs[3] = {6e-4, 3e-4, 1e-3};
    static const float coefs[3] = {0.37f, 1.0f, 0.9f};
    float *g = ops_fvec(r, n);
    for (int step = 0; step < 3; step++) {
        /* gradients of mixed magnitude, some tiny: the division's and sqrt's rounding */
        df_test_fill_random(g, n, 50 + (uint64_t)step, 1.0f);
        for (size_t i = 0; i < n; i += 7) g[i] *= 1e-6f;
        DfError err;
        if (r->be->ops->upload_f32(r->be, grads, g, &err)) fail_msg("%s", err.msg);
        float *p_before = NULL, *m_before = NULL, *v_before = NULL; /* the reference's state before the step */
        if (r->reference) {
            p_before = df_test_download(r->be, master);
            m_before = df_test_download(r->be, m), v_before = df_test_download(r->be, v);
        }
        DfAdamWScalars sc = df_adamw_scalars(&cfg, step + 1, lrs[step]);
        DfAdamWArgs a = {.master = df_buffer_view(master, off, used), .exp_avg = df_buffer_view(m, off, used),
                         .exp_avg_sq = df_buffer_view(v, off, used), .grads = df_buffer_view(grads, off, used),
                         .params = df_buffer_view(params, off, used), .clip_coef = coefs[step], .s = sc};
        df_op_adamw_step(r->be, &a);
        char name[64];
        snprintf(name, sizeof name, "master after step %d", step + 1);
        float *gm = ops_result_exact(r, name, master);
        snprintf(name, sizeof name, "exp_avg after step %d", step + 1);
        ops_result_exact(r, name, m);
        snprintf(name, sizeof name, "exp_avg_sq after step %d", step + 1);
        ops_result_exact(r, name, v);
        /* every backend: the ACT parameters are its rounding of the master */
        float *gp = ops_track(r, df_test_download(r->be, params));
        DfBuffer rounded = ops_up(r, gm, n, DF_BUF_ACT);
        float *want_p = ops_track(r, df_test_download(r->be, rounded));
        for (size_t i = 0; i < n; i++)
            if (memcmp(&gp[i], &want_p[i], sizeof gp[i]) != 0)
                fail_msg("%s: step %d: param %zu is %.9g on the %s backend, its rounding of the master %.9g is %.9g",
                         r->label, step + 1, i, gp[i], r->be->ops->name, gm[i], want_p[i]);
        if (!r->reference) continue;
        double *want = ops_dvec(r, used);
        ref_adamw(p_before + off, m_before + off, v_before + off, g + off, coefs[step], &sc, used, want);
        ops_near(r, "adamw_step master", gm + off, want, used, 1e-5);
        for (size_t i = 0; i < off; i++) assert_true(gm[i] == p_before[i]); /* outside the view: untouched */
        free(p_before), free(m_before), free(v_before);
    }
}

static const AdamShape ADAM_SHAPES[] = {
    {53, 0, 0.9, 0.01, 1},
    {1000003, 0, 0.9, 0.01, 0}, /* the vector kernel and a scalar tail of 3 */
    {4099, 0, 0.4, 0.1, 0},     /* torch's other lerp branch (weight 0.6) */
    {4099, 1, 0.9, 0.0, 0},     /* misaligned views: the scalar kernel; no weight decay */
};

const OpCase CASE_ADAMW = {"adamw_step (three steps, the same bits)", "adamw_step", run_adamw, OPS_SHAPES(ADAM_SHAPES),
                           0, OPS_NO_VARIANTS};

/* sum_squares: the same bits on every call, within 1e-6 relative of a long
 * double host sum (the CPU's double sum within 1e-12); on every backend. */
static void run_sum_squares(Run *r, const void *shape) {
    size_t n = ((const OpsCount *)shape)->n;
    ops_label(r, "n=%zu", n);
    float *x = ops_track(r, df_test_random_array(n, 9 + n, 2.0f));
    DfBuffer b = ops_up(r, x, n, DF_BUF_F32);
    double tol = r->reference ? 1e-12 : 1e-6;
    for (size_t off = 0; off < 2 && off < n; off++) { /* aligned, then a misaligned view */
        DfBuffer v = df_buffer_view(b, off, n - off);
        double got, again;
        DfError err;
        if (df_op_sum_squares(r->be, v, &got, &err) || df_op_sum_squares(r->be, v, &again, &err))
            fail_msg("%s", err.msg);
        if (memcmp(&got, &again, sizeof got) != 0)
            fail_msg("%s: sum_squares on the %s backend: %.17g, then %.17g", r->label, r->be->ops->name, got, again);
        long double ref = 0;
        for (size_t i = off; i < n; i++) ref += (long double)x[i] * x[i];
        if (!(fabsl((long double)got - ref) <= tol * ref))
            fail_msg("%s (offset %zu): sum_squares on the %s backend %.17g, host %.17Lg", r->label, off,
                     r->be->ops->name, got, ref);
    }
    double zero = -1;
    DfError err;
    if (df_op_sum_squares(r->be, (DfBuffer){.kind = DF_BUF_F32, .elem_size = 4}, &zero, &err)) fail_msg("%s", err.msg);
    assert_true(zero == 0.0);
}

static const OpsCount SUM_SQUARES_SHAPES[] = {{53}, {1}, {1000}, {1000003}};

const OpCase CASE_SUM_SQUARES = {"sum_squares", "sum_squares", run_sum_squares, OPS_SHAPES(SUM_SQUARES_SHAPES), -1,
                                 OPS_NO_VARIANTS};
