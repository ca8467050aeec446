/* --kernel-variant NAME=VALUE (bench and train; backend/kernel_variants.h):
 * well-formed items parse in order; a malformed one, or too many, fails
 * naming the item and the option; applying them resets every knob first,
 * then sets each in order, and a name the backend lacks fails naming it. A
 * backend wrapping the CPU one records the calls its variant knob gets. */
#include <stdio.h>
#include <string.h>

#include "test_util.h"

#include "backend/kernel_variants.h"

static void test_items_parse_in_order(void **state) {
    (void)state;
    const char *items[] = {"gemm_search=1", "lm_head_chunk_rows=2048", "attention_mma_sync=0"};
    DfKernelVariants v;
    DfError err = {{0}};
    assert_int_equal(df_kernel_variants_parse(&v, items, 3, "--kernel-variant", &err), 0);
    assert_int_equal(v.count, 3);
    assert_string_equal(v.names[0], "gemm_search");
    assert_int_equal(v.values[0], 1);
    assert_string_equal(v.names[1], "lm_head_chunk_rows");
    assert_int_equal(v.values[1], 2048);
    assert_string_equal(v.names[2], "attention_mma_sync");
    assert_int_equal(v.values[2], 0);
}

static void test_malformed_items_fail_naming_them(void **state) {
    (void)state;
    char long_name[80];
    memset(long_name, 'a', 70);
    strcpy(long_name + 70, "=1");
    const char *bad[] = {"gemm_search", "=1", "gemm_search=", "gemm_search=-1", "gemm_search=1x",
                         "gemm_search=99999999999", long_name};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        DfKernelVariants v;
        DfError err = {{0}};
        const char *items[] = {"attention_mma_sync=1", bad[i]};
        assert_int_equal(df_kernel_variants_parse(&v, items, 2, "--kernel-variant", &err), -1);
        char want[128];
        snprintf(want, sizeof want, "--kernel-variant '%s'", bad[i]);
        if (!strstr(err.msg, want)) fail_msg("item %s: message '%s' lacks \"%s\"", bad[i], err.msg, want);
    }
}

static void test_too_many_items_fail(void **state) {
    (void)state;
    const char *items[DF_MAX_KERNEL_VARIANTS + 1];
    for (int i = 0; i <= DF_MAX_KERNEL_VARIANTS; i++) items[i] = "gemm_search=1";
    DfKernelVariants v;
    DfError err = {{0}};
    assert_int_equal(df_kernel_variants_parse(&v, items, DF_MAX_KERNEL_VARIANTS, "--kernel-variant", &err), 0);
    assert_int_equal(df_kernel_variants_parse(&v, items, DF_MAX_KERNEL_VARIANTS + 1, "--kernel-variant", &err), -1);
    assert_non_null(strstr(err.msg, "--kernel-variant: at most"));
}

/* The CPU backend with one knob that logs its calls; be first, so that a DfBackend * is a Logged *. */
typedef struct Logged {
    DfBackend be;
    DfBackend *cpu;
    DfBackendOps ops;
    char log[256];
} Logged;

static int logged_set(DfBackend *be, const char *name, int value, DfError *err) {
    Logged *l = (Logged *)be;
    size_t n = strlen(l->log);
    if (!name) {
        snprintf(l->log + n, sizeof l->log - n, "reset;");
        return 0;
    }
    if (strcmp(name, "knob") != 0) return df_fail(err, "no kernel variant '%s'", name);
    snprintf(l->log + n, sizeof l->log - n, "knob=%d;", value);
    return 0;
}

static void logged_init(Logged *l) {
    DfError err = {{0}};
    memset(l, 0, sizeof *l);
    l->cpu = df_backend_cpu_create(&err);
    assert_non_null(l->cpu);
    l->ops = *l->cpu->ops;
    l->ops.set_variant = logged_set;
    l->be.ops = &l->ops;
    l->be.impl = l->cpu->impl;
}

static void test_apply_resets_then_sets_in_order(void **state) {
    (void)state;
    Logged l;
    logged_init(&l);
    const char *items[] = {"knob=3", "knob=7"};
    DfKernelVariants v;
    DfError err = {{0}};
    assert_int_equal(df_kernel_variants_parse(&v, items, 2, "--kernel-variant", &err), 0);
    assert_int_equal(df_kernel_variants_apply(&l.be, &v, "--kernel-variant", &err), 0);
    assert_string_equal(l.log, "reset;knob=3;knob=7;");
    l.log[0] = '\0';
    assert_int_equal(df_kernel_variants_apply(&l.be, NULL, "--kernel-variant", &err), 0);
    assert_string_equal(l.log, "reset;");
    df_backend_destroy(l.cpu);
}

static void test_apply_fails_naming_the_refused_variant(void **state) {
    (void)state;
    Logged l;
    logged_init(&l);
    const char *items[] = {"knob=1", "other=2"};
    DfKernelVariants v;
    DfError err = {{0}};
    assert_int_equal(df_kernel_variants_parse(&v, items, 2, "--kernel-variant", &err), 0);
    assert_int_equal(df_kernel_variants_apply(&l.be, &v, "--kernel-variant", &err), -1);
    assert_non_null(strstr(err.msg, "--kernel-variant other=2"));
    assert_non_null(strstr(err.msg, "'other'"));
    df_backend_destroy(l.cpu);
    /* the plain CPU backend has no variants at all */
    DfBackend *cpu = df_backend_cpu_create(&err);
    assert_non_null(cpu);
    assert_int_equal(df_kernel_variants_apply(cpu, &v, "--kernel-variant", &err), -1);
    assert_non_null(strstr(err.msg, "--kernel-variant knob=1"));
    df_backend_destroy(cpu);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_items_parse_in_order),
        cmocka_unit_test(test_malformed_items_fail_naming_them),
        cmocka_unit_test(test_too_many_items_fail),
        cmocka_unit_test(test_apply_resets_then_sets_in_order),
        cmocka_unit_test(test_apply_fails_naming_the_refused_variant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
