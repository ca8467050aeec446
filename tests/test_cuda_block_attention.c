/* The CUDA DFlash block attention, forward and backward, against the CPU
 * op (cpu_block_attention.c) on random inputs rounded to bf16, so that both
 * backends see the same values. Layouts: several sequences of odd lengths
 * (one of a single row, one without blocks), anchors at 0 (no context) and at
 * the last row, more blocks in a sequence than a key-major work item takes,
 * block sizes 16 and odd ones, GQA groups of 1, 2, 4 and 8 heads (8 x 16
 * rows: two row chunks), head_dim 64, 128 and 256. Outputs are NaN-poisoned
 * before each run; dk/dv start from random values (they are added to), and
 * both their totals and their increments are compared. Sliding windows (a
 * block sees the last W context rows below its anchor) of 1, 50, 64, 100 rows. Tolerance: max|a-b|
 * / max|b| <= 1e-2; NaN never passes. Skips when no GPU is present.
 *
 * Without a GPU too: the CPU op at head_dim 256 (the reference of the GPU
 * cases there) against the definition computed in double, within 1e-4.
 *
 * With DFLASH_BLOCK_ATTN_TIMING=1 it also times both ops at the production
 * shape (1 and 2 sequences of 2048 context rows, 512 sorted random anchors
 * each, B 16, 32/8 heads of 128) with CUDA events after warm-up. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend/backend.h"
#include "base/numeric.h"
#ifdef DF_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

#define OP_TOL 1e-2
#define CPU_REF_TOL 1e-4 /* the fp32 CPU op against the double reference */

/* the CPU and CUDA backends (test_util.h); gpu NULL without a GPU */
typedef DfTestBackendPair Fixture;

/* A block-attention problem: layout and random inputs on the host. */
typedef struct Problem {
    int n_seqs, n_blocks, B, heads, kv_heads, hd, n_ctx;
    int window; /* DfBlockAttnArgs.window */
    int32_t *ctx_starts, *block_starts, *anchors;
    float *q, *kc, *vc, *kb, *vb, *d_out, *dk_ctx0, *dv_ctx0, *dk_blk0, *dv_blk0;
    size_t n_qd, n_ckv, n_bkv; /* element counts of q-like, context K/V, block K/V buffers */
} Problem;

/* Sequence s has lens[s] context rows and blocks[s] blocks; the first block
 * of a sequence is anchored at 0, the second at its last row, the rest at
 * random rows (sorted when `sorted`). */
static Problem make_problem(const int *lens, const int *blocks, int n_seqs, int B, int heads, int kv_heads, int hd,
                            int sorted, uint64_t seed) {
    Problem p = {.n_seqs = n_seqs, .B = B, .heads = heads, .kv_heads = kv_heads, .hd = hd};
    p.ctx_starts = calloc((size_t)n_seqs + 1, sizeof *p.ctx_starts);
    p.block_starts = calloc((size_t)n_seqs + 1, sizeof *p.block_starts);
    for (int s = 0; s < n_seqs; s++) {
        p.ctx_starts[s + 1] = p.ctx_starts[s] + lens[s];
        p.block_starts[s + 1] = p.block_starts[s] + blocks[s];
    }
    p.n_ctx = p.ctx_starts[n_seqs];
    p.n_blocks = p.block_starts[n_seqs];
    p.anchors = malloc((size_t)p.n_blocks * sizeof *p.anchors);
    uint64_t r = seed * 0x9E3779B97F4A7C15ull + 7;
    for (int s = 0; s < n_seqs; s++) {
        int b0 = p.block_starts[s], nb = blocks[s];
        for (int i = 0; i < nb; i++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            p.anchors[b0 + i] = i == 0 ? 0 : i == 1 ? lens[s] - 1 : (int32_t)(r % (uint64_t)lens[s]);
        }
        if (sorted)
            for (int i = 1; i < nb; i++) /* insertion sort: small test layouts */
                for (int k = b0 + i; k > b0 && p.anchors[k - 1] > p.anchors[k]; k--) {
                    int32_t t = p.anchors[k];
                    p.anchors[k] = p.anchors[k - 1], p.anchors[k - 1] = t;
                }
    }
    size_t n_q = (size_t)p.n_blocks * B;
    p.n_qd = n_q * heads * hd;
    p.n_ckv = (size_t)p.n_ctx * kv_heads * hd;
    p.n_bkv = n_q * kv_heads * hd;
    p.q = df_test_random_bf16(p.n_qd, seed + 1, 1.0f);
    p.kc = df_test_random_bf16(p.n_ckv, seed + 2, 1.0f);
    p.vc = df_test_random_bf16(p.n_ckv, seed + 3, 1.0f);
    p.kb = df_test_random_bf16(p.n_bkv, seed + 4, 1.0f);
    p.vb = df_test_random_bf16(p.n_bkv, seed + 5, 1.0f);
    p.d_out = df_test_random_bf16(p.n_qd, seed + 6, 1.0f);
    p.dk_ctx0 = df_test_random_bf16(p.n_ckv, seed + 7, 0.2f);
    p.dv_ctx0 = df_test_random_bf16(p.n_ckv, seed + 8, 0.2f);
    p.dk_blk0 = df_test_random_bf16(p.n_bkv, seed + 9, 0.2f);
    p.dv_blk0 = df_test_random_bf16(p.n_bkv, seed + 10, 0.2f);
    return p;
}

