/* The benchmarked training step runs with the backend's default kernel
 * variants whatever a benchmark chose before it: the full GPU bench
 * (dflash bench --device cuda) times attention at 16 rows per warp before
 * its training steps, --train-only goes straight to them, and both must
 * report the same step (bench/bench_gpu.c calls df_bench_train_step for
 * both, with the same shapes).
 *
 * On the CPU, which has no variants, a backend wrapping the CPU one gives
 * itself an attention knob: its attention ops record the value they ran
 * with, and its variants query reports it. The step after the knob was
 * set must see and report the default, exactly as a fresh step does. */
#include <stdio.h>
#include <string.h>

#include "test_util.h"

#include "backend/backend.h"
#include "bench/bench_train_step.h"
#include "target/model_config.h"

/* The CPU backend with one knob; be first, so that a DfBackend * is a Knobbed *. */
typedef struct Knobbed {
    DfBackend be;
    DfBackend *cpu;
    DfBackendOps ops;
    int rows;         /* the knob: 0 (default), 16 or 32 */
    int ran_with[2];  /* attention ops run with the knob at 0 / not at 0 */
} Knobbed;

static int knob_set(DfBackend *be, const char *name, int value, DfError *err) {
    Knobbed *k = (Knobbed *)be;
    if (!name) k->rows = 0;
    else if (strcmp(name, "attention_rows_per_warp") == 0) k->rows = value;
    else return df_fail(err, "no variant %s", name);
    return 0;
}

static void knob_variants(DfBackend *be, char *buf, size_t cap) {
    snprintf(buf, cap, "attention_rows_per_warp=%d", ((Knobbed *)be)->rows);
}

static void knob_attention(DfBackend *be, DfBuffer out, DfBuffer lse, DfBuffer q, DfBuffer k, DfBuffer v,
                           const DfPackedBatch *batch, int heads, int kv_heads, int head_dim, float scale) {
    Knobbed *kn = (Knobbed *)be;
    kn->ran_with[kn->rows != 0]++;
    kn->cpu->ops->attention(be, out, lse, q, k, v, batch, heads, kv_heads, head_dim, scale);
}

static void knob_block_attention(DfBackend *be, const DfBlockAttnArgs *a) {
    Knobbed *kn = (Knobbed *)be;
    kn->ran_with[kn->rows != 0]++;
    kn->cpu->ops->block_attention(be, a);
}

static void knobbed_init(Knobbed *k) {
    DfError err = {{0}};
    memset(k, 0, sizeof *k);
    k->cpu = df_backend_cpu_create(&err);
    assert_non_null(k->cpu);
    k->ops = *k->cpu->ops;
    k->ops.set_variant = knob_set;
    k->ops.variants = knob_variants;
    k->ops.attention = knob_attention;
    k->ops.block_attention = knob_block_attention;
    k->be.ops = &k->ops;
    k->be.impl = k->cpu->impl; /* the CPU ops work on the CPU backend's state */
}

/* A coder-tiny-shaped step small enough for two cores (its random batch in host). */
static DfTrainStepShape tiny_shape(DfBenchHostBatch *host) {
    DfRandomStepSize size = {.drafter_layers = 1, .block_size = 4, .num_anchors = 4, .seq_len = 48, .n_seqs = 1};
    DfModelConfig target;
    DfTrainStepShape s;
    DfError err = {{0}};
    if (df_model_config_load(&target, df_test_path("assets/coder-tiny"), &err) ||
        df_train_step_shape_random(&s, host, &target, &size, &err))
        fail_msg("%s", err.msg);
    s.repeat = 1;
    return s;
}

static void test_step_after_a_variant_matches_a_fresh_step(void **state) {
    (void)state;
    Knobbed k;
    knobbed_init(&k);
    DfBenchHostBatch host;
    DfTrainStepShape s = tiny_shape(&host);
    DfTrainStepResult fresh, after;
    DfError err = {{0}};
    /* --train-only: the step first */
    if (df_bench_train_step(&k.be, &s, &fresh, &err)) fail_msg("%s", err.msg);
    assert_true(k.ran_with[0] > 0);
    assert_int_equal(k.ran_with[1], 0);
    /* the full bench: a kernel shape chosen for its attention figures, then the step */
    assert_int_equal(df_backend_set_variant(&k.be, "attention_rows_per_warp", 16, &err), 0);
    k.ran_with[0] = 0;
    if (df_bench_train_step(&k.be, &s, &after, &err)) fail_msg("%s", err.msg);
    assert_int_equal(k.ran_with[1], 0); /* no attention op of the step ran with the leftover setting */
    assert_true(k.ran_with[0] > 0);
    assert_string_equal(fresh.variants, "attention_rows_per_warp=0");
    assert_string_equal(after.variants, fresh.variants);
    assert_true(after.tflop_per_step == fresh.tflop_per_step);
    assert_int_equal(after.target_layers_run, fresh.target_layers_run);
    df_bench_host_batch_free(&host);
    df_backend_destroy(k.cpu);
}

/* bench --kernel-variant: the step runs with the variant asked for (set after
 * the reset to defaults) and reports it; a name the backend does not know
 * fails the bench with an error naming the option and the name. */
static void test_step_with_asked_variants(void **state) {
    (void)state;
    Knobbed k;
    knobbed_init(&k);
    DfKernelVariants asked = {.count = 1, .names = {"attention_rows_per_warp"}, .values = {32}};
    DfBenchHostBatch host;
    DfTrainStepShape s = tiny_shape(&host);
    s.variants = &asked;
    DfTrainStepResult r;
    DfError err = {{0}};
    if (df_bench_train_step(&k.be, &s, &r, &err)) fail_msg("%s", err.msg);
    assert_int_equal(k.ran_with[0], 0); /* every attention op of the step ran with the asked value */
    assert_true(k.ran_with[1] > 0);
    assert_string_equal(r.variants, "attention_rows_per_warp=32");

    DfKernelVariants unknown = {.count = 1, .names = {"no_such_kernel"}, .values = {1}};
    s.variants = &unknown;
    assert_int_equal(df_bench_train_step(&k.be, &s, &r, &err), -1);
    assert_non_null(strstr(err.msg, "--kernel-variant no_such_kernel=1"));
    df_bench_host_batch_free(&host);
    df_backend_destroy(k.cpu);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_after_a_variant_matches_a_fresh_step),
        cmocka_unit_test(test_step_with_asked_variants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
