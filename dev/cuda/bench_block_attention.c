/* The DFlash block attention, forward and backward, at the production shape:
 * 1 and 2 sequences of 2048 context rows, 512 sorted random anchors each,
 * blocks of 16, 32/8 heads of 128; device events, median of 21 after 3
 * warm-up runs.
 *
 * Each problem is validated first against the CPU backend's op on the same
 * inputs, with the default kernels (wgmma) and with the variant
 * block_attention_mma_sync (the portable tier; one CPU run for both): out,
 * lse, dq and the added-to dk/dv (their totals and their increments) within
 * 1e-2 relative. The versions tried and dropped (two blocks a CTA on wgmma,
 * dQ with Q and dO in registers) are dev/cuda/block_attention_*_v2_*.cu.
 *
 * Usage: build/dev/cuda/bench_block_attention (make dev; scripts/test_gpu.sh part kernels). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev_util.h"

enum { CTX = 2048, B = 16, HEADS = 32, KV_HEADS = 8, HD = 128 };

/* A block-attention problem: layout and random inputs on the host. */
typedef struct Problem {
    int n_seqs, n_blocks, n_ctx;
    int32_t ctx_starts[3], block_starts[3], *anchors;
    float *q, *kc, *vc, *kb, *vb, *d_out, *dk_ctx0, *dv_ctx0, *dk_blk0, *dv_blk0;
    size_t n_qd, n_ckv, n_bkv;
} Problem;

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* n_seqs sequences of CTX context rows with `blocks` blocks each: a
 * sequence's first block anchored at 0 (no context), its second at its last
 * row, the rest at random rows, sorted (the layout the drafter trains on). */
static Problem make_problem(int n_seqs, int blocks, uint64_t seed) {
    Problem p = {.n_seqs = n_seqs, .n_ctx = n_seqs * CTX, .n_blocks = n_seqs * blocks};
    for (int s = 0; s < n_seqs; s++) p.ctx_starts[s + 1] = (s + 1) * CTX, p.block_starts[s + 1] = (s + 1) * blocks;
    p.anchors = malloc((size_t)p.n_blocks * sizeof *p.anchors);
    if (!p.anchors) dev_die("out of host memory");
    uint64_t r = seed * 0x9E3779B97F4A7C15ull + 7;
    for (int j = 0; j < p.n_blocks; j++) {
        int i = j % blocks;
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        p.anchors[j] = i == 0 ? 0 : i == 1 ? CTX - 1 : (int32_t)(r % CTX);
    }
    for (int s = 0; s < n_seqs; s++) qsort(p.anchors + s * blocks, (size_t)blocks, sizeof *p.anchors, cmp_i32);
    size_t n_q = (size_t)p.n_blocks * B;
    p.n_qd = n_q * HEADS * HD, p.n_ckv = (size_t)p.n_ctx * KV_HEADS * HD, p.n_bkv = n_q * KV_HEADS * HD;
    p.q = dev_random(p.n_qd, seed + 1, 1.0f), p.kc = dev_random(p.n_ckv, seed + 2, 1.0f);
    p.vc = dev_random(p.n_ckv, seed + 3, 1.0f), p.kb = dev_random(p.n_bkv, seed + 4, 1.0f);
    p.vb = dev_random(p.n_bkv, seed + 5, 1.0f), p.d_out = dev_random(p.n_qd, seed + 6, 1.0f);
    p.dk_ctx0 = dev_random(p.n_ckv, seed + 7, 0.2f), p.dv_ctx0 = dev_random(p.n_ckv, seed + 8, 0.2f);
    p.dk_blk0 = dev_random(p.n_bkv, seed + 9, 0.2f), p.dv_blk0 = dev_random(p.n_bkv, seed + 10, 0.2f);
    return p;
}

static void free_problem(Problem *p) {
    free(p->anchors), free(p->q), free(p->kc), free(p->vc), free(p->kb), free(p->vb), free(p->d_out);
    free(p->dk_ctx0), free(p->dv_ctx0), free(p->dk_blk0), free(p->dv_blk0);
}

