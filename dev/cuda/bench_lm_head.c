/* lm_head_ce at the Qwen3-8B drafter shape (rows 8192, hidden 4096, vocab
 * 151936) against a plain cuBLASLt GEMM of the logits' shape, timed in the
 * same run: with and without d_x, then fp32 logits with d_x at several rows per chunk
 * (variant lm_head_chunk_rows: the d_x product of one chunk has rows x hidden
 * outputs only, so its tiles fill whole waves of the SMs at some chunk sizes
 * and leave most of a last wave idle at others).
 *
 * Last, the plain GEMM and lm_head_ce (fp32 logits, d_x, the default chunks)
 * with variant gemm_search 1, which times cuBLASLt's candidates instead of
 * taking the heuristic's first (cuda_matmul_search.cu).
 *
 * Each configuration is validated before it is timed. The op works row by
 * row, so the CPU backend computes a sample of the rows (every 97th and the
 * last, all chunks crossed) and the GPU's run over all rows must match it
 * there: ce and d_x within 1e-2 relative, the argmax the CPU's or a near tie
 * (the two tokens' exact logits within fp32 accumulation noise, 1e-4).
 * Logits in bf16 were tried and dropped: dev/cuda/lm_head_ce_v2_bf16_logits.cu.
 * The plain GEMM's logits are validated on the same rows.
 *
 * Usage: build/dev/cuda/bench_lm_head (make dev; scripts/test_gpu.sh part kernels). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev_util.h"

enum { ROWS = 8192, HIDDEN = 4096, VOCAB = 151936, SAMPLE_STRIDE = 97, REPS = 9 };

typedef struct LmBench {
    DevBackends be;
    float *x, *head, *w; /* host inputs */
    int32_t *labels;
    DfLmHeadCeArgs a; /* the GPU's buffers */
    DfBuffer d_x, logits;
    int n_sample, sample[ROWS / SAMPLE_STRIDE + 2];
    float *ref_ce, *ref_dx, *ref_logits; /* the CPU's results on the sampled rows */
    int32_t *ref_argmax;
} LmBench;

/* The CPU backend's lm_head_ce (and plain logits) on the sampled rows. */
static void cpu_reference(LmBench *b) {
    DfBackend *cpu = b->be.cpu;
    int S = b->n_sample;
    float *xs = malloc((size_t)S * HIDDEN * sizeof *xs), *ws = malloc((size_t)S * sizeof *ws);
    int32_t *ls = malloc((size_t)S * sizeof *ls);
    if (!xs || !ws || !ls) dev_die("out of host memory");
    for (int i = 0; i < S; i++) {
        memcpy(xs + (size_t)i * HIDDEN, b->x + (size_t)b->sample[i] * HIDDEN, HIDDEN * sizeof *xs);
        ws[i] = b->w[b->sample[i]], ls[i] = b->labels[b->sample[i]];
    }
    DfLmHeadCeArgs c = {.rows = S, .hidden = HIDDEN, .vocab = VOCAB, .grad_scale = b->a.grad_scale};
    c.x = dev_upload(cpu, xs, (size_t)S * HIDDEN, DF_BUF_ACT);
    c.head = dev_upload(cpu, b->head, (size_t)VOCAB * HIDDEN, DF_BUF_ACT);
    c.weights = dev_upload(cpu, ws, (size_t)S, DF_BUF_F32);
    c.labels = dev_upload_i32(cpu, ls, (size_t)S);
    c.ce = dev_poisoned(cpu, (size_t)S, DF_BUF_F32);
    c.argmax = dev_upload_i32(cpu, ls, (size_t)S);
    c.d_x = dev_poisoned(cpu, (size_t)S * HIDDEN, DF_BUF_ACT);
    DfBuffer logits = dev_poisoned(cpu, (size_t)S * VOCAB, DF_BUF_ACT);
    df_op_lm_head_ce(cpu, &c);
    df_op_linear(cpu, logits, c.x, c.head, S, VOCAB, HIDDEN, 0);
    b->ref_ce = dev_download(cpu, c.ce), b->ref_dx = dev_download(cpu, c.d_x);
    b->ref_argmax = dev_download_i32(cpu, c.argmax), b->ref_logits = dev_download(cpu, logits);
    DfBuffer bufs[8] = {c.x, c.head, c.weights, c.labels, c.ce, c.argmax, c.d_x, logits};
    for (int i = 0; i < 8; i++) df_buffer_free(cpu, &bufs[i]);
    free(xs), free(ws), free(ls);
}

static double exact_logit(const LmBench *b, int row, int v) {
    double s = 0;
    for (int i = 0; i < HIDDEN; i++) s += (double)b->x[(size_t)row * HIDDEN + i] * b->head[(size_t)v * HIDDEN + i];
    return s;
}

