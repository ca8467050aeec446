/* Every op of the backend's list (src/backend/backend_ops.def) from one
 * registry of cases (tests/backend_ops/: one file per family of ops), the
 * place where every backend is tested op by op against the CPU.
 *
 * A case takes a list of shapes: odd sizes, sizes that are not multiples of
 * the GPU kernels' tiles, GQA groups, the head dims of the supported models,
 * windows, chunks, and the models' own shapes. It builds its inputs from a
 * seed (random, never zero, rounded to bf16 so that a bf16 backend and the
 * fp32 CPU read the same values), poisons its outputs with NaN beforehand (a
 * value an op fails to write shows), runs the op on one backend and hands
 * back its outputs. Each shape runs:
 *   - on the CPU, where it is also checked against an independent reference:
 *     a naive loop in double, the composition of simpler ops it must equal
 *     value for value, or (the backward ops) central finite differences of
 *     the forward; shapes too large for a naive reference on the CPU run only
 *     where another backend is present, with the CPU backend as their
 *     reference (ops_run.h: scopes);
 *   - on every other backend built in and present (a GPU), under each of the
 *     case's kernel variants (df_backend_set_variant), whose outputs must
 *     match the CPU's within the case's tolerance (bf16 activations; fp32
 *     statistics and states have tighter ones, copies must be exact).
 * Checks without a CPU counterpart (errors reported by sync, device queries,
 * streams, timers, the profile, recorded graphs) run on each backend alone.
 * The coverage test fails when an op of the list has no case.
 *
 * What the CUDA tests (tests/test_cuda_*.c) keep is not one op against the
 * CPU: whole models against transformers' fixtures and the CPU, generation,
 * speculative decoding and the commands on the GPU, recorded CUDA graphs
 * against op-by-op steps, the skinny GEMM's routing and determinism, fused
 * ops against the separate ops they replace (bit for bit). The kernels'
 * timings are dev/cuda/'s programs (make dev).
 *
 * DFLASH_OPS_QUICK=1 leaves out the models' shapes (the compute-sanitizer
 * runs of scripts/test_gpu.sh); DFLASH_OPS_CASES=a,b runs only the cases
 * whose names contain one of the words, DFLASH_OPS_SKIP=a,b leaves out those
 * that do (the coverage test still checks them all). DFLASH_OPS_GPU_AS=a100 makes the GPU look like an A100 to the
 * backend (the test seam, base/test_seam.h: no sm_90a code, 163 KiB of
 * shared memory a block), so that a Hopper machine runs every case on the
 * kernels an A100 would (the portable tier, and the CUDA-core attention
 * where an mma.sync kernel's tiles exceed that shared memory). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend_ops/cases.h"

#include "backend/backend.h"
#include "backend/gpu_tier.h"
#include "base/test_seam.h"


/* Ops of the list without a case of their own: none. (An op tested only
 * elsewhere, e.g. at a whole model's shapes, would be named here with the
 * test that covers it.) */
static const char *const EXEMPT[] = {NULL};

static int case_covers(const OpCase *c, const char *op) {
    size_t n = strlen(op);
    for (const char *p = c->ops; (p = strstr(p, op)) != NULL; p += n)
        if ((p == c->ops || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return 1;
    return 0;
}

static void test_coverage(void **state) {
    (void)state;
    int missing = 0;
    for (int id = 0; id < DF_OP_COUNT; id++) {
        const char *op = df_op_name(id);
        int covered = 0;
        for (size_t c = 0; c < OPS_N_CASES; c++) covered |= case_covers(OPS_CASES[c], op);
        for (size_t e = 0; EXEMPT[e]; e++) covered |= strcmp(EXEMPT[e], op) == 0;
        if (!covered) fprintf(stderr, "op '%s' of backend_ops.def has no case in test_backend_ops.c\n", op), missing++;
    }
    assert_int_equal(missing, 0);
    /* and no case names an op the list does not have */
    for (size_t c = 0; c < OPS_N_CASES; c++) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", OPS_CASES[c]->ops);
        for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
            int found = 0;
            for (int id = 0; id < DF_OP_COUNT; id++) found |= strcmp(df_op_name(id), tok) == 0;
            if (!found) fail_msg("case '%s' names '%s', which backend_ops.def does not list", OPS_CASES[c]->name, tok);
        }
    }
}

/* The missing-op check covers the whole list. */
static void test_missing_op(void **state) {
    DfTestBackendPair *f = *state;
    assert_null(df_backend_missing_op(f->cpu));
    DfBackendOps ops = *f->cpu->ops;
    DfBackend fake = {.ops = &ops, .impl = f->cpu->impl};
    ops.kv_attention = NULL; /* an inference op: once called through NULL */
    assert_string_equal(df_backend_missing_op(&fake), "kv_attention");
    ops = *f->cpu->ops;
    ops.describe = NULL;
    assert_string_equal(df_backend_missing_op(&fake), "describe");
    ops = *f->cpu->ops;
    ops.caps = DF_CAP_GRAPHS; /* claims graphs without their ops */
    assert_string_equal(df_backend_missing_op(&fake), "record_begin");
    ops.caps = 0;
    ops.memory_info = NULL; /* optional */
    assert_null(df_backend_missing_op(&fake));
}

