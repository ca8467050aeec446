#include "bench/bench_decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/sort.h"
#include "target/target_decode.h"
#include "target/target_memory.h"

#define WARMUP_STEPS 2
#define PROFILED_STEPS 8

double df_decode_weight_bytes(const DfTargetModel *m) {
    const DfModelConfig *c = &m->cfg;
    size_t elem = m->embed.elem_size;
    double all = (double)df_target_weight_bytes(c, c->num_layers, 1, elem);
    /* a step gathers a few embedding rows; an untied head is read whole (a tied one is the embedding) */
    return c->tie_word_embeddings ? all : all - (double)c->vocab_size * c->hidden_size * elem;
}

double df_decode_state_bytes(const DfModelConfig *c) {
    double linear_layers = c->num_layers - df_target_kv_layers(c);
    return linear_layers * (double)df_target_recurrent_floats(c) * 4 /* F32 */ * 2 /* read + written */;
}

/* Per-step kernel time from the backend's op profile (where it has one). */
static int profile_steps(DfTargetModel *m, int on, DfDecodeBenchResult *r, DfError *err) {
    DfBackend *be = m->be;
    if (!df_backend_has(be, DF_CAP_PROFILE)) return 0;
    if (on) {
        be->ops->profile_enable(be, 1);
        return 0;
    }
    double ms[DF_OP_COUNT] = {0};
    be->ops->profile_enable(be, 0);
    if (be->ops->profile_read(be, ms, NULL, err)) return -1;
    size_t used = 0;
    for (int k = 0; k < DF_OP_COUNT; k++) {
        r->device_ms += ms[k];
        if (ms[k] > 0 && used < sizeof r->kinds)
            used += (size_t)snprintf(r->kinds + used, sizeof r->kinds - used, "%s%s %.3f", used ? ", " : "",
                                     df_op_name(k), ms[k] / PROFILED_STEPS);
    }
    r->attention_ms = ms[DF_OP_ID_kv_attention];
    return 0;
}

/* One step of one token per sequence (the last argmax of each). */
static int decode_step(DfTargetDecoder *d, int batch, const int32_t *slots, const int32_t *starts, int32_t *next,
                       DfError *err) {
    int32_t ids[4096];
    memcpy(ids, next, (size_t)batch * sizeof *ids);
    DfDecodeStep step = {batch, slots, ids, starts, DF_LOGITS_LAST, NULL, next, NULL, 0};
    return df_target_decode(d, &step, err);
}

size_t df_bench_decode_bytes(const DfModelConfig *c, int batch, int prompt_len, int rows, size_t act_elem) {
    int prefill_seqs = batch < DF_BENCH_PREFILL_SEQS ? batch : DF_BENCH_PREFILL_SEQS;
    size_t prefill = 16;
    while (prefill < (size_t)prefill_seqs * prompt_len) prefill *= 2; /* the workspace's doubling */
    int paged_rows = df_kv_pages_for(rows) * DF_KV_PAGE_ROWS; /* every slot's pages in the paged cache */
    return (size_t)batch * (df_target_decoder_slot_bytes(c, paged_rows, 0, act_elem) + (size_t)c->vocab_size * act_elem) +
           df_target_rope_table_bytes(c, rows) + df_target_decoder_workspace_bytes(c, 1, prefill, act_elem);
}

/* The prompts, DF_BENCH_PREFILL_SEQS a step; next[] gets each one's greedy token. */
static int prefill(DfTargetDecoder *d, int batch, int prompt_len, const int32_t *ids, int32_t *next, DfError *err) {
    int32_t slots[DF_BENCH_PREFILL_SEQS], starts[DF_BENCH_PREFILL_SEQS + 1];
    for (int first = 0; first < batch; first += DF_BENCH_PREFILL_SEQS) {
        int n = batch - first < DF_BENCH_PREFILL_SEQS ? batch - first : DF_BENCH_PREFILL_SEQS;
        for (int s = 0; s < n; s++) slots[s] = first + s;
        for (int s = 0; s <= n; s++) starts[s] = s * prompt_len;
        DfDecodeStep step = {n, slots, ids + (size_t)first * prompt_len, starts, DF_LOGITS_LAST, NULL, next + first,
                             NULL, 0};
        if (df_target_decode(d, &step, err)) return -1;
    }
    return 0;
}

