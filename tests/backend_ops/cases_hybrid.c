/* test_backend_ops: hybrid targets' layers (Gated DeltaNet, gated attention)
 * over packed batches of odd lengths (length 1 included), and their decode
 * steps against per-slot windows and states.
 *
 * The delta rule's recurrence needs an argument for its tolerance: with
 * ||k|| <= 1 (l2-normalised), beta in (0, 1) and decay in (0, 1], the step
 * S <- decay (I - beta k k^T) S + beta k v^T is non-expanding, so the fp32
 * rounding errors of each step (at most ~3 dk 2^-24 of the state's scale for
 * its three dk-long sums) are never amplified later and add up at most
 * linearly: after T tokens <= 3 T dk 2^-24, for the longest case here (T 200,
 * dk 128) 4.6e-3; with the output's bf16 rounding, 6.6e-3 < 1e-2 (the bound
 * holds up to T dk ~ 4.4e4). States after a decode step (at most 40 tokens
 * of dk 128) within 1e-3. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"

/* Packed-batch starts from lengths ended by 0; returns the number of sequences. */
static int starts_of(const int *lens, int32_t *starts, int cap) {
    int n = 0;
    starts[0] = 0;
    while (lens[n]) {
        assert_true(n < cap);
        starts[n + 1] = starts[n] + lens[n];
        n++;
    }
    return n;
}

/* The gated delta rule (backend/gated_deltanet.h's formulas) in double over
 * rows t0 .. t1-1 of one sequence, from state (updated). */
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
            double x = a[(size_t)t * nv + h] + dt_bias[h], sp = x > 20 ? x : log1p(exp(x));
            double g = exp(-exp(a_log[h]) * sp), beta = ops_sigmoid(b[(size_t)t * nv + h]);
            double *S = state + (size_t)h * kd * vd;
            for (int i = 0; i < kd * vd; i++) S[i] *= g;
            for (int j = 0; j < vd; j++) {
                double sk = 0;
                for (int i = 0; i < kd; i++) sk += S[i * vd + j] * k[i] * kn;
                double delta = beta * (v[j] - sk);
                for (int i = 0; i < kd; i++) S[i * vd + j] += k[i] * kn * delta;
            }
            if (!out) continue;
            for (int j = 0; j < vd; j++) {
                double o = 0;
                for (int i = 0; i < kd; i++) o += S[i * vd + j] * q[i] * qn;
                out[(size_t)t * nv * vd + h * vd + j] = o;
            }
        }
}

/* The causal convolution + SiLU of rows t0 .. t1-1 whose window (the kernel-1
 * inputs before t0, oldest first; NULL: zeros) is given. */
static void ref_conv(const float *x, const float *w, const float *window, int t0, int t1, int ch, int kernel,
                     double *out) {
    for (int i = t0; i < t1; i++)
        for (int c = 0; c < ch; c++) {
            double acc = 0;
            for (int j = 0; j < kernel; j++) {
                int src = i - (kernel - 1) + j;
                double xv = src >= t0 ? x[(size_t)src * ch + c]
                            : window ? window[(size_t)(src - t0 + kernel - 1) * ch + c]
                                     : 0;
                acc += (double)w[c * kernel + j] * xv;
            }
            out[(size_t)i * ch + c] = ops_silu(acc);
        }
}

/* the delta rule's small parameters as a hybrid target has them: a decay
 * exp(-exp(a_log) softplus(a + dt_bias)) anywhere in (0, 1) */
static float *a_log_values(Run *r, int nv, uint64_t seed) { return ops_inputs_around(r, (size_t)nv, seed, 1.3863f, 1.3863f); }
static float *dt_bias_values(Run *r, int nv, uint64_t seed) { return ops_inputs_around(r, (size_t)nv, seed, 1.0f, 0.5f); }

static const int LENS_SMALL[] = {4, 3, 0}, LENS[] = {1, 7, 3, 30, 1, 13, 2, 0}, LENS_LONG[] = {200, 1, 77, 0};
static const int LENS_THREE[] = {1, 7, 3, 0};
static const int LENS_CHUNKS[] = {33, 1000, 0};

