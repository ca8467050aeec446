/* The DFlash block attention, forward and backward; device events, median
 * of 21 after 3 warm-up runs. Shapes (the argument):
 *   (none)  the production shape: 1 and 2 sequences of 2048 context rows,
 *           512 sorted random anchors each, blocks of 16, 32/8 heads of 128;
 *           the default kernels (wgmma) and the variant
 *           block_attention_mma_sync (the portable tier);
 *   recipe  the recipe's drafter on the bundled target: 19 sequences of 430
 *           context rows, 7,076 blocks of 16 in all (an anchor at nearly
 *           every row), 4/2 heads of 64 (packed chunks of 2 blocks);
 *   small   3 sequences of 150 context rows, of 37, 1 and 36 blocks of 16,
 *           4/2 and 4/4 heads of 64 (2 and 4 blocks a packed chunk),
 *           validated only, one run of each op per variant: for
 *           compute-sanitizer.
 *
 * Each problem is validated first against the CPU backend's op on the same
 * inputs, under each of the shape's variants (one CPU run for all): out,
 * lse, dq and the added-to dk/dv (their totals and their increments) within
 * 1e-2 relative. The versions tried and dropped (two blocks a CTA on wgmma,
 * dQ with Q and dO in registers) are dev/cuda/block_attention_*_v2_*.cu.
 *
 * Usage: build/dev/cuda/bench_block_attention [recipe|small] (make dev; scripts/test_gpu.sh part kernels). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev_util.h"

enum { MAX_SEQS = 32, MAX_VARIANTS = 2 };

/* A benchmarked shape: sequences of ctx context rows with blocks[s] blocks
 * each, anchors sorted random rows (distinct: every row at most once), a
 * sequence's first block at 0 and, unless distinct, its second at its last
 * row; the kernel variants timed (NULL: the defaults). */
typedef struct BenchShape {
    const char *name;
    int n_seqs, ctx, blocks[MAX_SEQS], B, heads, kv_heads, hd, distinct, timed;
    const char *variants[MAX_VARIANTS];
} BenchShape;

/* A block-attention problem: layout and random inputs on the host. */
typedef struct Problem {
    const BenchShape *shape;
    int n_seqs, n_blocks, n_ctx;
    int32_t ctx_starts[MAX_SEQS + 1], block_starts[MAX_SEQS + 1], *anchors;
    float *q, *kc, *vc, *kb, *vb, *d_out, *dk_ctx0, *dv_ctx0, *dk_blk0, *dv_blk0;
    size_t n_qd, n_ckv, n_bkv;
} Problem;

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t next_random(uint64_t *r) {
    *r ^= *r << 13, *r ^= *r >> 7, *r ^= *r << 17;
    return *r;
}

/* A sequence's nb anchors into a, sorted: distinct rows of ctx (a partial
 * shuffle of the rows), or a first block at 0, a second at the last row and
 * the rest at random rows (the layout the drafter trains on). */
static void sequence_anchors(int32_t *a, int nb, int ctx, int distinct, uint64_t *r) {
    if (distinct) {
        int32_t *rows = malloc((size_t)ctx * sizeof *rows);
        if (!rows) dev_die("out of host memory");
        for (int i = 0; i < ctx; i++) rows[i] = i;
        for (int i = 0; i < nb; i++) {
            int k = i + (int)(next_random(r) % (uint64_t)(ctx - i));
            int32_t t = rows[i];
            rows[i] = rows[k], rows[k] = t;
            a[i] = rows[i];
        }
        free(rows);
    } else {
        for (int i = 0; i < nb; i++) {
            uint64_t x = next_random(r);
            a[i] = i == 0 ? 0 : i == 1 ? ctx - 1 : (int32_t)(x % (uint64_t)ctx);
        }
    }
    qsort(a, (size_t)nb, sizeof *a, cmp_i32);
}