/* The sampled rows of a GPU output [ROWS, cols] (heap). */
static float *sampled(const LmBench *b, const float *all, size_t cols) {
    float *s = malloc((size_t)b->n_sample * cols * sizeof *s);
    if (!s) dev_die("out of host memory");
    for (int i = 0; i < b->n_sample; i++) memcpy(s + i * cols, all + (size_t)b->sample[i] * cols, cols * sizeof *s);
    return s;
}

/* One run of the configuration set on the GPU now, against the CPU's sampled rows. */
static void validate(LmBench *b, const char *what, int with_dx) {
    DfBackend *gpu = b->be.gpu;
    DfLmHeadCeArgs a = b->a;
    a.ce = dev_poisoned(gpu, ROWS, DF_BUF_F32);
    a.d_x = with_dx ? dev_poisoned(gpu, (size_t)ROWS * HIDDEN, DF_BUF_ACT) : (DfBuffer){0};
    df_op_lm_head_ce(gpu, &a);
    float *ce = dev_download(gpu, a.ce), *ce_s = sampled(b, ce, 1);
    int32_t *am = dev_download_i32(gpu, a.argmax);
    char tag[192];
    snprintf(tag, sizeof tag, "%s: ce on %d rows", what, b->n_sample);
    dev_validate(tag, ce_s, b->ref_ce, (size_t)b->n_sample, 1e-2);
    int ties = 0;
    for (int i = 0; i < b->n_sample; i++) {
        int row = b->sample[i], got = am[row], want = b->ref_argmax[i];
        if (got < 0 || got >= VOCAB) dev_die("    %s: argmax[%d] = %d outside the vocabulary", what, row, got);
        if (got == want) continue;
        double lg = exact_logit(b, row, got), lw = exact_logit(b, row, want);
        double margin = 1e-4 * fmax(1.0, fabs(lw));
        if (!(fabs(lg - lw) <= margin))
            dev_die("    %s: argmax row %d: GPU %d (logit %.6f), CPU %d (logit %.6f): apart by more than %g", what, row,
                    got, lg, want, lw, margin);
        ties++;
    }
    printf("    validated %s: argmax on %d rows (%d ties within noise)\n", what, b->n_sample, ties);
    if (with_dx) {
        float *dx = dev_download(gpu, a.d_x), *dx_s = sampled(b, dx, HIDDEN);
        snprintf(tag, sizeof tag, "%s: d_x on %d rows", what, b->n_sample);
        dev_validate(tag, dx_s, b->ref_dx, (size_t)b->n_sample * HIDDEN, 1e-2);
        free(dx), free(dx_s);
        df_buffer_free(gpu, &a.d_x);
    }
    df_buffer_free(gpu, &a.ce);
    free(ce), free(ce_s), free(am);
}

static void validate_gemm(LmBench *b) {
    df_op_linear(b->be.gpu, b->logits, b->a.x, b->a.head, ROWS, VOCAB, HIDDEN, 0);
    float *all = dev_download(b->be.gpu, b->logits), *s = sampled(b, all, VOCAB);
    dev_validate("plain GEMM: logits on the sampled rows", s, b->ref_logits, (size_t)b->n_sample * VOCAB, 1e-2);
    free(all), free(s);
}

typedef struct LmHeadRun {
    DfBackend *be;
    const DfLmHeadCeArgs *a;
    DfBuffer logits;
    int gemm_only;
} LmHeadRun;

static void lm_head_once(void *ctx) {
    const LmHeadRun *r = ctx;
    if (r->gemm_only)
        df_op_linear(r->be, r->logits, r->a->x, r->a->head, r->a->rows, r->a->vocab, r->a->hidden, 0);
    else
        df_op_lm_head_ce(r->be, r->a);
}

/* Median ms of REPS runs of lm_head_ce (gemm_only: the plain logits GEMM), after two warm-up runs. */
static double time_median(LmBench *b, const DfLmHeadCeArgs *a, int gemm_only) {
    LmHeadRun run = {b->be.gpu, a, b->logits, gemm_only};
    return dev_median_ms(b->be.gpu, lm_head_once, &run, 2, REPS, 1);
}

