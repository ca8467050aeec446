/* Every op of the backend's list (src/backend/backend_ops.def) from one
 * registry of cases.
 *
 * A case builds its inputs from a seed (random, never zero, rounded to bf16
 * so that a bf16 backend and the fp32 CPU read the same values), poisons
 * its outputs with NaN beforehand (a value an op fails to write shows), runs
 * the op on one backend and hands back its outputs. Each case runs:
 *   - on the CPU, where it is also checked against an independent reference:
 *     a naive loop in double, the composition of simpler ops it must equal
 *     value for value, or (the backward ops) central finite differences of
 *     the forward;
 *   - on every other backend built in and present (a GPU), whose outputs
 *     must match the CPU's within the case's tolerance (bf16 activations).
 * Device queries without a CPU counterpart (streams, timers, the profile,
 * recorded graphs) are checked on each backend that has them.
 * The coverage test fails when an op of the list has no case here.
 *
 * This replaces nothing yet: tests/test_cuda_*.c keep their per-op
 * comparisons at the model's shapes and their timing modes. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend/backend.h"
#include "backend/optim_math.h"
#include "backend/select.h"
#include "base/numeric.h"

#define MAX_OUTS 8
#define MAX_TRACKED 64

/* One run of a case on one backend. */
typedef struct Run {
    DfBackend *be;
    int reference;                  /* the CPU run: also check against the reference */
    int n_out;
    const char *out_name[MAX_OUTS];
    float *out[MAX_OUTS];           /* host copies of the outputs */
    size_t out_count[MAX_OUTS];
    int out_exact[MAX_OUTS];        /* integer outputs: must agree exactly */
    int out_poison_kept[MAX_OUTS];  /* the op leaves part of it untouched (NaN): same places on every backend */
    DfBuffer bufs[MAX_TRACKED];
    int n_bufs;
    void *host[MAX_TRACKED];
    int n_host;
} Run;

typedef struct OpCase {
    const char *name;
    const char *ops;  /* the list's ops it covers, space-separated */
    void (*run)(Run *r);
    double tol;       /* other backends against the CPU: max|x - cpu| / max|cpu| */
} OpCase;

static void *track(Run *r, void *p) {
    assert_true(r->n_host < MAX_TRACKED);
    assert_non_null(p);
    return r->host[r->n_host++] = p;
}

/* n values with |x| in [0.1, 1] * scale and random signs, rounded to bf16. */
static float *inputs(Run *r, size_t n, uint64_t seed, float scale) {
    float *x = track(r, df_test_random_array(n, seed, 1.0f));
    for (size_t i = 0; i < n; i++) {
        float mag = 0.1f + 0.9f * fabsf(x[i]);
        x[i] = df_bf16_to_f32(df_f32_to_bf16((x[i] < 0 ? -mag : mag) * scale));
    }
    return x;
}

static DfBuffer keep(Run *r, DfBuffer b) {
    assert_true(r->n_bufs < MAX_TRACKED);
    return r->bufs[r->n_bufs++] = b;
}

static DfBuffer up(Run *r, const float *h, size_t n, DfBufKind kind) { return keep(r, df_test_upload(r->be, h, n, kind)); }
static DfBuffer up_i32(Run *r, const int32_t *h, size_t n) { return keep(r, df_test_upload_i32(r->be, h, n)); }
/* An output before the op: NaN, or INT32_MIN in an I32 buffer. */
static DfBuffer poisoned(Run *r, size_t n, DfBufKind kind) {
    if (kind != DF_BUF_I32) return keep(r, df_test_upload_poisoned(r->be, n, kind));
    int32_t *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = INT32_MIN;
    DfBuffer b = up_i32(r, v, n);
    free(v);
    return b;
}

/* Downloads b (after a sync) as the run's next output. */
static float *result(Run *r, const char *name, DfBuffer b) {
    assert_true(r->n_out < MAX_OUTS);
    float *h = track(r, df_test_download(r->be, b));
    r->out_name[r->n_out] = name, r->out[r->n_out] = h, r->out_count[r->n_out] = b.count;
    r->out_poison_kept[r->n_out] = 0;
    r->out_exact[r->n_out++] = 0;
    return h;
}

/* The same for an output the op writes only in part: its poisoned rest must
 * stay NaN, at the same places on every backend (the case's reference check
 * says which places). */
static float *result_partial(Run *r, const char *name, DfBuffer b) {
    float *h = result(r, name, b);
    r->out_poison_kept[r->n_out - 1] = 1;
    return h;
}

static float *result_i32(Run *r, const char *name, DfBuffer b) {
    DfError err;
    int32_t *v = malloc(b.count * sizeof *v);
    if (r->be->ops->sync(r->be, &err) || r->be->ops->download_i32(r->be, v, b, &err)) fail_msg("%s", err.msg);
    float *h = track(r, malloc(b.count * sizeof *h));
    for (size_t i = 0; i < b.count; i++) h[i] = (float)v[i];
    free(v);
    assert_true(r->n_out < MAX_OUTS);
    r->out_name[r->n_out] = name, r->out[r->n_out] = h, r->out_count[r->n_out] = b.count;
    r->out_poison_kept[r->n_out] = 0;
    r->out_exact[r->n_out++] = 1;
    return h;
}

static void run_free(Run *r) {
    for (int i = 0; i < r->n_bufs; i++) df_buffer_free(r->be, &r->bufs[i]);
    for (int i = 0; i < r->n_host; i++) free(r->host[i]);
    memset(r, 0, sizeof *r);
}

/* The reference check: max|got - want| <= tol * max(1, max|want|), no NaN. */
static void near(const char *what, const float *got, const double *want, size_t n, double tol) {
    double worst = 0, scale = 1;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= tol * scale)) fail_msg("%s[%zu]: %.8g, reference %.8g (tolerance %g x %g)", what, i, got[i], want[i], tol, scale);
        if (e > worst) worst = e;
    }
}

static double *dvec(Run *r, size_t n) { return track(r, calloc(n ? n : 1, sizeof(double))); }

static double silu(double x) { return x / (1 + exp(-x)); }
static double sigmoid(double x) { return 1 / (1 + exp(-x)); }

/* ---- memory ---------------------------------------------------------------- */

static void case_memory(Run *r) {
    enum { N = 37 };
    float *x = inputs(r, N, 1, 2.0f);
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)(i * 7919 % 1001) - 500;
    DfBuffer f = up(r, x, N, DF_BUF_F32), a = up(r, x, N, DF_BUF_ACT), i32 = up_i32(r, ids, N);
    float *fo = result(r, "f32", f);
    result(r, "act", a);
    float *io = result_i32(r, "i32", i32);
    if (!r->reference) return;
    for (int i = 0; i < N; i++) {
        assert_true(fo[i] == x[i]); /* F32 is exact everywhere */
        assert_true(io[i] == (float)ids[i]);
    }
}

/* ---- compute: forward ops ---------------------------------------------------- */

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

static void case_matmul(Run *r) {
    const int m = 5, n = 7, k = 13; /* odd sizes */
    for (int v = 0; v < 4; v++) {
        int ta = v & 1, tb = v >> 1;
        float beta = v == 3 ? 1.0f : 0.0f;
        float *a = inputs(r, (size_t)m * k, 10 + v, 1), *b = inputs(r, (size_t)k * n, 20 + v, 1);
        float *c0 = inputs(r, (size_t)m * n, 30 + v, 1);
        DfBuffer c = beta ? up(r, c0, (size_t)m * n, DF_BUF_ACT) : poisoned(r, (size_t)m * n, DF_BUF_ACT);
        df_op_matmul(r->be, c, up(r, a, (size_t)m * k, DF_BUF_ACT), up(r, b, (size_t)k * n, DF_BUF_ACT), m, n, k, ta,
                     tb, beta);
        float *got = result(r, "c", c);
        if (!r->reference) continue;
        double *want = dvec(r, (size_t)m * n);
        ref_matmul(a, b, c0, want, m, n, k, ta, tb, beta);
        near("matmul", got, want, (size_t)m * n, 1e-5);
    }
}

static void ref_rmsnorm(const float *x, const float *w, double *out, int rows, int dim, double eps) {
    for (int i = 0; i < rows; i++) {
        double ss = 0;
        for (int j = 0; j < dim; j++) ss += (double)x[i * dim + j] * x[i * dim + j];
        double s = 1 / sqrt(ss / dim + eps);
        for (int j = 0; j < dim; j++) out[i * dim + j] = x[i * dim + j] * s * w[j];
    }
}