/* ---- causal_conv_silu --------------------------------------------------------------- */

typedef struct ConvShape {
    int ch, kernel;
    const int *lens;
} ConvShape;

static void run_causal_conv(Run *r, const void *shape) {
    const ConvShape *s = shape;
    int32_t starts[16];
    int n_seqs = starts_of(s->lens, starts, 15), t = starts[n_seqs], ch = s->ch, kernel = s->kernel;
    ops_label(r, "%d channels, kernel %d, %d tokens in %d sequences", ch, kernel, t, n_seqs);
    DfPackedBatch pb;
    DfError err;
    if (df_packed_batch_init(&pb, r->be, starts, n_seqs, &err)) fail_msg("%s", err.msg);
    float *x = ops_inputs(r, (size_t)t * ch, 190 + (uint64_t)ch, 2);
    float *w = ops_inputs(r, (size_t)ch * kernel, 191 + (uint64_t)ch, 1);
    DfBuffer conv = ops_poisoned(r, (size_t)t * ch, DF_BUF_ACT);
    df_op_causal_conv_silu(r->be, conv, ops_up(r, x, (size_t)t * ch, DF_BUF_ACT),
                           ops_up(r, w, (size_t)ch * kernel, DF_BUF_F32), &pb, ch, kernel);
    float *got = ops_result(r, "causal_conv_silu", conv);
    df_packed_batch_free(&pb, r->be);
    if (!r->reference) return;
    double *want = ops_dvec(r, (size_t)t * ch);
    for (int q = 0; q < n_seqs; q++) ref_conv(x, w, NULL, starts[q], starts[q + 1], ch, kernel, want);
    ops_near(r, "causal_conv_silu", got, want, (size_t)t * ch, 1e-5);
}

static const ConvShape CONV_SHAPES[] = {
    {5, 4, LENS_SMALL}, {37, 4, LENS}, {160, 4, LENS}, {64, 2, LENS}, {24, 1, LENS},
};

const OpCase CASE_CAUSAL_CONV = {"causal_conv_silu", "causal_conv_silu", run_causal_conv, OPS_SHAPES(CONV_SHAPES), 1e-2,
                                 OPS_NO_VARIANTS};

/* ---- gated_delta_rule ------------------------------------------------------------------ */

typedef struct DeltaShape {
    DfDeltaRuleShape s;
    const int *lens;
    double ref_tol; /* the fp32 CPU op against the double reference (the header's bound) */
} DeltaShape;

static void run_delta_rule(Run *r, const void *shape) {
    const DeltaShape *d = shape;
    const DfDeltaRuleShape *s = &d->s;
    int32_t starts[16];
    int n_seqs = starts_of(d->lens, starts, 15), t = starts[n_seqs], nv = s->value_heads;
    int width = 2 * s->key_heads * s->key_dim + nv * s->value_dim, value = nv * s->value_dim;
    ops_label(r, "%d/%d heads, %d x %d, %d tokens in %d sequences", s->key_heads, nv, s->key_dim, s->value_dim, t, n_seqs);
    DfPackedBatch pb;
    DfError err;
    if (df_packed_batch_init(&pb, r->be, starts, n_seqs, &err)) fail_msg("%s", err.msg);
    uint64_t seed = 192 + (uint64_t)s->key_dim + (uint64_t)s->value_dim * 3 + (uint64_t)t;
    float *qkv = ops_inputs(r, (size_t)t * width, seed, 1), *b = ops_inputs(r, (size_t)t * nv, seed + 1, 3);
    float *a = ops_inputs(r, (size_t)t * nv, seed + 2, 3), *a_log = a_log_values(r, nv, seed + 3);
    float *dt = dt_bias_values(r, nv, seed + 4);
    DfBuffer out = ops_poisoned(r, (size_t)t * value, DF_BUF_ACT);
    df_op_gated_delta_rule(r->be, out, ops_up(r, qkv, (size_t)t * width, DF_BUF_ACT), ops_up(r, b, (size_t)t * nv, DF_BUF_ACT),
                           ops_up(r, a, (size_t)t * nv, DF_BUF_ACT), ops_up(r, a_log, nv, DF_BUF_F32),
                           ops_up(r, dt, nv, DF_BUF_F32), &pb, s);
    float *got = ops_result(r, "gated_delta_rule", out);
    df_packed_batch_free(&pb, r->be);
    if (!r->reference) return;
    double *want = ops_dvec(r, (size_t)t * value);
    for (int q = 0; q < n_seqs; q++) {
        double *state = ops_dvec(r, (size_t)value * s->key_dim);
        ref_delta_rule(qkv, b, a, a_log, dt, starts[q], starts[q + 1], s, want, state);
    }
    ops_near(r, "gated_delta_rule", got, want, (size_t)t * value, d->ref_tol);
}

