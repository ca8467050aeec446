/* AdamW, gradient clipping and the learning-rate schedule:
 * - three steps of torch.optim.AdamW with clip_grad_norm_(1.0)
 *   (tests/fixtures/drafter/adamw.safetensors, made by tests/ref/drafter_ref.py):
 *   pre-clip norms to 1e-6 relative, parameters to 1e-5 relative;
 * - the textbook AdamW formula evaluated here in double (both lerp branches,
 *   with and without weight decay);
 * - clipping leaves small gradients alone and scales large ones to max_norm;
 * - the norm and the update do not depend on the number of OpenMP threads;
 * - optimizer state saved to a safetensors file and restored continues with
 *   bit-identical updates; bad states and configurations are refused;
 * - the schedule at chosen steps against its formula. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "train/optimizer.h"
#include "train/schedule.h"
#include "adamw_ref.h"
#include "test_util.h"

static float *load(const DfSafetensors *st, const char *name, int ndim, const int64_t *shape) {
    DfError err;
    float *x = df_safetensors_load_f32(st, name, ndim, shape, &err);
    if (!x) fail_msg("%s", err.msg);
    return x;
}

static double rel_diff(double a, double b) {
    return fabs(a - b) / fabs(b);
}

static void test_torch_adamw_fixture(void **state) {
    (void)state;
    DfSafetensors st;
    DfError err;
    if (df_safetensors_open(&st, df_test_path("tests/fixtures/drafter/adamw.safetensors"), &err))
        fail_msg("%s", err.msg);
    const int64_t shape_a[2] = {37, 19}, shape_b[1] = {23}, shape_1[1] = {1};
    size_t sizes[2] = {37 * 19, 23};
    float *params[2] = {load(&st, "p0.a", 2, shape_a), load(&st, "p0.b", 1, shape_b)};
    DfAdamWConfig cfg = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
    DfAdamW opt;
    assert_int_equal(df_adamw_init(&opt, &cfg, sizes, 2, &err), 0);
    for (int s = 0; s < 3; s++) {
        char name[32];
        snprintf(name, sizeof name, "g%d.a", s);
        float *ga = load(&st, name, 2, shape_a);
        snprintf(name, sizeof name, "g%d.b", s);
        float *gb = load(&st, name, 1, shape_b);
        snprintf(name, sizeof name, "norm%d", s);
        float *ref_norm = load(&st, name, 1, shape_1);
        float *grads[2] = {ga, gb};
        float norm = df_test_clip_grad_norm(grads, sizes, 2, 1.0f);
        assert_true(rel_diff(norm, ref_norm[0]) <= 1e-6);
        assert_true(norm > 1.0f); /* the fixture does clip */
        df_test_adamw_step(&opt, params, (const float *const *)grads, 1e-2);
        snprintf(name, sizeof name, "p%d.a", s + 1);
        float *ra = load(&st, name, 2, shape_a);
        snprintf(name, sizeof name, "p%d.b", s + 1);
        float *rb = load(&st, name, 1, shape_b);
        double ea = df_rel_error(params[0], ra, sizes[0]), eb = df_rel_error(params[1], rb, sizes[1]);
        print_message("step %d: norm %.7g (torch %.7g), rel error a %.2e b %.2e\n", s, norm, ref_norm[0], ea, eb);
        assert_true(ea <= 1e-5);
        assert_true(eb <= 1e-5);
        free(ga), free(gb), free(ref_norm), free(ra), free(rb);
    }
    assert_int_equal(opt.step, 3);
    df_adamw_free(&opt);
    free(params[0]), free(params[1]);
    df_safetensors_close(&st);
}

/* AdamW as written in Loshchilov & Hutter / the torch docs, in double. */
static void textbook_adamw(double *p, const double *g, double *m, double *v, size_t n, int t, double lr,
                           const DfAdamWConfig *c) {
    for (size_t i = 0; i < n; i++) {
        p[i] -= lr * c->weight_decay * p[i];
        m[i] = c->beta1 * m[i] + (1 - c->beta1) * g[i];
        v[i] = c->beta2 * v[i] + (1 - c->beta2) * g[i] * g[i];
        double mhat = m[i] / (1 - pow(c->beta1, t)), vhat = v[i] / (1 - pow(c->beta2, t));
        p[i] -= lr * mhat / (sqrt(vhat) + c->eps);
    }
}

