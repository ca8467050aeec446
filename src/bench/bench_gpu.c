/* The GPU figures of the bench harness (--device cuda): the GEMM peak, the
 * attention op, the prefill of --target and of a Qwen3-8B-shaped random
 * target, the whole training step; with --hybrid a Qwen3.6-27B-shaped hybrid
 * target's prefill instead. */
#include <stdio.h>

#include "backend/gpu_peaks.h"
#include "backend/select.h"
#include "base/clock.h"
#include "bench/bench_internal.h"
#include "bench/bench_recipe.h"
#include "bench/bench_train_step.h"
#include "target/target_random.h"

/* The training step of the recipe: --target's shape (random weights) with
 * the drafter and a batch of --train-data's records as `dflash train`
 * trains them at its defaults (bench/bench_recipe.h). */
static int bench_gpu_recipe_step(DfBackend *be, const DfBenchOptions *o, double peak, double nominal, cJSON *json,
                                 DfError *err) {
    DfBenchRecipe recipe;
    int rc = df_bench_recipe_load(&recipe, o->target, o->train_data, err);
    DfStepBatch *b = &recipe.batch;
    DfTrainStepShape s = {.target = recipe.target, .drafter = recipe.drafter, .repeat = o->train_repeat,
                          .variants = &o->variants,
                          .batch = {b->n_seqs, b->seq_starts, b->ids, b->mask, b->anchor_starts, b->anchors}};
    DfTrainStepResult r;
    if (rc == 0) rc = df_bench_train_step(be, &s, &r, err);
    if (rc == 0) {
        char head[8400];
        snprintf(head, sizeof head,
                 "training step, %s at train's defaults: %d records of %s (batch %lld of %lld of epoch 0), "
                 "%lld tokens, %lld anchors x block %d",
                 o->target, b->n_seqs, o->train_data, (long long)b->batch_in_epoch + 1, (long long)b->epoch_batches,
                 (long long)b->tokens, (long long)recipe.anchors, recipe.drafter.block_size);
        DfTrainStepLabel label = {head, "step_recipe", "records"};
        df_bench_train_step_report(&label, &s, &r, peak, nominal, json);
        df_bench_add_number(json, "step_recipe_records", b->n_seqs);
        df_bench_add_number(json, "step_recipe_tokens", (double)b->tokens);
        df_bench_add_number(json, "step_recipe_anchors", (double)recipe.anchors);
        df_bench_add_number(json, "step_recipe_batch_in_epoch", (double)b->batch_in_epoch);
    }
    df_bench_recipe_free(&recipe);
    return rc;
}

/* The whole training step: the recipe's, then Qwen3-8B's shape with a
 * 5-layer drafter on random sequences of 2048 tokens, 512 anchors of 16. */
static int bench_gpu_train_steps(DfBackend *be, const DfBenchOptions *o, double peak, double nominal, cJSON *json,
                                 DfError *err) {
    printf("\n");
    if (bench_gpu_recipe_step(be, o, peak, nominal, json, err)) return -1;
    DfRandomStepSize size = {.drafter_layers = 5, .block_size = 16, .num_anchors = 512, .seq_len = 2048,
                             .n_seqs = o->train_seqs};
    DfModelConfig qwen3_8b = df_bench_qwen3_8b_shape();
    DfTrainStepShape s;
    DfBenchHostBatch host;
    DfTrainStepResult r;
    int rc = df_train_step_shape_random(&s, &host, &qwen3_8b, &size, err);
    s.repeat = o->train_repeat, s.variants = &o->variants;
    if (rc == 0) rc = df_bench_train_step(be, &s, &r, err);
    if (rc == 0) {
        char head[256];
        snprintf(head, sizeof head, "training step, Qwen3-8B shape (random): %d x %d tokens, %d anchors x block %d",
                 size.n_seqs, size.seq_len, size.num_anchors, size.block_size);
        DfTrainStepLabel label = {head, "step_qwen3_8b", "sequences"};
        df_bench_train_step_report(&label, &s, &r, peak, nominal, json);
    }
    df_bench_host_batch_free(&host);
    return rc;
}

/* --hybrid: the GEMM peak, then the Qwen3.6-27B-shaped target's prefill
 * (taps only; all built layers + logits). With fewer than 64 layers the
 * 64-layer figures are estimated from the measured per-layer time (taps run
 * time / layers run) plus the measured rest (embedding, head): an estimate,
 * printed as one. */
