/* The CPU backend's training ops against naive double-precision references
 * written here (and, for the block attention, central finite differences of
 * a double forward), on random inputs with odd sizes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend/backend.h"
#include "backend/cpu/cpu_fast_exp.h"
#include "target/rope.h"

typedef DfTestBackendFixture Fixture;

static void assert_close(const float *got, const double *want, size_t n, double tol, const char *what) {
    float *w = malloc(n * sizeof *w);
    for (size_t i = 0; i < n; i++) w[i] = (float)want[i];
    double e = df_rel_error(got, w, n);
    if (!(e < tol)) fail_msg("%s: relative error %g over %zu values (tolerance %g)", what, e, n, tol);
    free(w);
}

static void sync_ok(DfBackend *be) {
    DfError err;
    if (be->ops->sync(be, &err)) fail_msg("%s", err.msg);
}

/* ------------------------------------------------------------- rmsnorm */

static void check_rmsnorm_backward(DfBackend *be, int rows, int dim, int accumulate, int in_place) {
    const float eps = 1e-6f;
    size_t n = (size_t)rows * dim;
    float *x = df_test_random_array(n, 11, 2.0f), *w = df_test_random_array((size_t)dim, 12, 1.0f), *dy = df_test_random_array(n, 13, 1.0f);
    float *dx0 = df_test_random_array(n, 14, 1.0f), *dw0 = df_test_random_array((size_t)dim, 15, 1.0f);
    double *want_dx = malloc(n * sizeof *want_dx), *want_dw = malloc((size_t)dim * sizeof *want_dw);
    for (int i = 0; i < dim; i++) want_dw[i] = dw0[i];
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * dim, *dyr = dy + (size_t)r * dim;
        double ss = 0, gx = 0;
        for (int i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
        double inv = 1.0 / sqrt(ss / dim + eps);
        for (int i = 0; i < dim; i++) gx += (double)dyr[i] * w[i] * xr[i] * inv;
        for (int i = 0; i < dim; i++) {
            double xh = xr[i] * inv;
            want_dw[i] += dyr[i] * xh;
            double v = inv * (dyr[i] * (double)w[i] - xh * gx / dim);
            want_dx[(size_t)r * dim + i] = (accumulate ? dx0[(size_t)r * dim + i] : 0.0) + v;
        }
    }
    DfBuffer bx = df_test_upload(be, x, n, DF_BUF_ACT), bw = df_test_upload(be, w, dim, DF_BUF_ACT), bdy = df_test_upload(be, dy, n, DF_BUF_ACT);
    DfBuffer bdx = in_place ? bdy : df_test_upload(be, dx0, n, DF_BUF_ACT), bdw = df_test_upload(be, dw0, dim, DF_BUF_F32);
    df_op_rmsnorm_backward(be, bdx, bdw, bdy, bx, bw, rows, dim, eps, accumulate);
    sync_ok(be);
    float *got_dx = df_test_download(be, bdx), *got_dw = df_test_download(be, bdw);
    assert_close(got_dx, want_dx, n, 1e-5, "rmsnorm dx");
    assert_close(got_dw, want_dw, (size_t)dim, 1e-5, "rmsnorm dw");
    DfBuffer *bufs[] = {&bx, &bw, &bdy, &bdw};
    for (int i = 0; i < 4; i++) df_buffer_free(be, bufs[i]);
    if (!in_place) df_buffer_free(be, &bdx);
    free(x), free(w), free(dy), free(dx0), free(dw0), free(want_dx), free(want_dw), free(got_dx), free(got_dw);
}

static void test_rmsnorm_backward(void **state) {
    Fixture *f = *state;
    check_rmsnorm_backward(f->be, 37, 19, 0, 0);
    check_rmsnorm_backward(f->be, 37, 19, 1, 0);
    check_rmsnorm_backward(f->be, 101, 64, 0, 1);
    check_rmsnorm_backward(f->be, 1, 7, 1, 0);
}

/* ---------------------------------------------------------------- rope */