static void free_problem(Problem *p) {
    free(p->ctx_starts), free(p->block_starts), free(p->anchors);
    free(p->q), free(p->kc), free(p->vc), free(p->kb), free(p->vb), free(p->d_out);
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
    if (df_block_attn_layout_init(&r->layout, be, p->n_seqs, p->ctx_starts, p->block_starts, p->anchors, p->B, &err))
        fail_msg("layout: %s", err.msg);
    size_t n_q = (size_t)p->n_blocks * p->B;
    r->args = (DfBlockAttnArgs){
        .layout = &r->layout,
        .q = df_test_upload(be, p->q, p->n_qd, DF_BUF_ACT),
        .k_ctx = df_test_upload(be, p->kc, p->n_ckv, DF_BUF_ACT),
        .v_ctx = df_test_upload(be, p->vc, p->n_ckv, DF_BUF_ACT),
        .k_blk = df_test_upload(be, p->kb, p->n_bkv, DF_BUF_ACT),
        .v_blk = df_test_upload(be, p->vb, p->n_bkv, DF_BUF_ACT),
        .out = df_test_upload_poisoned(be, p->n_qd, DF_BUF_ACT),
        .lse = df_test_upload_poisoned(be, n_q * p->heads, DF_BUF_F32),
        .heads = p->heads,
        .kv_heads = p->kv_heads,
        .head_dim = p->hd,
        .scale = 1.0f / sqrtf((float)p->hd),
        .window = p->window,
    };
    r->grads = (DfBlockAttnGrads){
        .d_out = df_test_upload(be, p->d_out, p->n_qd, DF_BUF_ACT),
        .dq = df_test_upload_poisoned(be, p->n_qd, DF_BUF_ACT),
        .dk_ctx = df_test_upload(be, p->dk_ctx0, p->n_ckv, DF_BUF_ACT),
        .dv_ctx = df_test_upload(be, p->dv_ctx0, p->n_ckv, DF_BUF_ACT),
        .dk_blk = df_test_upload(be, p->dk_blk0, p->n_bkv, DF_BUF_ACT),
        .dv_blk = df_test_upload(be, p->dv_blk0, p->n_bkv, DF_BUF_ACT),
    };
}

static void run_free(Run *r, DfBackend *be) {
    DfBuffer *bufs[] = {&r->args.q,      &r->args.k_ctx,    &r->args.v_ctx,    &r->args.k_blk,
                        &r->args.v_blk,  &r->args.out,      &r->args.lse,      &r->grads.d_out,
                        &r->grads.dq,    &r->grads.dk_ctx,  &r->grads.dv_ctx,  &r->grads.dk_blk,
                        &r->grads.dv_blk};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) df_buffer_free(be, bufs[i]);
    df_block_attn_layout_free(&r->layout, be);
}

/* Compares a GPU buffer with the CPU's; for an added-to buffer (init not
 * NULL) also the increments over its initial values. */