static void test_textbook_formula(void **state) {
    (void)state;
    enum { N = 1000, STEPS = 6 };
    const DfAdamWConfig configs[] = {
        {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0},  /* the recipe */
        {.beta1 = 0.3, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.05}, /* the other lerp branch */
    };
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
        float *p = malloc(N * sizeof *p), *g = malloc(N * sizeof *g);
        double *pd = malloc(N * sizeof *pd), *gd = malloc(N * sizeof *gd);
        double *md = calloc(N, sizeof *md), *vd = calloc(N, sizeof *vd);
        df_test_fill_random(p, N, 10 + c, 1.0f);
        for (int i = 0; i < N; i++) pd[i] = p[i];
        DfAdamW opt;
        DfError err;
        size_t n = N;
        assert_int_equal(df_adamw_init(&opt, &configs[c], &n, 1, &err), 0);
        for (int t = 1; t <= STEPS; t++) {
            df_test_fill_random(g, N, 100 * c + t, 0.5f * t);
            for (int i = 0; i < N; i++) gd[i] = g[i];
            double lr = 1e-3 * t;
            df_test_adamw_step(&opt, &p, (const float *const *)&g, lr);
            textbook_adamw(pd, gd, md, vd, N, t, lr, &configs[c]);
        }
        float *pf = malloc(N * sizeof *pf);
        for (int i = 0; i < N; i++) pf[i] = (float)pd[i];
        double e = df_rel_error(p, pf, N);
        print_message("config %zu: rel error vs double textbook %.2e\n", c, e);
        assert_true(e <= 1e-5);
        df_adamw_free(&opt);
        free(p), free(g), free(pd), free(gd), free(md), free(vd), free(pf);
    }
}

static void test_clipping(void **state) {
    (void)state;
    float a[3] = {3.0f, 0.0f, 0.0f}, b[1] = {4.0f};
    float *grads[2] = {a, b};
    size_t sizes[2] = {3, 1};
    /* norm 5 below max 10: untouched */
    assert_true(df_test_clip_grad_norm(grads, sizes, 2, 10.0f) == 5.0f);
    assert_true(a[0] == 3.0f && b[0] == 4.0f);
    /* above max 1: scaled by 1 / (5 + 1e-6) */
    assert_true(df_test_clip_grad_norm(grads, sizes, 2, 1.0f) == 5.0f);
    assert_true(fabs(a[0] - 0.6) < 1e-6 && fabs(b[0] - 0.8) < 1e-6);
    assert_true(fabsf(df_test_grad_norm((const float *const *)grads, sizes, 2) - 1.0f) < 1e-6f);
    /* no gradients at all */
    assert_true(df_test_clip_grad_norm(grads, sizes, 0, 1.0f) == 0.0f);
}

static void test_thread_count_independence(void **state) {
    (void)state;
    enum { N = 300001 };
    float *g = malloc(N * sizeof *g), *g2 = malloc(N * sizeof *g2);
    float *p1 = malloc(N * sizeof *p1), *p2 = malloc(N * sizeof *p2);
    df_test_fill_random(g, N, 3, 2.0f);
    df_test_fill_random(p1, N, 4, 1.0f);
    memcpy(p2, p1, N * sizeof *p1);
    memcpy(g2, g, N * sizeof *g);
    size_t n = N;
    int saved = omp_get_max_threads();
    DfAdamWConfig cfg = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    DfAdamW o1, o2;
    DfError err;
    df_adamw_init(&o1, &cfg, &n, 1, &err);
    df_adamw_init(&o2, &cfg, &n, 1, &err);

    omp_set_num_threads(1);
    float n1 = df_test_clip_grad_norm(&g, &n, 1, 1.0f);
    df_test_adamw_step(&o1, &p1, (const float *const *)&g, 1e-3);
    omp_set_num_threads(3);
    float n2 = df_test_clip_grad_norm(&g2, &n, 1, 1.0f);
    df_test_adamw_step(&o2, &p2, (const float *const *)&g2, 1e-3);
    omp_set_num_threads(saved);

    assert_true(memcmp(&n1, &n2, sizeof n1) == 0);
    assert_memory_equal(g, g2, N * sizeof *g);
    assert_memory_equal(p1, p2, N * sizeof *p1);
    /* and the norm is the double-precision norm, rounded */
    double ss = 0;
    float *orig = malloc(N * sizeof *orig);
    df_test_fill_random(orig, N, 3, 2.0f);
    for (int i = 0; i < N; i++) ss += (double)orig[i] * orig[i];
    assert_true(rel_diff(n1, sqrt(ss)) < 1e-7);
    df_adamw_free(&o1), df_adamw_free(&o2);
    free(g), free(g2), free(p1), free(p2), free(orig);
}

