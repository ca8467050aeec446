/* RMSNorm forward and backward, and the q/k norms with their rope
 * (rmsnorm_rope, beside rmsnorm then rope; the target's as it runs them, qk_norm_rope from its q/k/v
 * rows, beside two strided rmsnorm_rope calls), at the shapes of the Qwen3-8B training step
 * (`dflash bench --train-only`: 2 x 2048 context rows, 16,384 block rows,
 * hidden 4096, 32/8 heads of 128): each call's time and the bandwidth its
 * bytes reach next to the device-to-device copy's, and the step's calls
 * summed with their multiplicities (5 drafter layers, 34 target layers).
 *
 * Each shape is validated first against the CPU backend's op on the same
 * inputs: out (forward), dx and dw (backward, added to a known dx and dw
 * where the step accumulates) within 2e-2 relative. The backward is timed
 * on its default kernel (rows held in registers) and on the two-pass one
 * (the variant rmsnorm_backward_two_pass) in the same run.
 *
 * Usage: build/dev/cuda/bench_norms (make dev; scripts/test_gpu.sh part kernels). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "dev_util.h"

typedef struct Shape {
    const char *what;
    int rows, dim, accumulate, per_step; /* accumulate: backward only */
    int backward;
} Shape;

/* The step's calls (model/drafter_forward.c, drafter_backward.c, target_layer.c). */
static const Shape SHAPES[] = {
    {"drafter hidden, block rows", 16384, 4096, 1, 10, 1},
    {"drafter final norm", 16384, 4096, 0, 1, 1},
    {"drafter q heads (in the step: rmsnorm_rope_backward)", 16384 * 32, 128, 0, 0, 1},
    {"drafter k heads (in the step: rmsnorm_rope_backward)", 20480 * 8, 128, 0, 0, 1},
    {"drafter hidden_norm, context rows", 4096, 4096, 0, 1, 1},
    {"drafter hidden, block rows", 16384, 4096, 0, 11, 0},
    {"drafter hidden_norm, context rows", 4096, 4096, 0, 1, 0},
    {"target hidden", 4096, 4096, 0, 68, 0},
};

static void compare(DevBackends *be, const char *what, DfBuffer g, DfBuffer c) {
    float *a = dev_download(be->gpu, g), *b = dev_download(be->cpu, c);
    dev_validate(what, a, b, c.count, 2e-2);
    free(a), free(b);
}

/* The q/k norms of the forward, each with its rope (rmsnorm_rope), heads of 128. */
typedef struct RopeShape {
    const char *what;
    int tokens, heads, per_step;
} RopeShape;

static const RopeShape ROPE_SHAPES[] = {
    {"drafter q heads", 16384, 32, 5},
    {"drafter k heads, context + block rows", 20480, 8, 5},
    {"target q heads", 4096, 32, 34},
    {"target k heads", 4096, 8, 34},
};

enum { HD = 128, N_POS = 4096 };

typedef struct RopeRun {
    DfBackend *be;
    int tokens, heads;
    DfBuffer x, w, pos, cos_t, sin_t, out;
} RopeRun;

static void rope_run_init(RopeRun *r, DfBackend *be, const RopeShape *s, const float *x, const float *w,
                          const int32_t *pos, const float *c, const float *sn) {
    size_t n = (size_t)s->tokens * s->heads * HD, nt = (size_t)N_POS * HD / 2;
    *r = (RopeRun){.be = be, .tokens = s->tokens, .heads = s->heads};
    r->x = dev_upload(be, x, n, DF_BUF_ACT), r->w = dev_upload(be, w, HD, DF_BUF_ACT);
    r->pos = dev_upload_i32(be, pos, (size_t)s->tokens);
    r->cos_t = dev_upload(be, c, nt, DF_BUF_F32), r->sin_t = dev_upload(be, sn, nt, DF_BUF_F32);
    r->out = dev_poisoned(be, n, DF_BUF_ACT);
}

static void rope_run_free(RopeRun *r) {
    DfBuffer *bufs[] = {&r->x, &r->w, &r->pos, &r->cos_t, &r->sin_t, &r->out};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) df_buffer_free(r->be, bufs[i]);
}

/* The rope tables (theta 1e6, Qwen3's) and a shape's token positions, built
 * once on the host for every shape. */
