/* The CUDA backend against the CPU backend: every op on random (never zero)
 * inputs, already rounded to bf16 so that both backends see the same values,
 * at odd sizes and sizes that are not multiples of the tiles; outputs are
 * NaN-poisoned before each run, so an unwritten element fails. Tolerance:
 * max|a-b| / max|b| <= 1e-2 (bf16 outputs, fp32 accumulation); NaN never
 * passes. Then the whole target forward on coder-tiny against the CPU
 * forward and against transformers' fp32 fixture. GPU tests skip when no GPU
 * is present (or CUDA was not built in); backend selection is tested always. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend/backend.h"
#include "backend/select.h"
#include "base/numeric.h"
#include "formats/safetensors.h"
#include "model/rope.h"
#include "model/target.h"
#include "model/target_random.h"
#ifdef DF_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_variants.h"
#endif

#define OP_TOL 1e-2

/* the CPU and CUDA backends (test_util.h); gpu NULL without a GPU */
typedef DfTestBackendPair Fixture;

static DfBackend *gpu_or_skip(void **state) {
    Fixture *f = *state;
    if (!f->gpu) skip();
    return f->gpu;
}

typedef DfTestPair Pair;

/* --- backend selection (runs everywhere) --------------------------------- */

static void test_select_backends(void **state) {
    (void)state;
    DfError err;
    DfBackend *be = df_backend_create(NULL, &err);
    assert_non_null(be);
    assert_string_equal(be->ops->name, "cpu");
    df_backend_destroy(be);
    be = df_backend_create("cpu", &err);
    assert_non_null(be);
    df_backend_destroy(be);
    assert_null(df_backend_create("tpu", &err));
    assert_non_null(strstr(err.msg, "unknown device"));
    assert_null(df_backend_create("cuda:x", &err));
    assert_non_null(strstr(err.msg, "cuda:N"));
    assert_null(df_backend_create("cuda:999", &err)); /* no machine has 1000 GPUs */
#ifndef DF_HAVE_CUDA
    assert_non_null(strstr(err.msg, "without CUDA"));
#else
    if (df_cuda_device_count() == 0) assert_non_null(strstr(err.msg, "no CUDA GPU"));
    else assert_non_null(strstr(err.msg, "GPU 999"));
#endif
    assert_true(df_device_is_cuda("cuda") && df_device_is_cuda("cuda:1"));
    assert_false(df_device_is_cuda("cudax") || df_device_is_cuda("cpu") || df_device_is_cuda(NULL));
}

/* --- ops ------------------------------------------------------------------- */

static void check_matmul(Fixture *f, int m, int n, int k, int ta, int tb, float beta, uint64_t seed) {
    float *a = df_test_random_bf16((size_t)m * k, seed, 1.0f), *b = df_test_random_bf16((size_t)k * n, seed + 1, 1.0f);
    float *c0 = df_test_random_bf16((size_t)m * n, seed + 2, 1.0f);
    Pair pa = df_test_pair_upload(f, a, (size_t)m * k, DF_BUF_ACT), pb = df_test_pair_upload(f, b, (size_t)k * n, DF_BUF_ACT);
    Pair pc = beta != 0 ? df_test_pair_upload(f, c0, (size_t)m * n, DF_BUF_ACT) : df_test_pair_poisoned(f, (size_t)m * n, DF_BUF_ACT);
    df_op_matmul(f->cpu, pc.c, pa.c, pb.c, m, n, k, ta, tb, beta);
    df_op_matmul(f->gpu, pc.g, pa.g, pb.g, m, n, k, ta, tb, beta);
    char what[128];
    snprintf(what, sizeof what, "matmul M=%d N=%d K=%d ta=%d tb=%d beta=%g", m, n, k, ta, tb, beta);
    df_test_pair_compare(f, what, pc, OP_TOL);
    df_test_pair_free(f, &pa), df_test_pair_free(f, &pb), df_test_pair_free(f, &pc);
    free(a), free(b), free(c0);
}

static void test_matmul(void **state) {
    gpu_or_skip(state);
    const int shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {33, 65, 17}, {128, 256, 64}, {300, 257, 129}, {1000, 384, 256}};
    uint64_t seed = 10;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int acc = 0; acc < 2; acc++)
                    check_matmul(*state, shapes[s][0], shapes[s][1], shapes[s][2], ta, tb, acc ? 1.0f : 0.0f,
                                 seed += 3);
}

