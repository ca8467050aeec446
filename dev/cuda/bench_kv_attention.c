/* kv_attention at the Qwen3-8B decode shapes: 32/8 heads of 128, caches of
 * 576 keys + 1 new, batch 64 and 1; also the same bytes as 512 sequences of
 * one kv head (4 query heads), whose keys then lie contiguous in the cache
 * as a head-major cache layout would give them. Device events, median of 11
 * after 3 warm-up runs, rotating over 4 layers' caches so that they come
 * from HBM, for several split-K targets (variant kv_attention_blocks_per_sm);
 * GB/s of K and V read next to the device-to-device copy's bandwidth.
 *
 * Each shape and split-K target is validated first against the CPU
 * backend's op on the same caches (layer 0's), into a fresh NaN-filled
 * output: within 1e-2 relative.
 *
 * Then the same caches paged (DfKvBatch's page table): each slot's rows moved
 * to pages of DF_KV_PAGE_ROWS handed out in a shuffled order, so that a
 * sequence's pages lie scattered over the cache; the output must equal the
 * contiguous caches' bit for bit (the same keys in the same tiles) and the
 * CPU reference within 1e-2, and the timing shows what the page lookups cost.
 *
 * Usage: build/dev/cuda/bench_kv_attention (make dev; scripts/test_gpu.sh part kernels). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
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

/* Page j of slot s is table[s * pages_for(capacity) + j]: the n_slots *
 * pages_for(capacity) pages in a shuffled order (Fisher-Yates); heap. */
static int32_t *scrambled_pages(int n_slots, int capacity) {
    int n = n_slots * df_kv_pages_for(capacity);
    int32_t *table = malloc((size_t)n * sizeof *table);
    if (!table) dev_die("out of host memory for a page table of %d pages", n);
    for (int i = 0; i < n; i++) table[i] = i;
    DfRng rng = df_rng_key(91, 0, 0);
    for (int i = n - 1; i > 0; i--) {
        int j = (int)df_rng_below(&rng, (uint64_t)i + 1), t = table[i];
        table[i] = table[j], table[j] = t;
    }
    return table;
}

/* The contiguous caches' values (row r of slot s at s * capacity + r, kvd a
 * row) at their rows in the pages of `table`; cache_n values, the rest zero. */
static float *paged_copy(const float *host, size_t cache_n, const int32_t *table, int n_slots, int capacity, int kvd) {
    int per_slot = df_kv_pages_for(capacity);
    if ((size_t)n_slots * per_slot * DF_KV_PAGE_ROWS * kvd > cache_n)
        dev_die("%d slots of %d pages of %d rows of %d do not fit the caches' %zu values", n_slots, per_slot,
                DF_KV_PAGE_ROWS, kvd, cache_n);
    float *paged = calloc(cache_n, sizeof *paged);
    if (!paged) dev_die("out of host memory for a paged cache of %zu values", cache_n);
    for (int s = 0; s < n_slots; s++)
        for (int r = 0; r < capacity; r++) {
            size_t to = (size_t)table[s * per_slot + r / DF_KV_PAGE_ROWS] * DF_KV_PAGE_ROWS + r % DF_KV_PAGE_ROWS;
            memcpy(paged + to * kvd, host + ((size_t)s * capacity + r) * kvd, (size_t)kvd * sizeof *paged);
        }
    return paged;
}

/* One layout of a shape's caches: its batch and LAYERS caches of each. */
typedef struct KvLayoutCase {
    const char *name;
    const DfKvBatch *kb;
    const DfBuffer *kc, *vc;
} KvLayoutCase;

static const int per_sm[] = {2, 4, 8};
enum { N_TARGETS = sizeof per_sm / sizeof per_sm[0] };

/* A layout at every split-K target: validated (into a fresh NaN-filled
 * output, so that a row the op leaves unwritten fails) against the CPU's
 * `want` and, given `same`, equal bit for bit to outs[target] (else
 * outs[target] becomes the output, heap), then timed. */