int df_bench_hybrid(const DfBenchOptions *o, cJSON *json, DfError *err) {
    DfBackend *be = df_backend_create(o->device, err);
    if (!be) return -1;
    if (df_bench_require_timing(be, o->device, err)) {
        df_backend_destroy(be);
        return -1;
    }
    if (df_kernel_variants_apply(be, &o->variants, "bench --hybrid: --kernel-variant", err)) {
        df_backend_destroy(be);
        return -1;
    }
    char desc[256], variants[512];
    df_backend_describe(be, desc, sizeof desc);
    df_backend_variants(be, variants, sizeof variants);
    printf("dflash bench --hybrid on %s: %s; prefill batches of %d x %d tokens\nkernel variants: %s\n\n", o->device,
           desc, o->n_seqs, o->seq_len, variants);
    cJSON_AddStringToObject(json, "gpu", desc);
    double nominal = df_gpu_nominal_bf16_tflops(desc);
    df_bench_add_number(json, "nominal_tflops", nominal);
    int rc = -1;
    double peak = 0;
    DfTargetModel m;
    DfModelConfig cfg = df_bench_qwen36_27b_shape(o->hybrid_layers);
    if (df_bench_gemm_tflops(be, 8192, 8192, 8192, 50, &peak, err)) goto done;
    printf("%-40s %9.1f TFLOP/s (nominal %.0f): MFU's measured reference\n", "cuBLASLt bf16 GEMM 8192^3", peak,
           nominal);
    df_bench_add_number(json, "gemm_8192_tflops", peak);
    df_bench_add_number(json, "hybrid_layers", o->hybrid_layers);
    df_backend_reset_peak(be);
    double t0 = df_now_seconds();
    if (df_target_init_random(&m, be, &cfg, 1234, 1, err)) goto done;
    printf("%-40s %9.1f s (%d of 64 layers)\n", "Qwen3.6-27B random weights built in", df_now_seconds() - t0,
           o->hybrid_layers);
    DfPrefillResult taps, full;
    rc = df_bench_prefill(be, &m, o->seq_len, o->n_seqs, 0, o->repeat, &taps, err);
    if (rc == 0) rc = df_bench_prefill(be, &m, o->seq_len, o->n_seqs, 1, o->repeat, &full, err);
    if (rc == 0) {
        df_bench_prefill_report("Qwen3.6-27B shape (random), taps only", "hybrid_taps", &taps, peak, nominal, json);
        df_bench_prefill_report("Qwen3.6-27B shape (random), all + logits", "hybrid_full", &full, peak, nominal, json);
        printf("%-40s %9.2f GiB (weights, activations, workspaces)\n", "    peak GPU memory",
               full.peak_bytes / 1073741824.0);
        double per_layer = taps.ms / taps.layers, rest = full.ms - per_layer * full.layers;
        double est_ms = per_layer * 64 + rest, tokens = (double)o->seq_len * o->n_seqs;
        printf("%-40s %9.2f ms per layer (taps run / %d layers)\n", "    per layer", per_layer, taps.layers);
        if (o->hybrid_layers < 64)
            printf("%-40s %9.0f tokens/s %8.2f ms (ESTIMATE: %.2f ms x 64 layers + %.2f ms embedding and head, "
                   "measured on %d layers)\n",
                   "    64 layers + logits, scaled", tokens / (est_ms * 1e-3), est_ms, per_layer, rest,
                   o->hybrid_layers);
        df_bench_add_number(json, "hybrid_per_layer_ms", per_layer);
        df_bench_add_number(json, "hybrid_64_layers_tokens_per_s", tokens / (est_ms * 1e-3));
    }
    df_target_free(&m);
done:
    df_backend_destroy(be);
    return rc;
}

