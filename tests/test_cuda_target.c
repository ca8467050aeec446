/* The CUDA backend as a whole target: backend selection (runs everywhere),
 * the coder-tiny forward on the GPU against the CPU forward and against
 * transformers' fp32 fixture, `dflash forward --device cuda` against the CPU
 * command, and random-weight targets (a function of the seed, on the GPU the
 * same model). The ops one by one against the CPU are test_backend_ops'
 * cases. GPU tests skip when no GPU is present (or CUDA was not built in). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend/backend.h"
#include "backend/select.h"
#include "formats/safetensors.h"
#include "target/target.h"
#include "target/target_random.h"
#ifdef DF_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

/* the CPU and CUDA backends (test_util.h); gpu NULL without a GPU */
typedef DfTestBackendPair Fixture;

static DfBackend *gpu_or_skip(void **state) {
    Fixture *f = *state;
    if (!f->gpu) skip();
    return f->gpu;
}

/* --- backend selection (runs everywhere) --------------------------------- */

static void test_select_backends(void **state) {
    (void)state;
    DfError err;
    DfBackend *be = df_backend_create(NULL, &err);
    assert_non_null(be);
    assert_string_equal(be->ops->name, "cpu");
    df_backend_destroy(be);
    be = df_backend_create("cpu", &err);
    assert_non_null(be);
    df_backend_destroy(be);
    assert_null(df_backend_create("tpu", &err));
    assert_non_null(strstr(err.msg, "unknown device"));
    assert_null(df_backend_create("cuda:x", &err));
    assert_non_null(strstr(err.msg, "cuda:N"));
    assert_null(df_backend_create("cuda:999", &err)); /* no machine has 1000 GPUs */
#ifndef DF_HAVE_CUDA
    assert_non_null(strstr(err.msg, "without CUDA"));
#else
    if (df_cuda_device_count() == 0) assert_non_null(strstr(err.msg, "no CUDA GPU"));
    else assert_non_null(strstr(err.msg, "GPU 999"));
#endif
    assert_true(df_device_is_cuda("cuda") && df_device_is_cuda("cuda:1"));
    assert_false(df_device_is_cuda("cudax") || df_device_is_cuda("cpu") || df_device_is_cuda(NULL));
}

/* --- the target forward ------------------------------------------------------ */

typedef struct ForwardOut {
    float *features, *logits;
} ForwardOut;

static ForwardOut run_target(DfBackend *be, const int32_t *ids, const int32_t *starts, int n_seqs, const int *taps,
                             int n_taps) {
    DfTargetModel m;
    DfError err;
    DfModelConfig cfg;
    if (df_model_config_load(&cfg, df_test_path("assets/coder-tiny"), &err) ||
        df_target_load(&m, be, df_test_path("assets/coder-tiny"), cfg.num_layers, 1, &err))
        fail_msg("%s", err.msg);
    size_t t = (size_t)starts[n_seqs];
    ForwardOut o = {malloc(t * n_taps * cfg.hidden_size * sizeof(float)), malloc(t * cfg.vocab_size * sizeof(float))};
    for (size_t i = 0; i < t * cfg.vocab_size; i++) o.logits[i] = NAN;
    if (df_target_forward(&m, ids, starts, n_seqs, taps, n_taps, o.features, o.logits, &err)) fail_msg("%s", err.msg);
    df_target_free(&m);
    return o;
}

/* coder-tiny on the GPU: taps and logits against the CPU forward (fp32) and
 * against transformers' fp32 outputs (fixture); bf16 activations through 8
 * layers stay within a few percent of the largest value. */