static void case_rmsnorm(Run *r) {
    const int rows = 3, dim = 19;
    float *x = inputs(r, rows * dim, 40, 2), *w = inputs(r, dim, 41, 1);
    for (int f32 = 0; f32 < 2; f32++) {
        DfBuffer out = poisoned(r, rows * dim, DF_BUF_ACT);
        df_op_rmsnorm(r->be, out, up(r, x, rows * dim, DF_BUF_ACT), up(r, w, dim, f32 ? DF_BUF_F32 : DF_BUF_ACT),
                      rows, dim, 1e-6f);
        float *got = result(r, f32 ? "out (F32 weight)" : "out", out);
        if (!r->reference) continue;
        double *want = dvec(r, rows * dim);
        ref_rmsnorm(x, w, want, rows, dim, 1e-6);
        near("rmsnorm", got, want, rows * dim, 1e-5);
    }
}

static void case_add_swiglu(Run *r) {
    const size_t n = 41;
    float *y0 = inputs(r, n, 50, 1), *x = inputs(r, n, 51, 1), *g = inputs(r, n, 52, 2), *u = inputs(r, n, 53, 1);
    /* swiglu_packed's output holds its rows x inter values only: a poisoned tail would be compared too */
    DfBuffer y = up(r, y0, n, DF_BUF_ACT), out = poisoned(r, n, DF_BUF_ACT), packed_out = poisoned(r, 3 * 7, DF_BUF_ACT);
    df_op_add_inplace(r->be, y, up(r, x, n, DF_BUF_ACT));
    df_op_swiglu(r->be, out, up(r, g, n, DF_BUF_ACT), up(r, u, n, DF_BUF_ACT));
    /* swiglu_packed: rows 3, inter 7 over [gate | up] rows */
    float *packed = inputs(r, 2 * 3 * 7, 54, 2);
    df_op_swiglu_packed(r->be, packed_out, up(r, packed, 2 * 3 * 7, DF_BUF_ACT), 3, 7);
    float *sum = result(r, "add_inplace", y), *sw = result(r, "swiglu", out);
    float *sp = result(r, "swiglu_packed", packed_out);
    if (!r->reference) return;
    double *w1 = dvec(r, n), *w2 = dvec(r, n), *w3 = dvec(r, 21);
    for (size_t i = 0; i < n; i++) w1[i] = (double)y0[i] + x[i], w2[i] = silu(g[i]) * u[i];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 7; j++) w3[i * 7 + j] = silu(packed[i * 14 + j]) * packed[i * 14 + 7 + j];
    near("add_inplace", sum, w1, n, 1e-6);
    near("swiglu", sw, w2, n, 1e-5);
    near("swiglu_packed", sp, w3, 21, 1e-5);
}

static void case_embedding_copy_fill(Run *r) {
    const int rows = 11, dim = 9, t = 6, ld = 13;
    float *table = inputs(r, rows * dim, 60, 1), *src = inputs(r, 4 * ld, 61, 1);
    int32_t ids[6] = {3, 0, 10, 3, 7, 1};
    DfBuffer out = poisoned(r, t * dim, DF_BUF_ACT), dst = poisoned(r, 4 * 17, DF_BUF_ACT);
    df_op_embedding(r->be, out, up(r, table, rows * dim, DF_BUF_ACT), up_i32(r, ids, t), t, dim);
    df_op_copy2d(r->be, dst, 17, up(r, src, 4 * ld, DF_BUF_ACT), ld, 4, 5);
    DfBuffer z[3];
    for (int k = 0; k < 3; k++) {
        z[k] = up(r, src, 4 * ld, k == 0 ? DF_BUF_ACT : DF_BUF_F32);
        df_op_fill_zero(r->be, z[k]);
    }
    int32_t some[5] = {1, 2, 3, 4, 5};
    DfBuffer zi = up_i32(r, some, 5);
    df_op_fill_zero(r->be, zi);
    float *e = result(r, "embedding", out), *c = result_partial(r, "copy2d", dst), *z0 = result(r, "fill_zero act", z[0]);
    float *z1 = result(r, "fill_zero f32", z[1]), *zi_h = result_i32(r, "fill_zero i32", zi);
    if (!r->reference) return;
    for (int i = 0; i < t; i++)
        for (int j = 0; j < dim; j++) assert_true(e[i * dim + j] == table[ids[i] * dim + j]);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 17; j++) {
            if (j < 5) assert_true(c[i * 17 + j] == src[i * ld + j]);
            else assert_true(isnan(c[i * 17 + j])); /* outside the copied block: untouched */
        }
    for (int i = 0; i < 4 * ld; i++) assert_true(z0[i] == 0 && z1[i] == 0);
    for (int i = 0; i < 5; i++) assert_true(zi_h[i] == 0);
}