/* rope_backward is the transpose of rope: <rope(x), y> = <x, rope_backward(y)>,
 * and undoes it: rope_backward(rope(x)) = x. */
static void test_rope_backward(void **state) {
    Fixture *f = *state;
    DfBackend *be = f->be;
    const int t = 13, heads = 3, hd = 10, n_pos = 40;
    size_t n = (size_t)t * heads * hd;
    DfRopeConfig rc = {.theta = 10000.0, .type = DF_ROPE_DEFAULT};
    float *c = malloc(sizeof *c * n_pos * hd / 2), *s = malloc(sizeof *s * n_pos * hd / 2);
    df_rope_tables(&rc, hd, n_pos, c, s);
    int32_t pos[13];
    for (int i = 0; i < t; i++) pos[i] = (i * 7 + 3) % n_pos;
    float *x = df_test_random_array(n, 21, 1.0f), *y = df_test_random_array(n, 22, 1.0f);
    DfBuffer bc = df_test_upload(be, c, (size_t)n_pos * hd / 2, DF_BUF_F32), bs = df_test_upload(be, s, (size_t)n_pos * hd / 2, DF_BUF_F32);
    DfBuffer bp = df_test_upload_i32(be, pos, t), bx = df_test_upload(be, x, n, DF_BUF_ACT), by = df_test_upload(be, y, n, DF_BUF_ACT);
    df_op_rope(be, bx, bp, bc, bs, t, heads, hd);
    float *rx = df_test_download(be, bx);
    df_op_rope_backward(be, by, bp, bc, bs, t, heads, hd);
    df_op_rope_backward(be, bx, bp, bc, bs, t, heads, hd);
    sync_ok(be);
    float *ry = df_test_download(be, by), *back = df_test_download(be, bx);
    double lhs = 0, rhs = 0;
    for (size_t i = 0; i < n; i++) lhs += (double)rx[i] * y[i], rhs += (double)x[i] * ry[i];
    assert_true(fabs(lhs - rhs) < 1e-4 * (1 + fabs(lhs)));
    double *want = malloc(n * sizeof *want);
    for (size_t i = 0; i < n; i++) want[i] = x[i];
    assert_close(back, want, n, 1e-5, "rope round trip");
    DfBuffer *bufs[] = {&bc, &bs, &bp, &bx, &by};
    for (int i = 0; i < 5; i++) df_buffer_free(be, bufs[i]);
    free(c), free(s), free(x), free(y), free(rx), free(ry), free(back), free(want);
}

/* -------------------------------------------------------------- swiglu */

static void test_swiglu_backward(void **state) {
    Fixture *f = *state;
    DfBackend *be = f->be;
    const size_t n = 1031;
    float *g = df_test_random_array(n, 31, 4.0f), *u = df_test_random_array(n, 32, 2.0f), *d = df_test_random_array(n, 33, 1.0f);
    double *want_g = malloc(n * sizeof *want_g), *want_u = malloc(n * sizeof *want_u);
    for (size_t i = 0; i < n; i++) { /* central differences of silu(g) * u in double */
        double h = 1e-5, gi = g[i];
        double fp = (gi + h) / (1 + exp(-(gi + h))), fm = (gi - h) / (1 + exp(-(gi - h)));
        want_g[i] = d[i] * u[i] * (fp - fm) / (2 * h);
        want_u[i] = d[i] * gi / (1 + exp(-gi));
    }
    DfBuffer bg = df_test_upload(be, g, n, DF_BUF_ACT), bu = df_test_upload(be, u, n, DF_BUF_ACT), bd = df_test_upload(be, d, n, DF_BUF_ACT);
    df_op_swiglu_backward(be, bg, bu, bd, bg, bu); /* in place, as the drafter uses it */
    sync_ok(be);
    float *got_g = df_test_download(be, bg), *got_u = df_test_download(be, bu);
    assert_close(got_g, want_g, n, 1e-5, "d gate");
    assert_close(got_u, want_u, n, 1e-6, "d up");
    df_buffer_free(be, &bg), df_buffer_free(be, &bu), df_buffer_free(be, &bd);
    free(g), free(u), free(d), free(want_g), free(want_u), free(got_g), free(got_u);
}