/* A matmul on views at odd element offsets (pointers only 2-byte aligned). */
static void test_matmul_unaligned_views(void **state) {
    gpu_or_skip(state);
    Fixture *f = *state;
    int m = 19, n = 23, k = 31;
    size_t na = (size_t)m * k + 1, nb = (size_t)n * k + 3, nc = (size_t)m * n + 5;
    float *a = df_test_random_bf16(na, 71, 1.0f), *b = df_test_random_bf16(nb, 72, 1.0f);
    Pair pa = df_test_pair_upload(f, a, na, DF_BUF_ACT), pb = df_test_pair_upload(f, b, nb, DF_BUF_ACT), pc = df_test_pair_poisoned(f, nc, DF_BUF_ACT);
    DfBuffer va[2] = {df_buffer_view(pa.c, 1, na - 1), df_buffer_view(pa.g, 1, na - 1)};
    DfBuffer vb[2] = {df_buffer_view(pb.c, 3, nb - 3), df_buffer_view(pb.g, 3, nb - 3)};
    DfBuffer vc[2] = {df_buffer_view(pc.c, 5, nc - 5), df_buffer_view(pc.g, 5, nc - 5)};
    df_op_linear(f->cpu, vc[0], va[0], vb[0], m, n, k, 0);
    df_op_linear(f->gpu, vc[1], va[1], vb[1], m, n, k, 0);
    Pair views = {vc[0], vc[1]};
    df_test_pair_compare(f, "matmul on unaligned views", views, OP_TOL);
    df_test_pair_free(f, &pa), df_test_pair_free(f, &pb), df_test_pair_free(f, &pc);
    free(a), free(b);
}

static void check_rmsnorm(Fixture *f, int rows, int dim, int in_place, uint64_t seed) {
    size_t n = (size_t)rows * dim;
    float *x = df_test_random_bf16(n, seed, 3.0f), *w = df_test_random_bf16((size_t)dim, seed + 1, 1.0f);
    Pair px = df_test_pair_upload(f, x, n, DF_BUF_ACT), pw = df_test_pair_upload(f, w, (size_t)dim, DF_BUF_ACT);
    Pair po = in_place ? px : df_test_pair_poisoned(f, n, DF_BUF_ACT);
    df_op_rmsnorm(f->cpu, po.c, px.c, pw.c, rows, dim, 1e-6f);
    df_op_rmsnorm(f->gpu, po.g, px.g, pw.g, rows, dim, 1e-6f);
    char what[96];
    snprintf(what, sizeof what, "rmsnorm rows=%d dim=%d in_place=%d", rows, dim, in_place);
    df_test_pair_compare(f, what, po, OP_TOL);
    if (!in_place) df_test_pair_free(f, &po);
    df_test_pair_free(f, &px), df_test_pair_free(f, &pw);
    free(x), free(w);
}

static void test_rmsnorm(void **state) {
    gpu_or_skip(state);
    check_rmsnorm(*state, 5, 64, 0, 1);
    check_rmsnorm(*state, 37, 4096, 0, 2);
    check_rmsnorm(*state, 3, 100, 0, 3);
    check_rmsnorm(*state, 1001, 128, 1, 4);
    check_rmsnorm(*state, 9, 7, 1, 5);
}

