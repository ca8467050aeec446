/* adamw_step (clipping folded in, one launch for all parameters) and the
 * gradients' sum of squares at 1.05e9 parameters (about 19.6 GiB of device
 * memory), device events after a warm-up, with the bandwidth each reaches.
 *
 * Validated first against the CPU backend at 1,000,003 parameters (the
 * vector kernel and a scalar tail of 3; the op is element by element): one
 * step must give the CPU's bits for the master weights and both moments, the
 * bf16 parameters must be the round-to-nearest-even of the master, and the
 * sum of squares within 1e-6 relative of a long double host sum.
 *
 * Usage: build/dev/cuda/bench_adamw (make dev; scripts/test_gpu.sh part kernels). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev_util.h"

#include "train/optimizer.h"

/* master, m, v, grads (F32) and the ACT parameters over n elements */
typedef struct State {
    DfBuffer master, m, v, grads, params;
} State;

static State state_new(DfBackend *be, size_t n) {
    return (State){dev_alloc(be, n, DF_BUF_F32), dev_alloc(be, n, DF_BUF_F32), dev_alloc(be, n, DF_BUF_F32),
                   dev_alloc(be, n, DF_BUF_F32), dev_alloc(be, n, DF_BUF_ACT)};
}

static void state_free(DfBackend *be, State *s) {
    DfBuffer *bufs[5] = {&s->master, &s->m, &s->v, &s->grads, &s->params};
    for (int i = 0; i < 5; i++) df_buffer_free(be, bufs[i]);
}

static DfAdamWArgs args_of(const State *s, float coef, DfAdamWScalars sc) {
    return (DfAdamWArgs){.master = s->master, .exp_avg = s->m, .exp_avg_sq = s->v, .grads = s->grads,
                         .params = s->params, .clip_coef = coef, .s = sc};
}

/* Fills a device buffer with a pattern from a host chunk (no 4 GiB host arrays). */
static void fill(DfBackend *be, DfBuffer b, const float *chunk, size_t chunk_n) {
    DfError err = {{0}};
    for (size_t off = 0; off < b.count; off += chunk_n) {
        size_t n = b.count - off < chunk_n ? b.count - off : chunk_n;
        if (be->ops->upload_f32(be, df_buffer_view(b, off, n), chunk, &err)) dev_die("%s", err.msg);
    }
}

/* The same inputs on one backend: master and params from x, moments from
 * |x| * 1e-3, the gradients from x again. */
static State state_filled(DfBackend *be, size_t n, const float *x, size_t chunk_n, float *scratch) {
    State s = state_new(be, n);
    fill(be, s.master, x, chunk_n), fill(be, s.params, x, chunk_n), fill(be, s.grads, x, chunk_n);
    for (size_t i = 0; i < chunk_n; i++) scratch[i] = fabsf(x[i]) * 1e-3f;
    fill(be, s.m, scratch, chunk_n), fill(be, s.v, scratch, chunk_n);
    return s;
}

static void validate(DevBackends *be, const DfAdamWScalars *sc) {
    const size_t n = 1000003;
    float *x = dev_random(n, 77, 0.5f), *scratch = malloc(n * sizeof *scratch);
    if (!scratch) dev_die("out of host memory");
    State c = state_filled(be->cpu, n, x, n, scratch), g = state_filled(be->gpu, n, x, n, scratch);
    DfAdamWArgs ac = args_of(&c, 0.5f, *sc), ag = args_of(&g, 0.5f, *sc);
    df_op_adamw_step(be->cpu, &ac);
    df_op_adamw_step(be->gpu, &ag);
    const char *names[3] = {"adamw_step master", "adamw_step exp_avg", "adamw_step exp_avg_sq"};
    DfBuffer cb[3] = {c.master, c.m, c.v}, gb[3] = {g.master, g.m, g.v};
    for (int i = 0; i < 3; i++) {
        float *a = dev_download(be->gpu, gb[i]), *b = dev_download(be->cpu, cb[i]);
        dev_validate_exact(names[i], a, b, n);
        free(a), free(b);
    }
    /* the parameters: the device's own rounding of the master (an upload into an ACT buffer: bf16 on the GPU) */
    float *p = dev_download(be->gpu, g.params), *m = dev_download(be->gpu, g.master);
    DfBuffer rounded = dev_upload(be->gpu, m, n, DF_BUF_ACT);
    float *want_p = dev_download(be->gpu, rounded);
    dev_validate_exact("adamw_step params (the rounding of the master)", p, want_p, n);
    df_buffer_free(be->gpu, &rounded);
    free(want_p);
    double ss;
    DfError err;
    if (df_op_sum_squares(be->gpu, g.grads, &ss, &err)) dev_die("%s", err.msg);
    long double ref = 0;
    for (size_t i = 0; i < n; i++) ref += (long double)x[i] * x[i];
    if (!(fabsl((long double)ss - ref) <= 1e-6L * ref)) dev_die("    sum_squares: GPU %.17g, host %.17Lg", ss, ref);
    printf("    validated sum_squares: relative error %.3Lg against a long double host sum (tolerance 1e-06)\n",
           fabsl((long double)ss - ref) / ref);
    state_free(be->cpu, &c), state_free(be->gpu, &g);
    free(p), free(m), free(x), free(scratch);
}

int main(void) {
    DevBackends be = dev_open("bench_adamw");
    DfBackend *gpu = be.gpu;
    DfAdamWConfig cfg = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    DfAdamWScalars sc = df_adamw_scalars(&cfg, 1, 6e-4);
    validate(&be, &sc);
    const size_t n = 1050000000, chunk_n = (size_t)1 << 24;
    float *chunk = dev_random(chunk_n, 77, 0.5f), *scratch = malloc(chunk_n * sizeof *scratch);
    if (!scratch) dev_die("out of host memory");
    State d = state_filled(gpu, n, chunk, chunk_n, scratch);
    DfAdamWArgs a = args_of(&d, 0.5f, sc);
    for (int i = 0; i < 3; i++) df_op_adamw_step(gpu, &a); /* warm-up */
    DfError err = {{0}};
    DfTimer *t = gpu->ops->timer_create(gpu, &err);
    if (!t) dev_die("%s", err.msg);
    const int reps = 10;
    gpu->ops->timer_start(gpu, t);
    for (int i = 0; i < reps; i++) df_op_adamw_step(gpu, &a);
    double ms = gpu->ops->timer_stop(gpu, t) / reps, ss = 0;
    gpu->ops->timer_start(gpu, t);
    if (df_op_sum_squares(gpu, d.grads, &ss, &err)) dev_die("%s", err.msg);
    double ss_ms = gpu->ops->timer_stop(gpu, t);
    gpu->ops->timer_destroy(gpu, t);
    dev_sync(gpu);
    /* read master, m, v, g; write master, m, v (fp32) and the bf16 params */
    double bytes = (double)n * (4 * 4 + 3 * 4 + 2);
    char desc[256];
    df_backend_describe(gpu, desc, sizeof desc);
    printf("adamw_step, %zu parameters on %s: %.3f ms, %.0f GB/s (%.0f%% of ~4300 GB/s copy bandwidth)\n", n, desc, ms,
           bytes / ms / 1e6, 100 * bytes / ms / 1e6 / 4300);
    printf("sum_squares over the %zu gradients (one call, sync and copy-back included): %.3f ms, %.0f GB/s\n", n, ss_ms,
           (double)n * 4 / ss_ms / 1e6);
    state_free(gpu, &d);
    free(chunk), free(scratch);
    dev_close(&be);
    return 0;
}