int df_bench_gpu(const DfBenchOptions *o, cJSON *json, DfError *err) {
    DfBackend *be = df_backend_create(o->device, err);
    if (!be) return -1;
    if (df_bench_require_timing(be, o->device, err)) {
        df_backend_destroy(be);
        return -1;
    }
    char desc[256];
    df_backend_describe(be, desc, sizeof desc);
    int t = o->seq_len * o->n_seqs;
    printf("dflash bench on %s: %s; prefill batches of %d x %d tokens\n\n", o->device, desc, o->n_seqs, o->seq_len);
    cJSON_AddStringToObject(json, "gpu", desc);
    double nominal = df_gpu_nominal_bf16_tflops(desc);
    df_bench_add_number(json, "nominal_tflops", nominal);
    int rc = -1;
    double peak = 0, tf = 0;
    if (df_bench_gemm_tflops(be, 8192, 8192, 8192, 50, &peak, err)) goto done;
    printf("%-40s %9.1f TFLOP/s (nominal %.0f)\n", "cuBLASLt bf16 GEMM 8192^3", peak, nominal);
    df_bench_add_number(json, "gemm_8192_tflops", peak);
    const struct {
        const char *name, *key;
        int n, k;
    } shapes[] = {{"q, o proj   [T x 4096 x 4096]", "gemm_qo_tflops", 4096, 4096},
                  {"k, v proj   [T x 1024 x 4096]", "gemm_kv_tflops", 1024, 4096},
                  {"gate, up    [T x 12288 x 4096]", "gemm_gate_up_tflops", 12288, 4096},
                  {"down        [T x 4096 x 12288]", "gemm_down_tflops", 4096, 12288},
                  {"lm head     [T x 151936 x 4096]", "gemm_lm_head_tflops", 151936, 4096}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (df_bench_gemm_tflops(be, t, shapes[i].n, shapes[i].k, 20, &tf, err)) goto done;
        printf("  Qwen3-8B %-30s %9.1f TFLOP/s\n", shapes[i].name, tf);
        df_bench_add_number(json, shapes[i].key, tf);
        if (tf > peak) peak = tf;
    }
    printf("%-40s %9.1f TFLOP/s (the best GEMM above: MFU's measured reference)\n", "measured peak", peak);
    df_bench_add_number(json, "gemm_peak_tflops", peak);
    if (o->train_only) {
        rc = bench_gpu_train_steps(be, o, peak, nominal, json, err);
        goto done;
    }
    for (int rows = 16; rows <= 32; rows += 16) {
        if (df_backend_set_variant(be, "attention_rows_per_warp", rows, err) ||
            df_bench_attention_tflops(be, o->seq_len, o->n_seqs, 32, 8, 128, 20, &tf, err))
            goto done;
        printf("  Qwen3-8B attention, %2d rows per warp   %9.1f TFLOP/s (causal, 32/8 heads of 128)\n", rows, tf);
        df_bench_add_number(json, rows == 16 ? "attention_rows16_tflops" : "attention_rows32_tflops", tf);
    }
    if (df_backend_set_variant(be, "attention_rows_per_warp", 0, err)) goto done; /* automatic, as in every forward */
    printf("\n");

    DfTargetModel m;
    DfModelConfig cfg;
    if (df_model_config_load(&cfg, o->target, err)) goto done;
    df_backend_reset_peak(be);
    if (df_target_load(&m, be, o->target, cfg.num_layers, 1, err)) goto done;
    rc = df_bench_model_prefill(be, &m, o->target, "target", o, peak, nominal, json, err);
    df_target_free(&m);
    if (rc) goto done;
    printf("\n");

    cfg = df_bench_qwen3_8b_shape();
    df_backend_reset_peak(be);
    double t0 = df_now_seconds();
    if ((rc = df_target_init_random(&m, be, &cfg, 1234, 1, err)) != 0) goto done;
    printf("%-40s %9.1f s\n", "Qwen3-8B random weights built in", df_now_seconds() - t0);
    rc = df_bench_model_prefill(be, &m, "Qwen3-8B shape (random)", "qwen3_8b", o, peak, nominal, json, err);
    if (rc == 0) { /* the other attention kernel shape, for comparison */
        DfPrefillResult r;
        rc = df_backend_set_variant(be, "attention_rows_per_warp", 16, err);
        if (rc == 0) rc = df_bench_prefill(be, &m, o->seq_len, o->n_seqs, 1, o->repeat, &r, err);
        /* the training steps below set every variant back to its default themselves (df_bench_train_step) */
        if (rc == 0) df_bench_prefill_report("Qwen3-8B full, attention 16 rows/warp", "qwen3_8b_full_rows16", &r, peak, nominal,
                                            json);
    }
    df_target_free(&m);
    if (rc == 0) rc = bench_gpu_train_steps(be, o, peak, nominal, json, err);
done:
    df_backend_destroy(be);
    return rc;
}