static void check_rope(Fixture *f, int n_tokens, int heads, int head_dim, uint64_t seed) {
    DfRopeConfig rc = {.theta = 1e6, .type = DF_ROPE_DEFAULT};
    int n_pos = 512, half = head_dim / 2;
    float *cs = malloc((size_t)n_pos * half * sizeof *cs), *sn = malloc((size_t)n_pos * half * sizeof *sn);
    df_rope_tables(&rc, head_dim, n_pos, cs, sn);
    int32_t *pos = malloc((size_t)n_tokens * sizeof *pos);
    for (int t = 0; t < n_tokens; t++) pos[t] = (t * 37 + 11) % n_pos;
    size_t n = (size_t)n_tokens * heads * head_dim;
    float *x = df_test_random_bf16(n, seed, 2.0f);
    Pair px = df_test_pair_upload(f, x, n, DF_BUF_ACT);
    Pair pc = df_test_pair_upload(f, cs, (size_t)n_pos * half, DF_BUF_F32), ps = df_test_pair_upload(f, sn, (size_t)n_pos * half, DF_BUF_F32);
    DfBuffer posc = df_test_upload_i32(f->cpu, pos, (size_t)n_tokens), posg = df_test_upload_i32(f->gpu, pos, (size_t)n_tokens);
    df_op_rope(f->cpu, px.c, posc, pc.c, ps.c, n_tokens, heads, head_dim);
    df_op_rope(f->gpu, px.g, posg, pc.g, ps.g, n_tokens, heads, head_dim);
    char what[96];
    snprintf(what, sizeof what, "rope T=%d heads=%d head_dim=%d", n_tokens, heads, head_dim);
    df_test_pair_compare(f, what, px, OP_TOL);
    /* a position past the table is reported by sync */
    pos[n_tokens - 1] = n_pos;
    DfError err;
    if (f->gpu->ops->upload_i32(f->gpu, posg, pos, &err)) fail_msg("%s", err.msg);
    df_op_rope(f->gpu, px.g, posg, pc.g, ps.g, n_tokens, heads, head_dim);
    assert_int_equal(f->gpu->ops->sync(f->gpu, &err), -1);
    assert_non_null(strstr(err.msg, "outside the table"));
    assert_int_equal(f->gpu->ops->sync(f->gpu, &err), 0); /* reported once */
    df_test_pair_free(f, &px), df_test_pair_free(f, &pc), df_test_pair_free(f, &ps);
    df_buffer_free(f->cpu, &posc), df_buffer_free(f->gpu, &posg);
    free(cs), free(sn), free(pos), free(x);
}

static void test_rope(void **state) {
    gpu_or_skip(state);
    check_rope(*state, 37, 3, 64, 20);
    check_rope(*state, 5, 8, 128, 21);
    check_rope(*state, 11, 2, 6, 22);
    check_rope(*state, 3, 1, 24, 23);
}

static void check_embedding(Fixture *f, int vocab, int dim, int n_tokens, uint64_t seed) {
    float *table = df_test_random_bf16((size_t)vocab * dim, seed, 1.0f);
    int32_t *ids = malloc((size_t)n_tokens * sizeof *ids);
    for (int t = 0; t < n_tokens; t++) ids[t] = (t * 7919 + 3) % vocab;
    Pair pt = df_test_pair_upload(f, table, (size_t)vocab * dim, DF_BUF_ACT), po = df_test_pair_poisoned(f, (size_t)n_tokens * dim, DF_BUF_ACT);
    DfBuffer ic = df_test_upload_i32(f->cpu, ids, (size_t)n_tokens), ig = df_test_upload_i32(f->gpu, ids, (size_t)n_tokens);
    df_op_embedding(f->cpu, po.c, pt.c, ic, n_tokens, dim);
    df_op_embedding(f->gpu, po.g, pt.g, ig, n_tokens, dim);
    df_test_pair_compare(f, "embedding", po, 0.0); /* a gather is exact */
    ids[n_tokens / 2] = vocab; /* out of range: recorded, reported by sync */
    DfError err;
    if (f->gpu->ops->upload_i32(f->gpu, ig, ids, &err)) fail_msg("%s", err.msg);
    df_op_embedding(f->gpu, po.g, pt.g, ig, n_tokens, dim);
    assert_int_equal(f->gpu->ops->sync(f->gpu, &err), -1);
    assert_non_null(strstr(err.msg, "outside the vocabulary"));
    assert_int_equal(f->gpu->ops->sync(f->gpu, &err), 0);
    df_test_pair_free(f, &pt), df_test_pair_free(f, &po);
    df_buffer_free(f->cpu, &ic), df_buffer_free(f->gpu, &ig);
    free(table), free(ids);
}

static void test_embedding(void **state) {
    gpu_or_skip(state);
    check_embedding(*state, 1000, 64, 37, 30);
    check_embedding(*state, 101, 70, 5, 31);
}