/* --------------------------------------------------------- weight grad */

static void test_linear_weight_grad(void **state) {
    Fixture *f = *state;
    DfBackend *be = f->be;
    const int shapes[][3] = {{77, 45, 19}, {5, 130, 33}, {300, 7, 90}};
    for (int c = 0; c < 3; c++) {
        int m = shapes[c][0], n = shapes[c][1], k = shapes[c][2];
        float *dy = df_test_random_array((size_t)m * n, 41, 1.0f), *x = df_test_random_array((size_t)m * k, 42, 1.0f);
        float *dw0 = df_test_random_array((size_t)n * k, 43, 1.0f);
        double *want = malloc((size_t)n * k * sizeof *want);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < k; j++) {
                double s = dw0[(size_t)i * k + j];
                for (int r = 0; r < m; r++) s += (double)dy[(size_t)r * n + i] * x[(size_t)r * k + j];
                want[(size_t)i * k + j] = s;
            }
        DfBuffer bdy = df_test_upload(be, dy, (size_t)m * n, DF_BUF_ACT), bx = df_test_upload(be, x, (size_t)m * k, DF_BUF_ACT);
        DfBuffer bdw = df_test_upload(be, dw0, (size_t)n * k, DF_BUF_F32);
        df_op_linear_weight_grad(be, bdw, bdy, bx, m, n, k, 1.0f);
        sync_ok(be);
        float *got = df_test_download(be, bdw);
        assert_close(got, want, (size_t)n * k, 1e-5, "weight grad");
        df_buffer_free(be, &bdy), df_buffer_free(be, &bx), df_buffer_free(be, &bdw);
        free(dy), free(x), free(dw0), free(want), free(got);
    }
}

/* ------------------------------------------------------ block attention */

/* Two sequences (11 and 7 context rows), blocks of B = 3 at anchors
 * {0, 5, 10} and {3, 6}; 4 query heads over 2 kv heads, head_dim 6. */
enum { BA_B = 3, BA_NB = 5, BA_Q = BA_NB * BA_B, BA_CTX = 18, BA_H = 4, BA_KV = 2, BA_HD = 6 };
static const int32_t ba_ctx_starts[3] = {0, 11, 18}, ba_block_starts[3] = {0, 3, 5},
                     ba_anchors[BA_NB] = {0, 5, 10, 3, 6};

typedef struct BlockAttnData {
    double q[BA_Q * BA_H * BA_HD], kc[BA_CTX * BA_KV * BA_HD], vc[BA_CTX * BA_KV * BA_HD], kb[BA_Q * BA_KV * BA_HD],
        vb[BA_Q * BA_KV * BA_HD];
} BlockAttnData;

/* The spec's masked attention, written out in double: out [Q, H*hd], lse [H, Q].
 * window > 0: a block sees only the last `window` context rows below its anchor. */