typedef struct HostRope {
    float *c, *sn;
    int32_t *pos; /* [the most tokens of any shape]: t % N_POS */
} HostRope;

static HostRope host_rope(int max_tokens) {
    size_t nt = (size_t)N_POS * HD / 2;
    HostRope h = {malloc(nt * sizeof *h.c), malloc(nt * sizeof *h.sn), malloc((size_t)max_tokens * sizeof *h.pos)};
    if (!h.c || !h.sn || !h.pos) dev_die("out of host memory");
    for (int p = 0; p < N_POS; p++)
        for (int i = 0; i < HD / 2; i++) {
            double f = p * pow(1e6, -2.0 * i / HD);
            h.c[(size_t)p * HD / 2 + i] = (float)cos(f), h.sn[(size_t)p * HD / 2 + i] = (float)sin(f);
        }
    for (int t = 0; t < max_tokens; t++) h.pos[t] = t % N_POS;
    return h;
}

static void fused_once(void *ctx) {
    RopeRun *r = ctx;
    df_op_rmsnorm_rope(r->be, r->out, r->x, r->heads * HD, r->w, r->pos, r->cos_t, r->sin_t, r->tokens, r->heads, HD,
                       1e-6f);
}

static void apart_once(void *ctx) {
    RopeRun *r = ctx;
    df_op_rmsnorm(r->be, r->out, r->x, r->w, r->tokens * r->heads, HD, 1e-6f);
    df_op_rope(r->be, r->out, r->pos, r->cos_t, r->sin_t, r->tokens, r->heads, HD);
}

/* rmsnorm_rope against the CPU's and, bit for bit, against rmsnorm then rope
 * on the GPU; both timed. Returns a step's ms of the fused calls. */
static double bench_rope_shape(DevBackends *be, const RopeShape *s, const HostRope *h, double copy_gbs,
                               double *apart_step) {
    size_t n = (size_t)s->tokens * s->heads * HD;
    float *x = dev_random(n, 21, 2.0f), *w = dev_random(HD, 22, 1.0f);
    RopeRun cr, gr, ga;
    rope_run_init(&cr, be->cpu, s, x, w, h->pos, h->c, h->sn);
    rope_run_init(&gr, be->gpu, s, x, w, h->pos, h->c, h->sn);
    rope_run_init(&ga, be->gpu, s, x, w, h->pos, h->c, h->sn);
    fused_once(&cr), fused_once(&gr), apart_once(&ga);
    char tag[160];
    snprintf(tag, sizeof tag, "rmsnorm_rope %s [%d x %d heads]", s->what, s->tokens, s->heads);
    compare(be, tag, gr.out, cr.out);
    float *a = dev_download(be->gpu, gr.out), *b = dev_download(be->gpu, ga.out);
    dev_validate_exact("    and the GPU's rmsnorm then rope", a, b, n);
    free(a), free(b);
    double ms = dev_median_ms(be->gpu, fused_once, &gr, 3, 21, 1), apart = dev_median_ms(be->gpu, apart_once, &ga, 3, 21, 1);
    double gbs = 4.0 * n / ms * 1e-6; /* x read, out written, bf16 */
    printf("%-16s %-40s [%7d x %2d heads] %7.3f ms %6.0f GB/s (%3.0f%% of copy), %3d a step: %6.2f ms "
           "(rmsnorm then rope: %.3f ms, %.2f a step)\n",
           "rmsnorm_rope", s->what, s->tokens, s->heads, ms, gbs, 100 * gbs / copy_gbs, s->per_step, ms * s->per_step,
           apart, apart * s->per_step);
    rope_run_free(&cr), rope_run_free(&gr), rope_run_free(&ga);
    free(x), free(w);
    *apart_step += apart * s->per_step;
    return ms * s->per_step;
}

/* The target's q and k norms as the step runs them: from the q and k columns of its fused q/k/v rows
 * (32 + 2 x 8 heads a token), as one qk_norm_rope and as two strided rmsnorm_rope calls. */
enum { TARGET_TOKENS = 4096, TARGET_QH = 32, TARGET_KH = 8, TARGET_LD = (TARGET_QH + 2 * TARGET_KH) * HD };