static const DeltaShape DELTA_SHAPES[] = {
    {{2, 4, 8, 6}, LENS_SMALL, 1e-4},
    {{2, 4, 16, 24}, LENS, 1e-4},    /* the fixture model's heads */
    {{1, 3, 64, 37}, LENS, 1e-4},    /* an odd value dim */
    {{2, 6, 128, 128}, LENS, 1e-4},  /* the Qwen3.5-27B head */
    {{1, 2, 128, 128}, LENS_LONG, 1e-4}, /* long sequences: the header's bound */
    {{1, 1, 256, 64}, LENS_THREE, 1e-4}, /* key dim over 128: 8 threads per value column */
    {{1, 2, 128, 128}, LENS_CHUNKS, 1e-4}, /* many chunks of 32 in one sequence, and a partial one */
};

/* Head dims of 128 take the chunked kernel on CUDA; the token-by-token one stays checked as a variant. */
static const OpsVariant DELTA_VARIANTS[] = {
    {"default variants (chunks of 32 where both head dims are 128)", {NULL}, {0}},
    {"token by token", {"delta_rule_recurrent"}, {1}},
};

const OpCase CASE_DELTA_RULE = {"gated_delta_rule", "gated_delta_rule", run_delta_rule, OPS_SHAPES(DELTA_SHAPES), 1e-2,
                                OPS_VARIANTS(DELTA_VARIANTS)};

/* ---- gated_rmsnorm, sigmoid_gate --------------------------------------------------------- */

static void run_gated_rmsnorm(Run *r, const void *shape) {
    const OpsRowsDim *s = shape;
    int rows = s->rows, dim = s->dim;
    size_t n = (size_t)rows * dim;
    ops_label(r, "%d x %d", rows, dim);
    float *gx = ops_inputs(r, n, 197 + n, 2), *gz = ops_inputs(r, n, 198 + n, 3);
    float *gw = ops_inputs_around(r, dim, 199 + n, 1.0f, 0.3f), *gate = ops_inputs(r, n, 200 + n, 6);
    DfBuffer xb = ops_up(r, gx, n, DF_BUF_ACT), sg = ops_up(r, gx, n, DF_BUF_ACT);
    df_op_gated_rmsnorm(r->be, xb, ops_up(r, gz, n, DF_BUF_ACT), ops_up(r, gw, dim, DF_BUF_F32), rows, dim, 1e-6f);
    df_op_sigmoid_gate(r->be, sg, ops_up(r, gate, n, DF_BUF_ACT));
    float *gn = ops_result(r, "gated_rmsnorm", xb), *gs = ops_result(r, "sigmoid_gate", sg);
    if (!r->reference) return;
    double *wn = ops_dvec(r, n), *ws = ops_dvec(r, n);
    for (int i = 0; i < rows; i++) {
        double ss = 0;
        for (int j = 0; j < dim; j++) ss += (double)gx[(size_t)i * dim + j] * gx[(size_t)i * dim + j];
        double sc = 1 / sqrt(ss / dim + 1e-6);
        for (int j = 0; j < dim; j++) {
            size_t at = (size_t)i * dim + j;
            wn[at] = gx[at] * sc * gw[j] * ops_silu(gz[at]);
        }
    }
    for (size_t i = 0; i < n; i++) ws[i] = gx[i] * ops_sigmoid(gate[i]);
    ops_near(r, "gated_rmsnorm", gn, wn, n, 1e-5);
    ops_near(r, "sigmoid_gate", gs, ws, n, 1e-6);
}

