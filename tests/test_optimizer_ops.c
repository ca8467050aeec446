/* The backend optimizer ops on the CPU (sum_squares, adamw_step) against the
 * host optimizer of train/optimizer.c, which stays the reference: the same
 * bits for the moments, the master weights and the ACT parameter copy, with
 * clipping active and not, weight decay on and off, and both branches of
 * torch's lerp (beta1 0.9 and 0.4); the sum of squares against a long double
 * sum and against df_test_grad_norm. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "adamw_ref.h"
#include "test_util.h"

#include "backend/backend.h"
#include "train/optimizer.h"

#define MAX_NORM 1.0f

static void assert_buffer_equals(DfBackend *be, DfBuffer b, const float *want, size_t n, const char *what) {
    float *got = df_test_download(be, b);
    if (memcmp(got, want, n * sizeof *got) != 0) {
        size_t i = 0;
        while (i < n && memcmp(got + i, want + i, sizeof *got) == 0) i++;
        fail_msg("%s differs at element %zu: %.9g, host optimizer %.9g", what, i, (double)got[i], (double)want[i]);
    }
    free(got);
}

/* Steps of the host optimizer (clip_grad_norm_ over `sizes` tensors, then
 * AdamW) and of the ops over the same values laid flat; every step must give
 * the same bits. The op path's norm comes from the sum_squares op (the same
 * bits as the host's for one tensor, within 1e-6 for several: the host sums
 * tensor by tensor); the coefficient given to the op is df_clip_coef of the
 * host's norm, so that the update itself is compared bit for bit. */
static void check_against_host(const size_t *sizes, int n_tensors, double beta1, double wd, float grad_scale) {
    DfError err = {{0}};
    DfBackend *be = df_backend_cpu_create(&err);
    size_t n = 0;
    for (int i = 0; i < n_tensors; i++) n += sizes[i];
    DfAdamWConfig cfg = {.beta1 = beta1, .beta2 = 0.999, .eps = 1e-8, .weight_decay = wd};
    DfAdamW host;
    assert_int_equal(df_adamw_init(&host, &cfg, sizes, n_tensors, &err), 0);
    float *params = df_test_random_array(n, 11, 0.5f);
    DfTestAdamWState s = df_test_adamw_state_new(be, params, n);
    float **p_ptr = malloc(sizeof *p_ptr * n_tensors), **g_ptr = malloc(sizeof *g_ptr * n_tensors);
    float *grads = malloc(n * sizeof *grads);
    for (int i = 0, off = 0; i < n_tensors; off += (int)sizes[i], i++) p_ptr[i] = params + off, g_ptr[i] = grads + off;
    const double lrs[3] = {1e-3, 6e-4, 2.5e-4};
    for (int step = 0; step < 3; step++) {
        df_test_fill_random(grads, n, 100 + step, grad_scale);
        assert_int_equal(s.grads.ptr != NULL, 1);
        assert_int_equal(be->ops->upload_f32(be, s.grads, grads, &err), 0);
        /* host: clip_grad_norm_ (per-tensor sums) then AdamW */
        float host_norm = df_test_clip_grad_norm(g_ptr, sizes, n_tensors, MAX_NORM);
        df_test_adamw_step(&host, p_ptr, (const float *const *)g_ptr, lrs[step]);
        /* ops */
        double ss;
        assert_int_equal(df_op_sum_squares(be, s.grads, &ss, &err), 0);
        float norm = (float)sqrt(ss);
        assert_true(fabs((double)norm - host_norm) <= 1e-6 * host_norm);
        if (n_tensors == 1) assert_true(norm == host_norm); /* the same chunked sum */
        float coef = df_clip_coef(host_norm, MAX_NORM);
        if (grad_scale > 0.1f) assert_true(coef < 1.0f); /* clipping is exercised */
        DfAdamWArgs a = {.master = s.master, .exp_avg = s.m, .exp_avg_sq = s.v, .grads = s.grads, .params = s.params,
                         .clip_coef = coef, .s = df_adamw_scalars(&cfg, step + 1, lrs[step])};
        df_op_adamw_step(be, &a);
        assert_int_equal(be->ops->sync(be, &err), 0);
        assert_buffer_equals(be, s.master, params, n, "master");
        assert_buffer_equals(be, s.params, params, n, "ACT params");
        assert_buffer_equals(be, s.m, host.exp_avg, n, "exp_avg");
        assert_buffer_equals(be, s.v, host.exp_avg_sq, n, "exp_avg_sq");
    }
    df_test_adamw_state_free(be, &s);
    free(p_ptr), free(g_ptr), free(grads), free(params);
    df_adamw_free(&host);
    df_backend_destroy(be);
}

