/* The decode figures of the bench harness (--decode): batched decode
 * tokens/s next to the memory-bandwidth limit measured in the same run, and
 * one speculative cycle against one greedy step. */
#include <omp.h>
#include <stdio.h>

#include "backend/select.h"
#include "base/clock.h"
#include "bench/bench_decode.h"
#include "bench/bench_internal.h"
#include "bench/bench_spec_cycle.h"
#include "target/decode_graphs.h"
#include "target/target_random.h"

static void report_decode(const char *name, const char *key, const DfDecodeBenchResult *r, int both_modes,
                          cJSON *json) {
    char label[160];
    snprintf(label, sizeof label, "%s%s", name, !both_modes ? "" : r->graphs ? ", graphs" : ", op by op");
    int compute_bound = r->compute_limit_tokens_per_s > 0 && r->limit_tokens_per_s == r->compute_limit_tokens_per_s;
    printf("%-36s batch %4d %9.1f tokens/s %8.3f ms/step | limit %9.1f tokens/s (%s): %5.1f%% | read/step %.3f GB "
           "weights + %.3f GB kv",
           label, r->batch, r->tokens_per_s, r->step_ms, r->limit_tokens_per_s, compute_bound ? "GEMM peak" : "bandwidth",
           100 * r->tokens_per_s / r->limit_tokens_per_s, r->weight_bytes / 1e9, r->kv_bytes / 1e9);
    if (r->state_bytes > 0) printf(" + %.3f GB recurrent state (read + written)", r->state_bytes / 1e9);
    printf(" = %.1f tokens/s at the bandwidth; %.2f GFLOP/step", r->bandwidth_limit_tokens_per_s, r->flops / 1e9);
    if (r->compute_limit_tokens_per_s > 0) printf(" = %.1f tokens/s at the GEMM peak", r->compute_limit_tokens_per_s);
    if (r->device_ms > 0) printf(" | kernels %.3f ms/step (kv attention %.3f)", r->device_ms, r->attention_ms);
    printf("\n");
    if (r->kinds[0]) printf("    kernel ms per step by kind (profiled, op by op): %s\n", r->kinds);
    char name_buf[128];
    const struct {
        const char *suffix;
        double v;
    } fig[] = {{"tokens_per_s", r->tokens_per_s}, {"step_ms", r->step_ms}, {"limit_tokens_per_s", r->limit_tokens_per_s},
               {"fraction_of_limit", r->tokens_per_s / r->limit_tokens_per_s},
               {"bandwidth_limit_tokens_per_s", r->bandwidth_limit_tokens_per_s},
               {"compute_limit_tokens_per_s", r->compute_limit_tokens_per_s}, {"gflop_per_step", r->flops / 1e9},
               {"weight_gb", r->weight_bytes / 1e9}, {"kv_gb", r->kv_bytes / 1e9}, {"state_gb", r->state_bytes / 1e9},
               {"kernel_ms_per_step", r->device_ms}, {"kv_attention_ms_per_step", r->attention_ms}};
    for (size_t i = 0; i < sizeof fig / sizeof fig[0]; i++) {
        snprintf(name_buf, sizeof name_buf, "decode_%s_b%d_%s%s", key, r->batch, fig[i].suffix,
                 both_modes && !r->graphs ? "_op_by_op" : "");
        df_bench_add_number(json, name_buf, fig[i].v);
    }
}

/* Whether batch sequences fit the device beside the model; a note when they do not. */
static int batch_fits(DfTargetModel *m, const char *name, const DfBenchOptions *o, int batch) {
    DfMemoryInfo mem;
    df_backend_memory_info(m->be, &mem);
    if (mem.available == SIZE_MAX) return 1;
    size_t act = (size_t)m->embed.elem_size, reserve = df_memory_reserve(mem.total, mem.host);
    size_t need = df_bench_decode_bytes(&m->cfg, batch, o->prompt_len, o->prompt_len + o->new_tokens, act);
    if (need + reserve <= mem.available) return 1;
    printf("%-36s batch %4d skipped: its KV cache, states and workspace take %.2f GiB, %.2f GiB free (%.2f kept "
           "free)\n",
           name, batch, need / 1073741824.0, mem.available / 1073741824.0, reserve / 1073741824.0);
    return 0;
}

static int decode_batches(DfTargetModel *m, const char *name, const char *key, const DfBenchOptions *o, double bw,
                          double peak, cJSON *json, DfError *err) {
    /* where steps can be recorded, also without, for the difference it makes */
    int both_modes = df_decode_graphs_available(m->be);
    for (int graphs = 1; graphs >= (both_modes ? 0 : 1); graphs--)
        for (int i = 0; i < o->n_decode_batches; i++) {
            DfDecodeBenchResult r;
            if (!batch_fits(m, name, o, o->decode_batches[i])) continue;
            if (df_bench_decode(m, o->decode_batches[i], o->prompt_len, o->new_tokens, bw, peak, graphs, &r, err))
                return -1;
            report_decode(name, key, &r, both_modes, json);
            fflush(stdout);
        }
    return 0;
}