static void check_elementwise(Fixture *f, size_t n, uint64_t seed) {
    float *g = df_test_random_bf16(n, seed, 4.0f), *u = df_test_random_bf16(n, seed + 1, 2.0f);
    Pair pg = df_test_pair_upload(f, g, n, DF_BUF_ACT), pu = df_test_pair_upload(f, u, n, DF_BUF_ACT), po = df_test_pair_poisoned(f, n, DF_BUF_ACT);
    df_op_swiglu(f->cpu, po.c, pg.c, pu.c);
    df_op_swiglu(f->gpu, po.g, pg.g, pu.g);
    df_test_pair_compare(f, "swiglu", po, OP_TOL);
    df_op_add_inplace(f->cpu, pu.c, pg.c);
    df_op_add_inplace(f->gpu, pu.g, pg.g);
    df_test_pair_compare(f, "add_inplace", pu, OP_TOL);
    df_test_pair_free(f, &pg), df_test_pair_free(f, &pu), df_test_pair_free(f, &po);
    free(g), free(u);
}

static void test_swiglu_and_add(void **state) {
    gpu_or_skip(state);
    check_elementwise(*state, 4096, 40);
    check_elementwise(*state, 999, 41);
    check_elementwise(*state, 1, 42);
}

static void check_copy2d(Fixture *f, DfBufKind kind, int rows, int cols, int ld_src, int ld_dst, int dst_off) {
    size_t ns = (size_t)rows * ld_src, nd = (size_t)rows * ld_dst + dst_off;
    float *s = df_test_random_bf16(ns, 50 + rows, 1.0f);
    Pair ps = df_test_pair_upload(f, s, ns, kind);
    float *d0 = df_test_random_bf16(nd, 60 + cols, 1.0f); /* untouched elements must stay */
    Pair pd = df_test_pair_upload(f, d0, nd, kind);
    df_op_copy2d(f->cpu, df_buffer_view(pd.c, dst_off, nd - dst_off), ld_dst, ps.c, ld_src, rows, cols);
    df_op_copy2d(f->gpu, df_buffer_view(pd.g, dst_off, nd - dst_off), ld_dst, ps.g, ld_src, rows, cols);
    df_test_pair_compare(f, "copy2d", pd, 0.0);
    df_test_pair_free(f, &ps), df_test_pair_free(f, &pd);
    free(s), free(d0);
}

static void test_copy2d(void **state) {
    gpu_or_skip(state);
    check_copy2d(*state, DF_BUF_ACT, 37, 64, 64, 192, 64);
    check_copy2d(*state, DF_BUF_ACT, 5, 7, 13, 9, 1);
    check_copy2d(*state, DF_BUF_F32, 9, 3, 5, 11, 2);
}

/* Attention over a packed batch: outputs and log-sum-exp against the CPU. */
static void check_attention(Fixture *f, const int *lens, int n_seqs, int heads, int kv_heads, int hd, uint64_t seed) {
    DfError err;
    int32_t starts[17] = {0};
    assert_true(n_seqs <= 16);
    for (int s = 0; s < n_seqs; s++) starts[s + 1] = starts[s] + lens[s];
    int t = starts[n_seqs];
    DfPackedBatch bc, bg;
    if (df_packed_batch_init(&bc, f->cpu, starts, n_seqs, &err) || df_packed_batch_init(&bg, f->gpu, starts, n_seqs, &err))
        fail_msg("%s", err.msg);
    size_t nq = (size_t)t * heads * hd, nk = (size_t)t * kv_heads * hd;
    float *q = df_test_random_bf16(nq, seed, 2.0f), *k = df_test_random_bf16(nk, seed + 1, 2.0f), *v = df_test_random_bf16(nk, seed + 2, 1.0f);
    Pair pq = df_test_pair_upload(f, q, nq, DF_BUF_ACT), pk = df_test_pair_upload(f, k, nk, DF_BUF_ACT), pv = df_test_pair_upload(f, v, nk, DF_BUF_ACT);
    Pair po = df_test_pair_poisoned(f, nq, DF_BUF_ACT), pl = df_test_pair_poisoned(f, (size_t)heads * t, DF_BUF_F32);
    float scale = 1.0f / sqrtf((float)hd);
    df_op_attention(f->cpu, po.c, pl.c, pq.c, pk.c, pv.c, &bc, heads, kv_heads, hd, scale);
    df_op_attention(f->gpu, po.g, pl.g, pq.g, pk.g, pv.g, &bg, heads, kv_heads, hd, scale);
    char what[128];
    snprintf(what, sizeof what, "attention T=%d seqs=%d heads=%d/%d head_dim=%d", t, n_seqs, heads, kv_heads, hd);
    df_test_pair_compare(f, what, po, OP_TOL);
    strncat(what, " lse", sizeof what - strlen(what) - 1);
    df_test_pair_compare(f, what, pl, 1e-3); /* fp32 statistics */
    df_test_pair_free(f, &pq), df_test_pair_free(f, &pk), df_test_pair_free(f, &pv), df_test_pair_free(f, &po), df_test_pair_free(f, &pl);
    df_packed_batch_free(&bc, f->cpu), df_packed_batch_free(&bg, f->gpu);
    free(q), free(k), free(v);
}

