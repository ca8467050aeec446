/* dflash bench: measures this machine's speed on the CPU paths, each figure
 * next to the hardware reference measured in the same run:
 *   - OpenBLAS sgemm GFLOP/s (all cores) at the target forward's shapes;
 *   - the target forward (tokens/s, GFLOP/s counted per spec section 8);
 *   - tokenizer encode MB/s (one thread, and all threads);
 *   - token store random sample access (ns per access).
 * With --device cuda[:N], the GPU figures instead:
 *   - cuBLASLt bf16 GEMM TFLOP/s (8192^3 and the prefill's own shapes),
 *     CUDA events, warm-up, median of many; the best of them is the
 *     measured peak;
 *   - the attention op alone at the Qwen3-8B shape (both kernel shapes);
 *   - target prefill tokens/s and MFU (spec section 8 FLOPs over the measured
 *     peak and over the nominal 989 TFLOP/s dense bf16 of an H100/H200 SXM)
 *     for the given target (real weights) and a Qwen3-8B-shaped target with
 *     random weights built in GPU memory; time split by op kind; peak memory;
 *   - with --hybrid, instead: the prefill of a Qwen3.6-27B-shaped hybrid
 *     target (Gated DeltaNet + gated attention) with random weights, all or
 *     --hybrid-layers of its 64 layers (dev/compare/hybrid_transformers.py times
 *     transformers' forward of the same model).
 * --json writes the figures for bench/ records. */
#include <cblas.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/select.h"
#include "base/clock.h"
#include "base/paths_apart.h"
#include "base/sort.h"
#include "cli/args.h"
#include "bench/bench_data.h"
#include "bench/bench_decode.h"
#include "bench/bench_spec_cycle.h"
#include "infer/decode_graphs.h"
#include "bench/bench_drafter.h"
#include "bench/bench_train_step.h"
#include "cli/commands.h"
#include "model/target.h"
#include "model/target_random.h"
#include "text/tokenizer.h"

typedef struct BenchOptions {
    const char *target;
    const char *tokenizer; /* NULL: the target's */
    const char *data;
    const char *json_out;
    const char *device;
    int seq_len;
    int n_seqs;
    int repeat;
    int train_seqs; /* sequences of one benchmarked GPU training step */
    int train_repeat; /* timed GPU training steps after the warm-up (their median is the figure) */
    int train_only; /* GPU: the GEMM peak and the training steps, no prefill figures */
    int decode;                   /* --decode: the decode figures instead */
    int prompt_len, new_tokens;   /* of the decode figures */
    int hybrid;                   /* --hybrid: a Qwen3.6-27B-shaped hybrid target's prefill instead */
    int hybrid_layers;            /* of it: 4..64 decoder layers built (3 default taps need 4) */
    DfStringList kernel_variant;  /* --kernel-variant NAME=VALUE, as given */
    DfKernelVariants variants;    /* parsed from them, for the training steps or the hybrid prefill */
} BenchOptions;

/* Best-of-`repeat` time of C[m,n] = A[m,k] B[n,k]^T with OpenBLAS on all cores. */
static double bench_sgemm_gflops(int m, int n, int k, int repeat) {
    float *a = df_xmalloc((size_t)m * k * sizeof(float), "sgemm A");
    float *b = df_xmalloc((size_t)n * k * sizeof(float), "sgemm B");
    float *c = df_xmalloc((size_t)m * n * sizeof(float), "sgemm C");
    for (size_t i = 0; i < (size_t)m * k; i++) a[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    for (size_t i = 0; i < (size_t)n * k; i++) b[i] = (float)((i * 40503u) % 1000) / 1000.0f - 0.5f;
    openblas_set_num_threads(omp_get_max_threads());
    double best = 1e30;
    for (int r = 0; r < repeat + 1; r++) { /* first run is warm-up */
        double t0 = df_now_seconds();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
        double t = df_now_seconds() - t0;
        if (r > 0 && t < best) best = t;
    }
    openblas_set_num_threads(1); /* the CPU backend runs OpenBLAS single-threaded under OpenMP */
    free(a);
    free(b);
    free(c);
    return 2.0 * m * n * k / best / 1e9;
}

typedef struct ForwardResult {
    double tokens_per_s, gflops;
    int layers;
} ForwardResult;

static int bench_target_forward(const BenchOptions *o, int with_logits, ForwardResult *res, DfError *err) {
    DfBackend *be = df_backend_cpu_create(err);
    if (!be) return -1;
    DfModelConfig cfg;
    int rc = df_model_config_load(&cfg, o->target, err);
    int taps[3];
    if (rc == 0) df_default_target_layer_ids(cfg.num_layers, 3, taps);
    int n_layers = rc == 0 ? df_target_layers_needed(&cfg, taps, 3, with_logits) : 0;
    DfTargetModel model;
    if (rc == 0) rc = df_target_load(&model, be, o->target, n_layers, with_logits, err);
    if (rc != 0) {
        df_backend_destroy(be);
        return -1;
    }
    int T = o->seq_len * o->n_seqs;
    int32_t *ids = df_xmalloc((size_t)T * sizeof *ids, "bench ids");
    int32_t *starts = df_xmalloc((size_t)(o->n_seqs + 1) * sizeof *starts, "bench starts");
    int *lens = df_xmalloc((size_t)o->n_seqs * sizeof *lens, "bench lens");
    for (int i = 0; i < T; i++) ids[i] = (int32_t)((i * 7919u + 13u) % (unsigned)(cfg.vocab_size - 2));
    for (int s = 0; s <= o->n_seqs; s++) starts[s] = s * o->seq_len;
    for (int s = 0; s < o->n_seqs; s++) lens[s] = o->seq_len;
    float *feat = df_xmalloc((size_t)T * 3 * cfg.hidden_size * sizeof(float), "bench features");
    float *logits = with_logits ? df_xmalloc((size_t)T * cfg.vocab_size * sizeof(float), "bench logits") : NULL;
    double best = 1e30;
    for (int r = 0; r < o->repeat + 1 && rc == 0; r++) {
        double t0 = df_now_seconds();
        rc = df_target_forward(&model, ids, starts, o->n_seqs, taps, 3, feat, logits, err);
        double t = df_now_seconds() - t0;
        if (r > 0 && t < best) best = t;
    }
    if (rc == 0) {
        res->layers = model.layers_run;
        res->tokens_per_s = T / best;
        res->gflops = df_target_forward_flops(&cfg, lens, o->n_seqs, model.layers_run, with_logits) / best / 1e9;
    }
    free(ids);
    free(starts);
    free(lens);
    free(feat);
    free(logits);
    df_target_free(&model);
    df_backend_destroy(be);
    return rc;
}

/* Encode MB/s over the texts with `threads` threads (each text encoded whole). */
static double bench_tokenizer(const DfTokenizer *tok, const DfBenchTexts *texts, int threads, int repeat) {
    double best = 1e30;
    for (int r = 0; r < repeat + 1; r++) {
        double t0 = df_now_seconds();
        int failed = 0;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 16) reduction(+ : failed)
        for (size_t i = 0; i < texts->count; i++) {
            DfI32Vec ids = {0};
            if (df_tokenizer_encode(tok, texts->text[i], texts->len[i], &ids, NULL) != 0) failed++;
            df_i32vec_free(&ids);
        }
        double t = df_now_seconds() - t0;
        if (failed) return -1;
        if (r > 0 && t < best) best = t;
    }
    return (double)texts->bytes / best / 1e6;
}