/* Whether the case's name contains one of the comma-separated words of the environment variable var. */
static int name_has_word_of(const OpCase *c, const char *var) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", getenv(var));
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ","))
        if (strstr(c->name, tok)) return 1;
    return 0;
}

/* DFLASH_OPS_CASES: words one of which the case's name must contain;
 * DFLASH_OPS_SKIP: words none of which it may contain. */
static int case_selected(const OpCase *c) {
    const char *want = getenv("DFLASH_OPS_CASES"), *skip = getenv("DFLASH_OPS_SKIP");
    if (skip && *skip && name_has_word_of(c, "DFLASH_OPS_SKIP")) return 0;
    return !want || !*want || name_has_word_of(c, "DFLASH_OPS_CASES");
}

static void set_variant(DfBackend *be, const OpsVariant *v) {
    DfError err;
    if (df_backend_set_variant(be, NULL, 0, &err)) fail_msg("%s", err.msg);
    for (int k = 0; v && k < 2; k++)
        if (v->knob[k] && df_backend_set_variant(be, v->knob[k], v->value[k], &err))
            fail_msg("variant %s: %s", v->label, err.msg);
}

typedef struct Worst {
    double fraction;
    char what[256];
    int runs;
} Worst;

/* One shape of the case: the CPU run, then every other backend under each variant against it. */
static void run_shape(const OpCase *c, const void *shape, DfBackend *cpu_be, DfBackend *const *others, int n_others,
                      int quick, Worst *worst) {
    Run cpu = {.be = cpu_be, .reference = 1, .compared_ok = n_others > 0, .model_ok = n_others > 0 && !quick,
               .tol = c->tol};
    c->run(&cpu, shape);
    ops_run_release(&cpu);
    if (cpu.skipped) {
        ops_run_free(&cpu);
        return;
    }
    for (int b = 0; b < n_others; b++) {
        /* a backend without knobs runs its defaults once */
        int n_var = others[b]->ops->set_variant && c->n_variants ? c->n_variants : 1;
        for (int v = 0; v < n_var; v++) {
            Run other = {.be = others[b], .compared_ok = 1, .model_ok = !quick, .tol = c->tol,
                         .variant = c->n_variants && others[b]->ops->set_variant ? &c->variants[v] : NULL};
            set_variant(others[b], other.variant);
            c->run(&other, shape);
            ops_run_release(&other);
            set_variant(others[b], NULL);
            /* tol < 0: checked on each backend alone; skipped: the case does not run this shape under this variant */
            if (c->tol >= 0 && !other.skipped) {
                char what[256] = "";
                double f = ops_compare(c, &cpu, &other, what, sizeof what);
                if (f > worst->fraction) worst->fraction = f, snprintf(worst->what, sizeof worst->what, "%s", what);
            }
            worst->runs += !other.skipped;
            ops_run_free(&other);
        }
    }
    ops_run_free(&cpu);
}

static void test_cases(void **state) {
    DfTestBackendPair *f = *state;
    DfBackend *others[1] = {f->gpu};
    int n_others = f->gpu ? 1 : 0;
    const char *q = getenv("DFLASH_OPS_QUICK");
    int quick = q && strcmp(q, "1") == 0;
    for (size_t i = 0; i < OPS_N_CASES; i++) {
        const OpCase *c = OPS_CASES[i];
        if (!case_selected(c)) continue;
        Worst worst = {0};
        for (int s = 0; s < c->n_shapes; s++) {
            const void *shape = c->shapes ? (const char *)c->shapes + (size_t)s * c->shape_size : NULL;
            run_shape(c, shape, f->cpu, others, n_others, quick, &worst);
        }
        printf("case: %s: %d shape%s", c->name, c->n_shapes, c->n_shapes == 1 ? "" : "s");
        if (worst.runs) printf(", %d runs on the other backends", worst.runs);
        if (worst.fraction > 0) printf("; largest error %.2f of its tolerance (%s)", worst.fraction, worst.what);
        printf("\n");
        fflush(stdout);
    }
}

/* DFLASH_OPS_GPU_AS=a100: the CUDA backend sees an A100's limits (sm_80's
 * opt-in shared memory a block: 163 KiB) and no sm_90a code. */
static int look_like_a100(void *ctx, DfSeamPoint point, void *data, DfError *err) {
    (void)ctx, (void)err;
    if (point != DF_SEAM_CUDA_DEVICE) return 0;
    DfGpuFacts *g = data;
    g->runs_sm90a_code = 0;
    g->smem_optin = 163 * 1024;
    return 0;
}

int main(void) {
    const char *as = getenv("DFLASH_OPS_GPU_AS");
    if (as && strcmp(as, "a100") == 0) df_test_seam_set(look_like_a100, NULL);
    else if (as && *as) {
        fprintf(stderr, "DFLASH_OPS_GPU_AS=%s: only a100 is known\n", as);
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coverage),
        cmocka_unit_test(test_missing_op),
        cmocka_unit_test(test_cases),
    };
    return cmocka_run_group_tests(tests, df_test_backend_pair_setup, df_test_backend_pair_teardown);
}