static void compare(Fixture *f, const char *case_name, const char *what, DfBuffer g, DfBuffer c, const float *init) {
    float *a = df_test_download(f->gpu, g), *b = df_test_download(f->cpu, c);
    double e = df_rel_error(a, b, c.count);
    if (!(e <= OP_TOL)) fail_msg("%s: %s: relative error %g over %zu values", case_name, what, e, c.count);
    if (init) {
        for (size_t i = 0; i < c.count; i++) a[i] -= init[i], b[i] -= init[i];
        e = df_rel_error(a, b, c.count);
        if (!(e <= OP_TOL)) fail_msg("%s: %s increment: relative error %g over %zu values", case_name, what, e, c.count);
    }
    free(a);
    free(b);
}

static void check_window_case(Fixture *f, const int *lens, const int *blocks, int n_seqs, int B, int heads,
                              int kv_heads, int hd, int sorted, uint64_t seed, int window) {
    Problem p = make_problem(lens, blocks, n_seqs, B, heads, kv_heads, hd, sorted, seed);
    p.window = window;
    char name[160];
    snprintf(name, sizeof name, "block attention seqs=%d blocks=%d B=%d heads=%d/%d head_dim=%d window=%d", n_seqs,
             p.n_blocks, B, heads, kv_heads, hd, window);
    Run rc, rg;
    run_init(&rc, f->cpu, &p);
    run_init(&rg, f->gpu, &p);
    df_op_block_attention(f->cpu, &rc.args);
    df_op_block_attention(f->gpu, &rg.args);
    compare(f, name, "out", rg.args.out, rc.args.out, NULL);
    compare(f, name, "lse", rg.args.lse, rc.args.lse, NULL);
    df_op_block_attention_backward(f->cpu, &rc.args, &rc.grads);
    df_op_block_attention_backward(f->gpu, &rg.args, &rg.grads);
    compare(f, name, "dq", rg.grads.dq, rc.grads.dq, NULL);
    compare(f, name, "dk_ctx", rg.grads.dk_ctx, rc.grads.dk_ctx, p.dk_ctx0);
    compare(f, name, "dv_ctx", rg.grads.dv_ctx, rc.grads.dv_ctx, p.dv_ctx0);
    compare(f, name, "dk_blk", rg.grads.dk_blk, rc.grads.dk_blk, p.dk_blk0);
    compare(f, name, "dv_blk", rg.grads.dv_blk, rc.grads.dv_blk, p.dv_blk0);
    run_free(&rc, f->cpu);
    run_free(&rg, f->gpu);
    free_problem(&p);
}

static void check_case(Fixture *f, const int *lens, const int *blocks, int n_seqs, int B, int heads, int kv_heads,
                       int hd, int sorted, uint64_t seed) {
    check_window_case(f, lens, blocks, n_seqs, B, heads, kv_heads, hd, sorted, seed, 0);
}

static void test_block_attention(void **state) {
    Fixture *f = *state;
    if (!f->gpu) skip();
    /* one row only (anchor 0), no blocks at all, odd lengths around the 64-row tiles */
    const int lens[] = {37, 1, 150, 64, 129}, blocks[] = {5, 1, 9, 0, 6};
    const struct {
        int B, heads, kv_heads, hd;
    } shapes[] = {
        {16, 8, 2, 128}, {16, 4, 4, 64}, {5, 4, 2, 64}, {7, 8, 2, 128}, {16, 16, 2, 64}, {3, 2, 1, 128}, {16, 2, 1, 64},
    };
    uint64_t seed = 100;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++, seed += 20)
        check_case(f, lens, blocks, 5, shapes[i].B, shapes[i].heads, shapes[i].kv_heads, shapes[i].hd, (int)(i & 1),
                   seed);
}

/* More blocks in one sequence than a key-major item of a context tile takes
 * (128), sorted and not, so that several items add into the same rows. */
static void test_block_attention_many_blocks(void **state) {
    Fixture *f = *state;
    if (!f->gpu) skip();
    const int lens[] = {300, 71}, blocks[] = {290, 40};
    check_case(f, lens, blocks, 2, 16, 8, 2, 128, 1, 900);
    check_case(f, lens, blocks, 2, 7, 4, 1, 64, 0, 901);
}

/* Sliding windows: shorter than a tile, a tile exactly, across tiles; with
 * many blocks per sequence so that key-major items see partial windows. */