/* The attention kernel shape (a CUDA tuning knob; nothing to set elsewhere). */
static void set_attention_rows(DfBackend *gpu, int rows) {
#ifdef DF_HAVE_CUDA
    df_cuda_set_attention_rows_per_warp(gpu, rows);
#else
    (void)gpu, (void)rows;
#endif
}

static void test_attention(void **state) {
    DfBackend *gpu = gpu_or_skip(state);
    const int lens[] = {1, 7, 130, 300}, one[] = {1000}, many[] = {64, 65, 63, 128, 2, 129, 255, 256, 257};
    for (int rows = 16; rows <= 32; rows += 16) { /* both kernel shapes */
        set_attention_rows(gpu, rows);
        uint64_t seed = 80 + (uint64_t)rows;
        check_attention(*state, lens, 4, 4, 2, 64, seed++);
        check_attention(*state, lens, 4, 4, 2, 128, seed++);
        check_attention(*state, lens, 4, 8, 1, 64, seed++);
        check_attention(*state, lens, 4, 3, 3, 128, seed++);
        check_attention(*state, one, 1, 2, 1, 128, seed++);
        check_attention(*state, many, 9, 4, 2, 64, seed++);
        check_attention(*state, many, 9, 2, 1, 128, seed++);
    }
    set_attention_rows(gpu, 0); /* automatic */
}

/* --- the target forward ------------------------------------------------------ */

typedef struct ForwardOut {
    float *features, *logits;
} ForwardOut;

static ForwardOut run_target(DfBackend *be, const int32_t *ids, const int32_t *starts, int n_seqs, const int *taps,
                             int n_taps) {
    DfTargetModel m;
    DfError err;
    DfModelConfig cfg;
    if (df_model_config_load(&cfg, df_test_path("assets/coder-tiny"), &err) ||
        df_target_load(&m, be, df_test_path("assets/coder-tiny"), cfg.num_layers, 1, &err))
        fail_msg("%s", err.msg);
    size_t t = (size_t)starts[n_seqs];
    ForwardOut o = {malloc(t * n_taps * cfg.hidden_size * sizeof(float)), malloc(t * cfg.vocab_size * sizeof(float))};
    for (size_t i = 0; i < t * cfg.vocab_size; i++) o.logits[i] = NAN;
    if (df_target_forward(&m, ids, starts, n_seqs, taps, n_taps, o.features, o.logits, &err)) fail_msg("%s", err.msg);
    df_target_free(&m);
    return o;
}

/* coder-tiny on the GPU: taps and logits against the CPU forward (fp32) and
 * against transformers' fp32 outputs (fixture); bf16 activations through 8
 * layers stay within a few percent of the largest value. */