/* rope tables [n_pos, half] from theta 1e4 */
static void rope_tables(Run *r, int n_pos, int half, float **cos_t, float **sin_t) {
    *cos_t = track(r, malloc((size_t)n_pos * half * sizeof(float)));
    *sin_t = track(r, malloc((size_t)n_pos * half * sizeof(float)));
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

static void case_rope(Run *r) {
    const int t = 5, heads = 3, hd = 10, n_pos = 16, rot = 6;
    int32_t pos[5] = {0, 3, 15, 7, 1};
    float *x = inputs(r, t * heads * hd, 70, 1), *c, *s, *cp, *sp;
    rope_tables(r, n_pos, hd / 2, &c, &s);
    rope_tables(r, n_pos, rot / 2, &cp, &sp);
    DfBuffer p = up_i32(r, pos, t), ct = up(r, c, n_pos * hd / 2, DF_BUF_F32), st = up(r, s, n_pos * hd / 2, DF_BUF_F32);
    DfBuffer a = up(r, x, t * heads * hd, DF_BUF_ACT), b = up(r, x, t * heads * hd, DF_BUF_ACT);
    DfBuffer q = up(r, x, t * heads * hd, DF_BUF_ACT);
    df_op_rope(r->be, a, p, ct, st, t, heads, hd);
    df_op_rope_backward(r->be, b, p, ct, st, t, heads, hd);
    df_op_rope_partial(r->be, q, p, up(r, cp, n_pos * rot / 2, DF_BUF_F32), up(r, sp, n_pos * rot / 2, DF_BUF_F32),
                       t, heads, hd, rot);
    float *ga = result(r, "rope", a), *gb = result(r, "rope_backward", b), *gq = result(r, "rope_partial", q);
    if (!r->reference) return;
    size_t n = (size_t)t * heads * hd;
    double *want = dvec(r, n);
    ref_rope(x, pos, c, s, want, t, heads, hd, hd, 1);
    near("rope", ga, want, n, 1e-5);
    ref_rope(x, pos, c, s, want, t, heads, hd, hd, -1);
    near("rope_backward (the inverse rotation)", gb, want, n, 1e-5);
    ref_rope(x, pos, cp, sp, want, t, heads, hd, rot, 1);
    near("rope_partial", gq, want, n, 1e-5);
    /* rope_backward is the transpose of rope: <rope(x), y> = <x, rope_backward(y)>, by finite nature of a
     * linear map checked on the reference itself: rope then its backward gives x back */
    double *back = dvec(r, n);
    float *fa = track(r, malloc(n * sizeof(float)));
    for (size_t i = 0; i < n; i++) fa[i] = ga[i];
    ref_rope(fa, pos, c, s, back, t, heads, hd, hd, -1);
    double *xd = dvec(r, n);
    for (size_t i = 0; i < n; i++) xd[i] = x[i];
    for (size_t i = 0; i < n; i++) assert_true(fabs(back[i] - xd[i]) < 1e-5);
}

/* Naive causal GQA attention over packed sequences; lse per [head, row]. */
static void ref_attention(const float *q, const float *k, const float *v, const int32_t *starts, int n_seqs,
                          int heads, int kvh, int hd, double scale, double *out, double *lse, int t) {
    for (int s = 0; s < n_seqs; s++)
        for (int i = starts[s]; i < starts[s + 1]; i++)
            for (int h = 0; h < heads; h++) {
                int g = h / (heads / kvh), n = i - starts[s] + 1;
                double mx = -INFINITY, *sc = malloc(n * sizeof *sc), sum = 0;
                for (int j = 0; j < n; j++) {
                    double d = 0;
                    for (int e = 0; e < hd; e++)
                        d += (double)q[((size_t)i * heads + h) * hd + e] * k[((size_t)(starts[s] + j) * kvh + g) * hd + e];
                    sc[j] = d * scale, mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j < n; j++) sum += sc[j] = exp(sc[j] - mx);
                for (int e = 0; e < hd; e++) {
                    double o = 0;
                    for (int j = 0; j < n; j++) o += sc[j] * v[((size_t)(starts[s] + j) * kvh + g) * hd + e];
                    out[((size_t)i * heads + h) * hd + e] = o / sum;
                }
                lse[(size_t)h * t + i] = mx + log(sum);
                free(sc);
            }
}

static void case_attention(Run *r) {
    const int heads = 4, kvh = 2, hd = 64, n_seqs = 2, t = 11;
    int32_t starts[3] = {0, 4, 11};
    float *q = inputs(r, t * heads * hd, 80, 1), *k = inputs(r, t * kvh * hd, 81, 1), *v = inputs(r, t * kvh * hd, 82, 1);
    DfPackedBatch pb;
    DfError err;
    if (df_packed_batch_init(&pb, r->be, starts, n_seqs, &err)) fail_msg("%s", err.msg);
    DfBuffer out = poisoned(r, t * heads * hd, DF_BUF_ACT), lse = poisoned(r, heads * t, DF_BUF_F32);
    float scale = 1.0f / 8;
    df_op_attention(r->be, out, lse, up(r, q, t * heads * hd, DF_BUF_ACT), up(r, k, t * kvh * hd, DF_BUF_ACT),
                    up(r, v, t * kvh * hd, DF_BUF_ACT), &pb, heads, kvh, hd, scale);
    float *go = result(r, "out", out), *gl = result(r, "lse", lse);
    df_packed_batch_free(&pb, r->be);
    if (!r->reference) return;
    double *wo = dvec(r, t * heads * hd), *wl = dvec(r, heads * t);
    ref_attention(q, k, v, starts, n_seqs, heads, kvh, hd, scale, wo, wl, t);
    near("attention out", go, wo, t * heads * hd, 1e-5);
    near("attention lse", gl, wl, heads * t, 1e-5);
}

static void case_argmax(Run *r) {
    const int rows = 4, cols = 23;
    float *x = inputs(r, rows * cols, 90, 1);
    x[1 * cols + 5] = x[1 * cols + 9] = 3.0f; /* a tie: the first wins */
    DfBuffer idx = poisoned(r, rows, DF_BUF_I32), val = poisoned(r, rows, DF_BUF_F32);
    df_op_argmax_rows(r->be, idx, val, up(r, x, rows * cols, DF_BUF_ACT), rows, cols);
    float *gi = result_i32(r, "index", idx), *gv = result(r, "value", val);
    if (!r->reference) return;
    for (int i = 0; i < rows; i++) {
        int best = 0;
        for (int j = 1; j < cols; j++)
            if (x[i * cols + j] > x[i * cols + best]) best = j;
        assert_true(gi[i] == (float)best && gv[i] == x[i * cols + best]);
    }
    assert_true(gi[1] == 5.0f);
}

/* ---- compute: backward ops, by finite differences ------------------------- */

/* Central difference of L(x) = sum_i g[i] * f(x)[i] in coordinate j of x,
 * with f run on the CPU (fp32) through `forward`. */
typedef void (*ForwardFn)(Run *r, const float *x, float *out, void *ctx);
static double fd_grad(Run *r, ForwardFn f, void *ctx, float *x, size_t nx, const float *g, size_t nout, size_t j,
                      float h) {
    float *out = malloc(nout * sizeof *out), keep_x = x[j];
    double l[2];
    for (int side = 0; side < 2; side++) {
        x[j] = keep_x + (side ? h : -h);
        f(r, x, out, ctx);
        l[side] = 0;
        for (size_t i = 0; i < nout; i++) l[side] += (double)g[i] * out[i];
    }
    x[j] = keep_x;
    free(out);
    (void)nx;
    return (l[1] - l[0]) / (2.0 * h);
}

/* The gradient got[j] against finite differences at a spread of coordinates. */
static void check_fd(Run *r, const char *what, ForwardFn f, void *ctx, float *x, size_t nx, const float *g,
                     size_t nout, const float *got, double tol) {
    double scale = 1e-3;
    for (size_t j = 0; j < nx; j++) scale = fmax(scale, fabs(got[j]));
    for (size_t j = 0; j < nx; j += 1 + nx / 23) {
        double want = fd_grad(r, f, ctx, x, nx, g, nout, j, 1e-2f);
        if (!(fabs(got[j] - want) <= tol * scale))
            fail_msg("%s[%zu]: %.6g, finite differences %.6g (tolerance %g x %g)", what, j, got[j], want, tol, scale);
    }
}

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

static void case_rmsnorm_backward(Run *r) {
    const int rows = 3, dim = 17;
    size_t n = (size_t)rows * dim;
    float *x = inputs(r, n, 100, 1), *w = inputs(r, dim, 101, 1), *dy = inputs(r, n, 102, 1), *dx0 = inputs(r, n, 103, 1);
    for (int acc = 0; acc < 2; acc++) {
        DfBuffer dx = acc ? up(r, dx0, n, DF_BUF_ACT) : poisoned(r, n, DF_BUF_ACT);
        DfBuffer dw = up(r, dx0, dim, DF_BUF_F32); /* dw is added to */
        df_op_rmsnorm_backward(r->be, dx, dw, up(r, dy, n, DF_BUF_ACT), up(r, x, n, DF_BUF_ACT),
                               up(r, w, dim, DF_BUF_ACT), rows, dim, 1e-6f, acc);
        float *gdx = result(r, acc ? "dx (accumulated)" : "dx", dx), *gdw = result(r, "dw", dw);
        if (!r->reference) continue;
        float *pure_dx = track(r, malloc(n * sizeof(float))), *pure_dw = track(r, malloc(dim * sizeof(float)));
        for (size_t i = 0; i < n; i++) pure_dx[i] = gdx[i] - (acc ? dx0[i] : 0);
        for (int i = 0; i < dim; i++) pure_dw[i] = gdw[i] - dx0[i];
        NormCtx cx = {w, rows, dim}, cw = {x, rows, dim};
        check_fd(r, "rmsnorm_backward dx", rmsnorm_fwd, &cx, x, n, dy, n, pure_dx, 2e-3);
        check_fd(r, "rmsnorm_backward dw", rmsnorm_w_fwd, &cw, w, dim, dy, n, pure_dw, 2e-3);
    }
}

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

static void case_swiglu_backward(Run *r) {
    const size_t n = 29;
    float *g = inputs(r, n, 110, 2), *u = inputs(r, n, 111, 1), *d = inputs(r, n, 112, 1);
    DfBuffer dg = poisoned(r, n, DF_BUF_ACT), du = poisoned(r, n, DF_BUF_ACT);
    df_op_swiglu_backward(r->be, dg, du, up(r, d, n, DF_BUF_ACT), up(r, g, n, DF_BUF_ACT), up(r, u, n, DF_BUF_ACT));
    float *gdg = result(r, "d_gate", dg), *gdu = result(r, "d_up", du);
    if (!r->reference) return;
    SwigluCtx cg = {u, n, 1}, cu = {g, n, 0};
    check_fd(r, "swiglu_backward d_gate", swiglu_fwd, &cg, g, n, d, n, gdg, 2e-3);
    check_fd(r, "swiglu_backward d_up", swiglu_fwd, &cu, u, n, d, n, gdu, 2e-3);
}

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

static void case_linear_weight_grad(Run *r) {
    const int m = 7, n = 5, k = 9;
    float *dy = inputs(r, m * n, 120, 1), *x = inputs(r, m * k, 121, 1), *dw0 = inputs(r, n * k, 122, 1);
    float *w = inputs(r, n * k, 123, 1);
    DfBuffer dw = up(r, dw0, n * k, DF_BUF_F32);
    df_op_linear_weight_grad(r->be, dw, up(r, dy, m * n, DF_BUF_ACT), up(r, x, m * k, DF_BUF_ACT), m, n, k);
    float *got = result(r, "dw", dw);
    if (!r->reference) return;
    float *pure = track(r, malloc(n * k * sizeof(float)));
    for (int i = 0; i < n * k; i++) pure[i] = got[i] - dw0[i];
    WgCtx c = {x, m, n, k};
    check_fd(r, "linear_weight_grad", linear_fwd, &c, w, n * k, dy, m * n, pure, 2e-3);
}

/* ---- compute: the drafter's block attention and loss ----------------------- */

typedef struct BlockCase {
    int heads, kvh, hd, bs;
    int32_t ctx_starts[3], block_starts[3], anchors[3];
    int n_seqs;
    float *q, *kc, *vc, *kb, *vb;
    int window;
} BlockCase;

static size_t block_rows(const BlockCase *c) { return (size_t)c->block_starts[c->n_seqs] * c->bs; }

/* Runs block attention on r->be with inputs from c (q replaced by q_in
 * when given); out and lse downloaded into out/lse when non-NULL. */
static void block_run(Run *r, const BlockCase *c, const float *q_in, float *out, float *lse, const float *d_out,
                      float **grads) {
    DfBlockAttnLayout l;
    DfError err;
    if (df_block_attn_layout_init(&l, r->be, c->n_seqs, c->ctx_starts, c->block_starts, c->anchors, c->bs, &err))
        fail_msg("%s", err.msg);
    size_t qr = block_rows(c), ctx = (size_t)c->ctx_starts[c->n_seqs], qd = (size_t)c->heads * c->hd,
           kvd = (size_t)c->kvh * c->hd;
    DfBuffer tmp[16];
    int nt = 0;
#define UP(h, n) (tmp[nt++] = df_test_upload(r->be, h, n, DF_BUF_ACT))
    DfBlockAttnArgs a = {.layout = &l, .heads = c->heads, .kv_heads = c->kvh, .head_dim = c->hd,
                         .scale = 1.0f / sqrtf((float)c->hd), .window = c->window};
    a.q = UP(q_in ? q_in : c->q, qr * qd);
    a.k_ctx = UP(c->kc, ctx * kvd), a.v_ctx = UP(c->vc, ctx * kvd);
    a.k_blk = UP(c->kb, qr * kvd), a.v_blk = UP(c->vb, qr * kvd);
    a.out = tmp[nt++] = df_test_upload_poisoned(r->be, qr * qd, DF_BUF_ACT);
    a.lse = tmp[nt++] = df_test_upload_poisoned(r->be, qr * c->heads, DF_BUF_F32);
    df_op_block_attention(r->be, &a);
    if (out) {
        float *h = df_test_download(r->be, a.out);
        memcpy(out, h, qr * qd * sizeof *out), free(h);
    }
    if (lse) {
        float *h = df_test_download(r->be, a.lse);
        memcpy(lse, h, qr * c->heads * sizeof *lse), free(h);
    }
    if (d_out) {
        DfBlockAttnGrads g = {.d_out = UP(d_out, qr * qd)};
        g.dq = tmp[nt++] = df_test_upload_poisoned(r->be, qr * qd, DF_BUF_ACT);
        float *zeros = calloc(ctx > qr ? ctx * kvd : qr * kvd, sizeof(float));
        g.dk_ctx = UP(zeros, ctx * kvd), g.dv_ctx = UP(zeros, ctx * kvd);
        g.dk_blk = UP(zeros, qr * kvd), g.dv_blk = UP(zeros, qr * kvd);
        free(zeros);
        df_op_block_attention_backward(r->be, &a, &g);
        DfBuffer gb[5] = {g.dq, g.dk_ctx, g.dv_ctx, g.dk_blk, g.dv_blk};
        for (int i = 0; i < 5; i++) grads[i] = df_test_download(r->be, gb[i]);
    }
#undef UP
    for (int i = 0; i < nt; i++) df_buffer_free(r->be, &tmp[i]);
    df_block_attn_layout_free(&l, r->be);
}

static void block_case_init(Run *r, BlockCase *c, int window) {
    *c = (BlockCase){.heads = 4, .kvh = 2, .hd = 64, .bs = 3, .n_seqs = 2, .window = window,
                     .ctx_starts = {0, 5, 12}, .block_starts = {0, 2, 3}, .anchors = {1, 4, 6}};
    size_t qr = block_rows(c), ctx = 12, qd = (size_t)c->heads * c->hd, kvd = (size_t)c->kvh * c->hd;
    c->q = inputs(r, qr * qd, 130 + window, 1), c->kc = inputs(r, ctx * kvd, 131, 1), c->vc = inputs(r, ctx * kvd, 132, 1);
    c->kb = inputs(r, qr * kvd, 133, 1), c->vb = inputs(r, qr * kvd, 134, 1);
}

/* Naive block attention: block j of sequence s sees its visible context rows and its own B rows. */
static void ref_block_attention(const BlockCase *c, double *out) {
    int qd = c->heads * c->hd, kvd = c->kvh * c->hd;
    for (int s = 0; s < c->n_seqs; s++)
        for (int j = c->block_starts[s]; j < c->block_starts[s + 1]; j++)
            for (int b = 0; b < c->bs; b++)
                for (int h = 0; h < c->heads; h++) {
                    int g = h / (c->heads / c->kvh), row = j * c->bs + b;
                    int lo = c->window > 0 && c->anchors[j] > c->window ? c->anchors[j] - c->window : 0;
                    int n_ctx = c->anchors[j] - lo, n = n_ctx + c->bs;
                    double sc[64], mx = -INFINITY, sum = 0;
                    const float *keys[64], *vals[64];
                    for (int i = 0; i < n; i++) {
                        int kr = i < n_ctx ? c->ctx_starts[s] + lo + i : j * c->bs + (i - n_ctx);
                        keys[i] = (i < n_ctx ? c->kc : c->kb) + (size_t)kr * kvd + g * c->hd;
                        vals[i] = (i < n_ctx ? c->vc : c->vb) + (size_t)kr * kvd + g * c->hd;
                        double d = 0;
                        for (int e = 0; e < c->hd; e++) d += (double)c->q[(size_t)row * qd + h * c->hd + e] * keys[i][e];
                        sc[i] = d / sqrt(c->hd), mx = fmax(mx, sc[i]);
                    }
                    for (int i = 0; i < n; i++) sum += sc[i] = exp(sc[i] - mx);
                    for (int e = 0; e < c->hd; e++) {
                        double o = 0;
                        for (int i = 0; i < n; i++) o += sc[i] * vals[i][e];
                        out[(size_t)row * qd + h * c->hd + e] = o / sum;
                    }
                }
}

static void block_q_fwd(Run *r, const float *q, float *out, void *ctx) { block_run(r, ctx, q, out, NULL, NULL, NULL); }

static void case_block_attention(Run *r) {
    for (int window = 0; window <= 2; window += 2) {
        BlockCase c;
        block_case_init(r, &c, window);
        size_t qr = block_rows(&c), qd = (size_t)c.heads * c.hd, kvd = (size_t)c.kvh * c.hd;
        float *out = track(r, malloc(qr * qd * sizeof(float))), *lse = track(r, malloc(qr * c.heads * sizeof(float)));
        float *d_out = inputs(r, qr * qd, 140, 1), *grads[5];
        block_run(r, &c, NULL, out, lse, d_out, grads);
        /* outputs of the run, for the comparison with the CPU */
        const char *names[5] = {"dq", "dk_ctx", "dv_ctx", "dk_blk", "dv_blk"};
        size_t counts[5] = {qr * qd, 12 * kvd, 12 * kvd, qr * kvd, qr * kvd};
        DfBuffer ob = up(r, out, qr * qd, DF_BUF_F32);
        result(r, "block_attention out", ob);
        for (int i = 0; i < 5; i++) {
            track(r, grads[i]);
            if (i < 2) result(r, names[i], up(r, grads[i], counts[i], DF_BUF_F32));
        }
        if (!r->reference) continue;
        double *want = dvec(r, qr * qd);
        ref_block_attention(&c, want);
        near("block_attention", out, want, qr * qd, 1e-5);
        check_fd(r, "block_attention_backward dq", block_q_fwd, &c, c.q, qr * qd, d_out, qr * qd, grads[0], 5e-3);
    }
}

/* Naive lm head + weighted cross-entropy: per row the logits, ce, argmax and d_x. */
static void case_lm_head_ce(Run *r) {
    const int rows = 5, hidden = 12, vocab = 37;
    float *x = inputs(r, rows * hidden, 150, 1), *head = inputs(r, vocab * hidden, 151, 1);
    float weights[5] = {1.0f, 0.5f, 2.0f, 0.25f, 1.0f};
    int32_t labels[5] = {3, -1, 36, 0, 17};
    DfBuffer ce = poisoned(r, rows, DF_BUF_F32), am = poisoned(r, rows, DF_BUF_I32), dx = poisoned(r, rows * hidden, DF_BUF_ACT);
    DfLmHeadCeArgs a = {.x = up(r, x, rows * hidden, DF_BUF_ACT), .head = up(r, head, vocab * hidden, DF_BUF_ACT),
                        .labels = up_i32(r, labels, rows), .weights = up(r, weights, rows, DF_BUF_F32), .ce = ce,
                        .argmax = am, .d_x = dx, .rows = rows, .hidden = hidden, .vocab = vocab, .grad_scale = 0.5f};
    df_op_lm_head_ce(r->be, &a);
    float *gce = result(r, "ce", ce), *gam = result_i32(r, "argmax", am), *gdx = result(r, "d_x", dx);
    if (!r->reference) return;
    double *wce = dvec(r, rows), *wdx = dvec(r, rows * hidden), *logit = dvec(r, vocab);
    for (int i = 0; i < rows; i++) {
        double mx = -INFINITY, sum = 0;
        int best = 0;
        for (int v = 0; v < vocab; v++) {
            double d = 0;
            for (int e = 0; e < hidden; e++) d += (double)x[i * hidden + e] * head[v * hidden + e];
            logit[v] = d, mx = fmax(mx, d);
            if (d > logit[best]) best = v;
        }
        for (int v = 0; v < vocab; v++) sum += exp(logit[v] - mx);
        double lse = mx + log(sum);
        wce[i] = labels[i] < 0 ? 0 : lse - logit[labels[i]];
        assert_true(gam[i] == (float)best);
        for (int e = 0; e < hidden; e++) {
            double d = 0;
            for (int v = 0; v < vocab; v++)
                d += (exp(logit[v] - lse) - (v == labels[i])) * head[v * hidden + e];
            wdx[i * hidden + e] = 0.5 * weights[i] * d; /* (softmax - onehot) head, onehot 0 without a label */
        }
    }
    near("lm_head_ce ce", gce, wce, rows, 1e-5);
    near("lm_head_ce d_x (the gradient of 0.5 * sum w ce)", gdx, wdx, rows * hidden, 1e-5);
}

/* ---- compute: optimizer ---------------------------------------------------- */

static void case_optimizer(Run *r) {
    const size_t n = 53;
    float *master = inputs(r, n, 160, 1), *m = inputs(r, n, 161, 0.1f), *g = inputs(r, n, 163, 1);
    float *v = inputs(r, n, 162, 0.01f);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    DfAdamWArgs a = {.master = up(r, master, n, DF_BUF_F32), .exp_avg = up(r, m, n, DF_BUF_F32),
                     .exp_avg_sq = up(r, v, n, DF_BUF_F32), .grads = up(r, g, n, DF_BUF_F32),
                     .params = poisoned(r, n, DF_BUF_ACT), .clip_coef = 0.75f};
    a.s = (DfAdamWScalars){.decay = 1 - 1e-3f * 0.1f, .lerp_weight = 0.1f, .beta2 = 0.95f, .one_minus_beta2 = 0.05f,
                           .bc2_sqrt = sqrtf(1 - 0.95f * 0.95f), .eps = 1e-8f, .neg_step_size = -1e-3f / 0.19f,
                           .apply_decay = 1};
    double ss = 0;
    DfError err;
    if (df_op_sum_squares(r->be, a.grads, &ss, &err)) fail_msg("%s", err.msg);
    df_op_adamw_step(r->be, &a);
    float ss_f = (float)ss;
    result(r, "sum_squares", up(r, &ss_f, 1, DF_BUF_F32));
    float *gm = result(r, "master", a.master), *gp = result(r, "params", a.params);
    result(r, "exp_avg", a.exp_avg), result(r, "exp_avg_sq", a.exp_avg_sq);
    if (!r->reference) return;
    double want_ss = 0;
    for (size_t i = 0; i < n; i++) want_ss += (double)g[i] * g[i];
    assert_true(fabs(ss - want_ss) <= 1e-12 * want_ss);
    /* torch's AdamW step on the clipped gradient, in double */
    double *wm = dvec(r, n);
    for (size_t i = 0; i < n; i++) {
        double gi = (double)g[i] * 0.75, p = master[i] * (1 - 1e-4);
        double mi = m[i] + 0.1 * (gi - m[i]), vi = 0.95 * v[i] + 0.05 * gi * gi;
        wm[i] = p - (1e-3 / 0.19) * mi / (sqrt(vi) / sqrt(1 - 0.95 * 0.95) + 1e-8);
    }
    near("adamw_step master", gm, wm, n, 1e-5);
    for (size_t i = 0; i < n; i++) assert_true(gp[i] == gm[i]); /* the CPU's ACT is the fp32 value */
}

/* ---- compute: KV caches and the fused dense step ---------------------------- */

static void kv_batch(Run *r, DfKvBatch *kb, int32_t *slots, int32_t *lens, int32_t *row_starts, int n_seqs) {
    DfError err;
    if (df_kv_batch_init(kb, r->be, n_seqs, slots, lens, row_starts, 4, 16, &err)) fail_msg("%s", err.msg);
}

static void case_kv(Run *r) {
    const int heads = 4, kvh = 2, hd = 64, cap = 16, slots_n = 4, kvd = 2 * 64;
    int32_t slots[2] = {2, 0}, lens[2] = {5, 0}, starts[3] = {0, 3, 4};
    DfKvBatch kb;
    kv_batch(r, &kb, slots, lens, starts, 2);
    size_t cache_n = (size_t)slots_n * cap * kvd;
    float *kc0 = inputs(r, cache_n, 170, 1), *vc0 = inputs(r, cache_n, 171, 1), *q = inputs(r, 4 * heads * hd, 172, 1);
    float *kn = inputs(r, 4 * kvd, 173, 1), *vn = inputs(r, 4 * kvd, 174, 1);
    DfBuffer kc = up(r, kc0, cache_n, DF_BUF_ACT), vc = up(r, vc0, cache_n, DF_BUF_ACT);
    df_op_kv_cache_write(r->be, kc, up(r, kn, 4 * kvd, DF_BUF_ACT), &kb, kvd);
    df_op_kv_cache_write(r->be, vc, up(r, vn, 4 * kvd, DF_BUF_ACT), &kb, kvd);
    float *outs[2];
    for (int causal = 0; causal < 2; causal++) {
        DfBuffer out = poisoned(r, 4 * heads * hd, DF_BUF_ACT);
        df_op_kv_attention(r->be, out, up(r, q, 4 * heads * hd, DF_BUF_ACT), kc, vc, &kb, heads, kvh, hd, 0.125f, causal);
        outs[causal] = result(r, causal ? "kv_attention causal" : "kv_attention block", out);
    }
    float *gk = result(r, "k cache", kc);
    df_kv_batch_free(&kb, r->be);
    if (!r->reference) return;
    /* the cache: new rows in place, everything else as it was */
    for (int s = 0; s < 2; s++)
        for (int j = 0; j < starts[s + 1] - starts[s]; j++)
            for (int e = 0; e < kvd; e++) {
                size_t at = ((size_t)slots[s] * cap + lens[s] + j) * kvd + e;
                assert_true(gk[at] == kn[(size_t)(starts[s] + j) * kvd + e]);
                kc0[at] = kn[(size_t)(starts[s] + j) * kvd + e];
                vc0[at] = vn[(size_t)(starts[s] + j) * kvd + e];
            }
    /* attention of each new row over its slot's rows: the packed-attention reference over one "sequence" */
    for (int causal = 0; causal < 2; causal++) {
        double *want = dvec(r, 4 * heads * hd);
        for (int s = 0; s < 2; s++)
            for (int j = 0; j < starts[s + 1] - starts[s]; j++) {
                int row = starts[s] + j, n = causal ? lens[s] + j + 1 : lens[s] + starts[s + 1] - starts[s];
                for (int h = 0; h < heads; h++) {
                    int g = h / 2;
                    double sc[32], mx = -INFINITY, sum = 0;
                    for (int i = 0; i < n; i++) {
                        double d = 0;
                        for (int e = 0; e < hd; e++)
                            d += (double)q[((size_t)row * heads + h) * hd + e] * kc0[((size_t)slots[s] * cap + i) * kvd + g * hd + e];
                        sc[i] = d * 0.125, mx = fmax(mx, sc[i]);
                    }
                    for (int i = 0; i < n; i++) sum += sc[i] = exp(sc[i] - mx);
                    for (int e = 0; e < hd; e++) {
                        double o = 0;
                        for (int i = 0; i < n; i++) o += sc[i] * vc0[((size_t)slots[s] * cap + i) * kvd + g * hd + e];
                        want[((size_t)row * heads + h) * hd + e] = o / sum;
                    }
                }
            }
        near("kv_attention", outs[causal], want, 4 * heads * hd, 1e-5);
    }
}

/* qkv_rope_cache against the ops it fuses, as tests/test_util.c runs them on one backend. */
static void case_qkv_rope_cache(Run *r) {
    static const int32_t slots[2] = {1, 3}, lens[2] = {2, 0}, n_new[2] = {3, 1};
    DfTestQkvCase c = {"odd", 4, 2, 64, 1, 2, 4, 8, slots, lens, n_new};
    DfTestQkvRun fused = df_test_qkv_run(r->be, &c, 180, 1);
    DfTestQkvRun sep = df_test_qkv_run(r->be, &c, 180, 0);
    /* the fused run's q and k cache as outputs (copies, tracked) */
    float *q = track(r, malloc(fused.q_count * sizeof(float))), *k = track(r, malloc(fused.cache_count * sizeof(float)));
    memcpy(q, fused.q, fused.q_count * sizeof *q), memcpy(k, fused.k_cache, fused.cache_count * sizeof *k);
    result(r, "q", up(r, q, fused.q_count, DF_BUF_F32));
    /* NaN rows of the cache stay NaN: compare the written values only, through the helper below */
    if (r->reference) df_test_qkv_compare(&c, &fused, &sep, 1e-6, 0);
    df_test_qkv_run_free(&fused), df_test_qkv_run_free(&sep);
}

/* ---- compute: hybrid targets' ops -------------------------------------------- */

static DfDeltaRuleShape delta_shape(void) { return (DfDeltaRuleShape){.key_heads = 2, .value_heads = 4, .key_dim = 8, .value_dim = 6}; }

/* The gated delta rule (backend/gated_deltanet.h's formulas) in double, one sequence. */
static void ref_delta_rule(const float *qkv, const float *b, const float *a, const float *a_log, const float *dt_bias,
                           int t0, int t1, const DfDeltaRuleShape *s, double *out, double *state) {
    int kd = s->key_dim, vd = s->value_dim, nv = s->value_heads, r = nv / s->key_heads;
    int width = 2 * s->key_heads * kd + nv * vd;
    for (int t = t0; t < t1; t++)
        for (int h = 0; h < nv; h++) {
            const float *q = qkv + (size_t)t * width + (h / r) * kd, *k = q + s->key_heads * kd;
            const float *v = qkv + (size_t)t * width + 2 * s->key_heads * kd + h * vd;
            double qn = 0, kn = 0;
            for (int i = 0; i < kd; i++) qn += (double)q[i] * q[i], kn += (double)k[i] * k[i];
            qn = 1 / sqrt(qn + 1e-6) / sqrt(kd), kn = 1 / sqrt(kn + 1e-6);
            double x = a[t * nv + h] + dt_bias[h], sp = x > 20 ? x : log1p(exp(x));
            double g = exp(-exp(a_log[h]) * sp), beta = sigmoid(b[t * nv + h]);
            double *S = state + (size_t)h * kd * vd;
            for (int i = 0; i < kd * vd; i++) S[i] *= g;
            for (int j = 0; j < vd; j++) {
                double sk = 0;
                for (int i = 0; i < kd; i++) sk += S[i * vd + j] * k[i] * kn;
                double delta = beta * (v[j] - sk);
                for (int i = 0; i < kd; i++) S[i * vd + j] += k[i] * kn * delta;
            }
            for (int j = 0; j < vd; j++) {
                double o = 0;
                for (int i = 0; i < kd; i++) o += S[i * vd + j] * q[i] * qn;
                out[(size_t)t * nv * vd + h * vd + j] = o;
            }
        }
}

static void case_hybrid_layers(Run *r) {
    const int t = 7, ch = 5, kernel = 4, rows = 3, dim = 11;
    int32_t starts[3] = {0, 4, 7};
    DfPackedBatch pb;
    DfError err;
    if (df_packed_batch_init(&pb, r->be, starts, 2, &err)) fail_msg("%s", err.msg);
    float *x = inputs(r, t * ch, 190, 1), *w = inputs(r, ch * kernel, 191, 1);
    DfBuffer conv = poisoned(r, t * ch, DF_BUF_ACT);
    df_op_causal_conv_silu(r->be, conv, up(r, x, t * ch, DF_BUF_ACT), up(r, w, ch * kernel, DF_BUF_F32), &pb, ch, kernel);
    DfDeltaRuleShape s = delta_shape();
    int width = 2 * s.key_heads * s.key_dim + s.value_heads * s.value_dim, value = s.value_heads * s.value_dim;
    float *qkv = inputs(r, t * width, 192, 1), *b = inputs(r, t * 4, 193, 1), *a = inputs(r, t * 4, 194, 1);
    float *a_log = inputs(r, 4, 195, 0.5f), *dt = inputs(r, 4, 196, 0.5f);
    DfBuffer dout = poisoned(r, t * value, DF_BUF_ACT);
    df_op_gated_delta_rule(r->be, dout, up(r, qkv, t * width, DF_BUF_ACT), up(r, b, t * 4, DF_BUF_ACT),
                           up(r, a, t * 4, DF_BUF_ACT), up(r, a_log, 4, DF_BUF_F32), up(r, dt, 4, DF_BUF_F32), &pb, &s);
    float *gx = inputs(r, rows * dim, 197, 1), *gz = inputs(r, rows * dim, 198, 1), *gw = inputs(r, dim, 199, 1);
    DfBuffer gxb = up(r, gx, rows * dim, DF_BUF_ACT), sg = up(r, gx, rows * dim, DF_BUF_ACT);
    df_op_gated_rmsnorm(r->be, gxb, up(r, gz, rows * dim, DF_BUF_ACT), up(r, gw, dim, DF_BUF_F32), rows, dim, 1e-6f);
    df_op_sigmoid_gate(r->be, sg, up(r, gz, rows * dim, DF_BUF_ACT));
    float *gc = result(r, "causal_conv_silu", conv), *gd = result(r, "gated_delta_rule", dout);
    float *gn = result(r, "gated_rmsnorm", gxb), *gs = result(r, "sigmoid_gate", sg);
    df_packed_batch_free(&pb, r->be);
    if (!r->reference) return;
    double *wc = dvec(r, t * ch), *wd = dvec(r, t * value), *wn = dvec(r, rows * dim), *ws = dvec(r, rows * dim);
    for (int q = 0; q < 2; q++)
        for (int i = starts[q]; i < starts[q + 1]; i++)
            for (int c = 0; c < ch; c++) {
                double acc = 0;
                for (int j = 0; j < kernel; j++) {
                    int src = i - (kernel - 1) + j;
                    if (src >= starts[q]) acc += (double)w[c * kernel + j] * x[src * ch + c];
                }
                wc[i * ch + c] = silu(acc);
            }
    for (int q = 0; q < 2; q++) {
        double *state = dvec(r, (size_t)value * s.key_dim);
        ref_delta_rule(qkv, b, a, a_log, dt, starts[q], starts[q + 1], &s, wd, state);
    }
    ref_rmsnorm(gx, gw, wn, rows, dim, 1e-6);
    for (int i = 0; i < rows * dim; i++) wn[i] *= silu(gz[i]), ws[i] = gx[i] * sigmoid(gz[i]);
    near("causal_conv_silu", gc, wc, t * ch, 1e-5);
    near("gated_delta_rule", gd, wd, t * value, 1e-4);
    near("gated_rmsnorm", gn, wn, rows * dim, 1e-5);
    near("sigmoid_gate", gs, ws, rows * dim, 1e-6);
}

/* The decode steps continue a sequence: two steps (3 rows, then 2) from
 * zero states equal the packed op over the 5 rows, window and state saved. */
static void case_hybrid_steps(Run *r) {
    const int ch = 5, kernel = 4, n = 5;
    DfDeltaRuleShape s = delta_shape();
    int width = 2 * s.key_heads * s.key_dim + s.value_heads * s.value_dim, value = s.value_heads * s.value_dim;
    size_t win = (size_t)4 * (kernel - 1) * ch, st_n = (size_t)4 * value * s.key_dim; /* 4 slots (kv_batch) */
    float *x = inputs(r, n * ch, 200, 1), *w = inputs(r, ch * kernel, 201, 1), *qkv = inputs(r, n * width, 202, 1);
    float *b = inputs(r, n * 4, 203, 1), *a = inputs(r, n * 4, 204, 1), *a_log = inputs(r, 4, 205, 0.5f);
    float *dt = inputs(r, 4, 206, 0.5f), *zeros = track(r, calloc(st_n + win, sizeof(float)));
    DfBuffer window = up(r, zeros, win, DF_BUF_F32), state = up(r, zeros, st_n, DF_BUF_F32);
    DfBuffer save_w = poisoned(r, win, DF_BUF_F32), save_s = poisoned(r, st_n, DF_BUF_F32);
    DfBuffer conv = poisoned(r, n * ch, DF_BUF_ACT), dout = poisoned(r, n * value, DF_BUF_ACT);
    DfBuffer bw = up(r, w, ch * kernel, DF_BUF_F32), bx = up(r, x, n * ch, DF_BUF_ACT), bq = up(r, qkv, n * width, DF_BUF_ACT);
    DfBuffer bb = up(r, b, n * 4, DF_BUF_ACT), ba = up(r, a, n * 4, DF_BUF_ACT), bl = up(r, a_log, 4, DF_BUF_F32);
    DfBuffer bd = up(r, dt, 4, DF_BUF_F32);
    int32_t slot[1] = {1};
    for (int step = 0; step < 2; step++) {
        int r0 = step ? 3 : 0, rn = step ? 2 : 3;
        int32_t lens[1] = {r0}, starts[2] = {0, rn};
        DfKvBatch kb;
        kv_batch(r, &kb, slot, lens, starts, 1);
        DfConvStepArgs ca = {.batch = &kb, .out = df_buffer_view(conv, (size_t)r0 * ch, (size_t)rn * ch),
                             .x = df_buffer_view(bx, (size_t)r0 * ch, (size_t)rn * ch), .w = bw, .window = window,
                             .save = step ? save_w : (DfBuffer){0}, .channels = ch, .kernel = kernel};
        DfDeltaStepArgs da = {.batch = &kb, .out = df_buffer_view(dout, (size_t)r0 * value, (size_t)rn * value),
                              .qkv = df_buffer_view(bq, (size_t)r0 * width, (size_t)rn * width),
                              .b = df_buffer_view(bb, (size_t)r0 * 4, (size_t)rn * 4),
                              .a = df_buffer_view(ba, (size_t)r0 * 4, (size_t)rn * 4), .a_log = bl, .dt_bias = bd,
                              .state = state, .save = step ? save_s : (DfBuffer){0}, .shape = s};
        df_op_conv_step(r->be, &ca);
        df_op_delta_rule_step(r->be, &da);
        if (r->be->ops->sync(r->be, &(DfError){{0}})) fail_msg("step %d failed", step);
        df_kv_batch_free(&kb, r->be);
    }
    float *gc = result(r, "conv_step", conv), *gd = result(r, "delta_rule_step", dout);
    float *gsw = result_partial(r, "saved window", save_w);
    if (!r->reference) return;
    double *wc = dvec(r, n * ch), *wd = dvec(r, n * value), *state_d = dvec(r, (size_t)value * s.key_dim);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < ch; c++) {
            double acc = 0;
            for (int j = 0; j < kernel; j++) {
                int src = i - (kernel - 1) + j;
                if (src >= 0) acc += (double)w[c * kernel + j] * x[src * ch + c];
            }
            wc[i * ch + c] = silu(acc);
        }
    ref_delta_rule(qkv, b, a, a_log, dt, 0, n, &s, wd, state_d);
    near("conv_step", gc, wc, n * ch, 1e-5);
    near("delta_rule_step", gd, wd, n * value, 1e-4);
    /* slot 1's saved window before step 2 holds inputs 0..2 (oldest first); slot 0 untouched (NaN) */
    for (int j = 0; j < kernel - 1; j++)
        for (int c = 0; c < ch; c++) {
            assert_true(gsw[(size_t)(kernel - 1) * ch + j * ch + c] == x[j * ch + c]);
            assert_true(isnan(gsw[j * ch + c]));
        }
}

