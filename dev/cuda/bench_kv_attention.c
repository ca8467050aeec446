/* kv_attention at the Qwen3-8B decode shapes: 32/8 heads of 128, caches of
 * 576 keys + 1 new, batch 64 and 1; also the same bytes as 512 sequences of
 * one kv head (4 query heads), whose keys then lie contiguous in the cache
 * as a head-major cache layout would give them. Device events, median of 11
 * after 3 warm-up runs, rotating over 4 layers' caches so that they come
 * from HBM, for several split-K targets (variant kv_attention_blocks_per_sm);
 * GB/s of K and V read next to the device-to-device copy's bandwidth.
 *
 * Each shape and split-K target is validated first against the CPU
 * backend's op on the same caches (layer 0's): within 1e-2 relative.
 *
 * Usage: build/dev/cuda/bench_kv_attention (make dev; scripts/test_gpu.sh part kernels). */
#include <stdio.h>
#include <stdlib.h>

#include "dev_util.h"

enum { LAYERS = 4, LEN = 576, CAP = 640, MAX_SEQS = 512, CACHE_ROWS_X_KVD = 64 * CAP * 8 * 128 };

typedef struct KvSpeedShape {
    int n_seqs, heads, kv_heads;
} KvSpeedShape;

typedef struct KvSpeedRun {
    DfBackend *be;
    DfBuffer out, q;
    const DfBuffer *kc, *vc; /* [layers] */
    int layers, heads, kv_heads;
    const DfKvBatch *kb;
} KvSpeedRun;

static void kv_attention_layers(void *ctx) {
    const KvSpeedRun *r = ctx;
    for (int l = 0; l < r->layers; l++)
        df_op_kv_attention(r->be, r->out, r->q, r->kc[l], r->vc[l], r->kb, r->heads, r->kv_heads, 128, 0.088f, 1);
}

/* The CPU backend's output for a shape, on layer 0's caches (its own copies of them). */
static float *cpu_reference(DfBackend *cpu, const float *host, size_t cache_n, const KvSpeedShape *s, int capacity,
                            const int32_t *slots, const int32_t *lens, const int32_t *starts) {
    DfError err;
    DfKvBatch kb;
    if (df_kv_batch_init(&kb, cpu, s->n_seqs, slots, lens, starts, s->n_seqs, capacity, &err)) dev_die("%s", err.msg);
    size_t nq = (size_t)s->n_seqs * s->heads * 128;
    DfBuffer kc = dev_upload(cpu, host, cache_n, DF_BUF_ACT), vc = dev_upload(cpu, host, cache_n, DF_BUF_ACT);
    DfBuffer q = dev_upload(cpu, host, nq, DF_BUF_ACT), out = dev_poisoned(cpu, nq, DF_BUF_ACT);
    df_op_kv_attention(cpu, out, q, kc, vc, &kb, s->heads, s->kv_heads, 128, 0.088f, 1);
    float *want = dev_download(cpu, out);
    df_buffer_free(cpu, &kc), df_buffer_free(cpu, &vc), df_buffer_free(cpu, &q), df_buffer_free(cpu, &out);
    df_kv_batch_free(&kb, cpu);
    return want;
}

int main(void) {
    DevBackends be = dev_open("bench_kv_attention");
    DfBackend *gpu = be.gpu;
    DfError err;
    double copy_gbs = 0;
    if (gpu->ops->copy_bandwidth(gpu, (size_t)2 << 30, 10, &copy_gbs, &err)) dev_die("%s", err.msg);
    size_t cache_n = CACHE_ROWS_X_KVD;
    float *host = dev_random(cache_n, 77, 1.f);
    DfBuffer kc[LAYERS], vc[LAYERS];
    for (int l = 0; l < LAYERS; l++)
        kc[l] = dev_upload(gpu, host, cache_n, DF_BUF_ACT), vc[l] = dev_upload(gpu, host, cache_n, DF_BUF_ACT);
    DfBuffer q = dev_upload(gpu, host, (size_t)MAX_SEQS * 4 * 128, DF_BUF_ACT);
    DfBuffer out = dev_poisoned(gpu, (size_t)MAX_SEQS * 4 * 128, DF_BUF_ACT);
    static int32_t slots[MAX_SEQS], lens[MAX_SEQS], starts[MAX_SEQS + 1];
    for (int i = 0; i < MAX_SEQS; i++) slots[i] = i, lens[i] = LEN;
    printf("kv_attention, heads of 128, %d cached keys + 1 new, copy bandwidth %.0f GB/s\n", LEN, copy_gbs);
    static const KvSpeedShape shapes[] = {{64, 32, 8}, {512, 4, 1}, {1, 32, 8}};
    static const int per_sm[] = {2, 4, 8};
    for (size_t b = 0; b < sizeof shapes / sizeof shapes[0]; b++) {
        const KvSpeedShape *s = &shapes[b];
        for (int i = 0; i <= s->n_seqs; i++) starts[i] = i;
        int kvd = s->kv_heads * 128, capacity = (int)(cache_n / ((size_t)s->n_seqs * kvd));
        if (capacity > CAP) capacity = CAP;
        DfKvBatch kb;
        if (df_kv_batch_init(&kb, gpu, s->n_seqs, slots, lens, starts, s->n_seqs, capacity, &err)) dev_die("%s", err.msg);
        size_t nq = (size_t)s->n_seqs * s->heads * 128;
        DfBuffer q_view = df_buffer_view(q, 0, nq), out_view = df_buffer_view(out, 0, nq);
        float *want = cpu_reference(be.cpu, host, cache_n, s, capacity, slots, lens, starts);
        double bytes = 2.0 * s->n_seqs * (LEN + 1) * kvd * 2;
        for (size_t i = 0; i < sizeof per_sm / sizeof per_sm[0]; i++) {
            dev_variant(gpu, "kv_attention_blocks_per_sm", per_sm[i]);
            df_op_kv_attention(gpu, out_view, q_view, kc[0], vc[0], &kb, s->heads, s->kv_heads, 128, 0.088f, 1);
            float *got = dev_download(gpu, out_view);
            char what[128];
            snprintf(what, sizeof what, "%d sequences, %d/%d heads, split-K target %d blocks/SM", s->n_seqs, s->heads,
                     s->kv_heads, per_sm[i]);
            dev_validate(what, got, want, nq, 1e-2);
            free(got);
            KvSpeedRun run = {gpu, out_view, q_view, kc, vc, LAYERS, s->heads, s->kv_heads, &kb};
            double ms = dev_median_ms(gpu, kv_attention_layers, &run, 3, 11, LAYERS);
            printf("  %3d sequences, %d/%d heads, split-K target %2d blocks/SM: %7.1f us, %6.0f GB/s, %.2f of the copy\n",
                   s->n_seqs, s->heads, s->kv_heads, per_sm[i], ms * 1e3, bytes / (ms * 1e-3) / 1e9,
                   bytes / (ms * 1e-3) / 1e9 / copy_gbs);
        }
        free(want);
        df_kv_batch_free(&kb, gpu);
    }
    dev_variant(gpu, NULL, 0);
    dev_sync(gpu);
    for (int l = 0; l < LAYERS; l++) df_buffer_free(gpu, &kc[l]), df_buffer_free(gpu, &vc[l]);
    df_buffer_free(gpu, &q), df_buffer_free(gpu, &out);
    free(host);
    dev_close(&be);
    return 0;
}
