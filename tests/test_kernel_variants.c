/* Kernel variants.
 *
 * --kernel-variant NAME=VALUE (bench and train; backend/kernel_variants.h):
 * well-formed items parse in order; a malformed one, or too many, fails
 * naming the item and the option; applying them resets every knob first,
 * then sets each in order, and a name the backend lacks fails naming it. A
 * backend wrapping the CPU one records the calls its variant knob gets.
 *
 * The CUDA backend's variants are declared once
 * (src/backend/cuda/kernel_variants.def): the backend's variant line (what
 * `variants` prints, the `kernel variants:` line of bench and train) names
 * exactly the declared list in its order; every declared variant is set by
 * some case of test_backend_ops' registry (tests/backend_ops/registry.c), and
 * every knob a case sets is declared, so a variant added to one side only
 * fails here. Setting by name follows each variant's declared kind, and a
 * change to a variant with replans says so. All of it runs on the CPU build;
 * with a GPU, the CUDA backend's own line is checked too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend_ops/cases.h"

#include "backend/cuda/kernel_variants.h"
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

/* The names as the .def lists them, expanded here on their own. */
static const char *const DEF_NAMES[] = {
#define DF_KERNEL_VARIANT(name, kind, lo, hi, def, replans, why) #name,
#include "backend/cuda/kernel_variants.def"
#undef DF_KERNEL_VARIANT
};
enum { N_DEF = sizeof DEF_NAMES / sizeof DEF_NAMES[0] };

/* The names of a variant line "a=1 b=0 ..." into names (at most cap), their count. */
static int line_names(const char *line, char names[][64], int cap) {
    char buf[2048];
    snprintf(buf, sizeof buf, "%s", line);
    int n = 0;
    for (char *tok = strtok(buf, " "); tok && n < cap; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        assert_non_null(eq);
        snprintf(names[n++], 64, "%.*s", (int)(eq - tok), tok);
    }
    return n;
}

/* A variant line names exactly DEF_NAMES, in order, every value the default. */
static void assert_line_is_declared(const char *line) {
    char names[64][64];
    int n = line_names(line, names, 64), declared;
    const DfKernelVariantDecl *d = df_cuda_kernel_variants(&declared);
    assert_int_equal(declared, N_DEF);
    if (n != N_DEF) fail_msg("the variant line names %d variants, kernel_variants.def %d: %s", n, N_DEF, line);
    for (int i = 0; i < n; i++) {
        char want[96];
        snprintf(want, sizeof want, "%s=%d", DEF_NAMES[i], d[i].def);
        if (strcmp(names[i], DEF_NAMES[i]) != 0 || !strstr(line, want))
            fail_msg("variant %d of the line is '%s', kernel_variants.def declares '%s' (line: %s)", i, names[i],
                     DEF_NAMES[i], line);
    }
}

static void test_line_names_the_list(void **state) {
    (void)state;
    DfCudaVariants v;
    memset(&v, 0x5a, sizeof v);
    df_cuda_variants_reset(&v);
    char line[2048];
    df_cuda_variants_print(&v, line, sizeof line);
    assert_line_is_declared(line);
}

static int declared(const char *name) {
    for (int i = 0; i < N_DEF; i++)
        if (strcmp(DEF_NAMES[i], name) == 0) return 1;
    return 0;
}

/* Every knob the registry's cases set is declared, and every declared variant is set by a case. */
static void test_registry_sets_the_list(void **state) {
    (void)state;
    int used[N_DEF] = {0}, problems = 0;
    for (size_t c = 0; c < OPS_N_CASES; c++) {
        const OpCase *oc = OPS_CASES[c];
        for (int v = 0; v < oc->n_variants; v++)
            for (int k = 0; k < 2; k++) {
                const char *knob = oc->variants[v].knob[k];
                if (!knob) continue;
                if (!declared(knob)) {
                    fprintf(stderr, "case '%s' sets the variant '%s', which kernel_variants.def does not declare\n",
                            oc->name, knob);
                    problems++;
                }
                for (int i = 0; i < N_DEF; i++) used[i] |= strcmp(DEF_NAMES[i], knob) == 0;
            }
    }
    for (int i = 0; i < N_DEF; i++)
        if (!used[i]) {
            fprintf(stderr, "variant '%s' of kernel_variants.def is set by no case of tests/backend_ops/\n",
                    DEF_NAMES[i]);
            problems++;
        }
    assert_int_equal(problems, 0);
}