/* ---- device queries ---------------------------------------------------------- */

static void case_device_queries(Run *r) {
    char desc[256], var[512];
    df_backend_describe(r->be, desc, sizeof desc);
    assert_true(desc[0] != '\0');
    DfMemoryInfo before, mid, after;
    df_backend_reset_peak(r->be);
    df_backend_memory_info(r->be, &before);
    DfBuffer big = df_test_upload_poisoned(r->be, 1 << 16, DF_BUF_F32); /* freed below, not by run_free */
    df_backend_memory_info(r->be, &mid);
    df_buffer_free(r->be, &big);
    df_backend_reset_peak(r->be);
    df_backend_memory_info(r->be, &after);
    if (r->be->ops->memory_info) {
        assert_true(mid.in_use >= before.in_use + ((size_t)4 << 16));
        assert_true(mid.peak >= mid.in_use);
        if (r->be->ops->reset_peak) assert_true(after.peak == after.in_use);
    }
    DfError err = {{0}};
    assert_int_equal(df_backend_set_variant(r->be, NULL, 0, &err), 0); /* every backend: all defaults */
    assert_int_equal(df_backend_set_variant(r->be, "no_such_knob", 1, &err), -1);
    assert_non_null(strstr(err.msg, "no_such_knob"));
    df_backend_variants(r->be, var, sizeof var);
    if (r->be->ops->set_variant) assert_true(var[0] != '\0');
}

