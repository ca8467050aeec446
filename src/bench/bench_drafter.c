#include "bench/bench_drafter.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "model/drafter.h"
#include "target/target.h"
#include "model/anchors.h"

/* Fixed pseudo-random contents (never zeros), for ids and features. */
static uint32_t next_u32(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

void df_bench_host_batch_init(DfBenchHostBatch *b, int vocab_size, int n_seqs, int seq_len, int num_anchors) {
    int T = n_seqs * seq_len;
    b->n_seqs = n_seqs;
    b->starts = df_xmalloc((size_t)(n_seqs + 1) * sizeof *b->starts, "bench batch");
    b->ids = df_xmalloc((size_t)T * sizeof *b->ids, "bench batch");
    b->mask = df_xmalloc((size_t)T, "bench batch");
    b->anchor_starts = df_xmalloc((size_t)(n_seqs + 1) * sizeof *b->anchor_starts, "bench batch");
    b->anchors = df_xmalloc((size_t)n_seqs * num_anchors * sizeof *b->anchors, "bench batch");
    int64_t *scratch = df_xmalloc((size_t)seq_len * sizeof *scratch, "bench batch");
    uint64_t rng = 42;
    for (int t = 0; t < T; t++) {
        b->ids[t] = (int32_t)(next_u32(&rng) % (uint32_t)(vocab_size - 2));
        b->mask[t] = (t % seq_len) >= seq_len / 4; /* a quarter prompt, the rest response */
    }
    b->anchor_starts[0] = 0;
    for (int q = 0; q < n_seqs; q++) {
        b->starts[q] = q * seq_len;
        int64_t n = df_select_anchors(b->mask + (size_t)q * seq_len, seq_len, num_anchors, 1, 0, (uint64_t)q,
                                      b->anchors + b->anchor_starts[q], scratch);
        b->anchor_starts[q + 1] = b->anchor_starts[q] + n;
    }
    b->starts[n_seqs] = T;
    free(scratch);
}

void df_bench_host_batch_free(DfBenchHostBatch *b) {
    free(b->starts);
    free(b->ids);
    free(b->mask);
    free(b->anchor_starts);
    free(b->anchors);
}

/* Random features in [-1, 1] for every context row. */
static int random_features(DfBuffer *features, DfBackend *be, const DfDrafterConfig *cfg, size_t rows, DfError *err) {
    size_t n_feat = rows * cfg->n_taps * cfg->hidden_size;
    float *host = df_xmalloc(n_feat * sizeof *host, "bench features");
    uint64_t rng = 43;
    for (size_t i = 0; i < n_feat; i++) host[i] = (float)(next_u32(&rng) % 2001) / 1000.0f - 1.0f;
    int rc = df_buffer_alloc(be, features, DF_BUF_ACT, n_feat, err);
    if (rc == 0) rc = be->ops->upload_f32(be, *features, host, err);
    free(host);
    return rc;
}

static int time_steps(DfDrafter *d, const DfDrafterBatch *batch, int repeat, double *best, DfError *err) {
    DfMetrics m;
    if (df_metrics_init(&m, d->cfg.block_size, err) != 0) return -1;
    double scale = 1.0 / df_drafter_batch_weight_sum(&d->cfg, batch);
    *best = 1e30;
    for (int r = 0; r < repeat + 1; r++) { /* the first is warm-up (workspace allocation) */
        double t0 = df_now_seconds();
        if (df_drafter_forward_backward(d, batch, scale, &m, err) != 0) return -1;
        if (d->be->ops->sync(d->be, err) != 0) return -1;
        double t = df_now_seconds() - t0;
        if (r > 0 && t < *best) *best = t;
    }
    return 0;
}

int df_bench_drafter_step(const char *target_dir, const DfDrafterBenchShape *s, int repeat, DfDrafterBenchResult *res,
                          DfError *err) {
    DfBackend *be = df_backend_cpu_create(err);
    if (!be) return -1;
    DfTargetModel target;
    DfDrafterConfig cfg;
    DfDrafter d;
    DfBenchHostBatch b = {0};
    DfBuffer features = {0};
    memset(&d, 0, sizeof d);
    int rc = df_target_load(&target, be, target_dir, 1, 1, err);
    if (rc != 0) goto out_be;
    DfDrafterOptions opt = {.num_layers = s->layers, .intermediate_size = s->intermediate,
                            .block_size = s->block_size, .mask_token_id = target.cfg.vocab_size - 2};
    rc = df_drafter_config_from_target(&cfg, &target.cfg, &opt, err);
    if (rc == 0) rc = df_drafter_create(&d, be, &cfg, target.embed, target.lm_head, err);
    if (rc != 0) goto out_target;
    float *params = df_xmalloc(d.layout.total * sizeof *params, "bench params");
    df_drafter_init_params(&d.layout, params, 7);
    rc = df_drafter_set_params(&d, params, err);
    free(params);
    df_bench_host_batch_init(&b, cfg.vocab_size, s->n_seqs, s->seq_len, s->num_anchors);
    if (rc == 0) rc = random_features(&features, be, &cfg, (size_t)s->n_seqs * s->seq_len, err);
    if (rc == 0) {
        DfDrafterBatch batch = {s->n_seqs, b.starts, b.ids, b.mask, features, b.anchor_starts, b.anchors};
        rc = time_steps(&d, &batch, repeat, &res->step_s, err);
        res->gflop = df_drafter_step_flops(&cfg, &batch) / 1e9;
        res->gflops = res->gflop / res->step_s;
    }
    df_bench_host_batch_free(&b);
    df_buffer_free(be, &features);
    df_drafter_free(&d);
out_target:
    df_target_free(&target);
out_be:
    df_backend_destroy(be);
    return rc;
}