/* Two tensors, a few steps; state written to and read back from a
 * safetensors file, as a checkpoint would; the restored optimizer and the
 * original then take the same steps and must agree bit for bit. */
static void test_state_round_trip(void **state) {
    (void)state;
    enum { NA = 5000, NB = 77 };
    size_t sizes[2] = {NA, NB};
    DfAdamWConfig cfg = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0};
    DfAdamW orig, resumed;
    DfError err;
    assert_int_equal(df_adamw_init(&orig, &cfg, sizes, 2, &err), 0);
    float *pa = malloc(NA * sizeof *pa), *pb = malloc(NB * sizeof *pb);
    float *ga = malloc(NA * sizeof *ga), *gb = malloc(NB * sizeof *gb);
    df_test_fill_random(pa, NA, 1, 0.1f);
    df_test_fill_random(pb, NB, 2, 1.0f);
    float *params[2] = {pa, pb}, *grads[2] = {ga, gb};
    for (int s = 0; s < 4; s++) {
        df_test_fill_random(ga, NA, 10 + s, 1.0f);
        df_test_fill_random(gb, NB, 20 + s, 1.0f);
        df_test_adamw_step(&orig, params, (const float *const *)grads, 1e-3);
    }

    char *dir = df_test_tmpdir("adamw");
    char path[512];
    snprintf(path, sizeof path, "%s/state.safetensors", dir);
    double step_as_double = (double)orig.step;
    float *step_f = malloc(sizeof(float));
    step_f[0] = (float)step_as_double;
    DfTensorOut out[5] = {
        {.name = "exp_avg", .dtype = DF_DTYPE_F32, .ndim = 1, .shape = {(int64_t)orig.total}, .data = orig.exp_avg},
        {.name = "exp_avg_sq", .dtype = DF_DTYPE_F32, .ndim = 1, .shape = {(int64_t)orig.total},
         .data = orig.exp_avg_sq},
        {.name = "step", .dtype = DF_DTYPE_F32, .ndim = 1, .shape = {1}, .data = step_f},
        {.name = "pa", .dtype = DF_DTYPE_F32, .ndim = 1, .shape = {NA}, .data = pa},
        {.name = "pb", .dtype = DF_DTYPE_F32, .ndim = 1, .shape = {NB}, .data = pb},
    };
    if (df_safetensors_write(path, out, 5, NULL, &err)) fail_msg("%s", err.msg);
    DfSafetensors st;
    if (df_safetensors_open(&st, path, &err)) fail_msg("%s", err.msg);
    const int64_t shape_t[1] = {(int64_t)orig.total}, shape_1[1] = {1}, shape_a[1] = {NA}, shape_b[1] = {NB};
    float *m = load(&st, "exp_avg", 1, shape_t), *v = load(&st, "exp_avg_sq", 1, shape_t);
    float *step = load(&st, "step", 1, shape_1);
    float *ra = load(&st, "pa", 1, shape_a), *rb = load(&st, "pb", 1, shape_b);
    df_safetensors_close(&st);
    df_test_rmtree(dir);
    free(dir);

    assert_int_equal(df_adamw_init(&resumed, &cfg, sizes, 2, &err), 0);
    assert_int_equal(df_adamw_set_state(&resumed, (int64_t)step[0], m, v, orig.total, &err), 0);
    assert_int_equal(resumed.step, 4);
    float *rparams[2] = {ra, rb};
    for (int s = 4; s < 8; s++) {
        df_test_fill_random(ga, NA, 10 + s, 1.0f);
        df_test_fill_random(gb, NB, 20 + s, 1.0f);
        df_test_adamw_step(&orig, params, (const float *const *)grads, 1e-3 / s);
        df_test_adamw_step(&resumed, rparams, (const float *const *)grads, 1e-3 / s);
        assert_memory_equal(pa, ra, NA * sizeof *pa);
        assert_memory_equal(pb, rb, NB * sizeof *pb);
    }
    assert_memory_equal(orig.exp_avg, resumed.exp_avg, orig.total * sizeof(float));
    assert_memory_equal(orig.exp_avg_sq, resumed.exp_avg_sq, orig.total * sizeof(float));

    /* a state of the wrong size, or a negative step, is refused */
    assert_int_equal(df_adamw_set_state(&resumed, 4, m, v, orig.total - 1, &err), -1);
    assert_non_null(strstr(err.msg, "5076"));
    assert_int_equal(df_adamw_set_state(&resumed, -1, m, v, orig.total, &err), -1);
    df_adamw_free(&orig), df_adamw_free(&resumed);
    free(pa), free(pb), free(ga), free(gb), free(step_f), free(m), free(v), free(step), free(ra), free(rb);
}

