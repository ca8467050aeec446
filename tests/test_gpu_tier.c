/* The CUDA backend's kernel tiers and the GPU peaks (backend/gpu_tier.h,
 * backend/gpu_peaks.h).
 *
 * The rules run without a GPU: each GPU generation gets the tier it can run
 * (sm_90a code on Hopper only; sm_80 and the compute_80 PTX everywhere else
 * from sm_80), a GPU below sm_80 is refused naming it and what it lacks, and
 * DFLASH_CUDA_TIER forces a tier or is refused naming the variable. The
 * nominal peaks are the data sheets' dense bf16 figures, a variant's before
 * its family's. With a GPU present (a CUDA build), the backend itself: its
 * description names the tier, DFLASH_CUDA_TIER=portable gives the portable
 * tier on any GPU, a bad value fails the backend's creation, and a GPU made
 * to look like an older one through the test seam is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend/gpu_peaks.h"
#include "backend/gpu_tier.h"
#include "backend/select.h"
#include "base/test_seam.h"

static DfGpuFacts gpu(const char *name, int major, int minor, int runs_sm90a_code) {
    DfGpuFacts g = {.index = 3, .major = major, .minor = minor, .runs_sm90a_code = runs_sm90a_code};
    snprintf(g.name, sizeof g.name, "%s", name);
    return g;
}

static DfGpuTier tier_of(DfGpuFacts g, const char *forced) {
    DfGpuTier t = (DfGpuTier)-1;
    DfError err = {{0}};
    if (df_gpu_tier_choose(&g, forced, &t, &err)) fail_msg("%s: %s", g.name, err.msg);
    return t;
}

static void expect_refused(DfGpuFacts g, const char *forced, const char *const *words) {
    DfGpuTier t = DF_GPU_TIER_PORTABLE;
    DfError err = {{0}};
    assert_int_equal(df_gpu_tier_choose(&g, forced, &t, &err), -1);
    for (int i = 0; words[i]; i++)
        if (!strstr(err.msg, words[i])) fail_msg("'%s' lacks '%s'", err.msg, words[i]);
}

static void test_each_generation_gets_its_tier(void **state) {
    (void)state;
    assert_int_equal(tier_of(gpu("NVIDIA H100 80GB HBM3", 9, 0, 1), NULL), DF_GPU_TIER_HOPPER);
    assert_int_equal(tier_of(gpu("NVIDIA H200", 9, 0, 1), ""), DF_GPU_TIER_HOPPER);
    /* a build without sm_90a (CUDA_ARCHS=compute_80) on a Hopper GPU */
    assert_int_equal(tier_of(gpu("NVIDIA H100 80GB HBM3", 9, 0, 0), NULL), DF_GPU_TIER_PORTABLE);
    assert_int_equal(tier_of(gpu("NVIDIA A100-SXM4-80GB", 8, 0, 0), NULL), DF_GPU_TIER_PORTABLE);
    assert_int_equal(tier_of(gpu("NVIDIA L40S", 8, 9, 0), "auto"), DF_GPU_TIER_PORTABLE);
    assert_int_equal(tier_of(gpu("NVIDIA GeForce RTX 3090", 8, 6, 0), NULL), DF_GPU_TIER_PORTABLE);
    assert_int_equal(tier_of(gpu("NVIDIA B200", 10, 0, 0), NULL), DF_GPU_TIER_PORTABLE);
    assert_int_equal(tier_of(gpu("NVIDIA GeForce RTX 5090", 12, 0, 0), NULL), DF_GPU_TIER_PORTABLE);
    assert_string_equal(df_gpu_tier_name(DF_GPU_TIER_HOPPER), "hopper");
    assert_string_equal(df_gpu_tier_name(DF_GPU_TIER_PORTABLE), "portable");
}

static void test_gpus_below_sm80_are_refused(void **state) {
    (void)state;
    const char *v100[] = {"GPU 3", "Tesla V100-SXM2-32GB", "7.0", "8.0", "bf16", NULL};
    expect_refused(gpu("Tesla V100-SXM2-32GB", 7, 0, 0), NULL, v100);
    const char *t4[] = {"Tesla T4", "7.5", "8.0", NULL};
    expect_refused(gpu("Tesla T4", 7, 5, 0), NULL, t4);
    /* forcing a tier does not get an old GPU in */
    expect_refused(gpu("Tesla T4", 7, 5, 0), "portable", t4);
}