/* a warp a row (short rows, vectorised or not) and a block a row (2048 and up) */
static const OpsRowsDim GATED_NORM_SHAPES[] = {{3, 11}, {37, 24}, {64, 128}, {5, 7}, {3, 5120}, {2, 2051}, {1, 1001}};

const OpCase CASE_GATED_RMSNORM = {"gated_rmsnorm, sigmoid_gate", "gated_rmsnorm sigmoid_gate", run_gated_rmsnorm,
                                   OPS_SHAPES(GATED_NORM_SHAPES), 1e-2, OPS_NO_VARIANTS};

/* ---- rope_partial --------------------------------------------------------------------------- */

typedef struct PartialRopeShape {
    int heads, hd, rot;
    const int *lens; /* positions restart at each sequence */
} PartialRopeShape;

/* The rotated part against the reference, the rest of each head left bit for bit (every backend). */
static void run_rope_partial(Run *r, const void *shape) {
    const PartialRopeShape *s = shape;
    int32_t starts[16];
    int n_seqs = starts_of(s->lens, starts, 15), t = starts[n_seqs], heads = s->heads, hd = s->hd, rot = s->rot;
    enum { N_POS = 64 };
    ops_label(r, "%d heads of %d, %d rotary, %d tokens", heads, hd, rot, t);
    int32_t *pos = ops_track(r, malloc((size_t)t * sizeof *pos));
    for (int q = 0; q < n_seqs; q++)
        for (int i = starts[q]; i < starts[q + 1]; i++) pos[i] = i - starts[q];
    size_t n = (size_t)t * heads * hd, nt = (size_t)N_POS * (rot / 2);
    float *x = ops_inputs(r, n, 80 + n, 2), *c = ops_fvec(r, nt), *sn = ops_fvec(r, nt);
    for (int p = 0; p < N_POS; p++)
        for (int i = 0; i < rot / 2; i++) {
            double f = p * pow(1e4, -2.0 * i / rot);
            c[p * (rot / 2) + i] = (float)cos(f), sn[p * (rot / 2) + i] = (float)sin(f);
        }
    DfBuffer xb = ops_up(r, x, n, DF_BUF_ACT);
    df_op_rope_partial(r->be, xb, ops_up_i32(r, pos, (size_t)t), ops_up(r, c, nt, DF_BUF_F32), ops_up(r, sn, nt, DF_BUF_F32),
                       t, heads, hd, rot);
    float *got = ops_result(r, "rope_partial", xb);
    for (size_t row = 0; row < (size_t)t * heads; row++)
        for (int d = rot; d < hd; d++)
            if (got[row * hd + d] != x[row * hd + d])
                fail_msg("%s: rope_partial on the %s backend changed value %d of head row %zu", r->label,
                         r->be->ops->name, d, row);
    if (!r->reference) return;
    double *want = ops_dvec(r, n);
    int half = rot / 2;
    for (size_t row = 0; row < (size_t)t * heads; row++) {
        int p = pos[row / heads];
        const float *xv = x + row * hd;
        for (int j = 0; j < hd; j++) want[row * hd + j] = xv[j];
        for (int j = 0; j < half; j++) {
            double cc = c[p * half + j], ss = sn[p * half + j];
            want[row * hd + j] = xv[j] * cc - xv[j + half] * ss;
            want[row * hd + j + half] = xv[j + half] * cc + xv[j] * ss;
        }
    }
    ops_near(r, "rope_partial", got, want, n, 1e-5);
}