/* The problem's buffers on one backend, outputs poisoned. */
typedef struct Run {
    DfBlockAttnLayout layout;
    DfBlockAttnArgs args;
    DfBlockAttnGrads grads;
} Run;

static void run_init(Run *r, DfBackend *be, const Problem *p) {
    DfError err;
    if (df_block_attn_layout_init(&r->layout, be, p->n_seqs, p->ctx_starts, p->block_starts, p->anchors, B, &err))
        dev_die("layout: %s", err.msg);
    r->args = (DfBlockAttnArgs){
        .layout = &r->layout, .heads = HEADS, .kv_heads = KV_HEADS, .head_dim = HD, .scale = 1.0f / sqrtf((float)HD),
        .q = dev_upload(be, p->q, p->n_qd, DF_BUF_ACT), .k_ctx = dev_upload(be, p->kc, p->n_ckv, DF_BUF_ACT),
        .v_ctx = dev_upload(be, p->vc, p->n_ckv, DF_BUF_ACT), .k_blk = dev_upload(be, p->kb, p->n_bkv, DF_BUF_ACT),
        .v_blk = dev_upload(be, p->vb, p->n_bkv, DF_BUF_ACT), .out = dev_poisoned(be, p->n_qd, DF_BUF_ACT),
        .lse = dev_poisoned(be, (size_t)p->n_blocks * B * HEADS, DF_BUF_F32)};
    r->grads = (DfBlockAttnGrads){
        .d_out = dev_upload(be, p->d_out, p->n_qd, DF_BUF_ACT), .dq = dev_poisoned(be, p->n_qd, DF_BUF_ACT),
        .dk_ctx = dev_upload(be, p->dk_ctx0, p->n_ckv, DF_BUF_ACT), .dv_ctx = dev_upload(be, p->dv_ctx0, p->n_ckv, DF_BUF_ACT),
        .dk_blk = dev_upload(be, p->dk_blk0, p->n_bkv, DF_BUF_ACT), .dv_blk = dev_upload(be, p->dv_blk0, p->n_bkv, DF_BUF_ACT)};
}

static void run_free(Run *r, DfBackend *be) {
    DfBuffer *bufs[] = {&r->args.q,   &r->args.k_ctx,   &r->args.v_ctx,   &r->args.k_blk,   &r->args.v_blk,
                        &r->args.out, &r->args.lse,     &r->grads.d_out,  &r->grads.dq,     &r->grads.dk_ctx,
                        &r->grads.dv_ctx, &r->grads.dk_blk, &r->grads.dv_blk};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) df_buffer_free(be, bufs[i]);
    df_block_attn_layout_free(&r->layout, be);
}

/* A GPU output against the CPU's; for an added-to buffer (init not NULL) also the increments. variant names
 * the kernel variant the GPU ran (NULL: the defaults). */
static void compare(DevBackends *be, const char *what, const char *variant, DfBuffer g, DfBuffer c,
                    const float *init) {
    float *a = dev_download(be->gpu, g), *b = dev_download(be->cpu, c);
    char tag[160];
    snprintf(tag, sizeof tag, "block attention %s%s%s%s", what, variant ? " (" : "", variant ? variant : "",
             variant ? ")" : "");
    dev_validate(tag, a, b, c.count, 1e-2);
    if (init) {
        for (size_t i = 0; i < c.count; i++) a[i] -= init[i], b[i] -= init[i];
        snprintf(tag, sizeof tag, "block attention %s increment%s%s%s", what, variant ? " (" : "",
                 variant ? variant : "", variant ? ")" : "");
        dev_validate(tag, a, b, c.count, 1e-2);
    }
    free(a), free(b);
}

/* The GPU's forward and backward under each of n variants (NULL: the defaults; a name: that variant
 * set to 1) against one run of the CPU's, whose backward at this shape is the slow part. */