/* Streams, timers, the profile and recorded graphs, where the backend has them. */
static void case_device_caps(Run *r) {
    DfBackend *be = r->be;
    DfError err = {{0}};
    float *x = inputs(r, 64, 210, 1);
    DfBuffer y = up(r, x, 64, DF_BUF_ACT), one = up(r, x, 64, DF_BUF_ACT);
    int times_x = 1; /* y = times_x * x: each add_inplace run below adds one x */
    if (df_backend_has(be, DF_CAP_STREAMS)) {
        assert_non_null(df_backend_native_stream(be));
        void *side = be->ops->side_stream_create(be, &err), *ev = be->ops->event_create(be, &err);
        if (!side || !ev) fail_msg("%s", err.msg);
        assert_int_equal(be->ops->stream_wait_stream(be, side, NULL, ev, &err), 0);
        assert_int_equal(be->ops->stream_wait_stream(be, NULL, side, ev, &err), 0);
        be->ops->event_destroy(be, ev);
        be->ops->side_stream_destroy(be, side);
    } else {
        assert_null(df_backend_native_stream(be));
    }
    if (df_backend_has(be, DF_CAP_TIMING)) {
        DfTimer *t = be->ops->timer_create(be, &err);
        if (!t) fail_msg("%s", err.msg);
        be->ops->timer_start(be, t);
        df_op_add_inplace(be, y, one), times_x++;
        assert_true(be->ops->timer_stop(be, t) >= 0);
        be->ops->timer_destroy(be, t);
        double gbs = 0;
        assert_int_equal(be->ops->copy_bandwidth(be, (size_t)1 << 20, 3, &gbs, &err), 0);
        assert_true(gbs > 0);
    }
    if (df_backend_has(be, DF_CAP_PROFILE)) {
        double ms[DF_OP_COUNT] = {0};
        be->ops->profile_enable(be, 1);
        df_op_add_inplace(be, y, one), times_x++;
        be->ops->profile_enable(be, 0);
        assert_int_equal(be->ops->profile_read(be, ms, &err), 0);
        for (int k = 0; k < DF_OP_COUNT; k++)
            if (k == DF_OP_ID_add_inplace) assert_true(ms[k] > 0);
            else assert_true(ms[k] == 0);
    }
    if (df_backend_has(be, DF_CAP_GRAPHS)) {
        DfGraph *g = NULL;
        assert_int_equal(be->ops->record_begin(be, &err), 0);
        df_op_add_inplace(be, y, one); /* recorded, not run */
        assert_int_equal(be->ops->record_end(be, &g, &err), 0);
        assert_non_null(g);
        assert_int_equal(be->ops->graph_replay(be, g, &err), 0);
        assert_int_equal(be->ops->graph_replay(be, g, &err), 0);
        times_x += 2;
        be->ops->graph_free(be, g);
    }
    /* on every backend: exactly the adds that ran (a recording runs nothing) */
    float *got = result(r, "adds run", y);
    for (int i = 0; i < 64; i++)
        assert_true(fabsf(got[i] - times_x * x[i]) <= 1e-2f * times_x * fabsf(x[i]) + 1e-6f);
}