static void test_target_forward_coder_tiny(void **state) {
    DfBackend *gpu = gpu_or_skip(state);
    Fixture *f = *state;
    DfError err;
    DfSafetensors st;
    if (df_safetensors_open(&st, df_test_path("tests/fixtures/target/coder-tiny.safetensors"), &err)) fail_msg("%s", err.msg);
    const DfTensorInfo *ti = df_safetensors_find(&st, "input_ids"), *ts = df_safetensors_find(&st, "seq_starts");
    assert_non_null(ti);
    assert_non_null(ts);
    int t = (int)ti->shape[0], n_seqs = (int)ts->shape[0] - 1;
    int32_t *ids = malloc(ti->nbytes), *starts = malloc(ts->nbytes);
    memcpy(ids, ti->data, ti->nbytes);
    memcpy(starts, ts->data, ts->nbytes);
    DfModelConfig cfg;
    if (df_model_config_load(&cfg, df_test_path("assets/coder-tiny"), &err)) fail_msg("%s", err.msg);
    int64_t lo_shape[3] = {cfg.num_layers, t, cfg.hidden_size}, lg_shape[2] = {t, cfg.vocab_size};
    float *ref_layers = df_safetensors_load_f32(&st, "layer_out", 3, lo_shape, &err);
    float *ref_logits = df_safetensors_load_f32(&st, "logits", 2, lg_shape, &err);
    if (!ref_layers || !ref_logits) fail_msg("%s", err.msg);
    df_safetensors_close(&st);

    const int taps[3] = {1, 4, 7};
    ForwardOut g = run_target(gpu, ids, starts, n_seqs, taps, 3), c = run_target(f->cpu, ids, starts, n_seqs, taps, 3);
    size_t h = (size_t)cfg.hidden_size;
    float *tap_g = malloc((size_t)t * h * sizeof *tap_g), *tap_c = malloc((size_t)t * h * sizeof *tap_c);
    for (int j = 0; j < 3; j++) {
        for (int r = 0; r < t; r++) {
            memcpy(tap_g + r * h, g.features + ((size_t)r * 3 + j) * h, h * sizeof(float));
            memcpy(tap_c + r * h, c.features + ((size_t)r * 3 + j) * h, h * sizeof(float));
        }
        double e_cpu = df_rel_error(tap_g, tap_c, (size_t)t * h);
        double e_ref = df_rel_error(tap_g, ref_layers + (size_t)taps[j] * t * h, (size_t)t * h);
        printf("  tap layer %d: relative error %.3g vs CPU, %.3g vs transformers\n", taps[j], e_cpu, e_ref);
        if (!(e_cpu < 3e-2 && e_ref < 3e-2)) fail_msg("tap layer %d: %g vs CPU, %g vs transformers", taps[j], e_cpu, e_ref);
    }
    size_t nl = (size_t)t * cfg.vocab_size;
    double e_cpu = df_rel_error(g.logits, c.logits, nl), e_ref = df_rel_error(g.logits, ref_logits, nl);
    printf("  logits: relative error %.3g vs CPU, %.3g vs transformers\n", e_cpu, e_ref);
    if (!(e_cpu < 3e-2 && e_ref < 3e-2)) fail_msg("logits: %g vs CPU, %g vs transformers", e_cpu, e_ref);
    free(tap_g), free(tap_c), free(g.features), free(g.logits), free(c.features), free(c.logits);
    free(ids), free(starts), free(ref_layers), free(ref_logits);
}

/* dflash forward --device cuda end to end: features and logits match the
 * CPU command's output within bf16 noise; without a GPU the command fails
 * with a message that says so. */
static float *command_output(const char *device, const char *in_path, const char *out_path, const char *name,
                             int64_t rows, int64_t cols) {
    char cmd[2048], log[4096];
    snprintf(cmd, sizeof cmd, "%s forward --target %s --input %s --output %s --logits --device %s",
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), in_path, out_path, device);
    if (df_test_run(cmd, log, sizeof log) != 0) fail_msg("dflash forward --device %s failed: %s", device, log);
    DfSafetensors st;
    DfError err;
    if (df_safetensors_open(&st, out_path, &err)) fail_msg("%s", err.msg);
    int64_t shape[2] = {rows, cols};
    float *x = df_safetensors_load_f32(&st, name, 2, shape, &err);
    if (!x) fail_msg("%s", err.msg);
    df_safetensors_close(&st);
    return x;
}