static void add_number(cJSON *obj, const char *name, double v) {
    cJSON_AddNumberToObject(obj, name, v);
}

/* A target of Qwen3-8B's shape (config.json of Qwen/Qwen3-8B). */
static DfModelConfig qwen3_8b_shape(void) {
    DfModelConfig c;
    memset(&c, 0, sizeof c);
    c.arch = DF_ARCH_QWEN3;
    snprintf(c.architecture_name, sizeof c.architecture_name, "Qwen3ForCausalLM");
    c.hidden_size = 4096, c.intermediate_size = 12288, c.num_layers = 36, c.num_heads = 32, c.num_kv_heads = 8;
    c.head_dim = 128, c.vocab_size = 151936, c.max_position_embeddings = 40960, c.rms_norm_eps = 1e-6;
    c.rope.theta = 1e6, c.rope.type = DF_ROPE_DEFAULT, c.has_qk_norm = 1, c.tie_word_embeddings = 0;
    c.bos_token_id = -1;
    return c;
}

/* Qwen3.6-27B's text model (the public Qwen3.5-27B / Qwen3.6-27B config.json):
 * 64 layers, every 4th full attention, hidden 5120, MLP 17408, 24 query / 4
 * kv heads of 256 with a gated q_proj and rotary on 64 of them (partial
 * factor 0.25, theta 1e7); DeltaNet 16 key / 48 value heads of 128, conv
 * kernel 4; vocabulary 248320, untied head. With n_layers < 64 the first
 * n_layers of that layout (the same 3:1 pattern). */
static DfModelConfig qwen36_27b_shape(int n_layers) {
    DfModelConfig c;
    memset(&c, 0, sizeof c);
    c.arch = DF_ARCH_QWEN3_5;
    snprintf(c.architecture_name, sizeof c.architecture_name, "Qwen3_5ForCausalLM");
    c.hidden_size = 5120, c.intermediate_size = 17408, c.num_layers = n_layers, c.num_heads = 24, c.num_kv_heads = 4;
    c.head_dim = 256, c.rotary_dim = 64, c.vocab_size = 248320, c.max_position_embeddings = 262144;
    c.rms_norm_eps = 1e-6, c.rope.theta = 1e7, c.rope.type = DF_ROPE_DEFAULT, c.has_qk_norm = 1;
    c.tie_word_embeddings = 0, c.bos_token_id = -1;
    c.is_hybrid = 1, c.attn_output_gate = 1, c.norm_unit_offset = 1;
    c.linear = (DfLinearAttnConfig){.num_key_heads = 16, .num_value_heads = 48, .key_head_dim = 128,
                                    .value_head_dim = 128, .conv_kernel = 4};
    for (int i = 0; i < n_layers; i++) c.layer_is_linear[i] = (i + 1) % 4 != 0;
    return c;
}

/* The device figures time ops with the device's own timers and split them
 * with its per-op profile. */
static int require_timing(DfBackend *be, const char *device, DfError *err) {
    if (df_backend_has(be, DF_CAP_TIMING | DF_CAP_PROFILE)) return 0;
    return df_fail(err, "--device %s: the %s backend has no device timers or op profile for these figures", device,
                   be->ops->name);
}

/* --- decode figures (--decode) --------------------------------------------- */

static void report_decode(const char *name, const char *key, const DfDecodeBenchResult *r, int both_modes,
                          cJSON *json) {
    char label[160];
    snprintf(label, sizeof label, "%s%s", name, !both_modes ? "" : r->graphs ? ", graphs" : ", op by op");
    printf("%-36s batch %3d %9.1f tokens/s %8.3f ms/step | limit %9.1f tokens/s: %5.1f%% | read/step %.3f GB "
           "weights + %.3f GB kv",
           label, r->batch, r->tokens_per_s, r->step_ms, r->limit_tokens_per_s, 100 * r->tokens_per_s / r->limit_tokens_per_s,
           r->weight_bytes / 1e9, r->kv_bytes / 1e9);
    if (r->state_bytes > 0) printf(" + %.3f GB recurrent state (read + written)", r->state_bytes / 1e9);
    if (r->device_ms > 0) printf(" | kernels %.3f ms/step (kv attention %.3f)", r->device_ms, r->attention_ms);
    printf("\n");
    if (r->kinds[0]) printf("    kernel ms per step by kind (profiled, op by op): %s\n", r->kinds);
    char name_buf[128];
    const struct {
        const char *suffix;
        double v;
    } fig[] = {{"tokens_per_s", r->tokens_per_s}, {"step_ms", r->step_ms}, {"limit_tokens_per_s", r->limit_tokens_per_s},
               {"fraction_of_limit", r->tokens_per_s / r->limit_tokens_per_s}, {"weight_gb", r->weight_bytes / 1e9},
               {"kv_gb", r->kv_bytes / 1e9}, {"state_gb", r->state_bytes / 1e9}, {"kernel_ms_per_step", r->device_ms},
               {"kv_attention_ms_per_step", r->attention_ms}};
    for (size_t i = 0; i < sizeof fig / sizeof fig[0]; i++) {
        snprintf(name_buf, sizeof name_buf, "decode_%s_b%d_%s%s", key, r->batch, fig[i].suffix,
                 both_modes && !r->graphs ? "_op_by_op" : "");
        add_number(json, name_buf, fig[i].v);
    }
}