static void test_forced_tier(void **state) {
    (void)state;
    assert_int_equal(tier_of(gpu("NVIDIA H100 80GB HBM3", 9, 0, 1), "portable"), DF_GPU_TIER_PORTABLE);
    assert_int_equal(tier_of(gpu("NVIDIA H100 80GB HBM3", 9, 0, 1), "hopper"), DF_GPU_TIER_HOPPER);
    const char *no_hopper[] = {"DFLASH_CUDA_TIER=hopper", "NVIDIA A100-SXM4-80GB", "sm_90a", NULL};
    expect_refused(gpu("NVIDIA A100-SXM4-80GB", 8, 0, 0), "hopper", no_hopper);
    const char *bad[] = {"DFLASH_CUDA_TIER=fast", "hopper, portable or auto", NULL};
    expect_refused(gpu("NVIDIA H100 80GB HBM3", 9, 0, 1), "fast", bad);
    const char *case_matters[] = {"DFLASH_CUDA_TIER=Portable", NULL};
    expect_refused(gpu("NVIDIA H100 80GB HBM3", 9, 0, 1), "Portable", case_matters);
}

static void test_nominal_peaks(void **state) {
    (void)state;
    const struct {
        const char *description;
        double tflops;
    } rows[] = {
        {"NVIDIA H100 80GB HBM3, sm_90, 132 SMs, 79.1 GiB, L2 50 MiB, hopper kernels (sm_90a)", 989},
        {"NVIDIA H100 PCIe, sm_90, 114 SMs", 756},
        {"NVIDIA H100 NVL, sm_90", 835},
        {"NVIDIA H200, sm_90, 132 SMs, 139.8 GiB", 989},
        {"NVIDIA H200 NVL, sm_90", 835},
        {"NVIDIA GH200 480GB, sm_90", 989},
        {"NVIDIA A100-SXM4-80GB, sm_80", 312},
        {"NVIDIA A100 80GB PCIe, sm_80", 312},
        {"NVIDIA L40S, sm_89", 362},
        {"NVIDIA B200, sm_100", 2250},
        {"NVIDIA GB200, sm_100", 2500},
        {"NVIDIA GeForce RTX 4090, sm_89", 0},
        {"cpu: 2 threads, OpenBLAS", 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (df_gpu_nominal_bf16_tflops(rows[i].description) != rows[i].tflops)
            fail_msg("%s: %g, expected %g", rows[i].description, df_gpu_nominal_bf16_tflops(rows[i].description),
                     rows[i].tflops);
    assert_true(df_gpu_nominal_bf16_tflops(NULL) == 0);
}

/* ---- with a GPU ------------------------------------------------------------ */

static int gpu_present(void) {
    DfError err = {{0}};
    DfBackend *be = df_backend_create("cuda", &err);
    if (!be) return 0;
    df_backend_destroy(be);
    return 1;
}

static void describe_cuda(const char *tier_env, char *desc, size_t cap) {
    if (tier_env) setenv("DFLASH_CUDA_TIER", tier_env, 1);
    else unsetenv("DFLASH_CUDA_TIER");
    DfError err = {{0}};
    DfBackend *be = df_backend_create("cuda", &err);
    if (!be) fail_msg("cuda backend: %s", err.msg);
    df_backend_describe(be, desc, cap);
    df_backend_destroy(be);
    unsetenv("DFLASH_CUDA_TIER");
}

static void test_backend_names_its_tier(void **state) {
    (void)state;
    if (!gpu_present()) skip();
    char desc[256];
    describe_cuda(NULL, desc, sizeof desc);
    printf("cuda: %s\n", desc);
    if (!strstr(desc, "hopper kernels") && !strstr(desc, "portable kernels")) fail_msg("no tier in '%s'", desc);
    describe_cuda("portable", desc, sizeof desc);
    if (!strstr(desc, "portable kernels")) fail_msg("DFLASH_CUDA_TIER=portable: '%s'", desc);
    setenv("DFLASH_CUDA_TIER", "wgmma", 1);
    DfError err = {{0}};
    DfBackend *be = df_backend_create("cuda", &err);
    unsetenv("DFLASH_CUDA_TIER");
    assert_null(be);
    if (!strstr(err.msg, "DFLASH_CUDA_TIER=wgmma")) fail_msg("%s", err.msg);
}

static int look_like_v100(void *ctx, DfSeamPoint point, void *data, DfError *err) {
    (void)ctx, (void)err;
    if (point != DF_SEAM_CUDA_DEVICE) return 0;
    DfGpuFacts *g = data;
    g->major = 7;
    g->minor = 0;
    g->runs_sm90a_code = 0;
    return 0;
}

static void test_old_gpu_refused_at_creation(void **state) {
    (void)state;
    if (!gpu_present()) skip();
    df_test_seam_set(look_like_v100, NULL);
    DfError err = {{0}};
    DfBackend *be = df_backend_create("cuda", &err);
    df_test_seam_set(NULL, NULL);
    assert_null(be);
    if (!strstr(err.msg, "compute capability 7.0") || !strstr(err.msg, "8.0")) fail_msg("%s", err.msg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_generation_gets_its_tier),
        cmocka_unit_test(test_gpus_below_sm80_are_refused),
        cmocka_unit_test(test_forced_tier),
        cmocka_unit_test(test_nominal_peaks),
        cmocka_unit_test(test_backend_names_its_tier),
        cmocka_unit_test(test_old_gpu_refused_at_creation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
