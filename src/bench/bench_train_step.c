#include "bench/bench_train_step.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/sort.h"
#include "bench/bench_drafter.h"
#include "bench/bench_internal.h"
#include "model/drafter.h"
#include "model/drafter_rows.h"
#include "target/target.h"
#include "target/target_random.h"
#include "model/metrics.h"
#include "train/optimizer.h"

const char *df_step_phase_name(int phase) {
    static const char *const names[DF_STEP_PHASES] = {"target forward", "drafter fwd+bwd", "optimizer"};
    return phase >= 0 && phase < DF_STEP_PHASES ? names[phase] : "?";
}

/* Everything one benchmarked step needs, built once. */
typedef struct StepBench {
    DfBackend *be;
    DfTargetModel target;
    DfDrafter drafter;
    DfPackedBatch packed;
    DfBuffer ids, features;
    DfDrafterBatch batch;
    DfDrafterRows rows;
    DfMetrics metrics;
    double grad_scale;
    DfBuffer master, exp_avg, exp_avg_sq; /* F32 optimizer state, as the trainer keeps it */
    DfAdamWConfig adamw;
    int64_t adamw_step;
    int have_target, have_drafter, have_packed;
} StepBench;

int df_train_step_shape_random(DfTrainStepShape *s, DfBenchHostBatch *host, const DfModelConfig *target,
                               const DfRandomStepSize *size, DfError *err) {
    memset(s, 0, sizeof *s);
    memset(host, 0, sizeof *host);
    if (size->n_seqs < 1 || size->seq_len < 2 || size->num_anchors < 1)
        return df_fail(err, "train-step bench: sequences, length and anchors must be positive");
    s->target = *target;
    DfDrafterOptions opt = {.num_layers = size->drafter_layers, .block_size = size->block_size,
                            .mask_token_id = target->vocab_size - 2};
    if (df_drafter_config_from_target(&s->drafter, target, &opt, err)) return -1;
    df_bench_host_batch_init(host, target->vocab_size, size->n_seqs, size->seq_len, size->num_anchors);
    s->batch = *host;
    return 0;
}

static int build_models(StepBench *b, const DfTrainStepShape *s, DfError *err) {
    if (df_target_init_random(&b->target, b->be, &s->target, 1234, 1, err)) return -1;
    b->have_target = 1;
    if (df_drafter_create(&b->drafter, b->be, &s->drafter, b->target.embed, b->target.lm_head, err)) return -1;
    b->have_drafter = 1;
    size_t n = b->drafter.layout.total;
    float *params = df_xmalloc(n * sizeof *params, "bench drafter parameters");
    df_drafter_init_params(&b->drafter.layout, params, 7);
    int rc = df_drafter_set_params(&b->drafter, params, err);
    if (rc == 0)
        rc = df_buffer_alloc(b->be, &b->master, DF_BUF_F32, n, err) ||
             b->be->ops->upload_f32(b->be, b->master, params, err) ||
             df_buffer_alloc(b->be, &b->exp_avg, DF_BUF_F32, n, err) ||
             df_buffer_alloc(b->be, &b->exp_avg_sq, DF_BUF_F32, n, err);
    free(params);
    if (rc) return -1;
    df_op_fill_zero(b->be, b->exp_avg);
    df_op_fill_zero(b->be, b->exp_avg_sq);
    b->adamw = (DfAdamWConfig){.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.01};
    return 0;
}

static int build_batch(StepBench *b, const DfTrainStepShape *s, DfError *err) {
    const DfDrafterConfig *cfg = &b->drafter.cfg;
    const DfBenchHostBatch *h = &s->batch;
    DfBackend *be = b->be;
    size_t t = (size_t)h->starts[h->n_seqs];
    if (df_packed_batch_init(&b->packed, be, h->starts, h->n_seqs, err)) return -1;
    b->have_packed = 1;
    if (df_buffer_alloc(be, &b->ids, DF_BUF_I32, t, err) || be->ops->upload_i32(be, b->ids, h->ids, err) ||
        df_buffer_alloc(be, &b->features, DF_BUF_ACT, t * cfg->n_taps * cfg->hidden_size, err))
        return -1;
    DfDrafterBatch batch = {h->n_seqs, h->starts, h->ids, h->mask, b->features, h->anchor_starts, h->anchors};
    b->batch = batch;
    /* the block rows, built once: train's loader thread builds them while
     * the device runs the step before (model/drafter_rows.h), so building
     * them is not the step's work */
    df_drafter_rows_build(&b->rows, cfg, &b->batch);
    b->batch.rows = &b->rows;
    b->grad_scale = 1.0 / df_drafter_batch_weight_sum(cfg, &b->batch);
    return df_metrics_init(&b->metrics, cfg->block_size, err);
}

