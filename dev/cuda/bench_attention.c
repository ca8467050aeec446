/* Causal GQA attention (the target's prefill) at the training step's shape:
 * 2 and 8 packed sequences of 2048 tokens, 32/8 heads of 128 (Qwen3-8B);
 * device events, median of 21 after 3 warm-up runs. The default kernel at
 * head_dim 128 (wgmma) and the mma.sync one (the variant attention_mma_sync,
 * 128 rows a block) are timed in the same run.
 *
 * Each kernel is validated first against the CPU backend's op on the same
 * inputs (2 sequences: out and lse within 1e-2 relative).
 *
 * Usage: build/dev/cuda/bench_attention (make dev; scripts/test_gpu.sh part kernels). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "dev_util.h"

enum { LEN = 2048, HEADS = 32, KV_HEADS = 8, HD = 128, MAX_SEQS = 8 };

typedef struct Problem {
    int n_seqs, n_tokens;
    int32_t starts[MAX_SEQS + 1];
    float *q, *k, *v;
    size_t n_q, n_kv;
} Problem;

static Problem make_problem(int n_seqs, uint64_t seed) {
    Problem p = {.n_seqs = n_seqs, .n_tokens = n_seqs * LEN};
    for (int s = 0; s <= n_seqs; s++) p.starts[s] = s * LEN;
    p.n_q = (size_t)p.n_tokens * HEADS * HD, p.n_kv = (size_t)p.n_tokens * KV_HEADS * HD;
    p.q = dev_random(p.n_q, seed + 1, 1.0f), p.k = dev_random(p.n_kv, seed + 2, 1.0f);
    p.v = dev_random(p.n_kv, seed + 3, 1.0f);
    return p;
}

/* The problem's buffers on one backend, outputs poisoned. */
typedef struct Run {
    DfBackend *be;
    DfPackedBatch batch;
    DfBuffer q, k, v, out, lse;
} Run;

static void run_init(Run *r, DfBackend *be, const Problem *p) {
    DfError err;
    r->be = be;
    if (df_packed_batch_init(&r->batch, be, p->starts, p->n_seqs, &err)) dev_die("packed batch: %s", err.msg);
    r->q = dev_upload(be, p->q, p->n_q, DF_BUF_ACT), r->k = dev_upload(be, p->k, p->n_kv, DF_BUF_ACT);
    r->v = dev_upload(be, p->v, p->n_kv, DF_BUF_ACT), r->out = dev_poisoned(be, p->n_q, DF_BUF_ACT);
    r->lse = dev_poisoned(be, (size_t)HEADS * p->n_tokens, DF_BUF_F32);
}

static void run_free(Run *r) {
    DfBuffer *bufs[] = {&r->q, &r->k, &r->v, &r->out, &r->lse};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) df_buffer_free(r->be, bufs[i]);
    df_packed_batch_free(&r->batch, r->be);
}

static void op_once(void *ctx) {
    Run *r = ctx;
    df_op_attention(r->be, r->out, r->lse, r->q, r->k, r->v, &r->batch, HEADS, KV_HEADS, HD, 1.0f / sqrtf((float)HD));
}

static void compare(DevBackends *be, const char *what, DfBuffer g, DfBuffer c) {
    float *a = dev_download(be->gpu, g), *b = dev_download(be->cpu, c);
    dev_validate(what, a, b, c.count, 1e-2);
    free(a), free(b);
}

/* The GPU's kernel of the current variants against the CPU's op (cpu already run). */
static void validate(DevBackends *be, const Problem *p, Run *cpu, const char *kernel) {
    Run g;
    run_init(&g, be->gpu, p);
    op_once(&g);
    dev_sync(be->gpu);
    char tag[96];
    snprintf(tag, sizeof tag, "attention out (%s)", kernel);
    compare(be, tag, g.out, cpu->out);
    snprintf(tag, sizeof tag, "attention lse (%s)", kernel);
    compare(be, tag, g.lse, cpu->lse);
    run_free(&g);
}

int main(void) {
    DevBackends be = dev_open("bench_attention");
    Problem small = make_problem(2, 77);
    Run cpu;
    run_init(&cpu, be.cpu, &small);
    op_once(&cpu);
    validate(&be, &small, &cpu, "wgmma");
    dev_variant(be.gpu, "attention_mma_sync", 1);
    validate(&be, &small, &cpu, "mma.sync");
    dev_variant(be.gpu, NULL, 0);
    run_free(&cpu);
    free(small.q), free(small.k), free(small.v);

    for (int n_seqs = 2; n_seqs <= MAX_SEQS; n_seqs *= 4) {
        Problem p = make_problem(n_seqs, 90 + (uint64_t)n_seqs);
        /* causal: half of the LEN x LEN scores of each (sequence, head), QK^T and PV */
        double flop = 4.0 * n_seqs * HEADS * HD * (double)LEN * LEN / 2;
        Run r;
        run_init(&r, be.gpu, &p);
        double wgmma = dev_median_ms(be.gpu, op_once, &r, 3, 21, 1);
        dev_variant(be.gpu, "attention_mma_sync", 1);
        double mma_sync = dev_median_ms(be.gpu, op_once, &r, 3, 21, 1);
        dev_variant(be.gpu, NULL, 0);
        printf("causal attention, %d x %d tokens, %d/%d heads of %d: %.3f ms %.1f TFLOP/s "
               "(on mma.sync, the variant attention_mma_sync: %.3f ms, %.1f TFLOP/s)\n",
               n_seqs, LEN, HEADS, KV_HEADS, HD, wgmma, flop / wgmma * 1e-9, mma_sync, flop / mma_sync * 1e-9);
        run_free(&r);
        free(p.q), free(p.k), free(p.v);
    }
    dev_close(&be);
    return 0;
}