static void block_attn_ref(const BlockAttnData *x, double scale, int window, double *out, double *lse) {
    int ldq = BA_H * BA_HD, ldk = BA_KV * BA_HD;
    for (int j = 0; j < BA_NB; j++) {
        int s = j < 3 ? 0 : 1, a = ba_anchors[j], c0 = ba_ctx_starts[s];
        for (int r = 0; r < BA_B; r++)
            for (int h = 0; h < BA_H; h++) {
                int qi = j * BA_B + r, g = h / (BA_H / BA_KV), n = a + BA_B;
                int lo = window > 0 && a > window ? a - window : 0; /* first visible context row */
                double sc[32], mx = -INFINITY, sum = 0;
                for (int i = 0; i < n; i++) {
                    if (i < lo) {
                        sc[i] = -INFINITY;
                        continue;
                    }
                    const double *kr = i < a ? x->kc + (size_t)(c0 + i) * ldk : x->kb + (size_t)(j * BA_B + i - a) * ldk;
                    double d = 0;
                    for (int e = 0; e < BA_HD; e++) d += x->q[qi * ldq + h * BA_HD + e] * kr[g * BA_HD + e];
                    sc[i] = d * scale;
                    if (sc[i] > mx) mx = sc[i];
                }
                for (int i = 0; i < n; i++) sum += exp(sc[i] - mx);
                if (lse) lse[h * BA_Q + qi] = mx + log(sum);
                for (int e = 0; e < BA_HD; e++) {
                    double o = 0;
                    for (int i = 0; i < n; i++) {
                        const double *vr = i < a ? x->vc + (size_t)(c0 + i) * ldk : x->vb + (size_t)(j * BA_B + i - a) * ldk;
                        o += exp(sc[i] - mx) / sum * vr[g * BA_HD + e];
                    }
                    out[qi * ldq + h * BA_HD + e] = o;
                }
            }
    }
}

static double weighted_out(const BlockAttnData *x, double scale, int window, const float *dout) {
    static double out[BA_Q * BA_H * BA_HD];
    block_attn_ref(x, scale, window, out, NULL);
    double l = 0;
    for (int i = 0; i < BA_Q * BA_H * BA_HD; i++) l += out[i] * dout[i];
    return l;
}

/* d(sum dout * out)/d(t[i]) by central differences, for every element of t. */
static void fd_grad(BlockAttnData *x, double *t, int n, double scale, int window, const float *dout, double *grad) {
    for (int i = 0; i < n; i++) {
        double keep = t[i], h = 1e-5;
        t[i] = keep + h;
        double lp = weighted_out(x, scale, window, dout);
        t[i] = keep - h;
        double lm = weighted_out(x, scale, window, dout);
        t[i] = keep;
        grad[i] = (lp - lm) / (2 * h);
    }
}

static DfBuffer upload_d(DfBackend *be, const double *x, size_t n) {
    float *f = malloc(n * sizeof *f);
    for (size_t i = 0; i < n; i++) f[i] = (float)x[i];
    DfBuffer b = df_test_upload(be, f, n, DF_BUF_ACT);
    free(f);
    return b;
}