static const int LENS_FIVE[] = {2, 3, 0};

static const PartialRopeShape PARTIAL_ROPE_SHAPES[] = {
    {3, 10, 6, LENS_FIVE}, {3, 16, 4, LENS}, {4, 256, 64, LENS}, {2, 64, 64, LENS}, {5, 24, 6, LENS},
};

const OpCase CASE_ROPE_PARTIAL = {"rope_partial", "rope_partial", run_rope_partial, OPS_SHAPES(PARTIAL_ROPE_SHAPES),
                                  1e-2, OPS_NO_VARIANTS};

/* ---- decode steps: two steps equal the packed op ---------------------------------------------- */

static DfDeltaRuleShape small_delta(void) {
    return (DfDeltaRuleShape){.key_heads = 2, .value_heads = 4, .key_dim = 8, .value_dim = 6};
}

static void kv_batch(Run *r, DfKvBatch *kb, int32_t *slots, int32_t *lens, int32_t *row_starts, int n_seqs,
                     int n_slots, int capacity) {
    DfError err;
    if (df_kv_batch_init(kb, r->be, n_seqs, slots, lens, row_starts, n_slots, capacity, &err))
        fail_msg("%s: %s", r->label, err.msg);
}

/* Two steps (3 rows, then 2) from zero states equal the packed op over the
 * 5 rows, window and state saved. */
static void run_hybrid_steps(Run *r, const void *shape) {
    (void)shape;
    const int ch = 5, kernel = 4, n = 5;
    DfDeltaRuleShape s = small_delta();
    ops_label(r, "two steps of 3 and 2 rows from zero states");
    int width = 2 * s.key_heads * s.key_dim + s.value_heads * s.value_dim, value = s.value_heads * s.value_dim;
    size_t win = (size_t)4 * (kernel - 1) * ch, st_n = (size_t)4 * value * s.key_dim; /* 4 slots */
    float *x = ops_inputs(r, n * ch, 200, 1), *w = ops_inputs(r, ch * kernel, 201, 1), *qkv = ops_inputs(r, n * width, 202, 1);
    float *b = ops_inputs(r, n * 4, 203, 1), *a = ops_inputs(r, n * 4, 204, 1), *a_log = ops_inputs(r, 4, 205, 0.5f);
    float *dt = ops_inputs(r, 4, 206, 0.5f), *zeros = ops_fvec(r, st_n + win);
    DfBuffer window = ops_up(r, zeros, win, DF_BUF_F32), state = ops_up(r, zeros, st_n, DF_BUF_F32);
    DfBuffer save_w = ops_poisoned(r, win, DF_BUF_F32), save_s = ops_poisoned(r, st_n, DF_BUF_F32);
    DfBuffer conv = ops_poisoned(r, n * ch, DF_BUF_ACT), dout = ops_poisoned(r, n * value, DF_BUF_ACT);
    DfBuffer bw = ops_up(r, w, ch * kernel, DF_BUF_F32), bx = ops_up(r, x, n * ch, DF_BUF_ACT);
    DfBuffer bq = ops_up(r, qkv, n * width, DF_BUF_ACT), bb = ops_up(r, b, n * 4, DF_BUF_ACT);
    DfBuffer ba = ops_up(r, a, n * 4, DF_BUF_ACT), bl = ops_up(r, a_log, 4, DF_BUF_F32), bd = ops_up(r, dt, 4, DF_BUF_F32);
    int32_t slot[1] = {1};
    for (int step = 0; step < 2; step++) {
        int r0 = step ? 3 : 0, rn = step ? 2 : 3;
        int32_t lens[1] = {r0}, starts[2] = {0, rn};
        DfKvBatch kb;
        kv_batch(r, &kb, slot, lens, starts, 1, 4, 16);
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
        ops_sync(r);
        df_kv_batch_free(&kb, r->be);
    }
    float *gc = ops_result(r, "conv_step", conv), *gd = ops_result(r, "delta_rule_step", dout);
    float *gsw = ops_result_partial(r, "saved window", save_w);
    if (!r->reference) return;
    double *wc = ops_dvec(r, n * ch), *wd = ops_dvec(r, n * value), *state_d = ops_dvec(r, (size_t)value * s.key_dim);
    ref_conv(x, w, NULL, 0, n, ch, kernel, wc);
    ref_delta_rule(qkv, b, a, a_log, dt, 0, n, &s, wd, state_d);
    ops_near(r, "conv_step", gc, wc, n * ch, 1e-5);
    ops_near(r, "delta_rule_step", gd, wd, n * value, 1e-4);
    /* slot 1's saved window before step 2 holds inputs 0..2 (oldest first); slot 0 untouched (NaN) */
    for (int j = 0; j < kernel - 1; j++)
        for (int c = 0; c < ch; c++) {
            assert_true(gsw[(size_t)(kernel - 1) * ch + j * ch + c] == x[j * ch + c]);
            assert_true(isnan(gsw[j * ch + c]));
        }
}

