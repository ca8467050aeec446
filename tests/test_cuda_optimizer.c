/* The CUDA optimizer ops against the CPU ones: adamw_step must give the same
 * bits (master weights and both moments) over several steps on random
 * inputs, with weight decay, clipping and both lerp branches, through the
 * vector kernel and (on misaligned views) the scalar one; the bf16 parameter
 * copy must be the round-to-nearest-even of the fp32 master; sum_squares
 * within 1e-6 relative of a long double host sum, the same bits on every
 * call. Skips without a GPU.
 *
 * DFLASH_BENCH_ADAMW=1 also times adamw_step at 1.05e9 parameters (CUDA
 * events, after warm-up) and prints its bandwidth (about 19.6 GiB of device
 * memory). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend/backend.h"
#include "base/numeric.h"
#include "train/optimizer.h"
#ifdef DF_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

/* the CPU and CUDA backends (test_util.h); gpu NULL without a GPU */
typedef DfTestBackendPair Fixture;

/* The state of one backend: n + 1 elements, used from `offset` on. */
typedef DfTestAdamWState State;

static DfAdamWArgs args_of(const State *s, size_t offset, float coef, DfAdamWScalars sc) {
    size_t n = s->master.count - offset;
    DfAdamWArgs a = {.master = df_buffer_view(s->master, offset, n), .exp_avg = df_buffer_view(s->m, offset, n),
                     .exp_avg_sq = df_buffer_view(s->v, offset, n), .grads = df_buffer_view(s->grads, offset, n),
                     .params = df_buffer_view(s->params, offset, n), .clip_coef = coef, .s = sc};
    return a;
}

static void assert_same_bits(DfBackend *gpu, DfBuffer gb, DfBackend *cpu, DfBuffer cb, const char *what, int step) {
    float *g = df_test_download(gpu, gb), *c = df_test_download(cpu, cb);
    size_t n = gb.count, bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(g + i, c + i, sizeof *g) != 0 && bad++ == 0) first = i;
    if (bad)
        fail_msg("step %d: %s: %zu of %zu elements differ; first at %zu: GPU %.9g, CPU %.9g", step, what, bad, n, first,
                 (double)g[first], (double)c[first]);
    free(g), free(c);
}

/* The GPU's bf16 params must be the rounding of the (CPU-equal) master. */
static void assert_params_are_rounded_master(DfBackend *gpu, const State *s) {
    float *p = df_test_download(gpu, s->params), *m = df_test_download(gpu, s->master);
    for (size_t i = 0; i < s->master.count; i++) {
        float want = df_bf16_to_f32(df_f32_to_bf16(m[i]));
        if (memcmp(&p[i], &want, sizeof want) != 0)
            fail_msg("param %zu is %.9g, the bf16 rounding of the master %.9g is %.9g", i, (double)p[i], (double)m[i],
                     (double)want);
    }
    free(p), free(m);
}

static void run_steps(Fixture *f, size_t n, size_t offset, double beta1, double wd) {
    DfError err = {{0}};
    float *init = df_test_random_array(n, 3, 0.5f), *g = malloc(n * sizeof *g);
    State c = df_test_adamw_state_new(f->cpu, init, n), d = df_test_adamw_state_new(f->gpu, init, n);
    DfAdamWConfig cfg = {.beta1 = beta1, .beta2 = 0.999, .eps = 1e-8, .weight_decay = wd};
    const double lrs[3] = {6e-4, 3e-4, 1e-3};
    const float coefs[3] = {0.37f, 1.0f, 0.9f};
    for (int step = 0; step < 3; step++) {
        /* gradients of mixed magnitude, some tiny: exercises the division and sqrt rounding */
        df_test_fill_random(g, n, 50 + step, 1.0f);
        for (size_t i = 0; i < n; i += 7) g[i] *= 1e-6f;
        assert_int_equal(f->cpu->ops->upload_f32(f->cpu, c.grads, g, &err), 0);
        assert_int_equal(f->gpu->ops->upload_f32(f->gpu, d.grads, g, &err), 0);
        DfAdamWScalars sc = df_adamw_scalars(&cfg, step + 1, lrs[step]);
        DfAdamWArgs ac = args_of(&c, offset, coefs[step], sc), ad = args_of(&d, offset, coefs[step], sc);
        df_op_adamw_step(f->cpu, &ac);
        df_op_adamw_step(f->gpu, &ad);
        assert_int_equal(f->gpu->ops->sync(f->gpu, &err), 0);
        assert_same_bits(f->gpu, d.master, f->cpu, c.master, "master", step + 1);
        assert_same_bits(f->gpu, d.m, f->cpu, c.m, "exp_avg", step + 1);
        assert_same_bits(f->gpu, d.v, f->cpu, c.v, "exp_avg_sq", step + 1);
        assert_params_are_rounded_master(f->gpu, &d);
    }
    df_test_adamw_state_free(f->cpu, &c);
    df_test_adamw_state_free(f->gpu, &d);
    free(init), free(g);
}

static void test_adamw_bit_identical(void **state) {
    Fixture *f = *state;
    if (!f->gpu) skip();
    run_steps(f, 1000003, 0, 0.9, 0.01); /* the vector kernel and a scalar tail of 3 */
    run_steps(f, 4099, 0, 0.4, 0.1);     /* torch's other lerp branch (weight 0.6) */
    run_steps(f, 4099, 1, 0.9, 0.0);     /* misaligned views: the scalar kernel; no weight decay */
}