static int decode_batches(DfTargetModel *m, const char *name, const char *key, const BenchOptions *o, double bw,
                          cJSON *json, DfError *err) {
    static const int batches[] = {1, 64};
    /* where steps can be recorded, also without, for the difference it makes */
    int both_modes = df_decode_graphs_available(m->be);
    for (int graphs = 1; graphs >= (both_modes ? 0 : 1); graphs--)
        for (size_t i = 0; i < sizeof batches / sizeof batches[0]; i++) {
            DfDecodeBenchResult r;
            if (df_bench_decode(m, batches[i], o->prompt_len, o->new_tokens, bw, graphs, &r, err)) return -1;
            report_decode(name, key, &r, both_modes, json);
            fflush(stdout);
        }
    return 0;
}

/* One speculative cycle against one greedy step of the same target (batch 1, steps recorded where the backend records). */
static int report_spec_cycle(DfTargetModel *m, const char *key, const BenchOptions *o, double bw, cJSON *json,
                             DfError *err) {
    DfDecodeBenchResult greedy;
    DfSpecCycleResult spec;
    if (df_bench_decode(m, 1, o->prompt_len, o->new_tokens, bw, 1, &greedy, err) ||
        df_bench_spec_cycle(m, o->prompt_len, o->new_tokens, 16, 5, &spec, err))
        return -1;
    double ratio = spec.cycle_ms / greedy.step_ms;
    printf("%-36s %8.3f ms (block %d, a %d-layer drafter of random weights, %d cycles) = %.2f greedy steps of "
           "%.3f ms: speculative decoding pays from tau %.2f on (at tau 3: %.2fx greedy, at 4.77: %.2fx)\n",
           "    speculative cycle, batch 1", spec.cycle_ms, spec.block_size, spec.draft_layers, spec.cycles, ratio,
           greedy.step_ms, ratio, 3.0 / ratio, 4.77 / ratio);
    char name[96];
    snprintf(name, sizeof name, "decode_%s_spec_cycle_ms", key);
    add_number(json, name, spec.cycle_ms);
    snprintf(name, sizeof name, "decode_%s_spec_cycle_over_step", key);
    add_number(json, name, ratio);
    return 0;
}

static int run_decode_bench(const BenchOptions *o, cJSON *json, DfError *err) {
    int gpu = df_device_kind(o->device) == DF_DEVICE_ACCELERATOR;
    DfBackend *be = df_backend_create(o->device, err);
    if (!be) return -1;
    int rc = -1;
    double bw = 0;
    DfTargetModel m;
    DfModelConfig cfg;
    if (gpu) {
        char desc[256];
        df_backend_describe(be, desc, sizeof desc);
        printf("dflash bench --decode on %s: %s\n", o->device, desc);
        cJSON_AddStringToObject(json, "gpu", desc);
        if (require_timing(be, o->device, err) || be->ops->copy_bandwidth(be, (size_t)2 << 30, 20, &bw, err))
            goto done;
        printf("%-36s %9.1f GB/s (device-to-device copy of 2 GiB, read + write, median of 20)\n", "bandwidth", bw);
    } else {
        printf("dflash bench --decode on the CPU, %d threads\n", omp_get_max_threads());
        bw = df_host_copy_bandwidth((size_t)1 << 30, 3);
        printf("%-36s %9.1f GB/s (parallel memcpy of 1 GiB, read + write, best of 3)\n", "bandwidth", bw);
    }
    add_number(json, "decode_bandwidth_gbs", bw);
    printf("prompts of %d tokens, %d new tokens each (greedy); tokens/s = batch / median step; limit = batch / "
           "(bytes read per step / bandwidth)\n",
           o->prompt_len, o->new_tokens);
    add_number(json, "decode_prompt_len", o->prompt_len);
    add_number(json, "decode_new_tokens", o->new_tokens);
    if (df_model_config_load(&cfg, o->target, err) || df_target_load(&m, be, o->target, cfg.num_layers, 1, err)) goto done;
    rc = decode_batches(&m, o->target, "target", o, bw, json, err);
    if (rc == 0) rc = report_spec_cycle(&m, "target", o, bw, json, err);
    df_target_free(&m);
    if (rc || !gpu) goto done;
    rc = -1;
    /* with --hybrid the Qwen3.6-27B-shaped hybrid target instead of the Qwen3-8B shape */
    cfg = o->hybrid ? qwen36_27b_shape(o->hybrid_layers) : qwen3_8b_shape();
    double t0 = df_now_seconds();
    if (df_target_init_random(&m, be, &cfg, 1234, 1, err)) goto done;
    printf("%-36s %9.1f s (%d layers)\n", "random weights built in", df_now_seconds() - t0, cfg.num_layers);
    char name[64];
    snprintf(name, sizeof name, o->hybrid ? "Qwen3.6-27B shape (random, %d layers)" : "Qwen3-8B shape (random)",
             cfg.num_layers);
    rc = decode_batches(&m, name, o->hybrid ? "qwen36_27b" : "qwen3_8b", o, bw, json, err);
    if (rc == 0) rc = report_spec_cycle(&m, o->hybrid ? "qwen36_27b" : "qwen3_8b", o, bw, json, err);
    df_target_free(&m);
done:
    df_backend_destroy(be);
    return rc;
}

/* --- GPU figures (--device cuda) -------------------------------------------- */

#define NOMINAL_BF16_TFLOPS 989.0 /* H100 / H200 SXM, dense bf16 */

/* Uniform values in [-1, 1]: never zeros, which run faster than real data. */
static int fill_uniform(DfBackend *be, DfBuffer b, uint64_t seed, DfError *err) {
    size_t block = (size_t)1 << 22;
    float *host = df_xmalloc(block * sizeof *host, "bench block");
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    int rc = 0;
    for (size_t off = 0; off < b.count && rc == 0; off += block) {
        size_t n = b.count - off < block ? b.count - off : block;
        for (size_t i = 0; i < n; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            host[i] = (float)((double)(s >> 11) / 4503599627370496.0 - 1.0);
        }
        rc = be->ops->upload_f32(be, df_buffer_view(b, off, n), host, err);
    }
    free(host);
    return rc;
}

/* Median TFLOP/s of y[m,n] = x[m,k] w[n,k]^T, the layout of every linear
 * layer, timed one product at a time with CUDA events after a warm-up. */