/* ---- the registry -------------------------------------------------------------- */

static const OpCase CASES[] = {
    {"memory", "alloc free upload_f32 download_f32 upload_i32 download_i32 sync destroy", case_memory, 1e-2},
    {"matmul (4 transposes, beta 0 and 1)", "matmul", case_matmul, 2e-2},
    {"rmsnorm (ACT and F32 weight)", "rmsnorm rmsnorm_f32_weight", case_rmsnorm, 2e-2},
    {"add, swiglu, swiglu_packed", "add_inplace swiglu swiglu_packed", case_add_swiglu, 2e-2},
    {"embedding, copy2d, fill_zero", "embedding copy2d fill_zero", case_embedding_copy_fill, 0},
    {"rope, its backward, partial rope", "rope rope_backward rope_partial", case_rope, 2e-2},
    {"attention (packed, GQA)", "attention", case_attention, 2e-2},
    {"argmax_rows", "argmax_rows", case_argmax, 0},
    {"rmsnorm_backward (finite differences)", "rmsnorm_backward", case_rmsnorm_backward, 3e-2},
    {"swiglu_backward (finite differences)", "swiglu_backward", case_swiglu_backward, 3e-2},
    {"linear_weight_grad (finite differences)", "linear_weight_grad", case_linear_weight_grad, 2e-2},
    {"block attention and its backward (finite differences)", "block_attention block_attention_backward",
     case_block_attention, 3e-2},
    {"lm_head_ce", "lm_head_ce", case_lm_head_ce, 3e-2},
    {"sum_squares, adamw_step", "sum_squares adamw_step", case_optimizer, 1e-2},
    {"kv_cache_write, kv_attention", "kv_cache_write kv_attention", case_kv, 2e-2},
    {"qkv_rope_cache (against the ops it fuses)", "qkv_rope_cache", case_qkv_rope_cache, 2e-2},
    {"hybrid layers", "causal_conv_silu gated_delta_rule gated_rmsnorm sigmoid_gate", case_hybrid_layers, 3e-2},
    {"hybrid decode steps", "conv_step delta_rule_step", case_hybrid_steps, 3e-2},
    {"device queries", "describe memory_info reset_peak set_variant variants", case_device_queries, -1},
    {"device capabilities", "native_stream side_stream_create side_stream_destroy event_create event_destroy "
                            "stream_wait_stream timer_create timer_start timer_stop timer_destroy copy_bandwidth "
                            "profile_enable profile_begin profile_end profile_read record_begin record_end "
                            "graph_replay graph_free",
     case_device_caps, -1},
};
#define N_CASES (sizeof CASES / sizeof CASES[0])