static void check_block_attention(void **state, int window) {
    Fixture *f = *state;
    DfBackend *be = f->be;
    DfError err;
    BlockAttnData *x = malloc(sizeof *x);
    double *arrays[] = {x->q, x->kc, x->vc, x->kb, x->vb};
    size_t sizes[] = {BA_Q * BA_H * BA_HD, BA_CTX * BA_KV * BA_HD, BA_CTX * BA_KV * BA_HD, BA_Q * BA_KV * BA_HD,
                      BA_Q * BA_KV * BA_HD};
    for (int i = 0; i < 5; i++) {
        float *r = df_test_random_array(sizes[i], 50 + i, 1.5f);
        for (size_t e = 0; e < sizes[i]; e++) arrays[i][e] = r[e];
        free(r);
    }
    double scale = 1.0 / sqrt(BA_HD);
    DfBlockAttnLayout layout;
    assert_int_equal(df_block_attn_layout_init(&layout, be, 2, ba_ctx_starts, ba_block_starts, ba_anchors, BA_B, &err), 0);
    DfBlockAttnArgs a = {.layout = &layout, .heads = BA_H, .kv_heads = BA_KV, .head_dim = BA_HD, .scale = (float)scale,
                         .window = window};
    DfBuffer *bufs[] = {&a.q, &a.k_ctx, &a.v_ctx, &a.k_blk, &a.v_blk};
    for (int i = 0; i < 5; i++) *bufs[i] = upload_d(be, arrays[i], sizes[i]);
    assert_int_equal(df_buffer_alloc(be, &a.out, DF_BUF_ACT, sizes[0], &err), 0);
    assert_int_equal(df_buffer_alloc(be, &a.lse, DF_BUF_F32, BA_Q * BA_H, &err), 0);
    df_op_block_attention(be, &a);
    sync_ok(be);

    double *want_out = malloc(sizes[0] * sizeof *want_out), want_lse[BA_Q * BA_H];
    block_attn_ref(x, scale, window, want_out, want_lse);
    float *got_out = df_test_download(be, a.out), *got_lse = df_test_download(be, a.lse);
    assert_close(got_out, want_out, sizes[0], 1e-5, "block attention out");
    assert_close(got_lse, want_lse, BA_Q * BA_H, 1e-5, "block attention lse");

    /* backward: d(sum dout * out) against finite differences; dk/dv accumulate onto random starts */
    float *dout = df_test_random_array(sizes[0], 60, 1.0f);
    DfBlockAttnGrads g;
    g.d_out = df_test_upload(be, dout, sizes[0], DF_BUF_ACT);
    assert_int_equal(df_buffer_alloc(be, &g.dq, DF_BUF_ACT, sizes[0], &err), 0);
    float *starts[4];
    DfBuffer *gb[] = {&g.dk_ctx, &g.dv_ctx, &g.dk_blk, &g.dv_blk};
    for (int i = 0; i < 4; i++) {
        starts[i] = df_test_random_array(sizes[i + 1], 70 + i, 1.0f);
        *gb[i] = df_test_upload(be, starts[i], sizes[i + 1], DF_BUF_ACT);
    }
    df_op_block_attention_backward(be, &a, &g);
    sync_ok(be);
    const char *names[] = {"dq", "dk_ctx", "dv_ctx", "dk_blk", "dv_blk"};
    DfBuffer outs[] = {g.dq, g.dk_ctx, g.dv_ctx, g.dk_blk, g.dv_blk};
    for (int i = 0; i < 5; i++) {
        double *want = malloc(sizes[i] * sizeof *want);
        fd_grad(x, arrays[i], (int)sizes[i], scale, window, dout, want);
        if (i > 0)
            for (size_t e = 0; e < sizes[i]; e++) want[e] += starts[i - 1][e];
        float *got = df_test_download(be, outs[i]);
        assert_close(got, want, sizes[i], 2e-4, names[i]);
        free(want), free(got);
    }
    for (int i = 0; i < 5; i++) df_buffer_free(be, bufs[i]);
    for (int i = 0; i < 4; i++) df_buffer_free(be, gb[i]), free(starts[i]);
    df_buffer_free(be, &a.out), df_buffer_free(be, &a.lse), df_buffer_free(be, &g.d_out), df_buffer_free(be, &g.dq);
    df_block_attn_layout_free(&layout, be);
    free(x), free(want_out), free(got_out), free(got_lse), free(dout);
}

static void test_block_attention(void **state) { check_block_attention(state, 0); }

/* A sliding window of 4 cuts the context of the blocks anchored at 5, 10 and 6
 * (and not of those at 0 and 3); a window past every anchor changes nothing. */
static void test_block_attention_window(void **state) { check_block_attention(state, 4); }

static void test_block_attention_window_wide(void **state) { check_block_attention(state, 64); }

static void test_block_attention_layout_errors(void **state) {
    Fixture *f = *state;
    DfError err;
    DfBlockAttnLayout l;
    int32_t bad_anchors[BA_NB] = {0, 5, 10, 3, 7}; /* 7 >= the second sequence's 7 rows */
    assert_int_equal(df_block_attn_layout_init(&l, f->be, 2, ba_ctx_starts, ba_block_starts, bad_anchors, BA_B, &err), -1);
    assert_non_null(strstr(err.msg, "anchor 7"));
    int32_t bad_blocks[3] = {0, 4, 3};
    assert_int_equal(df_block_attn_layout_init(&l, f->be, 2, ba_ctx_starts, bad_blocks, ba_anchors, BA_B, &err), -1);
}

/* ------------------------------------------------------------ lm head CE */