static void test_target_forward_coder_tiny(void **state) {
    DfBackend *gpu = gpu_or_skip(state);
    Fixture *f = *state;
    DfError err;
    DfSafetensors st;
    if (df_safetensors_open(&st, df_test_path("tests/fixtures/target/coder-tiny.safetensors"), &err)) fail_msg("%s", err.msg);
    const DfTensorInfo *ti = df_safetensors_find(&st, "input_ids"), *ts = df_safetensors_find(&st, "seq_starts");
    assert_non_null(ti);
    assert_non_null(ts);
    int t = (int)ti->shape[0], n_seqs = (int)ts->shape[0] - 1;
    int32_t *ids = malloc(ti->nbytes), *starts = malloc(ts->nbytes);
    memcpy(ids, ti->data, ti->nbytes);
    memcpy(starts, ts->data, ts->nbytes);
    DfModelConfig cfg;
    if (df_model_config_load(&cfg, df_test_path("assets/coder-tiny"), &err)) fail_msg("%s", err.msg);
    int64_t lo_shape[3] = {cfg.num_layers, t, cfg.hidden_size}, lg_shape[2] = {t, cfg.vocab_size};
    float *ref_layers = df_safetensors_load_f32(&st, "layer_out", 3, lo_shape, &err);
    float *ref_logits = df_safetensors_load_f32(&st, "logits", 2, lg_shape, &err);
    if (!ref_layers || !ref_logits) fail_msg("%s", err.msg);
    df_safetensors_close(&st);

    const int taps[3] = {1, 4, 7};
    ForwardOut g = run_target(gpu, ids, starts, n_seqs, taps, 3), c = run_target(f->cpu, ids, starts, n_seqs, taps, 3);
    size_t h = (size_t)cfg.hidden_size;
    float *tap_g = malloc((size_t)t * h * sizeof *tap_g), *tap_c = malloc((size_t)t * h * sizeof *tap_c);
    for (int j = 0; j < 3; j++) {
        for (int r = 0; r < t; r++) {
            memcpy(tap_g + r * h, g.features + ((size_t)r * 3 + j) * h, h * sizeof(float));
            memcpy(tap_c + r * h, c.features + ((size_t)r * 3 + j) * h, h * sizeof(float));
        }
        double e_cpu = df_rel_error(tap_g, tap_c, (size_t)t * h);
        double e_ref = df_rel_error(tap_g, ref_layers + (size_t)taps[j] * t * h, (size_t)t * h);
        printf("  tap layer %d: relative error %.3g vs CPU, %.3g vs transformers\n", taps[j], e_cpu, e_ref);
        if (!(e_cpu < 3e-2 && e_ref < 3e-2)) fail_msg("tap layer %d: %g vs CPU, %g vs transformers", taps[j], e_cpu, e_ref);
    }
    size_t nl = (size_t)t * cfg.vocab_size;
    double e_cpu = df_rel_error(g.logits, c.logits, nl), e_ref = df_rel_error(g.logits, ref_logits, nl);
    printf("  logits: relative error %.3g vs CPU, %.3g vs transformers\n", e_cpu, e_ref);
    if (!(e_cpu < 3e-2 && e_ref < 3e-2)) fail_msg("logits: %g vs CPU, %g vs transformers", e_cpu, e_ref);
    free(tap_g), free(tap_c), free(g.features), free(g.logits), free(c.features), free(c.logits);
    free(ids), free(starts), free(ref_layers), free(ref_logits);
}

/* dflash forward --device cuda end to end: features and logits match the
 * CPU command's output within bf16 noise; without a GPU the command fails
 * with a message that says so. */
static float *command_output(const char *device, const char *in_path, const char *out_path, const char *name,
                             int64_t rows, int64_t cols) {
    char cmd[2048], log[4096];
    snprintf(cmd, sizeof cmd, "%s forward --target %s --input %s --output %s --logits --device %s",
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), in_path, out_path, device);
    if (df_test_run(cmd, log, sizeof log) != 0) fail_msg("dflash forward --device %s failed: %s", device, log);
    DfSafetensors st;
    DfError err;
    if (df_safetensors_open(&st, out_path, &err)) fail_msg("%s", err.msg);
    int64_t shape[2] = {rows, cols};
    float *x = df_safetensors_load_f32(&st, name, 2, shape, &err);
    if (!x) fail_msg("%s", err.msg);
    df_safetensors_close(&st);
    return x;
}