static void free_bench(StepBench *b) {
    df_buffer_free(b->be, &b->master);
    df_buffer_free(b->be, &b->exp_avg);
    df_buffer_free(b->be, &b->exp_avg_sq);
    df_buffer_free(b->be, &b->ids);
    df_buffer_free(b->be, &b->features);
    df_drafter_rows_free(&b->rows);
    if (b->have_packed) df_packed_batch_free(&b->packed, b->be);
    if (b->have_drafter) df_drafter_free(&b->drafter);
    if (b->have_target) df_target_free(&b->target);
}

/* The trainer's optimizer step: the global gradient norm (the one value the
 * host reads), clipping folded into the AdamW launch. */
static int optimizer_step(StepBench *b, DfError *err) {
    double sum_sq;
    if (df_op_sum_squares(b->be, b->drafter.grads, &sum_sq, err)) return -1;
    DfAdamWArgs a = {.master = b->master, .exp_avg = b->exp_avg, .exp_avg_sq = b->exp_avg_sq,
                     .grads = b->drafter.grads, .params = b->drafter.params,
                     .clip_coef = df_clip_coef((float)sqrt(sum_sq), 1.0f),
                     .s = df_adamw_scalars(&b->adamw, ++b->adamw_step, 1e-5)};
    df_op_adamw_step(b->be, &a);
    return 0;
}

/* One phase of the step. */
static int run_phase(StepBench *b, int phase, DfError *err) {
    const DfDrafterConfig *cfg = &b->drafter.cfg;
    DfBuffer no_logits = {0};
    switch (phase) {
    case DF_STEP_PHASE_TARGET:
        return df_target_forward_batch(&b->target, &b->packed, b->ids, cfg->target_layer_ids, cfg->n_taps,
                                       b->features, no_logits, err);
    case DF_STEP_PHASE_DRAFTER:
        return df_drafter_compute_grads(&b->drafter, &b->batch, b->grad_scale, &b->metrics, err);
    case DF_STEP_PHASE_OPTIMIZER:
        return optimizer_step(b, err);
    default:
        return 0;
    }
}

static int run_step(StepBench *b, double *phase_s, DfError *err) {
    for (int p = 0; p < DF_STEP_PHASES; p++) {
        double t0 = df_now_seconds();
        if (run_phase(b, p, err)) return -1;
        if (phase_s) {
            if (b->be->ops->sync(b->be, err)) return -1;
            phase_s[p] = df_now_seconds() - t0;
        }
    }
    return b->be->ops->sync(b->be, err);
}

/* One more step, phase by phase, with the backend's per-op profile on. */
static int profile_step(StepBench *b, DfTrainStepResult *r, DfError *err) {
    DfBackend *be = b->be;
    if (!df_backend_has(be, DF_CAP_PROFILE)) return 0;
    be->ops->profile_enable(be, 1);
    int rc = 0;
    for (int p = 0; p < DF_STEP_PHASES && rc == 0; p++)
        rc = run_phase(b, p, err) || be->ops->profile_read(be, r->op_ms[p], r->before_ms[p], err);
    be->ops->profile_enable(be, 0);
    r->profiled = rc == 0;
    return rc;
}

static void count_flops(StepBench *b, const DfTrainStepShape *s, DfTrainStepResult *r) {
    const DfBenchHostBatch *h = &s->batch;
    int *lens = df_xmalloc((size_t)h->n_seqs * sizeof *lens, "bench lengths");
    for (int i = 0; i < h->n_seqs; i++) lens[i] = h->starts[i + 1] - h->starts[i];
    r->target_layers_run = b->target.layers_run;
    r->target_tflop = df_target_forward_flops(&s->target, lens, h->n_seqs, b->target.layers_run, 0) / 1e12;
    r->drafter_tflop = df_drafter_step_flops(&b->drafter.cfg, &b->batch) / 1e12;
    r->tflop_per_step = r->target_tflop + r->drafter_tflop;
    r->drafter_params = (long long)b->drafter.layout.total;
    free(lens);
}