static void check_lm_head_ce(DfBackend *be, int rows, int hidden, int vocab, int with_grad) {
    DfError err;
    float *x = df_test_random_array((size_t)rows * hidden, 81, 1.0f), *head = df_test_random_array((size_t)vocab * hidden, 82, 0.5f);
    float *w = df_test_random_array((size_t)rows, 83, 1.0f);
    int32_t *labels = malloc((size_t)rows * sizeof *labels);
    for (int r = 0; r < rows; r++) {
        labels[r] = (r * 31 + 7) % vocab;
        w[r] = fabsf(w[r]);
        if (r % 11 == 3) labels[r] = -1, w[r] = 0.0f; /* past the end of a sequence */
        if (r % 13 == 5) w[r] = 0.0f;                 /* no loss on this slot */
    }
    const double gs = 0.37;
    double *want_ce = malloc((size_t)rows * sizeof *want_ce), *want_dx = calloc((size_t)rows * hidden, sizeof *want_dx);
    int32_t *want_arg = malloc((size_t)rows * sizeof *want_arg);
    double *logit = malloc((size_t)vocab * sizeof *logit);
    for (int r = 0; r < rows; r++) {
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < vocab; v++) {
            double s = 0;
            for (int i = 0; i < hidden; i++) s += (double)x[(size_t)r * hidden + i] * head[(size_t)v * hidden + i];
            logit[v] = s;
            if (s > mx) mx = s, want_arg[r] = v;
        }
        for (int v = 0; v < vocab; v++) sum += exp(logit[v] - mx);
        double lse = mx + log(sum);
        want_ce[r] = labels[r] >= 0 ? lse - logit[labels[r]] : 0.0;
        for (int v = 0; v < vocab; v++) {
            double d = gs * w[r] * (exp(logit[v] - lse) - (v == labels[r]));
            for (int i = 0; i < hidden; i++) want_dx[(size_t)r * hidden + i] += d * head[(size_t)v * hidden + i];
        }
    }
    DfLmHeadCeArgs a = {.rows = rows, .hidden = hidden, .vocab = vocab, .grad_scale = (float)gs};
    a.x = df_test_upload(be, x, (size_t)rows * hidden, DF_BUF_ACT);
    a.head = df_test_upload(be, head, (size_t)vocab * hidden, DF_BUF_ACT);
    a.weights = df_test_upload(be, w, (size_t)rows, DF_BUF_F32);
    a.labels = df_test_upload_i32(be, labels, (size_t)rows);
    assert_int_equal(df_buffer_alloc(be, &a.ce, DF_BUF_F32, (size_t)rows, &err), 0);
    assert_int_equal(df_buffer_alloc(be, &a.argmax, DF_BUF_I32, (size_t)rows, &err), 0);
    if (with_grad) assert_int_equal(df_buffer_alloc(be, &a.d_x, DF_BUF_ACT, (size_t)rows * hidden, &err), 0);
    df_op_lm_head_ce(be, &a);
    sync_ok(be);
    float *got_ce = df_test_download(be, a.ce);
    int32_t *got_arg = malloc((size_t)rows * sizeof *got_arg);
    assert_int_equal(be->ops->download_i32(be, got_arg, a.argmax, &err), 0);
    assert_close(got_ce, want_ce, (size_t)rows, 1e-5, "ce");
    assert_memory_equal(got_arg, want_arg, (size_t)rows * sizeof *got_arg);
    if (with_grad) {
        float *got_dx = df_test_download(be, a.d_x);
        assert_close(got_dx, want_dx, (size_t)rows * hidden, 1e-5, "d_x");
        free(got_dx);
        df_buffer_free(be, &a.d_x);
    }
    DfBuffer *bufs[] = {&a.x, &a.head, &a.weights, &a.labels, &a.ce, &a.argmax};
    for (int i = 0; i < 6; i++) df_buffer_free(be, bufs[i]);
    free(x), free(head), free(w), free(labels), free(want_ce), free(want_dx), free(want_arg), free(logit);
    free(got_ce), free(got_arg);
}