/* Ops of the list without a case of their own: none. (An op tested only
 * elsewhere, e.g. at a whole model's shapes, would be named here with the
 * test that covers it.) */
static const char *const EXEMPT[] = {NULL};

static int case_covers(const OpCase *c, const char *op) {
    size_t n = strlen(op);
    for (const char *p = c->ops; (p = strstr(p, op)) != NULL; p += n)
        if ((p == c->ops || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return 1;
    return 0;
}

static void test_coverage(void **state) {
    (void)state;
    int missing = 0;
    for (int id = 0; id < DF_OP_COUNT; id++) {
        const char *op = df_op_name(id);
        int covered = 0;
        for (size_t c = 0; c < N_CASES; c++) covered |= case_covers(&CASES[c], op);
        for (size_t e = 0; EXEMPT[e]; e++) covered |= strcmp(EXEMPT[e], op) == 0;
        if (!covered) fprintf(stderr, "op '%s' of backend_ops.def has no case in test_backend_ops.c\n", op), missing++;
    }
    assert_int_equal(missing, 0);
    /* and no case names an op the list does not have */
    for (size_t c = 0; c < N_CASES; c++) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", CASES[c].ops);
        for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
            int found = 0;
            for (int id = 0; id < DF_OP_COUNT; id++) found |= strcmp(df_op_name(id), tok) == 0;
            if (!found) fail_msg("case '%s' names '%s', which backend_ops.def does not list", CASES[c].name, tok);
        }
    }
}