/* Times the step: a warm-up, s->repeat whole steps (their median the
 * figure), one step synced phase by phase, one with the op profile. */
static int time_steps(StepBench *b, const DfTrainStepShape *s, DfTrainStepResult *r, DfError *err) {
    double *times = df_xmalloc((size_t)s->repeat * sizeof *times, "step times");
    int rc = run_step(b, NULL, err); /* warm-up: workspaces, plans */
    for (int i = 0; i < s->repeat && rc == 0; i++) {
        double t0 = df_now_seconds();
        rc = run_step(b, NULL, err);
        times[i] = df_now_seconds() - t0;
    }
    if (rc == 0 && (run_step(b, r->phase_s, err) || profile_step(b, r, err))) rc = -1;
    if (rc == 0) {
        df_sort_doubles(times, (size_t)s->repeat);
        r->step_s = times[s->repeat / 2];
        r->step_min_s = times[0], r->step_max_s = times[s->repeat - 1], r->timed_steps = s->repeat;
    }
    free(times);
    return rc;
}

int df_bench_train_step(DfBackend *be, const DfTrainStepShape *s, DfTrainStepResult *r, DfError *err) {
    memset(r, 0, sizeof *r);
    const DfBenchHostBatch *h = &s->batch;
    if (s->repeat < 1 || h->n_seqs < 1 || h->starts[h->n_seqs] < 2)
        return df_fail(err, "train-step bench: repeat, sequences and tokens must be positive");
    if (df_kernel_variants_apply(be, s->variants, "train-step bench: --kernel-variant", err)) return -1;
    df_backend_variants(be, r->variants, sizeof r->variants);
    StepBench b;
    memset(&b, 0, sizeof b);
    b.be = be;
    df_backend_reset_peak(be);
    int rc = -1;
    if (build_models(&b, s, err) || build_batch(&b, s, err) || time_steps(&b, s, r, err)) goto done;
    count_flops(&b, s, r);
    r->seqs_per_s = h->n_seqs / r->step_s;
    r->tokens_per_s = h->starts[h->n_seqs] / r->step_s;
    r->tflops = r->tflop_per_step / r->step_s;
    DfMemoryInfo mem;
    df_backend_memory_info(be, &mem);
    r->peak_bytes = mem.peak;
    rc = 0;
done:
    free_bench(&b);
    return rc;
}

