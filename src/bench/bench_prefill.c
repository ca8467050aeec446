/* GPU prefill figures of the bench harness: tokens/s, MFU and the time by
 * op kind of a target's packed forward. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sort.h"
#include "bench/bench_internal.h"

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
int df_bench_prefill(DfBackend *be, DfTargetModel *m, int seq_len, int n_seqs, int with_logits, int repeat,
                       DfPrefillResult *r, DfError *err) {
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

void df_bench_prefill_report(const char *label, const char *key, const DfPrefillResult *r, double peak,
                             double nominal, cJSON *json) {
    char of_nominal[64];
    printf("%-40s %9.0f tokens/s %8.2f ms %7.1f TFLOP/s  MFU %5.1f%% of measured, %s  (%d layers)\n", label,
           r->tokens_per_s, r->ms, r->tflops, 100 * r->tflops / peak,
           df_bench_of_nominal(of_nominal, sizeof of_nominal, r->tflops, nominal), r->layers);
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
               {"mfu_measured_peak", r->tflops / peak}, {"mfu_nominal", nominal > 0 ? r->tflops / nominal : 0},
               {"peak_gib", r->peak_bytes / 1073741824.0}};
    for (size_t i = 0; i < sizeof fig / sizeof fig[0]; i++) {
        snprintf(name, sizeof name, "%s_%s", key, fig[i].suffix);
        df_bench_add_number(json, name, fig[i].v);
    }
}

/* Both prefill variants (taps only; all layers + logits) of one model. */
int df_bench_model_prefill(DfBackend *be, DfTargetModel *m, const char *name, const char *key,
                               const DfBenchOptions *o, double peak, double nominal, cJSON *json, DfError *err) {
    DfPrefillResult r;
    char label[96], jkey[96];
    for (int with_logits = 0; with_logits < 2; with_logits++) {
        if (df_bench_prefill(be, m, o->seq_len, o->n_seqs, with_logits, o->repeat, &r, err)) return -1;
        snprintf(label, sizeof label, "%s, %s", name, with_logits ? "all layers + logits" : "taps only");
        snprintf(jkey, sizeof jkey, "%s_%s", key, with_logits ? "full" : "taps");
        df_bench_prefill_report(label, jkey, &r, peak, nominal, json);
    }
    printf("%-40s %9.2f GiB (weights, activations, workspaces)\n", "    peak GPU memory", r.peak_bytes / 1073741824.0);
    return 0;
}