static void test_forward_command_on_cuda(void **state) {
    Fixture *f = *state;
    char *dir = df_test_tmpdir("cuda_forward");
    char in_path[512], out_path[512], cmd[2048], log[4096];
    snprintf(in_path, sizeof in_path, "%s/ids.jsonl", dir);
    snprintf(out_path, sizeof out_path, "%s/out.safetensors", dir);
    df_test_write_file(in_path, "{\"ids\": [5, 17, 300, 8000, 42, 42, 7]}\n{\"ids\": [1]}\n{\"ids\": [9, 8, 7, 6]}\n");
    if (!f->gpu) {
        snprintf(cmd, sizeof cmd, "%s forward --target %s --input %s --output %s --device cuda", df_test_path("dflash"),
                 df_test_path("assets/coder-tiny"), in_path, out_path);
        assert_int_not_equal(df_test_run(cmd, log, sizeof log), 0);
        assert_true(strstr(log, "no CUDA GPU") || strstr(log, "without CUDA"));
        assert_false(df_test_file_exists(out_path));
    } else {
        DfModelConfig cfg;
        DfError err;
        if (df_model_config_load(&cfg, df_test_path("assets/coder-tiny"), &err)) fail_msg("%s", err.msg);
        int64_t t = 12;
        const char *names[2] = {"features", "logits"};
        int64_t cols[2] = {3 * (int64_t)cfg.hidden_size, cfg.vocab_size};
        for (int i = 0; i < 2; i++) {
            float *g = command_output("cuda", in_path, out_path, names[i], t, cols[i]);
            float *c = command_output("cpu", in_path, out_path, names[i], t, cols[i]);
            double e = df_rel_error(g, c, (size_t)(t * cols[i]));
            if (!(e < 3e-2)) fail_msg("forward --device cuda %s: relative error %g vs cpu", names[i], e);
            free(g), free(c);
        }
    }
    df_test_rmtree(dir);
    free(dir);
}

/* --- random-weight targets ---------------------------------------------------- */

static DfModelConfig tiny_random_config(void) {
    DfModelConfig c;
    memset(&c, 0, sizeof c);
    c.arch = DF_ARCH_QWEN3;
    c.hidden_size = 128, c.intermediate_size = 320, c.num_layers = 3, c.num_heads = 4, c.num_kv_heads = 2;
    c.head_dim = 64, c.vocab_size = 500, c.max_position_embeddings = 1024, c.rms_norm_eps = 1e-6;
    c.rope.theta = 1e6, c.rope.type = DF_ROPE_DEFAULT, c.has_qk_norm = 1, c.tie_word_embeddings = 0;
    return c;
}

static float *random_target_logits(DfBackend *be, uint64_t seed, const int32_t *ids, const int32_t *starts, int n_seqs) {
    DfModelConfig cfg = tiny_random_config();
    DfTargetModel m;
    DfError err;
    if (df_target_init_random(&m, be, &cfg, seed, 1, &err)) fail_msg("%s", err.msg);
    size_t n = (size_t)starts[n_seqs] * cfg.vocab_size;
    float *logits = malloc(n * sizeof *logits);
    int tap = 0;
    if (df_target_forward(&m, ids, starts, n_seqs, &tap, 1, NULL, logits, &err)) fail_msg("%s", err.msg);
    df_target_free(&m);
    return logits;
}

/* Runs on the CPU everywhere: same seed, same model; another seed, another. */
static void test_random_target_is_a_function_of_the_seed(void **state) {
    Fixture *f = *state;
    const int32_t ids[9] = {1, 5, 7, 499, 0, 3, 3, 3, 250}, starts[3] = {0, 4, 9};
    size_t n = 9 * (size_t)tiny_random_config().vocab_size;
    float *a = random_target_logits(f->cpu, 7, ids, starts, 2), *b = random_target_logits(f->cpu, 7, ids, starts, 2);
    float *c = random_target_logits(f->cpu, 8, ids, starts, 2);
    assert_true(df_rel_error(a, b, n) == 0.0);
    assert_true(df_rel_error(a, c, n) > 0.1);
    double mx = 0;
    for (size_t i = 0; i < n; i++) mx = fabs(a[i]) > mx ? fabs(a[i]) : mx;
    assert_true(mx > 0.1 && mx < 1e4); /* nonzero, not blown up */
    if (f->gpu) { /* and the same model on the GPU */
        float *g = random_target_logits(f->gpu, 7, ids, starts, 2);
        double e = df_rel_error(g, a, n);
        if (!(e < 3e-2)) fail_msg("random target on the GPU: relative error %g vs CPU", e);
        free(g);
    }
    free(a), free(b), free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_select_backends),
        cmocka_unit_test(test_target_forward_coder_tiny),
        cmocka_unit_test(test_forward_command_on_cuda),
        cmocka_unit_test(test_random_target_is_a_function_of_the_seed),
    };
    return cmocka_run_group_tests(tests, df_test_backend_pair_setup, df_test_backend_pair_teardown);
}
