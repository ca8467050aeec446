/* The CPU figures of the bench harness, each next to OpenBLAS sgemm on all
 * cores measured in the same run. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/select.h"
#include "base/clock.h"
#include "bench/bench_data.h"
#include "bench/bench_drafter.h"
#include "bench/bench_internal.h"
#include "target/target.h"
#include "text/tokenizer.h"

double df_bench_sgemm_gflops(int m, int n, int k, int repeat) {
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

static int bench_target_forward(const DfBenchOptions *o, int with_logits, ForwardResult *res, DfError *err) {
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


/* The CPU figures: sgemm, the target forward, the drafter step, the
 * tokenizer and the token store. */
int df_bench_cpu(const DfBenchOptions *o, cJSON *json, DfError *err) {
    printf("dflash bench on %d threads\n\n", omp_get_max_threads());

    DfModelConfig cfg;
    if (df_model_config_load(&cfg, o->target, err) != 0) return -1;
    int T = o->seq_len * o->n_seqs;
    double peak = df_bench_sgemm_gflops(T, cfg.intermediate_size, cfg.hidden_size, o->repeat);
    double peak_sq = df_bench_sgemm_gflops(1024, 1024, 1024, o->repeat);
    printf("%-44s %10.1f GFLOP/s\n", "OpenBLAS sgemm [T x I x H]", peak);
    printf("%-44s %10.1f GFLOP/s\n", "OpenBLAS sgemm 1024^3", peak_sq);
    df_bench_add_number(json, "sgemm_gflops", peak);
    df_bench_add_number(json, "sgemm_1024_gflops", peak_sq);

    ForwardResult fw;
    if (bench_target_forward(o, 0, &fw, err) != 0) return -1;
    printf("%-44s %10.0f tokens/s %8.1f GFLOP/s  %5.1f%% of sgemm  (%d x %d tokens, %d layers)\n",
           "target forward, taps only", fw.tokens_per_s, fw.gflops, 100 * fw.gflops / peak, o->n_seqs, o->seq_len,
           fw.layers);
    df_bench_add_number(json, "target_taps_tokens_per_s", fw.tokens_per_s);
    df_bench_add_number(json, "target_taps_gflops", fw.gflops);
    if (bench_target_forward(o, 1, &fw, err) != 0) return -1;
    printf("%-44s %10.0f tokens/s %8.1f GFLOP/s  %5.1f%% of sgemm  (%d layers + lm head)\n",
           "target forward, all layers + logits", fw.tokens_per_s, fw.gflops, 100 * fw.gflops / peak, fw.layers);
    df_bench_add_number(json, "target_full_tokens_per_s", fw.tokens_per_s);
    df_bench_add_number(json, "target_full_gflops", fw.gflops);

    DfDrafterBenchShape shape = {4, 512, 32, 16, 2, 512};
    DfDrafterBenchResult dr;
    if (df_bench_drafter_step(o->target, &shape, o->repeat, &dr, err) != 0) return -1;
    printf("%-44s %10.1f ms/step %7.1f GFLOP/s  %5.1f%% of sgemm  (%d x %d tokens, %d anchors, B %d, %d layers)\n",
           "drafter step (forward + backward)", dr.step_s * 1e3, dr.gflops, 100 * dr.gflops / peak, shape.n_seqs,
           shape.seq_len, shape.num_anchors, shape.block_size, shape.layers);
    df_bench_add_number(json, "drafter_step_ms", dr.step_s * 1e3);
    df_bench_add_number(json, "drafter_step_gflops", dr.gflops);

    DfBenchTexts texts;
    if (df_bench_texts_load(&texts, o->data, err) != 0) return -1;
    DfTokenizer *tok = df_tokenizer_load(o->tokenizer ? o->tokenizer : o->target, err);
    if (!tok) {
        df_bench_texts_free(&texts);
        return -1;
    }
    double mb1 = bench_tokenizer(tok, &texts, 1, o->repeat);
    double mbn = bench_tokenizer(tok, &texts, omp_get_max_threads(), o->repeat);
    printf("%-44s %10.2f MB/s (1 thread) %8.2f MB/s (%d threads)  over %.2f MB\n", "tokenizer encode", mb1, mbn,
           omp_get_max_threads(), texts.bytes / 1e6);
    df_bench_add_number(json, "tokenizer_mb_per_s_1thread", mb1);
    df_bench_add_number(json, "tokenizer_mb_per_s_all", mbn);

    double ns = 0;
    int rc = df_bench_store_access(tok, &texts, &ns, err);
    df_tokenizer_free(tok);
    df_bench_texts_free(&texts);
    if (rc != 0) return -1;
    printf("%-44s %10.1f ns per random sample access\n", "token store", ns);
    df_bench_add_number(json, "store_random_access_ns", ns);
    return 0;
}
