#include "cli/bench_drafter.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "model/drafter.h"
#include "model/target.h"
#include "train/anchors.h"

/* Fixed pseudo-random contents (never zeros), for ids and features. */
static uint32_t next_u32(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

typedef struct BenchBatch {
    int32_t *starts, *ids;
    uint8_t *mask;
    int64_t *anchor_starts, *anchors, *scratch;
    DfBuffer features;
} BenchBatch;

static int build_batch(BenchBatch *b, DfBackend *be, const DfDrafterConfig *cfg, const DfDrafterBenchShape *s,
                       DfError *err) {
    int T = s->n_seqs * s->seq_len;
    b->starts = df_xmalloc((size_t)(s->n_seqs + 1) * sizeof *b->starts, "bench batch");
    b->ids = df_xmalloc((size_t)T * sizeof *b->ids, "bench batch");
    b->mask = df_xmalloc((size_t)T, "bench batch");
    b->anchor_starts = df_xmalloc((size_t)(s->n_seqs + 1) * sizeof *b->anchor_starts, "bench batch");
    b->anchors = df_xmalloc((size_t)s->n_seqs * s->num_anchors * sizeof *b->anchors, "bench batch");
    b->scratch = df_xmalloc((size_t)s->seq_len * sizeof *b->scratch, "bench batch");
    uint64_t rng = 42;
    for (int t = 0; t < T; t++) {
        b->ids[t] = (int32_t)(next_u32(&rng) % (uint32_t)(cfg->vocab_size - 2));
        b->mask[t] = (t % s->seq_len) >= s->seq_len / 4; /* a quarter prompt, the rest response */
    }
    b->anchor_starts[0] = 0;
    for (int q = 0; q < s->n_seqs; q++) {
        b->starts[q] = q * s->seq_len;
        int64_t n = df_select_anchors(b->mask + (size_t)q * s->seq_len, s->seq_len, s->num_anchors, 1, 0, (uint64_t)q,
                                      b->anchors + b->anchor_starts[q], b->scratch);
        b->anchor_starts[q + 1] = b->anchor_starts[q] + n;
    }
    b->starts[s->n_seqs] = T;
    size_t n_feat = (size_t)T * cfg->n_taps * cfg->hidden_size;
    float *host = df_xmalloc(n_feat * sizeof *host, "bench features");
    for (size_t i = 0; i < n_feat; i++) host[i] = (float)(next_u32(&rng) % 2001) / 1000.0f - 1.0f;
    int rc = df_buffer_alloc(be, &b->features, DF_BUF_ACT, n_feat, err);
    if (rc == 0) rc = be->ops->upload_f32(be, b->features, host, err);
    free(host);
    return rc;
}

static void free_batch(BenchBatch *b, DfBackend *be) {
    free(b->starts);
    free(b->ids);
    free(b->mask);
    free(b->anchor_starts);
    free(b->anchors);
    free(b->scratch);
    df_buffer_free(be, &b->features);
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
    BenchBatch b = {0};
    memset(&d, 0, sizeof d);
    int rc = df_target_load(&target, be, target_dir, 1, 1, err);
    if (rc != 0) goto out_be;
    rc = df_drafter_config_from_target(&cfg, &target.cfg, s->layers, s->intermediate, s->block_size, 0,
                                       target.cfg.vocab_size - 2, err);
    if (rc == 0) rc = df_drafter_create(&d, be, &cfg, target.embed, target.lm_head, err);
    if (rc != 0) goto out_target;
    float *params = df_xmalloc(d.layout.total * sizeof *params, "bench params");
    df_drafter_init_params(&d.layout, params, 7);
    rc = df_drafter_set_params(&d, params, err);
    free(params);
    if (rc == 0) rc = build_batch(&b, be, &cfg, s, err);
    if (rc == 0) {
        DfDrafterBatch batch = {s->n_seqs, b.starts, b.ids, b.mask, b.features, b.anchor_starts, b.anchors};
        rc = time_steps(&d, &batch, repeat, &res->step_s, err);
        res->gflop = df_drafter_step_flops(&cfg, &batch) / 1e9;
        res->gflops = res->gflop / res->step_s;
    }
    free_batch(&b, be);
    df_drafter_free(&d);
out_target:
    df_target_free(&target);
out_be:
    df_backend_destroy(be);
    return rc;
}