static void setup(LmBench *b) {
    DfBackend *gpu = b->be.gpu;
    size_t R = ROWS, H = HIDDEN, V = VOCAB;
    b->x = dev_random(R * H, 1, 1.0f), b->head = dev_random(V * H, 2, 0.05f), b->w = dev_random(R, 3, 0.5f);
    b->labels = malloc(R * sizeof *b->labels);
    if (!b->labels) dev_die("out of host memory");
    for (size_t r = 0; r < R; r++) b->w[r] += 1.0f, b->labels[r] = r % 7 == 0 ? -1 : (int32_t)((r * 7919) % V);
    for (int r = 0; r < ROWS; r += SAMPLE_STRIDE) b->sample[b->n_sample++] = r;
    b->sample[b->n_sample++] = ROWS - 1;
    b->a = (DfLmHeadCeArgs){.rows = ROWS, .hidden = HIDDEN, .vocab = VOCAB, .grad_scale = 1.0f / ROWS};
    b->a.x = dev_upload(gpu, b->x, R * H, DF_BUF_ACT);
    b->a.head = dev_upload(gpu, b->head, V * H, DF_BUF_ACT);
    b->a.weights = dev_upload(gpu, b->w, R, DF_BUF_F32);
    b->a.labels = dev_upload_i32(gpu, b->labels, R);
    b->a.ce = dev_upload(gpu, b->w, R, DF_BUF_F32);
    b->a.argmax = dev_upload_i32(gpu, b->labels, R);
    b->d_x = dev_upload(gpu, b->x, R * H, DF_BUF_ACT);
    b->logits = dev_alloc(gpu, R * V, DF_BUF_ACT);
    cpu_reference(b);
}

static void teardown(LmBench *b) {
    DfBuffer bufs[8] = {b->a.x, b->a.head, b->a.weights, b->a.labels, b->a.ce, b->a.argmax, b->d_x, b->logits};
    for (int i = 0; i < 8; i++) df_buffer_free(b->be.gpu, &bufs[i]);
    free(b->x), free(b->head), free(b->w), free(b->labels);
    free(b->ref_ce), free(b->ref_dx), free(b->ref_logits), free(b->ref_argmax);
}

int main(void) {
    LmBench b = {.be = dev_open("bench_lm_head")};
    DfBackend *be = b.be.gpu;
    setup(&b);
    double flop1 = 2.0 * ROWS * HIDDEN * (double)VOCAB;
    validate_gemm(&b);
    double gemm = time_median(&b, &b.a, 1);
    printf("    plain GEMM %dx%dx%d (bf16 out): %.2f ms, %.0f TFLOP/s\n", ROWS, VOCAB, HIDDEN, gemm, flop1 / gemm / 1e9);
    for (int with_dx = 1; with_dx >= 0; with_dx--) {
        char what[96];
        snprintf(what, sizeof what, "lm_head_ce logits fp32, d_x %s", with_dx ? "yes" : "no");
        validate(&b, what, with_dx);
        DfLmHeadCeArgs a = b.a;
        a.d_x = with_dx ? b.d_x : (DfBuffer){0};
        double ms = time_median(&b, &a, 0), flop = flop1 * (with_dx ? 2 : 1);
        printf("    lm_head_ce logits fp32, d_x %s: %.2f ms, %.0f TFLOP/s, %.3f of the plain GEMM's rate\n",
               with_dx ? "yes" : "no ", ms, flop / ms / 1e9, (flop / ms) / (flop1 / gemm));
    }
    static const int chunk_rows[] = {1024, 1280, 1536, 1664, 2048, 2560, 4096};
    DfLmHeadCeArgs a = b.a;
    a.d_x = b.d_x;
    for (size_t i = 0; i < sizeof chunk_rows / sizeof chunk_rows[0]; i++) {
        dev_variant(be, "lm_head_chunk_rows", chunk_rows[i]);
        char what[96];
        snprintf(what, sizeof what, "lm_head_ce logits fp32, d_x yes, %d rows a chunk", chunk_rows[i]);
        validate(&b, what, 1);
        double ms = time_median(&b, &a, 0), flop = 2 * flop1;
        printf("    lm_head_ce logits fp32, d_x yes, %4d rows a chunk (%.2f GiB of logits): %.2f ms, %.0f TFLOP/s, "
               "%.3f of the plain GEMM's rate\n",
               chunk_rows[i], chunk_rows[i] * (double)VOCAB * 4.0 / (1 << 30), ms, flop / ms / 1e9,
               (flop / ms) / (flop1 / gemm));
    }
    /* the GEMMs' algorithms timed among the heuristic's candidates (gemm_search) against its first
     * (the default: every line above) */
    dev_variant(be, "lm_head_chunk_rows", 0);
    dev_variant(be, "gemm_search", 1);
    validate_gemm(&b);
    double gemm1 = time_median(&b, &b.a, 1);
    validate(&b, "lm_head_ce logits fp32, d_x yes, gemm_search 1", 1);
    double ms1 = time_median(&b, &a, 0);
    printf("    gemm_search 1 (the fastest of the heuristic's candidates): plain GEMM %.2f ms, %.0f TFLOP/s; lm_head_ce "
           "logits fp32, d_x yes: %.2f ms, %.0f TFLOP/s\n",
           gemm1, flop1 / gemm1 / 1e9, ms1, 2 * flop1 / ms1 / 1e9);
    dev_variant(be, NULL, 0);
    DfMemoryInfo mem;
    df_backend_memory_info(be, &mem);
    printf("    peak GPU memory %.2f GiB\n", mem.peak / (1024.0 * 1024 * 1024));
    teardown(&b);
    dev_close(&b.be);
    return 0;
}