static void test_sum_squares(void **state) {
    Fixture *f = *state;
    if (!f->gpu) skip();
    DfError err = {{0}};
    const size_t ns[] = {1, 1000, 1000003};
    for (size_t k = 0; k < 3; k++) {
        size_t n = ns[k];
        float *x = df_test_random_array(n, 9 + k, 2.0f);
        DfBuffer b = df_test_upload(f->gpu, x, n, DF_BUF_F32);
        for (size_t off = 0; off < 2 && off < n; off++) { /* aligned, then a misaligned view */
            DfBuffer v = df_buffer_view(b, off, n - off);
            double got, again;
            assert_int_equal(df_op_sum_squares(f->gpu, v, &got, &err), 0);
            assert_int_equal(df_op_sum_squares(f->gpu, v, &again, &err), 0);
            assert_memory_equal(&got, &again, sizeof got);
            long double ref = 0;
            for (size_t i = off; i < n; i++) ref += (long double)x[i] * x[i];
            if (ref > 0 && fabsl((long double)got - ref) > 1e-6L * ref)
                fail_msg("n %zu offset %zu: GPU %.17g, host %.17Lg", n, off, got, ref);
        }
        df_buffer_free(f->gpu, &b);
        free(x);
    }
    double zero = -1;
    assert_int_equal(df_op_sum_squares(f->gpu, (DfBuffer){.kind = DF_BUF_F32, .elem_size = 4}, &zero, &err), 0);
    assert_true(zero == 0.0);
}

#ifdef DF_HAVE_CUDA
/* Fills a device buffer with a pattern from a host chunk (no 4 GiB host arrays). */
static void fill(DfBackend *be, DfBuffer b, const float *chunk, size_t chunk_n) {
    DfError err = {{0}};
    for (size_t off = 0; off < b.count; off += chunk_n) {
        size_t n = b.count - off < chunk_n ? b.count - off : chunk_n;
        assert_int_equal(be->ops->upload_f32(be, df_buffer_view(b, off, n), chunk, &err), 0);
    }
}

static void test_adamw_bandwidth(void **state) {
    Fixture *f = *state;
    if (!f->gpu || !getenv("DFLASH_BENCH_ADAMW")) skip();
    const size_t n = 1050000000, chunk_n = (size_t)1 << 24;
    DfError err = {{0}};
    float *chunk = df_test_random_array(chunk_n, 77, 0.5f);
    State d;
    assert_int_equal(df_buffer_alloc(f->gpu, &d.master, DF_BUF_F32, n, &err), 0);
    assert_int_equal(df_buffer_alloc(f->gpu, &d.m, DF_BUF_F32, n, &err), 0);
    assert_int_equal(df_buffer_alloc(f->gpu, &d.v, DF_BUF_F32, n, &err), 0);
    assert_int_equal(df_buffer_alloc(f->gpu, &d.grads, DF_BUF_F32, n, &err), 0);
    assert_int_equal(df_buffer_alloc(f->gpu, &d.params, DF_BUF_ACT, n, &err), 0);
    fill(f->gpu, d.master, chunk, chunk_n);
    fill(f->gpu, d.grads, chunk, chunk_n);
    for (size_t i = 0; i < chunk_n; i++) chunk[i] = fabsf(chunk[i]) * 1e-3f;
    fill(f->gpu, d.m, chunk, chunk_n);
    fill(f->gpu, d.v, chunk, chunk_n);
    DfAdamWConfig cfg = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    DfAdamWArgs a = args_of(&d, 0, 0.5f, df_adamw_scalars(&cfg, 1, 6e-4));
    for (int i = 0; i < 3; i++) df_op_adamw_step(f->gpu, &a); /* warm-up */
    double ss = 0;
    DfTimer *t = f->gpu->ops->timer_create(f->gpu, NULL);
    const int reps = 10;
    f->gpu->ops->timer_start(f->gpu, t);
    for (int i = 0; i < reps; i++) df_op_adamw_step(f->gpu, &a);
    double ms = f->gpu->ops->timer_stop(f->gpu, t) / reps;
    f->gpu->ops->timer_start(f->gpu, t);
    assert_int_equal(df_op_sum_squares(f->gpu, d.grads, &ss, &err), 0);
    double ss_ms = f->gpu->ops->timer_stop(f->gpu, t);
    f->gpu->ops->timer_destroy(f->gpu, t);
    assert_int_equal(f->gpu->ops->sync(f->gpu, &err), 0);
    /* read master, m, v, g; write master, m, v (fp32) and the bf16 params */
    double bytes = (double)n * (4 * 4 + 3 * 4 + 2);
    char desc[256];
    df_backend_describe(f->gpu, desc, sizeof desc);
    printf("adamw_step, %zu parameters on %s: %.3f ms, %.0f GB/s (%.0f%% of ~4300 GB/s copy bandwidth)\n", n, desc, ms,
           bytes / ms / 1e6, 100 * bytes / ms / 1e6 / 4300);
    printf("sum_squares over the %zu gradients (one call, sync and copy-back included): %.3f ms, %.0f GB/s\n", n, ss_ms,
           (double)n * 4 / ss_ms / 1e6);
    df_test_adamw_state_free(f->gpu, &d);
    free(chunk);
}
#else
static void test_adamw_bandwidth(void **state) {
    (void)state;
    skip();
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw_bit_identical),
        cmocka_unit_test(test_sum_squares),
        cmocka_unit_test(test_adamw_bandwidth),
    };
    return cmocka_run_group_tests(tests, df_test_backend_pair_setup, df_test_backend_pair_teardown);
}
