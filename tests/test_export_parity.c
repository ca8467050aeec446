/* A drafter exported by `dflash train` (tests/fixtures/export/drafter/) is
 * what serving stacks load: tests/ref/export_ref.py loaded it on the GPU
 * machine into a z-lab-structured PyTorch drafter (config through
 * transformers' Qwen3Config, weights with load_state_dict(strict=True)) and
 * wrote that drafter's logits for two blocks. Our loader and inference
 * forward must give the same logits from the same directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "formats/safetensors.h"
#include "infer/drafter_infer.h"
#include "model/drafter_io.h"
#include "target/target.h"

/* fp32 on both sides, same bf16 weights: agreement is near 1e-6; a shifted
 * context row already moves the logits by 2e-3 */
#define EXPORT_TOL 1e-4

static float *load_tensor(const DfSafetensors *st, const char *name, size_t *count) {
    const DfTensorInfo *t = df_safetensors_find(st, name);
    if (!t) fail_msg("fixture tensor %s missing", name);
    DfError err;
    float *x = df_safetensors_load_f32(st, name, t->ndim, t->shape, &err);
    if (!x) fail_msg("%s", err.msg);
    *count = 1;
    for (int d = 0; d < t->ndim; d++) *count *= (size_t)t->shape[d];
    return x;
}

static void check_block(DfDrafterRunner *r, const DfSafetensors *step, const DfSafetensors *ref, int S) {
    DfError err;
    size_t n_feat, n_ref, n_ids;
    float *feats = load_tensor(step, "features", &n_feat);
    char name[64];
    snprintf(name, sizeof name, "logits.%d", S);
    float *want = load_tensor(ref, name, &n_ref);
    snprintf(name, sizeof name, "block.%d", S);
    const DfTensorInfo *bt = df_safetensors_find(ref, name);
    assert_non_null(bt);
    n_ids = (size_t)bt->shape[0];
    int B = r->cfg.block_size;
    assert_int_equal(n_ids, (size_t)B);
    assert_int_equal(n_ref, (size_t)B * r->cfg.vocab_size);
    int32_t ids[64], argmax[64];
    memcpy(ids, bt->data, (size_t)B * sizeof(int32_t));

    if (df_drafter_append_context(r, S == 21 ? 0 : 1, feats, S, &err)) fail_msg("%s", err.msg);
    if (df_drafter_propose(r, S == 21 ? 0 : 1, ids, B, argmax, &err)) fail_msg("%s", err.msg);
    const float *logits = df_drafter_logits(r, &err);
    if (!logits) fail_msg("%s", err.msg);
    double e = df_rel_error(logits, want, n_ref);
    printf("  context %d: logits relative error %.2e against the PyTorch drafter\n", S, e);
    if (!(e < EXPORT_TOL)) fail_msg("context %d: logits relative error %g against the PyTorch drafter", S, e);
    free(feats);
    free(want);
}

static void test_exported_drafter_matches_pytorch(void **state) {
    (void)state;
    DfError err;
    DfDrafterConfig cfg;
    DfDrafterLayout layout;
    float *params = NULL;
    if (df_drafter_load(df_test_path("tests/fixtures/export/drafter"), &cfg, &layout, &params, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(cfg.mask_token_id, 8190);
    DfBackend *be = df_backend_cpu_create(&err);
    assert_non_null(be);
    DfTargetModel target;
    if (df_target_load(&target, be, df_test_path("assets/coder-tiny"), 1, 0, &err)) fail_msg("%s", err.msg);
    DfDrafterRunner r;
    if (df_drafter_runner_init(&r, be, &cfg, params, target.embed, target.embed, 2, 64, &err)) fail_msg("%s", err.msg);
    DfSafetensors step, ref;
    if (df_safetensors_open(&step, df_test_path("tests/fixtures/drafter/step.safetensors"), &err)) fail_msg("%s", err.msg);
    if (df_safetensors_open(&ref, df_test_path("tests/fixtures/export/zlab_logits.safetensors"), &err))
        fail_msg("%s", err.msg);
    check_block(&r, &step, &ref, 21);
    check_block(&r, &step, &ref, 40);
    df_safetensors_close(&step);
    df_safetensors_close(&ref);
    df_drafter_runner_free(&r);
    df_target_free(&target);
    df_backend_destroy(be);
    df_drafter_layout_free(&layout);
    free(params);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exported_drafter_matches_pytorch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