const OpCase CASE_HYBRID_STEPS = {"conv_step, delta_rule_step: two steps equal the packed ops",
                                  "conv_step delta_rule_step", run_hybrid_steps, OPS_NO_SHAPES, 1e-2, OPS_NO_VARIANTS};

/* ---- decode steps at decoding's layouts --------------------------------------------------------- */

/* A step's layout: sequence i in slot (5 i + 3) % 9 (slots scrambled), with
 * (7 i) % 5 cached rows, lens[i] new rows; the windows, states and
 * snapshots of the other slots must stay as they were (random). */
enum { STEP_SLOTS = 9, STEP_CAPACITY = 64 };

typedef struct StepLayout {
    int32_t slots[STEP_SLOTS], cache_lens[STEP_SLOTS], starts[STEP_SLOTS + 1];
    int n_seqs, n_rows;
} StepLayout;

static StepLayout step_layout(const int *lens) {
    StepLayout l = {0};
    while (lens[l.n_seqs]) {
        int i = l.n_seqs++;
        assert_true(l.n_seqs <= STEP_SLOTS);
        l.slots[i] = (5 * i + 3) % STEP_SLOTS, l.cache_lens[i] = (7 * i) % 5, l.starts[i + 1] = l.starts[i] + lens[i];
    }
    l.n_rows = l.starts[l.n_seqs];
    return l;
}

static const int DECODE7[] = {1, 1, 1, 1, 1, 1, 1, 0}, DECODE3[] = {1, 1, 1, 0};
static const int MIXED[] = {1, 3, 1, 7, 2, 0}, LONG3[] = {40, 1, 5, 0};

typedef struct ConvStepShape {
    const int *lens;
    int ch, kernel, with_out;
} ConvStepShape;