static void test_block_attention_window(void **state) {
    Fixture *f = *state;
    if (!f->gpu) skip();
    const int lens[] = {37, 1, 150, 64, 129}, blocks[] = {5, 1, 9, 0, 6};
    const int windows[] = {1, 50, 64, 100};
    for (int i = 0; i < 4; i++) {
        check_window_case(f, lens, blocks, 5, 16, 8, 2, 128, i & 1, 300 + i, windows[i]);
        check_window_case(f, lens, blocks, 5, 5, 4, 2, 64, (i + 1) & 1, 320 + i, windows[i]);
    }
    const int many_lens[] = {300, 71}, many_blocks[] = {290, 40};
    check_window_case(f, many_lens, many_blocks, 2, 16, 8, 2, 128, 1, 950, 70);
    check_window_case(f, many_lens, many_blocks, 2, 7, 4, 1, 64, 0, 951, 100);
}

/* head_dim 256: the forward and dQ kernels with Q re-read from shared memory,
 * the key-major kernel as a dV pass and a dK pass. The odd layout (5
 * sequences, 21 blocks) at GQA 8/2 (B 16: one 64-row chunk; B 7), 4/4 at B 5,
 * 16/2 at B 16 (two chunks); a window; more blocks than a key-major item takes. */
static void test_block_attention_head_dim_256(void **state) {
    Fixture *f = *state;
    if (!f->gpu) skip();
    const int lens[] = {37, 1, 150, 64, 129}, blocks[] = {5, 1, 9, 0, 6};
    check_case(f, lens, blocks, 5, 16, 8, 2, 256, 1, 1200);
    check_case(f, lens, blocks, 5, 7, 8, 2, 256, 0, 1201);
    check_case(f, lens, blocks, 5, 5, 4, 4, 256, 1, 1202);
    check_case(f, lens, blocks, 5, 16, 16, 2, 256, 0, 1203);
    check_window_case(f, lens, blocks, 5, 16, 8, 2, 256, 1, 1204, 50);
    const int many_lens[] = {300, 71}, many_blocks[] = {290, 40};
    check_case(f, many_lens, many_blocks, 2, 7, 8, 2, 256, 1, 1205);
}

/* The op from its definition, in double: out, lse, and the gradients of
 * sum(d_out * out); dk/dv start from the problem's initial values. */
typedef struct Reference {
    double *out, *lse, *dq, *dk_ctx, *dv_ctx, *dk_blk, *dv_blk;
} Reference;

/* The offset of key i's kv head g in the context (*is_ctx) or block K/V. */
static size_t key_off(const Problem *p, int c0, int n_ctx, int j, int g, int i, int *is_ctx) {
    *is_ctx = i < n_ctx;
    size_t row = i < n_ctx ? (size_t)(c0 + i) : (size_t)j * p->B + (size_t)(i - n_ctx);
    return (row * p->kv_heads + (size_t)g) * p->hd;
}

/* One (block j, head h, row r): key i of its visible list is context row
 * c0 + i below n_ctx, then block row j*B + i - n_ctx. pr, dpr: scratch. */
static void reference_row(const Problem *p, Reference *o, double *pr, double *dpr, int j, int c0, int n_ctx, int h,
                          int r) {
    int hd = p->hd, g = h / (p->heads / p->kv_heads), n = n_ctx + p->B, ctx;
    size_t qi = (size_t)j * p->B + r, qo = (qi * p->heads + h) * hd;
    double scale = 1.0 / sqrt(hd), mx = -INFINITY, sum = 0, dsum = 0;
    for (int i = 0; i < n; i++) { /* scores */
        size_t ko = key_off(p, c0, n_ctx, j, g, i, &ctx);
        const float *k = (ctx ? p->kc : p->kb) + ko;
        double d = 0;
        for (int e = 0; e < hd; e++) d += (double)p->q[qo + e] * k[e];
        pr[i] = d * scale;
        mx = pr[i] > mx ? pr[i] : mx;
    }
    for (int i = 0; i < n; i++) sum += pr[i] = exp(pr[i] - mx);
    o->lse[(size_t)h * p->n_blocks * p->B + qi] = mx + log(sum);
    for (int i = 0; i < n; i++) { /* P, out, dP = dO V^T, rowsum(P dP) */
        size_t ko = key_off(p, c0, n_ctx, j, g, i, &ctx);
        const float *v = (ctx ? p->vc : p->vb) + ko;
        double d = 0;
        pr[i] /= sum;
        for (int e = 0; e < hd; e++) o->out[qo + e] += pr[i] * v[e], d += (double)p->d_out[qo + e] * v[e];
        dpr[i] = d;
        dsum += pr[i] * d;
    }
    for (int i = 0; i < n; i++) { /* dS; dq += dS K, dk += dS^T q, dv += P^T dO */
        size_t ko = key_off(p, c0, n_ctx, j, g, i, &ctx);
        const float *k = (ctx ? p->kc : p->kb) + ko;
        double *dk = (ctx ? o->dk_ctx : o->dk_blk) + ko, *dv = (ctx ? o->dv_ctx : o->dv_blk) + ko;
        double ds = pr[i] * (dpr[i] - dsum) * scale;
        for (int e = 0; e < hd; e++) {
            o->dq[qo + e] += ds * k[e];
            dk[e] += ds * p->q[qo + e];
            dv[e] += pr[i] * p->d_out[qo + e];
        }
    }
}