static int value_of(const DfCudaVariants *v, const char *name) {
    char line[2048], want[80];
    df_cuda_variants_print(v, line, sizeof line);
    snprintf(want, sizeof want, " %s=", name);
    char padded[2100];
    snprintf(padded, sizeof padded, " %s", line);
    const char *at = strstr(padded, want);
    assert_non_null(at);
    return atoi(at + strlen(want));
}

/* Setting by name as each kind takes values; refusals name the variant. */
static void test_set_by_name(void **state) {
    (void)state;
    DfCudaVariants v;
    df_cuda_variants_reset(&v);
    DfError err;
    int replan = 0;
    assert_int_equal(df_cuda_variants_set(&v, "attention_mma_sync", 5, &replan, &err), 0); /* a flag */
    assert_int_equal(value_of(&v, "attention_mma_sync"), 1);
    assert_int_equal(replan, 0);
    assert_int_equal(df_cuda_variants_set(&v, "lm_head_chunk_rows", -3, &replan, &err), 0); /* a count */
    assert_int_equal(value_of(&v, "lm_head_chunk_rows"), 0);
    assert_int_equal(df_cuda_variants_set(&v, "lm_head_chunk_rows", 50, &replan, &err), 0);
    assert_int_equal(value_of(&v, "lm_head_chunk_rows"), 50);
    assert_int_equal(df_cuda_variants_set(&v, "skinny_gemm", 2, &replan, &err), 0); /* a mode */
    assert_int_equal(value_of(&v, "skinny_gemm"), 2);
    assert_int_equal(df_cuda_variants_set(&v, "skinny_gemm", 7, &replan, &err), 0);
    assert_int_equal(value_of(&v, "skinny_gemm"), 0);
    assert_int_equal(df_cuda_variants_set(&v, "attention_rows_per_warp", 32, &replan, &err), 0); /* a choice */
    assert_int_equal(value_of(&v, "attention_rows_per_warp"), 32);
    assert_int_equal(df_cuda_variants_set(&v, "attention_rows_per_warp", 17, &replan, &err), -1);
    assert_string_equal(err.msg, "cuda variant attention_rows_per_warp: 17 (expected 0, 16 or 32)");
    assert_int_equal(value_of(&v, "attention_rows_per_warp"), 32);
    assert_int_equal(df_cuda_variants_set(&v, "gemm_algo", DF_GEMM_CANDIDATES + 1, &replan, &err), -1); /* a range */
    assert_string_equal(err.msg, "cuda variant gemm_algo: 9 (expected 0 to 8)");
    assert_int_equal(replan, 0);
    assert_int_equal(df_cuda_variants_set(&v, "gemm_algo", 4, &replan, &err), 0); /* replans */
    assert_int_equal(replan, 1);
    replan = 0;
    assert_int_equal(df_cuda_variants_set(&v, "gemm_algo", 4, &replan, &err), 0); /* unchanged: no replan */
    assert_int_equal(replan, 0);
    assert_int_equal(df_cuda_variants_set(&v, "block_attention_forward_pairs", 1, &replan, &err), -1);
    assert_string_equal(err.msg, "the cuda backend has no kernel variant 'block_attention_forward_pairs'");
    assert_int_equal(df_cuda_variants_reset(&v), 1); /* gemm_algo back to 0 */
    assert_int_equal(df_cuda_variants_reset(&v), 0);
    assert_int_equal(value_of(&v, "lm_head_chunk_rows"), 0);
}

/* With a GPU: the CUDA backend's own line (its `variants` op). */
static void test_backend_line(void **state) {
    DfTestBackendPair *f = df_test_gpu_or_skip(state);
    DfError err;
    assert_int_equal(df_backend_set_variant(f->gpu, NULL, 0, &err), 0);
    char line[2048];
    df_backend_variants(f->gpu, line, sizeof line);
    assert_line_is_declared(line);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_items_parse_in_order),
        cmocka_unit_test(test_malformed_items_fail_naming_them),
        cmocka_unit_test(test_too_many_items_fail),
        cmocka_unit_test(test_apply_resets_then_sets_in_order),
        cmocka_unit_test(test_apply_fails_naming_the_refused_variant),
        cmocka_unit_test(test_line_names_the_list),
        cmocka_unit_test(test_registry_sets_the_list),
        cmocka_unit_test(test_set_by_name),
        cmocka_unit_test(test_backend_line),
    };
    return cmocka_run_group_tests(tests, df_test_backend_pair_setup, df_test_backend_pair_teardown);
}