/* conv_step: outputs, the advanced windows and the snapshots (copies: exact). */
static void run_conv_step(Run *r, const void *shape) {
    const ConvStepShape *s = shape;
    StepLayout l = step_layout(s->lens);
    int ch = s->ch, kernel = s->kernel;
    size_t n = (size_t)l.n_rows * ch, slot_n = (size_t)(kernel - 1) * ch, wn = STEP_SLOTS * slot_n;
    ops_label(r, "%d channels, kernel %d, %d sequences, %d rows%s", ch, kernel, l.n_seqs, l.n_rows,
              s->with_out ? "" : " (the windows only: a rollback's replay)");
    uint64_t seed = 10 + (uint64_t)ch + (uint64_t)l.n_rows;
    float *x = ops_inputs(r, n, seed, 2), *w = ops_inputs(r, (size_t)ch * kernel, seed + 1, 1);
    float *win0 = ops_inputs_around(r, wn, seed + 2, 0.5f, 1.0f), *save0 = ops_inputs_around(r, wn, seed + 3, -0.5f, 1.0f);
    DfBuffer win = ops_up(r, win0, wn, DF_BUF_F32), save = ops_up(r, save0, wn, DF_BUF_F32);
    DfBuffer out = s->with_out ? ops_poisoned(r, n, DF_BUF_ACT) : (DfBuffer){0};
    DfKvBatch kb;
    kv_batch(r, &kb, l.slots, l.cache_lens, l.starts, l.n_seqs, STEP_SLOTS, STEP_CAPACITY);
    DfConvStepArgs a = {&kb, out, ops_up(r, x, n, DF_BUF_ACT), ops_up(r, w, (size_t)ch * kernel, DF_BUF_F32), win, save,
                        ch, kernel};
    df_op_conv_step(r->be, &a);
    float *gout = s->with_out ? ops_result(r, "out", out) : NULL;
    float *gwin = ops_result_exact(r, "advanced windows", win), *gsave = ops_result_exact(r, "snapshots", save);
    df_kv_batch_free(&kb, r->be);
    if (!r->reference) return;
    double *want = ops_dvec(r, n);
    float *want_win = ops_track(r, malloc(wn * sizeof(float))), *want_save = ops_track(r, malloc(wn * sizeof(float)));
    memcpy(want_win, win0, wn * sizeof(float)), memcpy(want_save, save0, wn * sizeof(float));
    for (int i = 0; i < l.n_seqs; i++) {
        float *slot_win = want_win + (size_t)l.slots[i] * slot_n;
        int t0 = l.starts[i], t1 = l.starts[i + 1];
        memcpy(want_save + (size_t)l.slots[i] * slot_n, slot_win, slot_n * sizeof(float));
        ref_conv(x, w, slot_win, t0, t1, ch, kernel, want);
        float *seq = malloc((size_t)(kernel - 1 + t1 - t0) * ch * sizeof *seq); /* window ++ new rows */
        assert_non_null(seq);
        memcpy(seq, slot_win, slot_n * sizeof *seq);
        memcpy(seq + slot_n, x + (size_t)t0 * ch, (size_t)(t1 - t0) * ch * sizeof *seq);
        memcpy(slot_win, seq + (size_t)(t1 - t0) * ch, slot_n * sizeof *seq); /* its last kernel-1 rows */
        free(seq);
    }
    if (gout) ops_near(r, "conv_step out", gout, want, n, 1e-5);
    for (size_t i = 0; i < wn; i++)
        if (gwin[i] != want_win[i] || gsave[i] != want_save[i])
            fail_msg("%s: element %zu: window %g (want %g), snapshot %g (want %g)", r->label, i, gwin[i], want_win[i],
                     gsave[i], want_save[i]);
}

static const ConvStepShape CONV_STEP_SHAPES[] = {
    {DECODE7, 37, 4, 1},
    {MIXED, 160, 4, 1}, /* the fixture's conv_dim */
    {MIXED, 33, 3, 1},  /* rows fewer than the window and more */
    {LONG3, 10240, 4, 1}, /* Qwen3.6-27B's conv_dim */
    {MIXED, 101, 4, 0},
    {DECODE3, 24, 2, 1},
};

const OpCase CASE_CONV_STEP = {"conv_step at decoding's layouts", "conv_step", run_conv_step, OPS_SHAPES(CONV_STEP_SHAPES),
                               1e-2, OPS_NO_VARIANTS};

typedef struct DeltaStepShape {
    const int *lens;
    DfDeltaRuleShape s;
    int with_out;
} DeltaStepShape;