/* The op kinds with a nonzero entry of ms, largest first; returns how many. */
static int kinds_by_size(const double *ms, int order[DF_OP_COUNT]) {
    int n = 0;
    for (int k = 0; k < DF_OP_COUNT; k++)
        if (ms[k] > 0) order[n++] = k;
    for (int i = 1; i < n; i++) /* insertion sort, largest first */
        for (int j = i; j > 0 && ms[order[j]] > ms[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    return n;
}

/* Op kinds of one phase, largest first, with their share of the phase's
 * synced time; the rest of that time is gaps between the ops, of which the
 * device's part (from one op's end to the next one's start) is printed by
 * the kind of the op that waited, its largest few. */
static void report_phase_ops(const char *key, int phase, const DfTrainStepResult *r, cJSON *json) {
    const double *ms = r->op_ms[phase], *before = r->before_ms[phase];
    int order[DF_OP_COUNT], n = kinds_by_size(ms, order);
    double phase_ms = r->phase_s[phase] * 1e3, sum = 0;
    printf("      %s:", df_step_phase_name(phase));
    char name[192];
    for (int i = 0; i < n; i++) {
        int k = order[i];
        sum += ms[k];
        printf(" %s %.2f", df_op_name(k), ms[k]);
        snprintf(name, sizeof name, "%s_ops_%d_%s_ms", key, phase, df_op_name(k));
        cJSON_AddNumberToObject(json, name, ms[k]);
    }
    printf(" | ops %.1f of %.1f ms (%.0f%%)\n", sum, phase_ms, phase_ms > 0 ? 100 * sum / phase_ms : 0);
    n = kinds_by_size(before, order);
    double between = 0;
    for (int i = 0; i < n; i++) {
        between += before[order[i]];
        snprintf(name, sizeof name, "%s_before_%d_%s_ms", key, phase, df_op_name(order[i]));
        cJSON_AddNumberToObject(json, name, before[order[i]]);
    }
    printf("        between ops %.2f ms, before:", between);
    for (int i = 0; i < n && i < 6; i++) printf(" %s %.2f", df_op_name(order[i]), before[order[i]]);
    printf("\n");
}

static void report_op_profile(const char *key, const DfTrainStepResult *r, cJSON *json) {
    printf("    kernel ms by op kind (one more step, every op timed by device events):\n");
    for (int p = 0; p < DF_STEP_PHASES; p++) report_phase_ops(key, p, r, json);
}

/* "3.31 M" or "1.05 B" parameters. */
static const char *params_text(char *buf, size_t cap, long long n) {
    if (n >= 1000000000LL) snprintf(buf, cap, "%.2f B", n / 1e9);
    else snprintf(buf, cap, "%.2f M", n / 1e6);
    return buf;
}

void df_bench_train_step_report(const DfTrainStepLabel *label, const DfTrainStepShape *s,
                                const DfTrainStepResult *r, double peak_tflops, double nominal_tflops, cJSON *json) {
    char params[32];
    printf("%s, %d-layer drafter (%s parameters)\n", label->head, s->drafter.num_layers,
           params_text(params, sizeof params, r->drafter_params));
    char of_nominal[64];
    printf("    whole step %8.1f ms  %6.2f %s/s  %9.0f tokens/s  %7.1f TFLOP/s  MFU %5.1f%% of measured, %s "
           "(median of %d steps, %.1f-%.1f ms)\n",
           r->step_s * 1e3, r->seqs_per_s, label->seqs_name, r->tokens_per_s, r->tflops, 100 * r->tflops / peak_tflops,
           df_bench_of_nominal(of_nominal, sizeof of_nominal, r->tflops, nominal_tflops), r->timed_steps,
           r->step_min_s * 1e3, r->step_max_s * 1e3);
    printf("    FLOPs per step: target %.2f TFLOP (%d layers run) + drafter %.2f TFLOP\n", r->target_tflop,
           r->target_layers_run, r->drafter_tflop);
    double total = 0;
    for (int p = 0; p < DF_STEP_PHASES; p++) total += r->phase_s[p];
    printf("    phases (synced step, %.1f ms):", total * 1e3);
    for (int p = 0; p < DF_STEP_PHASES; p++)
        printf(" %s %.1f ms (%.0f%%)", df_step_phase_name(p), r->phase_s[p] * 1e3,
               total > 0 ? 100 * r->phase_s[p] / total : 0);
    printf("\n");
    const char *key = label->key;
    if (r->profiled) report_op_profile(key, r, json);
    printf("    peak GPU memory %.2f GiB\n", r->peak_bytes / 1073741824.0);
    if (r->variants[0]) printf("    kernel variants: %s\n", r->variants);
    char name[160];
    const struct {
        const char *suffix;
        double v;
    } fig[] = {{"step_ms", r->step_s * 1e3},
               {"step_min_ms", r->step_min_s * 1e3},
               {"step_max_ms", r->step_max_s * 1e3},
               {"timed_steps", r->timed_steps},
               {"seqs_per_s", r->seqs_per_s},
               {"tokens_per_s", r->tokens_per_s},
               {"tflops", r->tflops},
               {"mfu_measured_peak", r->tflops / peak_tflops},
               {"target_ms", r->phase_s[DF_STEP_PHASE_TARGET] * 1e3},
               {"drafter_ms", r->phase_s[DF_STEP_PHASE_DRAFTER] * 1e3},
               {"optimizer_ms", r->phase_s[DF_STEP_PHASE_OPTIMIZER] * 1e3},
               {"peak_gib", r->peak_bytes / 1073741824.0}};
    for (size_t i = 0; i < sizeof fig / sizeof fig[0]; i++) {
        snprintf(name, sizeof name, "%s_%s", key, fig[i].suffix);
        cJSON_AddNumberToObject(json, name, fig[i].v);
    }
    snprintf(name, sizeof name, "%s_variants", key);
    cJSON_AddStringToObject(json, name, r->variants);
}