typedef struct QkRun {
    DfBackend *be;
    DfBuffer x, k_x, qw, kw, pos, cos_t, sin_t, q, k;
} QkRun;

static void qk_run_init(QkRun *r, DfBackend *be, const float *x, const float *qw, const float *kw, const HostRope *h) {
    size_t n = (size_t)TARGET_TOKENS * TARGET_LD, nt = (size_t)N_POS * HD / 2;
    *r = (QkRun){.be = be};
    r->x = dev_upload(be, x, n, DF_BUF_ACT);
    r->k_x = df_buffer_view(r->x, (size_t)TARGET_QH * HD, n - (size_t)TARGET_QH * HD);
    r->qw = dev_upload(be, qw, HD, DF_BUF_ACT), r->kw = dev_upload(be, kw, HD, DF_BUF_ACT);
    r->pos = dev_upload_i32(be, h->pos, TARGET_TOKENS);
    r->cos_t = dev_upload(be, h->c, nt, DF_BUF_F32), r->sin_t = dev_upload(be, h->sn, nt, DF_BUF_F32);
    r->q = dev_poisoned(be, (size_t)TARGET_TOKENS * TARGET_QH * HD, DF_BUF_ACT);
    r->k = dev_poisoned(be, (size_t)TARGET_TOKENS * TARGET_KH * HD, DF_BUF_ACT);
}

static void qk_run_free(QkRun *r) {
    DfBuffer *bufs[] = {&r->x, &r->qw, &r->kw, &r->pos, &r->cos_t, &r->sin_t, &r->q, &r->k};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) df_buffer_free(r->be, bufs[i]);
}

static void qk_once(void *ctx) {
    QkRun *r = ctx;
    df_op_qk_norm_rope(r->be, r->q, r->k, r->x, TARGET_LD, r->qw, r->kw, r->pos, r->cos_t, r->sin_t, TARGET_TOKENS,
                       TARGET_QH, TARGET_KH, HD, 1e-6f);
}

static void qk_apart_once(void *ctx) {
    QkRun *r = ctx;
    df_op_rmsnorm_rope(r->be, r->q, r->x, TARGET_LD, r->qw, r->pos, r->cos_t, r->sin_t, TARGET_TOKENS, TARGET_QH, HD,
                       1e-6f);
    df_op_rmsnorm_rope(r->be, r->k, r->k_x, TARGET_LD, r->kw, r->pos, r->cos_t, r->sin_t, TARGET_TOKENS, TARGET_KH, HD,
                       1e-6f);
}

/* qk_norm_rope against the CPU's and, bit for bit, against the GPU's two rmsnorm_rope calls; both timed. */
static void bench_qk_target(DevBackends *be, const HostRope *h, double copy_gbs) {
    size_t n = (size_t)TARGET_TOKENS * TARGET_LD;
    float *x = dev_random(n, 31, 2.0f), *qw = dev_random(HD, 32, 1.0f), *kw = dev_random(HD, 33, 1.0f);
    QkRun cr, gr, ga;
    qk_run_init(&cr, be->cpu, x, qw, kw, h), qk_run_init(&gr, be->gpu, x, qw, kw, h), qk_run_init(&ga, be->gpu, x, qw, kw, h);
    qk_once(&cr), qk_once(&gr), qk_apart_once(&ga);
    compare(be, "qk_norm_rope target q", gr.q, cr.q);
    compare(be, "qk_norm_rope target k", gr.k, cr.k);
    DfBuffer got[2] = {gr.q, gr.k}, want[2] = {ga.q, ga.k};
    for (int i = 0; i < 2; i++) {
        float *a = dev_download(be->gpu, got[i]), *b = dev_download(be->gpu, want[i]);
        dev_validate_exact(i ? "    k: and the GPU's two rmsnorm_rope" : "    q: and the GPU's two rmsnorm_rope", a, b,
                           got[i].count);
        free(a), free(b);
    }
    double ms = dev_median_ms(be->gpu, qk_once, &gr, 3, 21, 1), apart = dev_median_ms(be->gpu, qk_apart_once, &ga, 3, 21, 1);
    double gbs = 4.0 * (TARGET_QH + TARGET_KH) * HD * TARGET_TOKENS / ms * 1e-6; /* q, k read and written, bf16 */
    printf("%-16s %-40s [%7d x %2d+%d heads] %7.3f ms %6.0f GB/s (%3.0f%% of copy), 34 a step: %6.2f ms "
           "(two rmsnorm_rope calls: %.3f ms, %.2f a step)\n",
           "qk_norm_rope", "target q and k, from the q/k/v rows", TARGET_TOKENS, TARGET_QH, TARGET_KH, ms, gbs,
           100 * gbs / copy_gbs, 34 * ms, apart, 34 * apart);
    qk_run_free(&cr), qk_run_free(&gr), qk_run_free(&ga);
    free(x), free(qw), free(kw);
}