static void run_layout(DfBackend *gpu, const KvLayoutCase *c, const KvSpeedShape *s, DfBuffer q, DfBuffer out,
                       const float *want, float **outs, int same, double copy_gbs) {
    size_t nq = (size_t)s->n_seqs * s->heads * 128;
    double bytes = 2.0 * s->n_seqs * (LEN + 1) * s->kv_heads * 128 * 2;
    for (int i = 0; i < N_TARGETS; i++) {
        dev_variant(gpu, "kv_attention_blocks_per_sm", per_sm[i]);
        DfBuffer fresh = dev_poisoned(gpu, nq, DF_BUF_ACT);
        df_op_kv_attention(gpu, fresh, q, c->kc[0], c->vc[0], c->kb, s->heads, s->kv_heads, 128, 0.088f, 1);
        float *got = dev_download(gpu, fresh);
        df_buffer_free(gpu, &fresh);
        char what[160];
        snprintf(what, sizeof what, "%s, %d sequences, %d/%d heads, split-K target %d blocks/SM", c->name, s->n_seqs,
                 s->heads, s->kv_heads, per_sm[i]);
        dev_validate(what, got, want, nq, 1e-2);
        if (same) {
            char exact[200];
            snprintf(exact, sizeof exact, "%s, equal to the first layout's", what);
            dev_validate_exact(exact, got, outs[i], nq);
            free(got);
        } else {
            outs[i] = got;
        }
        KvSpeedRun run = {gpu, out, q, c->kc, c->vc, LAYERS, s->heads, s->kv_heads, c->kb};
        double ms = dev_median_ms(gpu, kv_attention_layers, &run, 3, 11, LAYERS);
        printf("  %-10s %3d sequences, %d/%d heads, split-K target %2d blocks/SM: %7.1f us, %6.0f GB/s, %.2f of the "
               "copy\n",
               c->name, s->n_seqs, s->heads, s->kv_heads, per_sm[i], ms * 1e3, bytes / (ms * 1e-3) / 1e9,
               bytes / (ms * 1e-3) / 1e9 / copy_gbs);
    }
}

/* The shape's paged case: the caches moved to scrambled pages (LAYERS copies),
 * against the contiguous case's outputs. */
static void run_paged(DevBackends *be, const float *host, size_t cache_n, const KvSpeedShape *s, int capacity,
                      DfBuffer q, DfBuffer out, const float *want, float **outs, double copy_gbs) {
    static int32_t slots[MAX_SEQS], lens[MAX_SEQS], starts[MAX_SEQS + 1];
    for (int i = 0; i < s->n_seqs; i++) slots[i] = i, lens[i] = LEN, starts[i] = i;
    starts[s->n_seqs] = s->n_seqs;
    int32_t *table = scrambled_pages(s->n_seqs, capacity);
    float *paged = paged_copy(host, cache_n, table, s->n_seqs, capacity, s->kv_heads * 128);
    DfKvPageTable pages = {table, s->n_seqs * df_kv_pages_for(capacity)};
    DfKvBatch kb = {0};
    DfError err;
    if (df_kv_batch_set_paged(&kb, be->gpu, s->n_seqs, slots, lens, starts, s->n_seqs, capacity, &pages, &err))
        dev_die("%s", err.msg);
    DfBuffer kc[LAYERS], vc[LAYERS];
    for (int l = 0; l < LAYERS; l++)
        kc[l] = dev_upload(be->gpu, paged, cache_n, DF_BUF_ACT), vc[l] = dev_upload(be->gpu, paged, cache_n, DF_BUF_ACT);
    KvLayoutCase c = {"paged", &kb, kc, vc};
    run_layout(be->gpu, &c, s, q, out, want, outs, 1, copy_gbs);
    dev_sync(be->gpu);
    for (int l = 0; l < LAYERS; l++) df_buffer_free(be->gpu, &kc[l]), df_buffer_free(be->gpu, &vc[l]);
    df_kv_batch_free(&kb, be->gpu);
    free(paged);
    free(table);
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
        float *outs[N_TARGETS];
        KvLayoutCase contiguous = {"contiguous", &kb, kc, vc};
        run_layout(gpu, &contiguous, s, q_view, out_view, want, outs, 0, copy_gbs);
        run_paged(&be, host, cache_n, s, capacity, q_view, out_view, want, outs, copy_gbs);
        for (int i = 0; i < N_TARGETS; i++) free(outs[i]);
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