/* The missing-op check covers the whole list. */
static void test_missing_op(void **state) {
    DfTestBackendPair *f = *state;
    assert_null(df_backend_missing_op(f->cpu));
    DfBackendOps ops = *f->cpu->ops;
    DfBackend fake = {.ops = &ops, .impl = f->cpu->impl};
    ops.kv_attention = NULL; /* an inference op: once called through NULL */
    assert_string_equal(df_backend_missing_op(&fake), "kv_attention");
    ops = *f->cpu->ops;
    ops.describe = NULL;
    assert_string_equal(df_backend_missing_op(&fake), "describe");
    ops = *f->cpu->ops;
    ops.caps = DF_CAP_GRAPHS; /* claims graphs without their ops */
    assert_string_equal(df_backend_missing_op(&fake), "record_begin");
    ops.caps = 0;
    ops.memory_info = NULL; /* optional */
    assert_null(df_backend_missing_op(&fake));
}

/* The relative error of a partly written output over the places the CPU
 * wrote; INFINITY where the untouched (NaN) places differ. */
static double partial_rel_error(const float *got, const float *want, size_t n) {
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(want[i]) != isnan(got[i])) return INFINITY;
        if (isnan(want[i])) continue;
        max_diff = fmax(max_diff, fabs((double)got[i] - want[i]));
        max_ref = fmax(max_ref, fabs((double)want[i]));
    }
    return max_ref > 0 ? max_diff / max_ref : max_diff;
}

static void compare_runs(const OpCase *c, const Run *cpu, const Run *other) {
    assert_int_equal(cpu->n_out, other->n_out);
    for (int i = 0; i < cpu->n_out; i++) {
        assert_int_equal(cpu->out_count[i], other->out_count[i]);
        double e = cpu->out_exact[i]         ? 0
                   : cpu->out_poison_kept[i] ? partial_rel_error(other->out[i], cpu->out[i], cpu->out_count[i])
                                             : df_rel_error(other->out[i], cpu->out[i], cpu->out_count[i]);
        if (cpu->out_exact[i])
            for (size_t j = 0; j < cpu->out_count[i]; j++)
                if (other->out[i][j] != cpu->out[i][j]) e = INFINITY;
        if (!(e <= c->tol))
            fail_msg("%s: %s on the %s backend: relative error %g against the CPU (tolerance %g)", c->name,
                     cpu->out_name[i], other->be->ops->name, e, c->tol);
    }
}

static void test_cases(void **state) {
    DfTestBackendPair *f = *state;
    DfBackend *others[1] = {f->gpu};
    for (size_t i = 0; i < N_CASES; i++) {
        const OpCase *c = &CASES[i];
        printf("case: %s\n", c->name);
        Run cpu = {.be = f->cpu, .reference = 1};
        CASES[i].run(&cpu);
        for (int b = 0; b < 1; b++) {
            if (!others[b]) continue;
            Run other = {.be = others[b]};
            c->run(&other);
            if (c->tol >= 0) compare_runs(c, &cpu, &other); /* tol < 0: checked on each backend alone */
            run_free(&other);
        }
        run_free(&cpu);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coverage),
        cmocka_unit_test(test_missing_op),
        cmocka_unit_test(test_cases),
    };
    return cmocka_run_group_tests(tests, df_test_backend_pair_setup, df_test_backend_pair_teardown);
}