typedef struct Run {
    DfBackend *be;
    Shape s;
    DfBuffer x, w, dy, dx, dw, out;
} Run;

static void run_init(Run *r, DfBackend *be, const Shape *s, const float *x, const float *w, const float *dy,
                     const float *dx0, const float *dw0) {
    size_t n = (size_t)s->rows * s->dim;
    *r = (Run){.be = be, .s = *s};
    r->x = dev_upload(be, x, n, DF_BUF_ACT), r->w = dev_upload(be, w, (size_t)s->dim, DF_BUF_ACT);
    if (s->backward) {
        r->dy = dev_upload(be, dy, n, DF_BUF_ACT), r->dx = dev_upload(be, dx0, n, DF_BUF_ACT);
        r->dw = dev_upload(be, dw0, (size_t)s->dim, DF_BUF_F32);
    } else {
        r->out = dev_poisoned(be, n, DF_BUF_ACT);
    }
}

static void run_free(Run *r) {
    DfBuffer *bufs[] = {&r->x, &r->w, &r->dy, &r->dx, &r->dw, &r->out};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]->count) df_buffer_free(r->be, bufs[i]);
}

static void op_once(void *ctx) {
    Run *r = ctx;
    const Shape *s = &r->s;
    if (s->backward)
        df_op_rmsnorm_backward(r->be, r->dx, r->dw, r->dy, r->x, r->w, s->rows, s->dim, 1e-6f, s->accumulate);
    else
        df_op_rmsnorm(r->be, r->out, r->x, r->w, s->rows, s->dim, 1e-6f);
}


/* One kernel (the variants now set) on the GPU: validated against the CPU's
 * run c, then timed; returns the median ms. */
static double validate_and_time(DevBackends *be, const Shape *s, const Run *c, const char *kernel, const float *x,
                                const float *w, const float *dy, const float *dx0, const float *dw0) {
    Run g;
    run_init(&g, be->gpu, s, x, w, dy, dx0, dw0);
    op_once(&g);
    dev_sync(be->gpu);
    char tag[192];
    snprintf(tag, sizeof tag, "%s %s [%d x %d]%s (%s)", s->backward ? "rmsnorm_backward" : "rmsnorm", s->what,
             s->rows, s->dim, s->accumulate ? " (accumulate)" : "", kernel);
    if (s->backward) {
        compare(be, tag, g.dx, c->dx);
        compare(be, "    and its dw", g.dw, c->dw);
    } else {
        compare(be, tag, g.out, c->out);
    }
    double ms = dev_median_ms(be->gpu, op_once, &g, 3, 21, 1);
    run_free(&g);
    return ms;
}

/* One shape on fresh inputs (the backward on both of its kernels); returns a step's ms of its calls. */
static double bench_shape(DevBackends *be, const Shape *s, double copy_gbs) {
    size_t n = (size_t)s->rows * s->dim;
    float *x = dev_random(n, 11, 2.0f), *w = dev_random((size_t)s->dim, 12, 1.0f), *dy = dev_random(n, 13, 1.0f);
    float *dx0 = dev_random(n, 14, 1.0f), *dw0 = dev_random((size_t)s->dim, 15, 1.0f);
    Run c;
    run_init(&c, be->cpu, s, x, w, dy, dx0, dw0);
    op_once(&c);
    double ms = validate_and_time(be, s, &c, "default", x, w, dy, dx0, dw0), two_pass = 0;
    if (s->backward) {
        dev_variant(be->gpu, "rmsnorm_backward_two_pass", 1);
        two_pass = validate_and_time(be, s, &c, "two-pass", x, w, dy, dx0, dw0);
        dev_variant(be->gpu, NULL, 0);
    }
    run_free(&c);
    /* bf16 bytes: x and out (forward); x, dy, dx written and read where accumulating (backward) */
    double bytes = 2.0 * n * (s->backward ? 3 + s->accumulate : 2);
    double gbs = bytes / ms * 1e-6;
    printf("%-16s %-54s [%7d x %4d]%s %7.3f ms %6.0f GB/s (%3.0f%% of copy), %3d a step: %6.2f ms",
           s->backward ? "rmsnorm_backward" : "rmsnorm", s->what, s->rows, s->dim, s->accumulate ? " +=" : "   ", ms,
           gbs, 100 * gbs / copy_gbs, s->per_step, ms * s->per_step);
    if (s->backward) printf(" (two-pass kernel: %.3f ms, %.2f a step)", two_pass, two_pass * s->per_step);
    printf("\n");
    free(x), free(w), free(dy), free(dx0), free(dw0);
    return ms * s->per_step;
}