static int gpu_gemm_tflops(DfBackend *be, int m, int n, int k, int iters, double *tflops, DfError *err) {
    DfBuffer x = {0}, w = {0}, y = {0};
    DfTimer *timer = be->ops->timer_create(be, err);
    double *ms = df_xmalloc((size_t)iters * sizeof *ms, "gemm times");
    int rc = -1;
    if (!timer) goto done;
    if (df_buffer_alloc(be, &x, DF_BUF_ACT, (size_t)m * k, err) || df_buffer_alloc(be, &w, DF_BUF_ACT, (size_t)n * k, err) ||
        df_buffer_alloc(be, &y, DF_BUF_ACT, (size_t)m * n, err) || fill_uniform(be, x, 1, err) || fill_uniform(be, w, 2, err))
        goto done;
    for (int i = 0; i < 3; i++) df_op_linear(be, y, x, w, m, n, k, 0);
    for (int i = 0; i < iters; i++) {
        be->ops->timer_start(be, timer);
        df_op_linear(be, y, x, w, m, n, k, 0);
        ms[i] = be->ops->timer_stop(be, timer);
    }
    if (be->ops->sync(be, err)) goto done;
    *tflops = 2.0 * m * n * k / (df_median_sorting(ms, (size_t)iters) * 1e-3) / 1e12;
    rc = 0;
done:
    df_buffer_free(be, &x), df_buffer_free(be, &w), df_buffer_free(be, &y);
    if (timer) be->ops->timer_destroy(be, timer);
    free(ms);
    return rc;
}

/* Median TFLOP/s of the attention op alone over n_seqs x seq_len packed
 * tokens (causal FLOPs as spec section 8 counts them: 2 S^2 nh hd per sequence). */
static int gpu_attention_tflops(DfBackend *be, int seq_len, int n_seqs, int heads, int kv_heads, int hd, int iters,
                                double *tflops, DfError *err) {
    int t = seq_len * n_seqs;
    int32_t *starts = df_xmalloc((size_t)(n_seqs + 1) * sizeof *starts, "attention starts");
    for (int s = 0; s <= n_seqs; s++) starts[s] = s * seq_len;
    DfPackedBatch batch;
    DfBuffer q = {0}, k = {0}, v = {0}, o = {0}, no_lse = {0};
    no_lse.kind = DF_BUF_F32;
    DfTimer *timer = be->ops->timer_create(be, err);
    double *ms = df_xmalloc((size_t)iters * sizeof *ms, "attention times");
    int rc = df_packed_batch_init(&batch, be, starts, n_seqs, err);
    free(starts);
    if (rc) goto done_nobatch;
    rc = -1;
    if (!timer || df_buffer_alloc(be, &q, DF_BUF_ACT, (size_t)t * heads * hd, err) ||
        df_buffer_alloc(be, &o, DF_BUF_ACT, (size_t)t * heads * hd, err) ||
        df_buffer_alloc(be, &k, DF_BUF_ACT, (size_t)t * kv_heads * hd, err) ||
        df_buffer_alloc(be, &v, DF_BUF_ACT, (size_t)t * kv_heads * hd, err) || fill_uniform(be, q, 3, err) ||
        fill_uniform(be, k, 4, err) || fill_uniform(be, v, 5, err))
        goto done;
    float scale = 1.0f / sqrtf((float)hd);
    for (int i = 0; i < 3; i++) df_op_attention(be, o, no_lse, q, k, v, &batch, heads, kv_heads, hd, scale);
    for (int i = 0; i < iters; i++) {
        be->ops->timer_start(be, timer);
        df_op_attention(be, o, no_lse, q, k, v, &batch, heads, kv_heads, hd, scale);
        ms[i] = be->ops->timer_stop(be, timer);
    }
    if (be->ops->sync(be, err)) goto done;
    *tflops = 2.0 * seq_len * (double)seq_len * heads * hd * n_seqs / (df_median_sorting(ms, (size_t)iters) * 1e-3) / 1e12;
    rc = 0;
done:
    df_packed_batch_free(&batch, be);
done_nobatch:
    df_buffer_free(be, &q), df_buffer_free(be, &k), df_buffer_free(be, &v), df_buffer_free(be, &o);
    if (timer) be->ops->timer_destroy(be, timer);
    free(ms);
    return rc;
}

typedef struct PrefillResult {
    double ms, tokens_per_s, tflops;
    int layers;
    size_t peak_bytes;
    double op_ms[DF_OP_COUNT]; /* by DfOpId */
} PrefillResult;

/* Buffers of one packed prefill batch on the GPU. */
typedef struct PrefillBatch {
    DfPackedBatch batch;
    DfBuffer ids, features, logits;
    int *lens;
} PrefillBatch;

static void prefill_batch_free(DfBackend *be, PrefillBatch *p) {
    df_packed_batch_free(&p->batch, be);
    df_buffer_free(be, &p->ids), df_buffer_free(be, &p->features), df_buffer_free(be, &p->logits);
    free(p->lens);
}

static int prefill_batch_init(DfBackend *be, const DfModelConfig *cfg, int seq_len, int n_seqs, int with_logits,
                              PrefillBatch *p, DfError *err) {
    memset(p, 0, sizeof *p);
    int t = seq_len * n_seqs;
    int32_t *ids = df_xmalloc((size_t)t * sizeof *ids, "bench ids");
    int32_t *starts = df_xmalloc((size_t)(n_seqs + 1) * sizeof *starts, "bench starts");
    p->lens = df_xmalloc((size_t)n_seqs * sizeof *p->lens, "bench lens");
    for (int i = 0; i < t; i++) ids[i] = (int32_t)((i * 7919u + 13u) % (unsigned)(cfg->vocab_size - 2));
    for (int s = 0; s <= n_seqs; s++) starts[s] = s * seq_len;
    for (int s = 0; s < n_seqs; s++) p->lens[s] = seq_len;
    int rc = df_packed_batch_init(&p->batch, be, starts, n_seqs, err) ||
             df_buffer_alloc(be, &p->ids, DF_BUF_I32, (size_t)t, err) || be->ops->upload_i32(be, p->ids, ids, err) ||
             df_buffer_alloc(be, &p->features, DF_BUF_ACT, (size_t)t * 3 * cfg->hidden_size, err) ||
             (with_logits && df_buffer_alloc(be, &p->logits, DF_BUF_ACT, (size_t)t * cfg->vocab_size, err));
    free(ids);
    free(starts);
    return rc ? -1 : 0;
}