static void test_lm_head_ce(void **state) {
    Fixture *f = *state;
    check_lm_head_ce(f->be, 300, 23, 53, 1); /* several chunks of rows */
    check_lm_head_ce(f->be, 7, 16, 5000, 1);
    check_lm_head_ce(f->be, 9, 5, 41, 0);
}

static void test_lm_head_ce_bad_label(void **state) {
    Fixture *f = *state;
    DfBackend *be = f->be;
    DfError err;
    float x[4] = {1, 2, 3, 4}, head[6] = {1, 0, 0, 1, 1, 1}, w[2] = {1, 1};
    int32_t labels[2] = {1, 3};
    DfLmHeadCeArgs a = {.rows = 2, .hidden = 2, .vocab = 3, .grad_scale = 1.0f};
    a.x = df_test_upload(be, x, 4, DF_BUF_ACT), a.head = df_test_upload(be, head, 6, DF_BUF_ACT);
    a.weights = df_test_upload(be, w, 2, DF_BUF_F32), a.labels = df_test_upload_i32(be, labels, 2);
    assert_int_equal(df_buffer_alloc(be, &a.ce, DF_BUF_F32, 2, &err), 0);
    assert_int_equal(df_buffer_alloc(be, &a.argmax, DF_BUF_I32, 2, &err), 0);
    df_op_lm_head_ce(be, &a);
    assert_int_equal(be->ops->sync(be, &err), -1);
    assert_non_null(strstr(err.msg, "label 3"));
    DfBuffer *bufs[] = {&a.x, &a.head, &a.weights, &a.labels, &a.ce, &a.argmax};
    for (int i = 0; i < 6; i++) df_buffer_free(be, bufs[i]);
}

static void test_fill_zero(void **state) {
    Fixture *f = *state;
    float *x = df_test_random_array(37, 90, 1.0f);
    DfBuffer b = df_test_upload(f->be, x, 37, DF_BUF_F32);
    df_op_fill_zero(f->be, df_buffer_view(b, 3, 30));
    float *got = df_test_download(f->be, b);
    for (int i = 0; i < 37; i++) assert_true(i >= 3 && i < 33 ? got[i] == 0.0f : got[i] == x[i]);
    df_buffer_free(f->be, &b);
    free(x), free(got);
}

/* The softmax exp against libm over its whole range: relative error of a few ulp. */
static void test_fast_exp(void **state) {
    (void)state;
    double worst = 0;
    for (int i = 0; i <= 200000; i++) {
        float x = -87.0f + 175.0f * (float)i / 200000.0f;
        double want = exp((double)x), got = df_fast_expf(x);
        double e = fabs(got - want) / want;
        if (e > worst) worst = e;
    }
    if (!(worst < 5e-7)) fail_msg("fast exp relative error %g", worst);
    assert_true(df_fast_expf(0.0f) == 1.0f);
    assert_true(df_fast_expf(-1000.0f) < 1e-37f && df_fast_expf(-1000.0f) >= 0.0f); /* clamped, still finite */
    assert_true(df_fast_expf(-INFINITY) < 1e-37f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rmsnorm_backward, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
        cmocka_unit_test_setup_teardown(test_rope_backward, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
        cmocka_unit_test_setup_teardown(test_swiglu_backward, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
        cmocka_unit_test_setup_teardown(test_linear_weight_grad, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
        cmocka_unit_test_setup_teardown(test_block_attention_window, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
        cmocka_unit_test_setup_teardown(test_block_attention_window_wide, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
        cmocka_unit_test_setup_teardown(test_block_attention, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
        cmocka_unit_test_setup_teardown(test_block_attention_layout_errors, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
        cmocka_unit_test_setup_teardown(test_lm_head_ce, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
        cmocka_unit_test_setup_teardown(test_lm_head_ce_bad_label, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
        cmocka_unit_test_setup_teardown(test_fill_zero, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
        cmocka_unit_test(test_fast_exp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