static void test_bad_config(void **state) {
    (void)state;
    DfAdamW opt;
    DfError err;
    size_t n = 4;
    DfAdamWConfig bad_beta = {.beta1 = 1.0, .beta2 = 0.999, .eps = 1e-8};
    assert_int_equal(df_adamw_init(&opt, &bad_beta, &n, 1, &err), -1);
    assert_non_null(strstr(err.msg, "betas"));
    DfAdamWConfig bad_eps = {.beta1 = 0.9, .beta2 = 0.999, .eps = -1};
    assert_int_equal(df_adamw_init(&opt, &bad_eps, &n, 1, &err), -1);
    DfAdamWConfig ok = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    assert_int_equal(df_adamw_init(&opt, &ok, &n, 0, &err), -1);
    df_adamw_free(&opt);
}

static void test_schedule(void **state) {
    (void)state;
    const double lr = 6e-4, pi = 3.14159265358979323846;
    DfLrSchedule s = df_lr_schedule(lr, 1000, 0.04);
    assert_int_equal(s.warmup_steps, 40);
    const int64_t steps[] = {0, 1, 19, 39, 40, 41, 500, 520, 777, 999};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        int64_t t = steps[i];
        double want = t < 40 ? lr * (t + 1) / 40.0 : lr * 0.5 * (1 + cos(pi * (t - 40) / 960.0));
        assert_true(fabs(df_lr_at(&s, t) - want) <= 1e-15);
    }
    assert_true(df_lr_at(&s, 39) == lr); /* the end of warmup reaches the peak */
    assert_true(df_lr_at(&s, 40) == lr); /* cosine starts at the peak */
    assert_true(fabs(df_lr_at(&s, 520) - lr / 2) < 1e-15);
    assert_true(df_lr_at(&s, 999) > 0 && df_lr_at(&s, 999) < 1e-8);
    assert_true(df_lr_at(&s, 1000) == 0.0);
    assert_true(df_lr_at(&s, -5) == df_lr_at(&s, 0));
    for (int64_t t = 1; t < 1000; t++) {
        if (t < 40)
            assert_true(df_lr_at(&s, t) > df_lr_at(&s, t - 1));
        else
            assert_true(df_lr_at(&s, t) <= df_lr_at(&s, t - 1));
    }
    /* rounding of the warmup length: half away from zero, at least 1, at most total */
    assert_int_equal(df_lr_schedule(lr, 100, 0.045).warmup_steps, 5);
    assert_int_equal(df_lr_schedule(lr, 100, 0.044).warmup_steps, 4);
    assert_int_equal(df_lr_schedule(lr, 10, 0.0).warmup_steps, 1);
    assert_int_equal(df_lr_schedule(lr, 10, 2.0).warmup_steps, 10);
    DfLrSchedule one = df_lr_schedule(lr, 1, 0.04);
    assert_true(df_lr_at(&one, 0) == lr);
    DfLrSchedule all_warm = df_lr_schedule(lr, 4, 1.0);
    assert_true(df_lr_at(&all_warm, 0) == lr / 4 && df_lr_at(&all_warm, 3) == lr);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_torch_adamw_fixture),
        cmocka_unit_test(test_textbook_formula),
        cmocka_unit_test(test_clipping),
        cmocka_unit_test(test_thread_count_independence),
        cmocka_unit_test(test_state_round_trip),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_schedule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