static Problem make_problem(const BenchShape *sh, uint64_t seed) {
    Problem p = {.shape = sh, .n_seqs = sh->n_seqs, .n_ctx = sh->n_seqs * sh->ctx};
    for (int s = 0; s < sh->n_seqs; s++) {
        if (sh->distinct && sh->blocks[s] > sh->ctx) dev_die("%s: more blocks than rows", sh->name);
        p.ctx_starts[s + 1] = (s + 1) * sh->ctx, p.block_starts[s + 1] = p.block_starts[s] + sh->blocks[s];
    }
    p.n_blocks = p.block_starts[sh->n_seqs];
    p.anchors = malloc((size_t)p.n_blocks * sizeof *p.anchors);
    if (!p.anchors) dev_die("out of host memory");
    uint64_t r = seed * 0x9E3779B97F4A7C15ull + 7;
    for (int s = 0; s < sh->n_seqs; s++)
        sequence_anchors(p.anchors + p.block_starts[s], sh->blocks[s], sh->ctx, sh->distinct, &r);
    size_t n_q = (size_t)p.n_blocks * sh->B;
    p.n_qd = n_q * sh->heads * sh->hd, p.n_ckv = (size_t)p.n_ctx * sh->kv_heads * sh->hd;
    p.n_bkv = n_q * sh->kv_heads * sh->hd;
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
    const BenchShape *sh = p->shape;
    if (df_block_attn_layout_init(&r->layout, be, p->n_seqs, p->ctx_starts, p->block_starts, p->anchors, sh->B, &err))
        dev_die("layout: %s", err.msg);
    r->args = (DfBlockAttnArgs){
        .layout = &r->layout, .heads = sh->heads, .kv_heads = sh->kv_heads, .head_dim = sh->hd,
        .scale = 1.0f / sqrtf((float)sh->hd),
        .q = dev_upload(be, p->q, p->n_qd, DF_BUF_ACT), .k_ctx = dev_upload(be, p->kc, p->n_ckv, DF_BUF_ACT),
        .v_ctx = dev_upload(be, p->vc, p->n_ckv, DF_BUF_ACT), .k_blk = dev_upload(be, p->kb, p->n_bkv, DF_BUF_ACT),
        .v_blk = dev_upload(be, p->vb, p->n_bkv, DF_BUF_ACT), .out = dev_poisoned(be, p->n_qd, DF_BUF_ACT),
        .lse = dev_poisoned(be, (size_t)p->n_blocks * sh->B * sh->heads, DF_BUF_F32)};
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

/* The shape's forward and backward under each of its variants: medians, TFLOP/s. */
static void time_shape(DevBackends *be, const Problem *p) {
    const BenchShape *sh = p->shape;
    double flop = 0;
    for (int j = 0; j < p->n_blocks; j++) flop += 4.0 * sh->B * (p->anchors[j] + sh->B) * sh->heads * sh->hd;
    Run r;
    run_init(&r, be->gpu, p);
    OpRun fwd_run = {be->gpu, &r, 0}, bwd_run = {be->gpu, &r, 1};
    printf("block attention, %s: %d sequences of %d context rows, %d blocks of %d, %d/%d heads of %d:", sh->name,
           p->n_seqs, sh->ctx, p->n_blocks, sh->B, sh->heads, sh->kv_heads, sh->hd);
    for (int v = 0; v < MAX_VARIANTS; v++) {
        const char *variant = sh->variants[v];
        if (v > 0 && !variant) break;
        if (variant) dev_variant(be->gpu, variant, 1);
        double fwd = dev_median_ms(be->gpu, op_once, &fwd_run, 3, 21, 1);
        double bwd = dev_median_ms(be->gpu, op_once, &bwd_run, 3, 21, 1);
        if (variant) dev_variant(be->gpu, variant, 0);
        printf("%s %s: forward %.3f ms %.1f TFLOP/s, backward %.3f ms %.1f TFLOP/s", v ? ";" : "",
               variant ? variant : "default kernels", fwd, flop / fwd * 1e-9, bwd, 2.5 * flop / bwd * 1e-9);
    }
    printf("\n");
    run_free(&r, be->gpu);
}

/* 19 sequences of 430 rows, 7,076 blocks: 8 of 373 and 11 of 372 */
#define RECIPE_BLOCKS 373, 373, 373, 373, 373, 373, 373, 373, 372, 372, 372, 372, 372, 372, 372, 372, 372, 372, 372

static const BenchShape SHAPES[] = {
    {"production", 1, 2048, {512}, 16, 32, 8, 128, 0, 1, {NULL, "block_attention_mma_sync"}},
    {"production", 2, 2048, {512, 512}, 16, 32, 8, 128, 0, 1, {NULL, "block_attention_mma_sync"}},
    {"recipe", 19, 430, {RECIPE_BLOCKS}, 16, 4, 2, 64, 1, 1, {NULL}},
    {"small", 3, 150, {37, 1, 36}, 16, 4, 2, 64, 0, 0, {NULL}},
    {"small", 3, 150, {37, 1, 36}, 16, 4, 4, 64, 0, 0, {NULL}},
};

int main(int argc, char **argv) {
    const char *want = argc > 1 ? argv[1] : "production";
    if (argc > 2 || (strcmp(want, "production") && strcmp(want, "recipe") && strcmp(want, "small")))
        dev_die("usage: bench_block_attention [recipe|small]");
    DevBackends be = dev_open("bench_block_attention");
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) {
        const BenchShape *sh = &SHAPES[i];
        if (strcmp(sh->name, want)) continue;
        Problem p = make_problem(sh, 4242 + (uint64_t)sh->n_seqs);
        int n_variants = 1;
        while (n_variants < MAX_VARIANTS && sh->variants[n_variants]) n_variants++;
        validate(&be, &p, sh->variants, n_variants);
        if (sh->timed) time_shape(&be, &p);
        free_problem(&p);
    }
    dev_close(&be);
    return 0;
}