static void validate(DevBackends *be, const Problem *p, const char *const *variants, int n) {
    Run rc;
    run_init(&rc, be->cpu, p);
    df_op_block_attention(be->cpu, &rc.args);
    df_op_block_attention_backward(be->cpu, &rc.args, &rc.grads);
    for (int v = 0; v < n; v++) {
        const char *variant = variants[v];
        if (variant) dev_variant(be->gpu, variant, 1);
        Run rg;
        run_init(&rg, be->gpu, p);
        df_op_block_attention(be->gpu, &rg.args);
        df_op_block_attention_backward(be->gpu, &rg.args, &rg.grads);
        compare(be, "out", variant, rg.args.out, rc.args.out, NULL);
        compare(be, "lse", variant, rg.args.lse, rc.args.lse, NULL);
        compare(be, "dq", variant, rg.grads.dq, rc.grads.dq, NULL);
        compare(be, "dk_ctx", variant, rg.grads.dk_ctx, rc.grads.dk_ctx, p->dk_ctx0);
        compare(be, "dv_ctx", variant, rg.grads.dv_ctx, rc.grads.dv_ctx, p->dv_ctx0);
        compare(be, "dk_blk", variant, rg.grads.dk_blk, rc.grads.dk_blk, p->dk_blk0);
        compare(be, "dv_blk", variant, rg.grads.dv_blk, rc.grads.dv_blk, p->dv_blk0);
        run_free(&rg, be->gpu);
        if (variant) dev_variant(be->gpu, variant, 0);
    }
    run_free(&rc, be->cpu);
}

typedef struct OpRun {
    DfBackend *be;
    Run *r;
    int backward;
} OpRun;

static void op_once(void *ctx) {
    const OpRun *o = ctx;
    if (o->backward) df_op_block_attention_backward(o->be, &o->r->args, &o->r->grads);
    else df_op_block_attention(o->be, &o->r->args);
}

int main(void) {
    DevBackends be = dev_open("bench_block_attention");
    for (int n_seqs = 1; n_seqs <= 2; n_seqs++) {
        Problem p = make_problem(n_seqs, 512, 4242 + n_seqs);
        const char *const variants[] = {NULL, "block_attention_mma_sync"};
        validate(&be, &p, variants, 2);
        double flop = 0;
        for (int j = 0; j < p.n_blocks; j++) flop += 4.0 * B * (p.anchors[j] + B) * HEADS * HD;
        Run r;
        run_init(&r, be.gpu, &p);
        OpRun fwd_run = {be.gpu, &r, 0}, bwd_run = {be.gpu, &r, 1};
        double fwd = dev_median_ms(be.gpu, op_once, &fwd_run, 3, 21, 1);
        double bwd = dev_median_ms(be.gpu, op_once, &bwd_run, 3, 21, 1);
        dev_variant(be.gpu, "block_attention_mma_sync", 1);
        double fwd_mma_sync = dev_median_ms(be.gpu, op_once, &fwd_run, 3, 21, 1);
        double bwd_mma_sync = dev_median_ms(be.gpu, op_once, &bwd_run, 3, 21, 1);
        dev_variant(be.gpu, "block_attention_mma_sync", 0);
        printf("block attention, %d x 2048 context rows, 512 blocks of 16 each, 32/8 heads of 128: "
               "forward %.3f ms %.1f TFLOP/s, backward %.3f ms %.1f TFLOP/s "
               "(on mma.sync, the variant block_attention_mma_sync: forward %.3f ms, %.1f TFLOP/s, backward %.3f ms, "
               "%.1f TFLOP/s)\n",
               n_seqs, fwd, flop / fwd * 1e-9, bwd, 2.5 * flop / bwd * 1e-9, fwd_mma_sync, flop / fwd_mma_sync * 1e-9,
               bwd_mma_sync, 2.5 * flop / bwd_mma_sync * 1e-9);
        run_free(&r, be.gpu);
        free_problem(&p);
    }
    dev_close(&be);
    return 0;
}