/* One speculative cycle against one greedy step of the same target (batch 1, steps recorded where the backend records). */
static int report_spec_cycle(DfTargetModel *m, const char *key, const DfBenchOptions *o, double bw, cJSON *json,
                             DfError *err) {
    DfDecodeBenchResult greedy;
    DfSpecCycleResult spec;
    if (df_bench_decode(m, 1, o->prompt_len, o->new_tokens, bw, 0, 1, &greedy, err) ||
        df_bench_spec_cycle(m, o->prompt_len, o->new_tokens, 16, 5, &spec, err))
        return -1;
    double ratio = spec.cycle_ms / greedy.step_ms;
    printf("%-36s %8.3f ms (block %d, a %d-layer drafter of random weights, %d cycles) = %.2f greedy steps of "
           "%.3f ms: speculative decoding pays from tau %.2f on (at tau 3: %.2fx greedy, at 4.77: %.2fx)\n",
           "    speculative cycle, batch 1", spec.cycle_ms, spec.block_size, spec.draft_layers, spec.cycles, ratio,
           greedy.step_ms, ratio, 3.0 / ratio, 4.77 / ratio);
    char name[96];
    snprintf(name, sizeof name, "decode_%s_spec_cycle_ms", key);
    df_bench_add_number(json, name, spec.cycle_ms);
    snprintf(name, sizeof name, "decode_%s_spec_cycle_over_step", key);
    df_bench_add_number(json, name, ratio);
    return 0;
}

int df_bench_decode_figures(const DfBenchOptions *o, cJSON *json, DfError *err) {
    int gpu = df_device_kind(o->device) == DF_DEVICE_ACCELERATOR;
    DfBackend *be = df_backend_create(o->device, err);
    if (!be) return -1;
    int rc = -1;
    double bw = 0, peak = 0;
    DfTargetModel m;
    DfModelConfig cfg;
    if (gpu) {
        char desc[256];
        df_backend_describe(be, desc, sizeof desc);
        printf("dflash bench --decode on %s: %s\n", o->device, desc);
        cJSON_AddStringToObject(json, "gpu", desc);
        if (df_bench_require_timing(be, o->device, err) || be->ops->copy_bandwidth(be, (size_t)2 << 30, 20, &bw, err))
            goto done;
        printf("%-36s %9.1f GB/s (device-to-device copy of 2 GiB, read + write, median of 20)\n", "bandwidth", bw);
        if (df_bench_gemm_tflops(be, 8192, 8192, 8192, 50, &peak, err)) goto done;
        printf("%-36s %9.1f TFLOP/s (cuBLASLt bf16 GEMM 8192^3, median of 50)\n", "GEMM peak", peak);
    } else {
        printf("dflash bench --decode on the CPU, %d threads\n", omp_get_max_threads());
        bw = df_host_copy_bandwidth((size_t)1 << 30, 3);
        printf("%-36s %9.1f GB/s (parallel memcpy of 1 GiB, read + write, best of 3)\n", "bandwidth", bw);
        peak = df_bench_sgemm_gflops(1024, 1024, 1024, 3) / 1e3;
        printf("%-36s %9.3f TFLOP/s (OpenBLAS sgemm 1024^3 on all cores, best of 3)\n", "GEMM peak", peak);
    }
    df_bench_add_number(json, "decode_bandwidth_gbs", bw);
    df_bench_add_number(json, "decode_gemm_peak_tflops", peak);
    printf("prompts of %d tokens, %d new tokens each (greedy); tokens/s = batch / median step; limit = batch / the "
           "larger of (bytes a step moves / bandwidth) and (its FLOPs / GEMM peak)\n",
           o->prompt_len, o->new_tokens);
    df_bench_add_number(json, "decode_prompt_len", o->prompt_len);
    df_bench_add_number(json, "decode_new_tokens", o->new_tokens);
    if (df_model_config_load(&cfg, o->target, err) || df_target_load(&m, be, o->target, cfg.num_layers, 1, err)) goto done;
    rc = decode_batches(&m, o->target, "target", o, bw, peak, json, err);
    if (rc == 0) rc = report_spec_cycle(&m, "target", o, bw, json, err);
    df_target_free(&m);
    if (rc || !gpu) goto done;
    rc = -1;
    /* with --hybrid the Qwen3.6-27B-shaped hybrid target instead of the Qwen3-8B shape */
    cfg = o->hybrid ? df_bench_qwen36_27b_shape(o->hybrid_layers) : df_bench_qwen3_8b_shape();
    double t0 = df_now_seconds();
    if (df_target_init_random(&m, be, &cfg, 1234, 1, err)) goto done;
    printf("%-36s %9.1f s (%d layers)\n", "random weights built in", df_now_seconds() - t0, cfg.num_layers);
    char name[64];
    snprintf(name, sizeof name, o->hybrid ? "Qwen3.6-27B shape (random, %d layers)" : "Qwen3-8B shape (random)",
             cfg.num_layers);
    rc = decode_batches(&m, name, o->hybrid ? "qwen36_27b" : "qwen3_8b", o, bw, peak, json, err);
    if (rc == 0) rc = report_spec_cycle(&m, o->hybrid ? "qwen36_27b" : "qwen3_8b", o, bw, json, err);
    df_target_free(&m);
done:
    df_backend_destroy(be);
    return rc;
}