static double *doubles_from(const float *x, size_t n) {
    double *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = x ? x[i] : 0.0;
    return d;
}

static Reference reference(const Problem *p) {
    size_t n_q = (size_t)p->n_blocks * p->B;
    Reference o = {doubles_from(NULL, p->n_qd),  doubles_from(NULL, n_q * p->heads), doubles_from(NULL, p->n_qd),
                   doubles_from(p->dk_ctx0, p->n_ckv), doubles_from(p->dv_ctx0, p->n_ckv),
                   doubles_from(p->dk_blk0, p->n_bkv), doubles_from(p->dv_blk0, p->n_bkv)};
    int max_n = p->B;
    for (int j = 0; j < p->n_blocks; j++) max_n = p->anchors[j] + p->B > max_n ? p->anchors[j] + p->B : max_n;
    double *pr = malloc((size_t)max_n * sizeof *pr), *dpr = malloc((size_t)max_n * sizeof *dpr);
    for (int s = 0; s < p->n_seqs; s++)
        for (int j = p->block_starts[s]; j < p->block_starts[s + 1]; j++) {
            int a = p->anchors[j], lo = p->window > 0 && a > p->window ? a - p->window : 0;
            for (int h = 0; h < p->heads; h++)
                for (int r = 0; r < p->B; r++) reference_row(p, &o, pr, dpr, j, p->ctx_starts[s] + lo, a - lo, h, r);
        }
    free(pr), free(dpr);
    return o;
}

static void free_reference(Reference *o) {
    free(o->out), free(o->lse), free(o->dq), free(o->dk_ctx), free(o->dv_ctx), free(o->dk_blk), free(o->dv_blk);
}

/* A CPU buffer against the reference; for an added-to buffer also the increments. */
static void compare_reference(Fixture *f, const char *case_name, const char *what, DfBuffer c, const double *want,
                              const float *init) {
    float *a = df_test_download(f->cpu, c), *b = malloc(c.count * sizeof *b);
    for (size_t i = 0; i < c.count; i++) b[i] = (float)want[i];
    double e = df_rel_error(a, b, c.count);
    if (!(e <= CPU_REF_TOL)) fail_msg("%s: %s: relative error %g over %zu values", case_name, what, e, c.count);
    if (init) {
        for (size_t i = 0; i < c.count; i++) a[i] -= init[i], b[i] = (float)(want[i] - init[i]);
        e = df_rel_error(a, b, c.count);
        if (!(e <= CPU_REF_TOL))
            fail_msg("%s: %s increment: relative error %g over %zu values", case_name, what, e, c.count);
    }
    free(a);
    free(b);
}