/* rmsnorm_rope_backward (the drafter's q/k heads) in place on dy, as the
 * drafter runs it, against the CPU's and, bit for bit, against
 * rope_backward then rmsnorm_backward on the GPU; both timed. Returns a
 * step's ms of the fused calls. */
typedef struct RopeBwdRun {
    RopeRun f; /* x, w, pos, tables; out holds dy and becomes dx */
    DfBuffer dw, dy0;
} RopeBwdRun;

static void rope_bwd_init(RopeBwdRun *r, DfBackend *be, const RopeShape *s, const float *x, const float *w,
                          const int32_t *pos, const float *c, const float *sn, const float *dy) {
    size_t n = (size_t)s->tokens * s->heads * HD;
    rope_run_init(&r->f, be, s, x, w, pos, c, sn);
    df_buffer_free(be, &r->f.out);
    r->f.out = dev_upload(be, dy, n, DF_BUF_ACT);
    r->dy0 = dev_upload(be, dy, n, DF_BUF_ACT);
    r->dw = dev_alloc(be, HD, DF_BUF_F32);
    df_op_fill_zero(be, r->dw);
}

static void rope_bwd_free(RopeBwdRun *r) {
    df_buffer_free(r->f.be, &r->dw), df_buffer_free(r->f.be, &r->dy0);
    rope_run_free(&r->f);
}

/* Each timed run starts from the same dy (copied in: part of both timings). */
static void fused_bwd_once(void *ctx) {
    RopeBwdRun *r = ctx;
    RopeRun *f = &r->f;
    df_op_copy2d(f->be, f->out, HD, r->dy0, HD, f->tokens * f->heads, HD);
    df_op_rmsnorm_rope_backward(f->be, f->out, r->dw, f->out, f->x, f->w, f->pos, f->cos_t, f->sin_t, f->tokens,
                                f->heads, HD, 1e-6f);
}

static void apart_bwd_once(void *ctx) {
    RopeBwdRun *r = ctx;
    RopeRun *f = &r->f;
    df_op_copy2d(f->be, f->out, HD, r->dy0, HD, f->tokens * f->heads, HD);
    df_op_rope_backward(f->be, f->out, f->pos, f->cos_t, f->sin_t, f->tokens, f->heads, HD);
    df_op_rmsnorm_backward(f->be, f->out, r->dw, f->out, f->x, f->w, f->tokens * f->heads, HD, 1e-6f, 0);
}

static void copy_once(void *ctx) {
    RopeBwdRun *r = ctx;
    df_op_copy2d(r->f.be, r->f.out, HD, r->dy0, HD, r->f.tokens * r->f.heads, HD);
}