/* Median prefill time over `repeat` runs after a warm-up, then one more run
 * with every op bracketed by events for the split by op kind. */
static int gpu_prefill(DfBackend *be, DfTargetModel *m, int seq_len, int n_seqs, int with_logits, int repeat,
                       PrefillResult *r, DfError *err) {
    memset(r, 0, sizeof *r);
    int taps[3];
    df_default_target_layer_ids(m->cfg.num_layers, 3, taps);
    PrefillBatch p;
    DfTimer *timer = be->ops->timer_create(be, err);
    double *ms = df_xmalloc((size_t)repeat * sizeof *ms, "prefill times");
    int rc = -1;
    if (!timer) goto done;
    if (prefill_batch_init(be, &m->cfg, seq_len, n_seqs, with_logits, &p, err)) goto done_batch;
    if (df_target_forward_batch(m, &p.batch, p.ids, taps, 3, p.features, p.logits, err)) goto done_batch;
    for (int i = 0; i < repeat; i++) {
        be->ops->timer_start(be, timer);
        if (df_target_forward_batch(m, &p.batch, p.ids, taps, 3, p.features, p.logits, err)) goto done_batch;
        ms[i] = be->ops->timer_stop(be, timer);
    }
    be->ops->profile_enable(be, 1);
    rc = df_target_forward_batch(m, &p.batch, p.ids, taps, 3, p.features, p.logits, err);
    be->ops->profile_enable(be, 0);
    if (rc == 0) rc = be->ops->profile_read(be, r->op_ms, NULL, err);
    if (rc == 0) {
        r->ms = df_median_sorting(ms, (size_t)repeat);
        r->layers = m->layers_run;
        r->tokens_per_s = (double)seq_len * n_seqs / (r->ms * 1e-3);
        r->tflops = df_target_forward_flops(&m->cfg, p.lens, n_seqs, m->layers_run, with_logits) / (r->ms * 1e-3) / 1e12;
        DfMemoryInfo mem;
        df_backend_memory_info(be, &mem);
        r->peak_bytes = mem.peak;
    }
done_batch:
    prefill_batch_free(be, &p);
done:
    if (timer) be->ops->timer_destroy(be, timer);
    free(ms);
    return rc;
}

static void report_prefill(const char *label, const char *key, const PrefillResult *r, double peak, cJSON *json) {
    printf("%-40s %9.0f tokens/s %8.2f ms %7.1f TFLOP/s  MFU %5.1f%% of measured, %5.1f%% of 989  (%d layers)\n", label,
           r->tokens_per_s, r->ms, r->tflops, 100 * r->tflops / peak, 100 * r->tflops / NOMINAL_BF16_TFLOPS, r->layers);
    double total = 0;
    for (int k = 0; k < DF_OP_COUNT; k++) total += r->op_ms[k];
    printf("%-40s", "    time by op kind");
    for (int k = 0; k < DF_OP_COUNT; k++)
        if (r->op_ms[k] > 0) printf(" %s %.1f%%", df_op_name(k), 100 * r->op_ms[k] / total);
    printf("\n");
    char name[128];
    const struct {
        const char *suffix;
        double v;
    } fig[] = {{"tokens_per_s", r->tokens_per_s}, {"ms", r->ms}, {"tflops", r->tflops},
               {"mfu_measured_peak", r->tflops / peak}, {"mfu_nominal_989", r->tflops / NOMINAL_BF16_TFLOPS},
               {"peak_gib", r->peak_bytes / 1073741824.0}};
    for (size_t i = 0; i < sizeof fig / sizeof fig[0]; i++) {
        snprintf(name, sizeof name, "%s_%s", key, fig[i].suffix);
        add_number(json, name, fig[i].v);
    }
}

/* Both prefill variants (taps only; all layers + logits) of one model. */
static int bench_model_prefill(DfBackend *be, DfTargetModel *m, const char *name, const char *key,
                               const BenchOptions *o, double peak, cJSON *json, DfError *err) {
    PrefillResult r;
    char label[96], jkey[96];
    for (int with_logits = 0; with_logits < 2; with_logits++) {
        if (gpu_prefill(be, m, o->seq_len, o->n_seqs, with_logits, o->repeat, &r, err)) return -1;
        snprintf(label, sizeof label, "%s, %s", name, with_logits ? "all layers + logits" : "taps only");
        snprintf(jkey, sizeof jkey, "%s_%s", key, with_logits ? "full" : "taps");
        report_prefill(label, jkey, &r, peak, json);
    }
    printf("%-40s %9.2f GiB (weights, activations, workspaces)\n", "    peak GPU memory", r.peak_bytes / 1073741824.0);
    return 0;
}

/* The whole training step: coder-tiny's shape, then Qwen3-8B's with
 * a 5-layer drafter, S = 2048, 512 anchors of 16. */
static int bench_gpu_train_steps(DfBackend *be, const BenchOptions *o, double peak, cJSON *json, DfError *err) {
    DfTrainStepShape s = {.drafter_layers = 5, .block_size = 16, .num_anchors = 512, .seq_len = 2048,
                          .n_seqs = o->train_seqs, .repeat = o->train_repeat, .variants = &o->variants};
    DfTrainStepResult r;
    printf("\n");
    if (df_model_config_load(&s.target, o->target, err)) return -1;
    s.drafter_layers = 2; /* as the demo trains it */
    if (df_bench_train_step(be, &s, &r, err)) return -1;
    df_bench_train_step_report("training step, coder-tiny shape (random)", "step_tiny", &s, &r, peak,
                               NOMINAL_BF16_TFLOPS, json);
    s.target = qwen3_8b_shape();
    s.drafter_layers = 5;
    if (df_bench_train_step(be, &s, &r, err)) return -1;
    df_bench_train_step_report("training step, Qwen3-8B shape (random)", "step_qwen3_8b", &s, &r, peak,
                               NOMINAL_BF16_TFLOPS, json);
    return 0;
}

/* --hybrid: the GEMM peak, then the Qwen3.6-27B-shaped target's prefill
 * (taps only; all built layers + logits). With fewer than 64 layers the
 * 64-layer figures are estimated from the measured per-layer time (taps run
 * time / layers run) plus the measured rest (embedding, head): an estimate,
 * printed as one. */