static void test_forward_command_on_cuda(void **state) {
    Fixture *f = *state;
    char *dir = df_test_tmpdir("cuda_forward");
    char in_path[512], out_path[512], cmd[2048], log[4096];
    snprintf(in_path, sizeof in_path, "%s/ids.jsonl", dir);
    snprintf(out_path, sizeof out_path, "%s/out.safetensors", dir);
    df_test_write_file(in_path, "{\"ids\": [5, 17, 300, 8000, 42, 42, 7]}\n{\"ids\": [1]}\n{\"ids\": [9, 8, 7, 6]}\n");
    if (!f->gpu) {
        snprintf(cmd, sizeof cmd, "%s forward --target %s --input %s --output %s --device cuda", df_test_path("dflash"),
                 df_test_path("assets/coder-tiny"), in_path, out_path);
        assert_int_not_equal(df_test_run(cmd, log, sizeof log), 0);
        assert_true(strstr(log, "no CUDA GPU") || strstr(log, "without CUDA"));
        assert_false(df_test_file_exists(out_path));
    } else {
        DfModelConfig cfg;
        DfError err;
        if (df_model_config_load(&cfg, df_test_path("assets/coder-tiny"), &err)) fail_msg("%s", err.msg);
        int64_t t = 12;
        const char *names[2] = {"features", "logits"};
        int64_t cols[2] = {3 * (int64_t)cfg.hidden_size, cfg.vocab_size};
        for (int i = 0; i < 2; i++) {
            float *g = command_output("cuda", in_path, out_path, names[i], t, cols[i]);
            float *c = command_output("cpu", in_path, out_path, names[i], t, cols[i]);
            double e = df_rel_error(g, c, (size_t)(t * cols[i]));
            if (!(e < 3e-2)) fail_msg("forward --device cuda %s: relative error %g vs cpu", names[i], e);
            free(g), free(c);
        }
    }
    df_test_rmtree(dir);
    free(dir);
}

/* --- random-weight targets ---------------------------------------------------- */

static DfModelConfig tiny_random_config(void) {
    DfModelConfig c;
    memset(&c, 0, sizeof c);
    c.arch = DF_ARCH_QWEN3;
    c.hidden_size = 128, c.intermediate_size = 320, c.num_layers = 3, c.num_heads = 4, c.num_kv_heads = 2;
    c.head_dim = 64, c.vocab_size = 500, c.max_position_embeddings = 1024, c.rms_norm_eps = 1e-6;
    c.rope.theta = 1e6, c.rope.type = DF_ROPE_DEFAULT, c.has_qk_norm = 1, c.tie_word_embeddings = 0;
    return c;
}

static float *random_target_logits(DfBackend *be, uint64_t seed, const int32_t *ids, const int32_t *starts, int n_seqs) {
    DfModelConfig cfg = tiny_random_config();
    DfTargetModel m;
    DfError err;
    if (df_target_init_random(&m, be, &cfg, seed, 1, &err)) fail_msg("%s", err.msg);
    size_t n = (size_t)starts[n_seqs] * cfg.vocab_size;
    float *logits = malloc(n * sizeof *logits);
    int tap = 0;
    if (df_target_forward(&m, ids, starts, n_seqs, &tap, 1, NULL, logits, &err)) fail_msg("%s", err.msg);
    df_target_free(&m);
    return logits;
}

/* Runs on the CPU everywhere: same seed, same model; another seed, another. */
static void test_random_target_is_a_function_of_the_seed(void **state) {
    Fixture *f = *state;
    const int32_t ids[9] = {1, 5, 7, 499, 0, 3, 3, 3, 250}, starts[3] = {0, 4, 9};
    size_t n = 9 * (size_t)tiny_random_config().vocab_size;
    float *a = random_target_logits(f->cpu, 7, ids, starts, 2), *b = random_target_logits(f->cpu, 7, ids, starts, 2);
    float *c = random_target_logits(f->cpu, 8, ids, starts, 2);
    assert_true(df_rel_error(a, b, n) == 0.0);
    assert_true(df_rel_error(a, c, n) > 0.1);
    double mx = 0;
    for (size_t i = 0; i < n; i++) mx = fabs(a[i]) > mx ? fabs(a[i]) : mx;
    assert_true(mx > 0.1 && mx < 1e4); /* nonzero, not blown up */
    if (f->gpu) { /* and the same model on the GPU */
        float *g = random_target_logits(f->gpu, 7, ids, starts, 2);
        double e = df_rel_error(g, a, n);
        if (!(e < 3e-2)) fail_msg("random target on the GPU: relative error %g vs CPU", e);
        free(g);
    }
    free(a), free(b), free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_select_backends),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_matmul_unaligned_views),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_swiglu_and_add),
        cmocka_unit_test(test_copy2d),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_target_forward_coder_tiny),
        cmocka_unit_test(test_forward_command_on_cuda),
        cmocka_unit_test(test_random_target_is_a_function_of_the_seed),
    };
    return cmocka_run_group_tests(tests, df_test_backend_pair_setup, df_test_backend_pair_teardown);
}