/* delta_rule_step: outputs, the advanced states (1e-3: the header's bound) and the snapshots (copies: exact). */
static void run_delta_step(Run *r, const void *shape) {
    const DeltaStepShape *d = shape;
    const DfDeltaRuleShape *s = &d->s;
    StepLayout l = step_layout(d->lens);
    int nv = s->value_heads, value = nv * s->value_dim, width = 2 * s->key_heads * s->key_dim + value;
    size_t t = (size_t)l.n_rows, slot_n = (size_t)value * s->key_dim, sn = STEP_SLOTS * slot_n;
    ops_label(r, "%d/%d heads, %d x %d, %d sequences, %d rows%s", s->key_heads, nv, s->key_dim, s->value_dim, l.n_seqs,
              l.n_rows, d->with_out ? "" : " (the states only: a rollback's replay)");
    uint64_t seed = 100 + (uint64_t)s->key_dim + (uint64_t)s->value_dim * 3 + t;
    float *qkv = ops_inputs(r, t * width, seed, 1), *b = ops_inputs(r, t * nv, seed + 1, 3);
    float *a = ops_inputs(r, t * nv, seed + 2, 3), *a_log = a_log_values(r, nv, seed + 3), *dt = dt_bias_values(r, nv, seed + 4);
    float *st0 = ops_inputs_around(r, sn, seed + 5, 0.1f, 0.5f), *save0 = ops_inputs_around(r, sn, seed + 6, -0.1f, 0.5f);
    DfBuffer st = ops_up(r, st0, sn, DF_BUF_F32), save = ops_up(r, save0, sn, DF_BUF_F32);
    DfBuffer out = d->with_out ? ops_poisoned(r, t * value, DF_BUF_ACT) : (DfBuffer){0};
    DfKvBatch kb;
    kv_batch(r, &kb, l.slots, l.cache_lens, l.starts, l.n_seqs, STEP_SLOTS, STEP_CAPACITY);
    DfDeltaStepArgs args = {&kb, out, ops_up(r, qkv, t * width, DF_BUF_ACT), ops_up(r, b, t * nv, DF_BUF_ACT),
                            ops_up(r, a, t * nv, DF_BUF_ACT), ops_up(r, a_log, nv, DF_BUF_F32),
                            ops_up(r, dt, nv, DF_BUF_F32), st, save, *s};
    df_op_delta_rule_step(r->be, &args);
    float *gout = d->with_out ? ops_result(r, "out", out) : NULL;
    float *gst = ops_result(r, "advanced states", st);
    ops_last_tol(r, 1e-3);
    float *gsave = ops_result_exact(r, "snapshots", save);
    df_kv_batch_free(&kb, r->be);
    if (!r->reference) return;
    double *want = ops_dvec(r, t * value), *want_st = ops_dvec(r, sn);
    for (size_t i = 0; i < sn; i++) want_st[i] = st0[i];
    float *want_save = ops_track(r, malloc(sn * sizeof(float)));
    memcpy(want_save, save0, sn * sizeof(float));
    for (int i = 0; i < l.n_seqs; i++) {
        memcpy(want_save + (size_t)l.slots[i] * slot_n, st0 + (size_t)l.slots[i] * slot_n, slot_n * sizeof(float));
        ref_delta_rule(qkv, b, a, a_log, dt, l.starts[i], l.starts[i + 1], s, want,
                       want_st + (size_t)l.slots[i] * slot_n);
    }
    if (gout) ops_near(r, "delta_rule_step out", gout, want, t * value, 1e-4);
    ops_near(r, "delta_rule_step states", gst, want_st, sn, 1e-5);
    for (size_t i = 0; i < sn; i++)
        if (gsave[i] != want_save[i]) fail_msg("%s: snapshot %zu is %g, want %g", r->label, i, gsave[i], want_save[i]);
}

static const DeltaStepShape DELTA_STEP_SHAPES[] = {
    {DECODE7, {2, 4, 16, 24}, 1},  /* the fixture's heads */
    {MIXED, {1, 3, 64, 37}, 1},    /* an odd value dim */
    {MIXED, {2, 6, 128, 128}, 1},  /* Qwen3.6's 128 x 128 */
    {LONG3, {1, 2, 128, 128}, 1},  /* across a staged chunk */
    {DECODE3, {1, 1, 256, 64}, 1}, /* 8 threads a column */
    {MIXED, {2, 4, 16, 24}, 0},
};

const OpCase CASE_DELTA_STEP = {"delta_rule_step at decoding's layouts", "delta_rule_step", run_delta_step,
                                OPS_SHAPES(DELTA_STEP_SHAPES), 1e-2, OPS_NO_VARIANTS};