static int run_hybrid_bench(const BenchOptions *o, cJSON *json, DfError *err) {
    DfBackend *be = df_backend_create(o->device, err);
    if (!be) return -1;
    if (require_timing(be, o->device, err)) {
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
    int rc = -1;
    double peak = 0;
    DfTargetModel m;
    DfModelConfig cfg = qwen36_27b_shape(o->hybrid_layers);
    if (gpu_gemm_tflops(be, 8192, 8192, 8192, 50, &peak, err)) goto done;
    printf("%-40s %9.1f TFLOP/s (nominal %.0f): MFU's measured reference\n", "cuBLASLt bf16 GEMM 8192^3", peak,
           NOMINAL_BF16_TFLOPS);
    add_number(json, "gemm_8192_tflops", peak);
    add_number(json, "hybrid_layers", o->hybrid_layers);
    df_backend_reset_peak(be);
    double t0 = df_now_seconds();
    if (df_target_init_random(&m, be, &cfg, 1234, 1, err)) goto done;
    printf("%-40s %9.1f s (%d of 64 layers)\n", "Qwen3.6-27B random weights built in", df_now_seconds() - t0,
           o->hybrid_layers);
    PrefillResult taps, full;
    rc = gpu_prefill(be, &m, o->seq_len, o->n_seqs, 0, o->repeat, &taps, err);
    if (rc == 0) rc = gpu_prefill(be, &m, o->seq_len, o->n_seqs, 1, o->repeat, &full, err);
    if (rc == 0) {
        report_prefill("Qwen3.6-27B shape (random), taps only", "hybrid_taps", &taps, peak, json);
        report_prefill("Qwen3.6-27B shape (random), all + logits", "hybrid_full", &full, peak, json);
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
        add_number(json, "hybrid_per_layer_ms", per_layer);
        add_number(json, "hybrid_64_layers_tokens_per_s", tokens / (est_ms * 1e-3));
    }
    df_target_free(&m);
done:
    df_backend_destroy(be);
    return rc;
}

static int run_gpu_bench(const BenchOptions *o, cJSON *json, DfError *err) {
    DfBackend *be = df_backend_create(o->device, err);
    if (!be) return -1;
    if (require_timing(be, o->device, err)) {
        df_backend_destroy(be);
        return -1;
    }
    char desc[256];
    df_backend_describe(be, desc, sizeof desc);
    int t = o->seq_len * o->n_seqs;
    printf("dflash bench on %s: %s; prefill batches of %d x %d tokens\n\n", o->device, desc, o->n_seqs, o->seq_len);
    cJSON_AddStringToObject(json, "gpu", desc);
    int rc = -1;
    double peak = 0, tf = 0;
    if (gpu_gemm_tflops(be, 8192, 8192, 8192, 50, &peak, err)) goto done;
    printf("%-40s %9.1f TFLOP/s (nominal %.0f)\n", "cuBLASLt bf16 GEMM 8192^3", peak, NOMINAL_BF16_TFLOPS);
    add_number(json, "gemm_8192_tflops", peak);
    const struct {
        const char *name, *key;
        int n, k;
    } shapes[] = {{"q, o proj   [T x 4096 x 4096]", "gemm_qo_tflops", 4096, 4096},
                  {"k, v proj   [T x 1024 x 4096]", "gemm_kv_tflops", 1024, 4096},
                  {"gate, up    [T x 12288 x 4096]", "gemm_gate_up_tflops", 12288, 4096},
                  {"down        [T x 4096 x 12288]", "gemm_down_tflops", 4096, 12288},
                  {"lm head     [T x 151936 x 4096]", "gemm_lm_head_tflops", 151936, 4096}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (gpu_gemm_tflops(be, t, shapes[i].n, shapes[i].k, 20, &tf, err)) goto done;
        printf("  Qwen3-8B %-30s %9.1f TFLOP/s\n", shapes[i].name, tf);
        add_number(json, shapes[i].key, tf);
        if (tf > peak) peak = tf;
    }
    printf("%-40s %9.1f TFLOP/s (the best GEMM above: MFU's measured reference)\n", "measured peak", peak);
    add_number(json, "gemm_peak_tflops", peak);
    if (o->train_only) {
        rc = bench_gpu_train_steps(be, o, peak, json, err);
        goto done;
    }
    for (int rows = 16; rows <= 32; rows += 16) {
        if (df_backend_set_variant(be, "attention_rows_per_warp", rows, err) ||
            gpu_attention_tflops(be, o->seq_len, o->n_seqs, 32, 8, 128, 20, &tf, err))
            goto done;
        printf("  Qwen3-8B attention, %2d rows per warp   %9.1f TFLOP/s (causal, 32/8 heads of 128)\n", rows, tf);
        add_number(json, rows == 16 ? "attention_rows16_tflops" : "attention_rows32_tflops", tf);
    }
    if (df_backend_set_variant(be, "attention_rows_per_warp", 0, err)) goto done; /* automatic, as in every forward */
    printf("\n");

    DfTargetModel m;
    DfModelConfig cfg;
    if (df_model_config_load(&cfg, o->target, err)) goto done;
    df_backend_reset_peak(be);
    if (df_target_load(&m, be, o->target, cfg.num_layers, 1, err)) goto done;
    rc = bench_model_prefill(be, &m, o->target, "target", o, peak, json, err);
    df_target_free(&m);
    if (rc) goto done;
    printf("\n");

    cfg = qwen3_8b_shape();
    df_backend_reset_peak(be);
    double t0 = df_now_seconds();
    if ((rc = df_target_init_random(&m, be, &cfg, 1234, 1, err)) != 0) goto done;
    printf("%-40s %9.1f s\n", "Qwen3-8B random weights built in", df_now_seconds() - t0);
    rc = bench_model_prefill(be, &m, "Qwen3-8B shape (random)", "qwen3_8b", o, peak, json, err);
    if (rc == 0) { /* the other attention kernel shape, for comparison */
        PrefillResult r;
        rc = df_backend_set_variant(be, "attention_rows_per_warp", 16, err);
        if (rc == 0) rc = gpu_prefill(be, &m, o->seq_len, o->n_seqs, 1, o->repeat, &r, err);
        /* the training steps below set every variant back to its default themselves (df_bench_train_step) */
        if (rc == 0) report_prefill("Qwen3-8B full, attention 16 rows/warp", "qwen3_8b_full_rows16", &r, peak, json);
    }
    df_target_free(&m);
    if (rc == 0) rc = bench_gpu_train_steps(be, o, peak, json, err);
done:
    df_backend_destroy(be);
    return rc;
}

int df_cmd_bench(int argc, char **argv) {
    /* seq_len, n_seqs, repeat 0: the device's default (CPU 4 x 1024, 3; GPU 8 x 2048, 10) */
    BenchOptions o = {.target = "assets/coder-tiny", .data = "assets/data/code-train.jsonl", .device = "cpu"};
    const DfOption options[] = {
        {"target", DF_OPT_STRING, &o.target, "DIR", "target model directory (default assets/coder-tiny)", 0},
        {"tokenizer", DF_OPT_STRING, &o.tokenizer, "PATH", "tokenizer for the tokenizer figure (default: the target's)", 0},
        {"data", DF_OPT_STRING, &o.data, "FILE", "JSONL prompt/response text for the tokenizer and store figures "
                                                  "(default assets/data/code-train.jsonl)", 0},
        {"seq-len", DF_OPT_INT, &o.seq_len, "N", "tokens per packed sequence in the forward (default 1024; GPU 2048)", 0, DF_RANGE(1, 1 << 20)},
        {"seqs", DF_OPT_INT, &o.n_seqs, "N", "sequences packed into one forward batch (default 4; GPU 8)", 0, DF_RANGE(1, 4096)},
        {"repeat", DF_OPT_INT, &o.repeat, "N",
         "timed repetitions after one warm-up; CPU keeps the best (default 3), GPU the median (default 10)", 0, DF_RANGE(1, 10000)},
        {"train-seqs", DF_OPT_INT, &o.train_seqs, "N",
         "GPU: sequences of 2048 tokens in one benchmarked training step (default 2)", 0, DF_RANGE(1, 4096)},
        {"train-repeat", DF_OPT_INT, &o.train_repeat, "N",
         "GPU: timed training steps after one warm-up step, their median the figure (default 5)", 0, DF_RANGE(1, 10000)},
        {"train-only", DF_OPT_FLAG, &o.train_only, NULL,
         "GPU: only the GEMM peak and the training steps (skip the prefill figures)", 0},
        {"kernel-variant", DF_OPT_STRING_LIST, &o.kernel_variant, "NAME=VALUE",
         "GPU: the training steps (or, with --hybrid, the prefill) with this kernel variant instead of its "
         "default (repeatable; names as their `kernel variants:` line prints them): an A/B of two kernels with "
         "one binary", 0},
        {"json", DF_OPT_STRING, &o.json_out, "FILE", "also write the figures as JSON", 0},
        {"device", DF_OPT_STRING, &o.device, "DEV", "cpu (default) or cuda[:N]: the GPU figures instead", 0},
        {"decode", DF_OPT_FLAG, &o.decode, NULL, "batched decode tokens/s at batch 1 and 64 next to the bandwidth "
                                                 "limit, instead of the other figures", 0},
        {"prompt-len", DF_OPT_INT, &o.prompt_len, "N", "--decode: prompt tokens per sequence (default 512)", 0, DF_RANGE(1, 1 << 20)},
        {"new-tokens", DF_OPT_INT, &o.new_tokens, "N", "--decode: decode steps (default 128)", 0, DF_RANGE(16, 1 << 20)},
        {"hybrid", DF_OPT_FLAG, &o.hybrid, NULL, "GPU: prefill tokens/s and MFU of a Qwen3.6-27B-shaped hybrid "
                                                 "target with random weights, instead of the other figures (with "
                                                 "--decode: its decode instead of the Qwen3-8B shape's)", 0},
        {"hybrid-layers", DF_OPT_INT, &o.hybrid_layers, "N",
         "--hybrid: decoder layers built, 4..64 (default 64; fewer also print a per-layer-scaled estimate)", 0, DF_RANGE(4, 64)},
    };
    const DfCommandSpec spec = {"bench", "measure the CPU paths' speed next to OpenBLAS sgemm on this machine", NULL,
                                "Figures: sgemm GFLOP/s (all cores), target forward tokens/s and GFLOP/s (spec "
                                "section 8 count), drafter training step (forward + backward) GFLOP/s, tokenizer "
                                "MB/s, token store random access ns.\n"
                                "With --device cuda: cuBLASLt bf16 GEMM TFLOP/s (peak and the prefill's shapes), "
                                "target prefill\ntokens/s and MFU for --target and a Qwen3-8B-shaped random target, "
                                "time by op kind, peak GPU memory;\nthe whole training step (target forward, drafter "
                                "forward + backward, optimizer) in sequences/s and MFU\nwith its split by phase, "
                                "for coder-tiny's shape and Qwen3-8B's with a 5-layer drafter.\n"
                                "With --decode: batched decode tokens/s (batch 1 and 64) of --target (and on CUDA a "
                                "Qwen3-8B-shaped\nrandom target, or with --hybrid a Qwen3.6-27B-shaped one) next to the "
                                "memory-bandwidth limit measured in the same run.",
                                options, DF_COUNT(options)};
    DfParsedArgs args;
    DfError err = {{0}};
    int exit_code;
    if (df_parse_command_line(&spec, argc, argv, &args, &exit_code)) return exit_code;
    const DfPathArg ins[] = {{"--target", o.target}, {"--tokenizer", o.tokenizer}, {"--data", o.data}};
    const DfPathArg outs[] = {{"--json", o.json_out}};
    if ((exit_code = df_paths_apart_or_usage("bench", ins, 3, outs, 1)) != 0) return exit_code;
    DfDeviceKind kind = df_device_kind(o.device);
    int gpu = kind == DF_DEVICE_ACCELERATOR;
    if (kind == DF_DEVICE_UNKNOWN) {
        fprintf(stderr, "dflash: bench: unknown --device '%s' (expected cpu, cuda or cuda:N)\n", o.device);
        return 2;
    }
    if (o.seq_len == 0) o.seq_len = gpu ? 2048 : 1024;
    if (o.n_seqs == 0) o.n_seqs = gpu ? 8 : 4;
    if (o.repeat == 0) o.repeat = gpu ? 10 : 3;
    if (o.train_seqs == 0) o.train_seqs = 2;
    if (o.train_repeat == 0) o.train_repeat = 5;
    if (o.seq_len < 1 || o.n_seqs < 1 || o.repeat < 1 || o.train_seqs < 1) {
        fprintf(stderr, "dflash: bench: --seq-len, --seqs, --train-seqs and --repeat must be positive\n");
        return 2;
    }
    if (df_kernel_variants_parse(&o.variants, o.kernel_variant.items, o.kernel_variant.count, "--kernel-variant",
                                 &err)) {
        fprintf(stderr, "dflash: bench: %s\n", err.msg);
        return 2;
    }
    if (o.variants.count > 0 && (!gpu || o.decode)) {
        fprintf(stderr, "dflash: bench: --kernel-variant sets the GPU training steps' or the hybrid prefill's "
                        "kernels: it needs --device cuda and not --decode\n");
        return 2;
    }
    if (o.prompt_len == 0) o.prompt_len = 512;
    if (o.new_tokens == 0) o.new_tokens = 128;
    cJSON *json = cJSON_CreateObject();
    if (o.hybrid_layers == 0) o.hybrid_layers = 64;
    if (o.decode) {
        if (o.prompt_len < 1 || o.new_tokens < 16) {
            df_fail(&err, "--prompt-len must be positive and --new-tokens at least 16");
            goto fail;
        }
        if (o.hybrid && !gpu) {
            df_fail(&err, "--decode --hybrid needs --device cuda (the Qwen3.6-27B shape)");
            goto fail;
        }
        if (run_decode_bench(&o, json, &err) != 0) goto fail;
        goto write_json;
    }
    if (o.hybrid && (!gpu || o.hybrid_layers < 4 || o.hybrid_layers > 64)) {
        df_fail(&err, "--hybrid needs --device cuda and --hybrid-layers in 4..64");
        goto fail;
    }
    if (gpu) { /* df_backend_create says when this dflash was built without CUDA */
        if (o.hybrid) {
            if (run_hybrid_bench(&o, json, &err) != 0) goto fail;
            goto write_json;
        }
        if (run_gpu_bench(&o, json, &err) != 0) goto fail;
        goto write_json;
    }
    printf("dflash bench on %d threads\n\n", omp_get_max_threads());

    DfModelConfig cfg;
    if (df_model_config_load(&cfg, o.target, &err) != 0) goto fail;
    int T = o.seq_len * o.n_seqs;
    double peak = bench_sgemm_gflops(T, cfg.intermediate_size, cfg.hidden_size, o.repeat);
    double peak_sq = bench_sgemm_gflops(1024, 1024, 1024, o.repeat);
    printf("%-44s %10.1f GFLOP/s\n", "OpenBLAS sgemm [T x I x H]", peak);
    printf("%-44s %10.1f GFLOP/s\n", "OpenBLAS sgemm 1024^3", peak_sq);
    add_number(json, "sgemm_gflops", peak);
    add_number(json, "sgemm_1024_gflops", peak_sq);

    ForwardResult fw;
    if (bench_target_forward(&o, 0, &fw, &err) != 0) goto fail;
    printf("%-44s %10.0f tokens/s %8.1f GFLOP/s  %5.1f%% of sgemm  (%d x %d tokens, %d layers)\n",
           "target forward, taps only", fw.tokens_per_s, fw.gflops, 100 * fw.gflops / peak, o.n_seqs, o.seq_len,
           fw.layers);
    add_number(json, "target_taps_tokens_per_s", fw.tokens_per_s);
    add_number(json, "target_taps_gflops", fw.gflops);
    if (bench_target_forward(&o, 1, &fw, &err) != 0) goto fail;
    printf("%-44s %10.0f tokens/s %8.1f GFLOP/s  %5.1f%% of sgemm  (%d layers + lm head)\n",
           "target forward, all layers + logits", fw.tokens_per_s, fw.gflops, 100 * fw.gflops / peak, fw.layers);
    add_number(json, "target_full_tokens_per_s", fw.tokens_per_s);
    add_number(json, "target_full_gflops", fw.gflops);

    DfDrafterBenchShape shape = {4, 512, 32, 16, 2, 512};
    DfDrafterBenchResult dr;
    if (df_bench_drafter_step(o.target, &shape, o.repeat, &dr, &err) != 0) goto fail;
    printf("%-44s %10.1f ms/step %7.1f GFLOP/s  %5.1f%% of sgemm  (%d x %d tokens, %d anchors, B %d, %d layers)\n",
           "drafter step (forward + backward)", dr.step_s * 1e3, dr.gflops, 100 * dr.gflops / peak, shape.n_seqs,
           shape.seq_len, shape.num_anchors, shape.block_size, shape.layers);
    add_number(json, "drafter_step_ms", dr.step_s * 1e3);
    add_number(json, "drafter_step_gflops", dr.gflops);

    DfBenchTexts texts;
    if (df_bench_texts_load(&texts, o.data, &err) != 0) goto fail;
    DfTokenizer *tok = df_tokenizer_load(o.tokenizer ? o.tokenizer : o.target, &err);
    if (!tok) {
        df_bench_texts_free(&texts);
        goto fail;
    }
    double mb1 = bench_tokenizer(tok, &texts, 1, o.repeat);
    double mbn = bench_tokenizer(tok, &texts, omp_get_max_threads(), o.repeat);
    printf("%-44s %10.2f MB/s (1 thread) %8.2f MB/s (%d threads)  over %.2f MB\n", "tokenizer encode", mb1, mbn,
           omp_get_max_threads(), texts.bytes / 1e6);
    add_number(json, "tokenizer_mb_per_s_1thread", mb1);
    add_number(json, "tokenizer_mb_per_s_all", mbn);

    double ns = 0;
    int rc = df_bench_store_access(tok, &texts, &ns, &err);
    df_tokenizer_free(tok);
    df_bench_texts_free(&texts);
    if (rc != 0) goto fail;
    printf("%-44s %10.1f ns per random sample access\n", "token store", ns);
    add_number(json, "store_random_access_ns", ns);
write_json:

    if (o.json_out) {
        char *text = cJSON_Print(json);
        FILE *f = fopen(o.json_out, "w");
        if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
            df_fail_errno(&err, "%s: cannot write", o.json_out);
            free(text);
            goto fail;
        }
        free(text);
    }
    cJSON_Delete(json);
    return 0;
fail:
    cJSON_Delete(json);
    fprintf(stderr, "dflash: bench: %s\n", err.msg);
    return 1;
}