static double bench_rope_backward_shape(DevBackends *be, const RopeShape *s, const HostRope *h, double copy_gbs,
                                        double *apart_step) {
    size_t n = (size_t)s->tokens * s->heads * HD;
    float *x = dev_random(n, 31, 2.0f), *w = dev_random(HD, 32, 1.0f), *dy = dev_random(n, 33, 1.0f);
    RopeBwdRun cr, gr, ga;
    rope_bwd_init(&cr, be->cpu, s, x, w, h->pos, h->c, h->sn, dy);
    rope_bwd_init(&gr, be->gpu, s, x, w, h->pos, h->c, h->sn, dy);
    rope_bwd_init(&ga, be->gpu, s, x, w, h->pos, h->c, h->sn, dy);
    fused_bwd_once(&cr), fused_bwd_once(&gr), apart_bwd_once(&ga);
    char tag[160];
    snprintf(tag, sizeof tag, "rmsnorm_rope_backward %s [%d x %d heads] dx", s->what, s->tokens, s->heads);
    compare(be, tag, gr.f.out, cr.f.out);
    compare(be, "    and its dw", gr.dw, cr.dw);
    float *a = dev_download(be->gpu, gr.f.out), *b = dev_download(be->gpu, ga.f.out);
    dev_validate_exact("    dx, and the GPU's rope_backward then rmsnorm_backward", a, b, n);
    free(a), free(b);
    a = dev_download(be->gpu, gr.dw), b = dev_download(be->gpu, ga.dw);
    dev_validate_exact("    dw, and the GPU's rope_backward then rmsnorm_backward", a, b, HD);
    free(a), free(b);
    double copy = dev_median_ms(be->gpu, copy_once, &gr, 3, 21, 1);
    double ms = dev_median_ms(be->gpu, fused_bwd_once, &gr, 3, 21, 1) - copy;
    double apart = dev_median_ms(be->gpu, apart_bwd_once, &ga, 3, 21, 1) - copy;
    double gbs = 6.0 * n / ms * 1e-6; /* x, dy read, dx written, bf16 */
    printf("%-21s %-35s [%7d x %2d heads] %7.3f ms %6.0f GB/s (%3.0f%% of copy), %3d a step: %6.2f ms "
           "(rope_backward then rmsnorm_backward: %.3f ms, %.2f a step; the dy copy before each, %.3f ms, "
           "taken out of both)\n",
           "rmsnorm_rope_backward", s->what, s->tokens, s->heads, ms, gbs, 100 * gbs / copy_gbs, s->per_step,
           ms * s->per_step, apart, apart * s->per_step, copy);
    rope_bwd_free(&cr), rope_bwd_free(&gr), rope_bwd_free(&ga);
    free(x), free(w), free(dy);
    *apart_step += apart * s->per_step;
    return ms * s->per_step;
}

int main(void) {
    DevBackends be = dev_open("bench_norms");
    DfError err = {{0}};
    double copy_gbs = 0;
    if (be.gpu->ops->copy_bandwidth(be.gpu, (size_t)2 << 30, 10, &copy_gbs, &err)) dev_die("%s", err.msg);
    printf("rmsnorm at the Qwen3-8B training step's shapes, copy bandwidth %.0f GB/s\n", copy_gbs);
    double fwd = 0, bwd = 0;
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) {
        double step_ms = bench_shape(&be, &SHAPES[i], copy_gbs);
        if (SHAPES[i].backward)
            bwd += step_ms;
        else
            fwd += step_ms;
    }
    double fused = 0, apart = 0, fused_bwd = 0, apart_bwd = 0;
    int max_tokens = 0;
    for (size_t i = 0; i < sizeof ROPE_SHAPES / sizeof ROPE_SHAPES[0]; i++)
        if (ROPE_SHAPES[i].tokens > max_tokens) max_tokens = ROPE_SHAPES[i].tokens;
    HostRope h = host_rope(max_tokens);
    for (size_t i = 0; i < sizeof ROPE_SHAPES / sizeof ROPE_SHAPES[0]; i++)
        fused += bench_rope_shape(&be, &ROPE_SHAPES[i], &h, copy_gbs, &apart);
    bench_qk_target(&be, &h, copy_gbs);
    for (size_t i = 0; i < 2; i++) /* the drafter's: the target has no backward */
        fused_bwd += bench_rope_backward_shape(&be, &ROPE_SHAPES[i], &h, copy_gbs, &apart_bwd);
    free(h.c), free(h.sn), free(h.pos);
    printf("a step's calls: rmsnorm_backward %.2f ms, rmsnorm %.2f ms, "
           "rmsnorm_rope %.2f ms (as rmsnorm then rope: %.2f ms), rmsnorm_rope_backward %.2f ms (as rope_backward "
           "then rmsnorm_backward: %.2f ms)\n",
           bwd, fwd, fused, apart, fused_bwd, apart_bwd);
    dev_close(&be);
    return 0;
}