int df_bench_decode(DfTargetModel *m, int batch, int prompt_len, int new_tokens, double bandwidth_gbs,
                    double peak_tflops, int graphs, DfDecodeBenchResult *r, DfError *err) {
    memset(r, 0, sizeof *r);
    if (batch < 1 || batch > 4096 || prompt_len < 1 || new_tokens < WARMUP_STEPS + PROFILED_STEPS + 1)
        return df_fail(err, "decode bench: batch %d (1..4096), prompt %d, %d new tokens (at least %d)", batch,
                       prompt_len, new_tokens, WARMUP_STEPS + PROFILED_STEPS + 1);
    const DfModelConfig *c = &m->cfg;
    DfTargetDecoder d;
    /* the paged cache generate decodes with, its pages taken as the sequences grow (interleaved, as there) */
    int rows = prompt_len + new_tokens;
    if (df_target_decoder_init_paged(&d, m, batch, rows, batch * df_kv_pages_for(rows), NULL, 0, err)) return -1;
    df_target_decoder_set_graphs(&d, graphs);
    r->graphs = d.graphs.enabled;
    size_t t = (size_t)batch * prompt_len;
    int32_t *ids = df_xmalloc(t * sizeof *ids, "decode bench prompts");
    int32_t *slots = df_xmalloc((size_t)batch * sizeof *slots, "decode bench slots");
    int32_t *starts = df_xmalloc((size_t)(batch + 1) * sizeof *starts, "decode bench starts");
    int32_t *next = df_xmalloc((size_t)batch * sizeof *next, "decode bench tokens");
    double *ms = df_xmalloc((size_t)new_tokens * sizeof *ms, "decode bench times");
    for (size_t i = 0; i < t; i++) ids[i] = (int32_t)((i * 7919u + 13u) % (unsigned)(c->vocab_size - 2));
    for (int s = 0; s < batch; s++) slots[s] = s;
    int rc = -1;
    if (prefill(&d, batch, prompt_len, ids, next, err)) goto done;
    for (int s = 0; s <= batch; s++) starts[s] = s;
    int timed_end = new_tokens - PROFILED_STEPS;
    double kv_rows = 0;
    for (int step = 0; step < new_tokens; step++) {
        if (step == timed_end && profile_steps(m, 1, r, err)) goto done;
        double t0 = df_now_seconds();
        if (decode_step(&d, batch, slots, starts, next, err)) goto done;
        ms[step] = (df_now_seconds() - t0) * 1e3;
        /* rows each sequence read in this step: its cache plus the new one */
        if (step >= WARMUP_STEPS && step < timed_end) kv_rows += (double)batch * (prompt_len + step + 1);
    }
    r->timed_steps = timed_end - WARMUP_STEPS;
    if (profile_steps(m, 0, r, err)) goto done;
    r->device_ms /= PROFILED_STEPS;
    r->attention_ms /= PROFILED_STEPS;
    df_sort_doubles(ms + WARMUP_STEPS, (size_t)r->timed_steps);
    r->step_ms = ms[WARMUP_STEPS + r->timed_steps / 2];
    r->batch = batch, r->prompt_len = prompt_len, r->new_tokens = new_tokens;
    r->tokens_per_s = batch / (r->step_ms * 1e-3);
    r->weight_bytes = df_decode_weight_bytes(m);
    r->kv_bytes = kv_rows / r->timed_steps * 2.0 * c->num_kv_heads * c->head_dim * df_target_kv_layers(c) * m->embed.elem_size;
    r->state_bytes = batch * df_decode_state_bytes(c);
    r->bandwidth_limit_tokens_per_s = batch / ((r->weight_bytes + r->kv_bytes + r->state_bytes) / (bandwidth_gbs * 1e9));
    r->flops = df_target_decode_flops(c, batch, kv_rows / r->timed_steps / batch);
    r->compute_limit_tokens_per_s = peak_tflops > 0 ? batch / (r->flops / (peak_tflops * 1e12)) : 0;
    r->limit_tokens_per_s = r->bandwidth_limit_tokens_per_s;
    if (r->compute_limit_tokens_per_s > 0 && r->compute_limit_tokens_per_s < r->limit_tokens_per_s)
        r->limit_tokens_per_s = r->compute_limit_tokens_per_s;
    rc = 0;
done:
    df_target_decoder_free(&d);
    free(ids), free(slots), free(starts), free(next), free(ms);
    return rc;
}

double df_host_copy_bandwidth(size_t bytes, int repeat) {
    char *a = df_xmalloc(bytes, "bandwidth source"), *b = df_xmalloc(bytes, "bandwidth destination");
    size_t chunk = (size_t)1 << 20, n = (bytes + chunk - 1) / chunk;
    for (size_t i = 0; i < bytes; i++) a[i] = (char)(i * 131u), b[i] = 1;
    double best = 1e30;
    for (int r = 0; r < repeat + 1; r++) {
        double t0 = df_now_seconds();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            size_t off = i * chunk, len = off + chunk > bytes ? bytes - off : chunk;
            memcpy(b + off, a + off, len);
        }
        double s = df_now_seconds() - t0;
        if (r > 0 && s < best) best = s;
    }
    free(a), free(b);
    return 2.0 * (double)bytes / best / 1e9;
}
