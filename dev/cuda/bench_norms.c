/* RMSNorm forward and backward at the shapes of the Qwen3-8B training step
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
 * Usage: build/dev/cuda/bench_norms (make dev; scripts/gpu_check.sh part lmhead). */
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
    {"drafter q heads", 16384 * 32, 128, 0, 5, 1},
    {"drafter k heads, context + block rows", 20480 * 8, 128, 0, 5, 1},
    {"drafter hidden_norm, context rows", 4096, 4096, 0, 1, 1},
    {"drafter hidden, block rows", 16384, 4096, 0, 11, 0},
    {"drafter q heads", 16384 * 32, 128, 0, 5, 0},
    {"drafter k heads, context + block rows", 20480 * 8, 128, 0, 5, 0},
    {"drafter hidden_norm, context rows", 4096, 4096, 0, 1, 0},
    {"target hidden", 4096, 4096, 0, 68, 0},
    {"target q heads", 4096 * 32, 128, 0, 34, 0},
    {"target k heads", 4096 * 8, 128, 0, 34, 0},
};

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

static void compare(DevBackends *be, const char *what, DfBuffer g, DfBuffer c) {
    float *a = dev_download(be->gpu, g), *b = dev_download(be->cpu, c);
    dev_validate(what, a, b, c.count, 2e-2);
    free(a), free(b);
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
    printf("%-16s %-40s [%7d x %4d]%s %7.3f ms %6.0f GB/s (%3.0f%% of copy), %3d a step: %6.2f ms",
           s->backward ? "rmsnorm_backward" : "rmsnorm", s->what, s->rows, s->dim, s->accumulate ? " +=" : "   ", ms,
           gbs, 100 * gbs / copy_gbs, s->per_step, ms * s->per_step);
    if (s->backward) printf(" (two-pass kernel: %.3f ms, %.2f a step)", two_pass, two_pass * s->per_step);
    printf("\n");
    free(x), free(w), free(dy), free(dx0), free(dw0);
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
    printf("a step's calls: rmsnorm_backward %.2f ms, rmsnorm %.2f ms\n", bwd, fwd);
    dev_close(&be);
    return 0;
}