static void test_adamw_op_one_tensor_clipped(void **state) {
    (void)state;
    size_t sizes[] = {100003}; /* the parallel path, odd length */
    check_against_host(sizes, 1, 0.9, 0.01, 0.5f);
}

static void test_adamw_op_many_tensors(void **state) {
    (void)state;
    size_t sizes[] = {7, 40000, 1, 1000, 65536};
    check_against_host(sizes, 5, 0.9, 0.0, 0.5f);   /* no weight decay */
    check_against_host(sizes, 5, 0.4, 0.1, 0.5f);   /* lerp weight 0.6: torch's other branch */
    check_against_host(sizes, 5, 0.9, 0.01, 1e-5f); /* norm below 1: coefficient 1, no clipping */
}

static void test_sum_squares_op(void **state) {
    (void)state;
    DfError err = {{0}};
    DfBackend *be = df_backend_cpu_create(&err);
    const size_t ns[] = {0, 1, 1000, 1000003};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        size_t n = ns[k];
        float *x = df_test_random_array(n ? n : 1, 5 + k, 3.0f);
        DfBuffer b = df_test_upload(be, x, n, DF_BUF_F32);
        double got, again;
        assert_int_equal(df_op_sum_squares(be, b, &got, &err), 0);
        assert_int_equal(df_op_sum_squares(be, b, &again, &err), 0);
        assert_memory_equal(&got, &again, sizeof got);
        long double ref = 0;
        for (size_t i = 0; i < n; i++) ref += (long double)x[i] * x[i];
        assert_true(fabsl((long double)got - ref) <= 1e-12L * ref);
        const float *one[] = {x};
        if (n) assert_true((float)sqrt(got) == df_test_grad_norm(one, &n, 1));
        df_buffer_free(be, &b);
        free(x);
    }
    df_backend_destroy(be);
}

static void test_clip_coef(void **state) {
    (void)state;
    assert_true(df_clip_coef(0.5f, 1.0f) == 1.0f);
    assert_true(df_clip_coef(NAN, 1.0f) == 1.0f);
    float norm = 4.0f, want = (1.0f / (norm + 1e-6f)) * 1.0f;
    assert_true(df_clip_coef(norm, 1.0f) == want);
    assert_true(df_clip_coef(INFINITY, 1.0f) == 0.0f);
}

/* Every training op is on the CPU; the optimizer ops are part of the list. */
static void test_cpu_has_training_ops(void **state) {
    (void)state;
    DfError err = {{0}};
    DfBackend *be = df_backend_cpu_create(&err);
    assert_null(df_backend_missing_op(be));
    DfBackendOps ops = *be->ops;
    ops.adamw_step = NULL;
    DfBackend fake = {.ops = &ops, .impl = NULL};
    assert_string_equal(df_backend_missing_op(&fake), "adamw_step");
    ops.sum_squares = NULL;
    assert_string_equal(df_backend_missing_op(&fake), "sum_squares");
    df_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw_op_one_tensor_clipped),
        cmocka_unit_test(test_adamw_op_many_tensors),
        cmocka_unit_test(test_sum_squares_op),
        cmocka_unit_test(test_clip_coef),
        cmocka_unit_test(test_cpu_has_training_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