static void check_cpu_reference(Fixture *f, int B, int heads, int kv_heads, int hd, uint64_t seed, int window) {
    const int lens[] = {37, 1, 150}, blocks[] = {5, 1, 9};
    Problem p = make_problem(lens, blocks, 3, B, heads, kv_heads, hd, 1, seed);
    p.window = window;
    char name[160];
    snprintf(name, sizeof name, "CPU block attention B=%d heads=%d/%d head_dim=%d window=%d", B, heads, kv_heads, hd,
             window);
    Reference want = reference(&p);
    Run rc;
    run_init(&rc, f->cpu, &p);
    df_op_block_attention(f->cpu, &rc.args);
    df_op_block_attention_backward(f->cpu, &rc.args, &rc.grads);
    compare_reference(f, name, "out", rc.args.out, want.out, NULL);
    compare_reference(f, name, "lse", rc.args.lse, want.lse, NULL);
    compare_reference(f, name, "dq", rc.grads.dq, want.dq, NULL);
    compare_reference(f, name, "dk_ctx", rc.grads.dk_ctx, want.dk_ctx, p.dk_ctx0);
    compare_reference(f, name, "dv_ctx", rc.grads.dv_ctx, want.dv_ctx, p.dv_ctx0);
    compare_reference(f, name, "dk_blk", rc.grads.dk_blk, want.dk_blk, p.dk_blk0);
    compare_reference(f, name, "dv_blk", rc.grads.dv_blk, want.dv_blk, p.dv_blk0);
    run_free(&rc, f->cpu);
    free_reference(&want);
    free_problem(&p);
}

/* The CPU op at head_dim 256 (3 sequences, 15 blocks, GQA 8/2 and 4/4), and
 * at 64 once, so that a failure at 256 alone points at the head dim. */
static void test_cpu_block_attention_head_dim_256(void **state) {
    Fixture *f = *state;
    check_cpu_reference(f, 5, 8, 2, 256, 1300, 0);
    check_cpu_reference(f, 16, 4, 4, 256, 1301, 50);
    check_cpu_reference(f, 5, 8, 2, 64, 1302, 0);
}

#ifdef DF_HAVE_CUDA
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median ms of `reps` runs of the forward (or the backward) after warm-up. */
static double time_op(DfBackend *be, Run *r, int backward, int reps) {
    DfTimer *t = be->ops->timer_create(be, NULL);
    assert_non_null(t);
    double ms[64];
    for (int i = 0; i < 3 + reps; i++) {
        be->ops->timer_start(be, t);
        if (backward) df_op_block_attention_backward(be, &r->args, &r->grads);
        else df_op_block_attention(be, &r->args);
        double v = be->ops->timer_stop(be, t);
        if (i >= 3) ms[i - 3] = v;
    }
    be->ops->timer_destroy(be, t);
    DfError err;
    if (be->ops->sync(be, &err)) fail_msg("sync: %s", err.msg);
    qsort(ms, (size_t)reps, sizeof ms[0], cmp_double);
    return ms[reps / 2];
}
#endif

static void test_block_attention_timing(void **state) {
    Fixture *f = *state;
    const char *on = getenv("DFLASH_BLOCK_ATTN_TIMING");
    if (!f->gpu || !on || strcmp(on, "1") != 0) skip();
#ifdef DF_HAVE_CUDA
    for (int n_seqs = 1; n_seqs <= 2; n_seqs++) {
        const int lens[] = {2048, 2048}, blocks[] = {512, 512};
        Problem p = make_problem(lens, blocks, n_seqs, 16, 32, 8, 128, 1, 4242 + n_seqs);
        double flop = 0;
        for (int j = 0; j < p.n_blocks; j++) flop += 4.0 * p.B * (p.anchors[j] + p.B) * p.heads * p.hd;
        Run r;
        run_init(&r, f->gpu, &p);
        double fwd = time_op(f->gpu, &r, 0, 21), bwd = time_op(f->gpu, &r, 1, 21);
        printf("block attention, %d x 2048 context rows, 512 blocks of 16 each, 32/8 heads of 128: "
               "forward %.3f ms %.1f TFLOP/s, backward %.3f ms %.1f TFLOP/s\n",
               n_seqs, fwd, flop / fwd * 1e-9, bwd, 2.5 * flop / bwd * 1e-9);
        run_free(&r, f->gpu);
        free_problem(&p);
    }
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_attention),
        cmocka_unit_test(test_block_attention_many_blocks),
        cmocka_unit_test(test_block_attention_window),
        cmocka_unit_test(test_block_attention_head_dim_256),
        cmocka_unit_test(test_cpu_block_attention_head_dim_256),
        cmocka_unit_test(test_block_attention_timing),
    };
    return cmocka_run_group_tests(tests, df_test_backend_pair_setup, df_test_backend_pair_teardown);
}
