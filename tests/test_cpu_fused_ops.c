/* The CPU backend's fused decoder-layer ops against the ops they replace:
 * qkv_rope_cache against q, k, v copied out of the fused product, rmsnorm
 * per head, rope and kv_cache_write; swiglu_packed against swiglu on copies
 * of the gate and up halves. Inputs are random and non-zero; caches and
 * outputs start NaN-poisoned, so an unwritten value, or one written outside
 * the new rows, fails. Cases: several sequences with different cache
 * lengths (0 included), slots out of order, 1 and several new rows, with
 * and without q/k norm, GQA group 1 and 4, head_dim 64, 96 and 128. The
 * fused weights: coder-tiny's q/k/v and gate/up views equal the
 * safetensors tensors, and the decoder's fused layers give the logits of the
 * separate ops. The random init fills the views with the values it gave
 * separate tensors (the same rng streams). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "base/rng.h"
#include "target/target.h"
#include "target/target_random.h"

/* Float sums in another order (the norm) differ in the last bits at most. */
#define CPU_TOL 1e-5

static const int32_t SLOTS3[3] = {3, 0, 2}, LENS3[3] = {5, 0, 17}, ONE3[3] = {1, 1, 1}, MANY3[3] = {4, 9, 1};
static const int32_t PAGE_LENS3[3] = {61, 0, 100}; /* the first sequence's new rows cross a page's end */
static const int32_t SLOT1[1] = {1}, LEN1[1] = {0}, MANY1[1] = {12};

static const DfTestQkvCase CASES[] = {
    {"decode, qk norm, gqa 4, hd 128", 8, 2, 128, 1, 3, 4, 32, SLOTS3, LENS3, ONE3},
    {"block, qk norm, gqa 4, hd 128", 8, 2, 128, 1, 3, 4, 32, SLOTS3, LENS3, MANY3},
    {"block, no norm, gqa 1, hd 64", 2, 2, 64, 0, 3, 4, 32, SLOTS3, LENS3, MANY3},
    {"decode, no norm, gqa 1, hd 64", 4, 4, 64, 0, 3, 4, 32, SLOTS3, LENS3, ONE3},
    {"prompt, qk norm, gqa 1, hd 64", 4, 4, 64, 1, 1, 2, 16, SLOT1, LEN1, MANY1},
    {"block, qk norm, gqa 4, hd 96", 4, 1, 96, 1, 3, 4, 32, SLOTS3, LENS3, MANY3},
    {"paged, block, qk norm, gqa 4, hd 128", 8, 2, 128, 1, 3, 4, 160, SLOTS3, PAGE_LENS3, MANY3, 1},
    {"paged, decode, no norm, gqa 1, hd 64", 2, 2, 64, 0, 3, 4, 160, SLOTS3, PAGE_LENS3, ONE3, 1},
};

static void test_qkv_rope_cache(void **state) {
    DfBackend *be = ((DfTestBackendFixture *)*state)->be;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        DfTestQkvRun fused = df_test_qkv_run(be, &CASES[i], 100 + i, 1);
        DfTestQkvRun split = df_test_qkv_run(be, &CASES[i], 100 + i, 0);
        df_test_qkv_compare(&CASES[i], &fused, &split, CPU_TOL, 0.0);
        df_test_qkv_run_free(&fused);
        df_test_qkv_run_free(&split);
    }
}

/* A position outside the rope table is reported at sync, as rope reports it. */
static void test_qkv_rope_cache_bad_position(void **state) {
    DfBackend *be = ((DfTestBackendFixture *)*state)->be;
    DfTestQkvCase c = CASES[0];
    c.capacity = 40;
    DfKvBatch kb;
    DfError err;
    int32_t starts[4] = {0, 1, 2, 3};
    if (df_kv_batch_init(&kb, be, 3, c.slots, c.cache_lens, starts, c.n_slots, c.capacity, &err)) fail_msg("%s", err.msg);
    int hd = c.head_dim, width = (c.heads + 2 * c.kv_heads) * hd;
    float *ones = malloc((size_t)c.n_slots * c.capacity * c.kv_heads * hd * sizeof *ones);
    for (size_t i = 0; i < (size_t)c.n_slots * c.capacity * c.kv_heads * hd; i++) ones[i] = 1.0f;
    DfBuffer cache = df_test_upload(be, ones, (size_t)c.n_slots * c.capacity * c.kv_heads * hd, DF_BUF_ACT);
    DfBuffer table = df_test_upload(be, ones, (size_t)10 * hd / 2, DF_BUF_F32); /* 10 positions; LENS3 has 17 */
    DfQkvRopeCacheArgs a = {.batch = &kb, .qkv = df_test_upload(be, ones, (size_t)3 * width, DF_BUF_ACT),
                            .eps = 1e-6f, .cos_table = table, .sin_table = table,
                            .q_out = df_test_upload(be, ones, (size_t)3 * c.heads * hd, DF_BUF_ACT),
                            .k_cache = cache, .v_cache = cache, .heads = c.heads, .kv_heads = c.kv_heads,
                            .head_dim = hd};
    df_op_qkv_rope_cache(be, &a);
    assert_int_equal(be->ops->sync(be, &err), -1);
    assert_non_null(strstr(err.msg, "position 17"));
    DfBuffer *bufs[] = {&cache, &table, &a.qkv, &a.q_out};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) df_buffer_free(be, bufs[i]);
    df_kv_batch_free(&kb, be);
    free(ones);
}

static void test_swiglu_packed(void **state) {
    DfBackend *be = ((DfTestBackendFixture *)*state)->be;
    const int shapes[][2] = {{1, 64}, {5, 37}, {16, 256}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int rows = shapes[i][0], inter = shapes[i][1];
        float *fused = df_test_swiglu_run(be, rows, inter, 7 + i, 1), *split = df_test_swiglu_run(be, rows, inter, 7 + i, 0);
        for (size_t j = 0; j < (size_t)rows * inter; j++)
            if (!(fused[j] == split[j])) fail_msg("swiglu_packed [%d, %d]: value %zu is %g, swiglu gives %g", rows, inter, j, fused[j], split[j]);
        free(fused), free(split);
    }
}

/* --- fused weights -------------------------------------------------------- */

static void expect_tensor(DfBackend *be, const DfSafetensors *st, const char *name, DfBuffer view, DfBuffer owner,
                          size_t offset) {
    assert_ptr_equal(view.ptr, (char *)owner.ptr + offset * (size_t)owner.elem_size);
    const DfTensorInfo *t = df_safetensors_find(st, name);
    assert_non_null(t);
    DfError err;
    float *want = df_safetensors_load_f32(st, name, t->ndim, t->shape, &err), *got = df_test_download(be, view);
    if (!want) fail_msg("%s", err.msg);
    assert_int_equal(view.count, (size_t)t->shape[0] * t->shape[1]);
    if (memcmp(want, got, view.count * sizeof *got) != 0) fail_msg("%s: the view holds other values", name);
    free(want), free(got);
}

static void test_loaded_views_hold_the_tensors(void **state) {
    (void)state;
    DfTargetModel m;
    DfBackend *be;
    df_test_load_cpu_target(&m, &be, "assets/coder-tiny", 2, 0);
    DfSafetensors st;
    DfError err;
    if (df_safetensors_open(&st, df_test_path("assets/coder-tiny"), &err)) fail_msg("%s", err.msg);
    for (int i = 0; i < 2; i++) {
        const DfTargetLayer *l = &m.layers[i];
        char name[160];
        const struct {
            const char *suffix;
            DfBuffer view, owner;
            size_t offset;
        } w[] = {
            {"self_attn.q_proj.weight", l->q_proj, l->qkv_proj, 0},
            {"self_attn.k_proj.weight", l->k_proj, l->qkv_proj, l->q_proj.count},
            {"self_attn.v_proj.weight", l->v_proj, l->qkv_proj, l->q_proj.count + l->k_proj.count},
            {"mlp.gate_proj.weight", l->gate_proj, l->gate_up_proj, 0},
            {"mlp.up_proj.weight", l->up_proj, l->gate_up_proj, l->gate_proj.count},
        };
        for (size_t j = 0; j < sizeof w / sizeof w[0]; j++) {
            snprintf(name, sizeof name, "model.layers.%d.%s", i, w[j].suffix);
            expect_tensor(be, &st, name, w[j].view, w[j].owner, w[j].offset);
        }
        assert_int_equal(l->qkv_proj.count, l->q_proj.count + l->k_proj.count + l->v_proj.count);
        assert_int_equal(l->gate_up_proj.count, l->gate_proj.count + l->up_proj.count);
    }
    df_safetensors_close(&st);
    df_target_free(&m); /* owners freed once, views never (ASan: make test-sanitize) */
    for (size_t i = 0; i < sizeof m; i++) assert_int_equal(((unsigned char *)&m)[i], 0);
    df_backend_destroy(be);
}

/* Tensor number `tensor` of a random init, as its generator draws it: the
 * values the separate tensor had before the fused storage. */
static void expect_random_tensor(DfBackend *be, DfBuffer view, uint64_t seed, uint32_t tensor, float half) {
    float *got = df_test_download(be, view);
    uint32_t stream = df_rng_stream(DF_RNG_DOMAIN_INIT, tensor);
    const size_t chunk = (size_t)1 << 16; /* values per generator (target_random.c) */
    DfRng r = df_rng_key(seed, stream, 0);
    for (size_t i = 0; i < view.count; i++) {
        if (i % chunk == 0) r = df_rng_key(seed, stream, i / chunk);
        float want = half * (2.0f * df_rng_float(&r) - 1.0f);
        if (got[i] != want) fail_msg("random tensor %u value %zu: %g, expected %g", tensor, i, got[i], want);
    }
    free(got);
}

static void test_random_views_keep_their_values(void **state) {
    DfBackend *be = ((DfTestBackendFixture *)*state)->be;
    DfModelConfig cfg;
    DfError err;
    if (df_model_config_load(&cfg, df_test_path("assets/coder-tiny"), &err)) fail_msg("%s", err.msg);
    cfg.num_layers = 2;
    DfTargetModel m;
    if (df_target_init_random(&m, be, &cfg, 42, 0, &err)) fail_msg("%s", err.msg);
    float half = sqrtf(3.0f / (float)cfg.hidden_size);
    /* tensor numbers: embed 0; per layer input_norm, q, k, v, o, post_norm, gate, up, down (+ q/k norms) */
    uint32_t per_layer = cfg.has_qk_norm ? 11 : 9;
    for (uint32_t i = 0; i < 2; i++) {
        const DfTargetLayer *l = &m.layers[i];
        uint32_t base = 1 + i * per_layer;
        assert_non_null(l->qkv_proj.ptr);
        expect_random_tensor(be, l->q_proj, 42, base + 1, half);
        expect_random_tensor(be, l->k_proj, 42, base + 2, half);
        expect_random_tensor(be, l->v_proj, 42, base + 3, half);
        expect_random_tensor(be, l->gate_proj, 42, base + 6, half);
        expect_random_tensor(be, l->up_proj, 42, base + 7, half);
    }
    df_target_free(&m);
}

/* The decoder's fused layers against the separate ops it ran before. */
static void test_decoder_fused_equals_separate(void **state) {
    DfBackend *be = ((DfTestBackendFixture *)*state)->be;
    DfModelConfig cfg;
    DfError err;
    if (df_model_config_load(&cfg, df_test_path("assets/coder-tiny"), &err)) fail_msg("%s", err.msg);
    DfTargetModel m;
    if (df_target_load(&m, be, df_test_path("assets/coder-tiny"), cfg.num_layers, 1, &err)) fail_msg("%s", err.msg);
    size_t n, n_split;
    float *fused = df_test_decode_logits(&m, 1, &n), *split = df_test_decode_logits(&m, 0, &n_split);
    assert_int_equal(n, n_split);
    double e = df_rel_error(fused, split, n);
    if (!(e <= CPU_TOL)) fail_msg("fused decoder logits: relative error %g against the separate ops", e);
    free(fused), free(split);
    df_target_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qkv_rope_cache),
        cmocka_unit_test(test_qkv_rope_cache_bad_position),
        cmocka_unit_test(test_swiglu_packed),
        cmocka_unit_test(test_loaded_views_hold_the_tensors),
        cmocka_unit_test(test_random_views_keep_their_values),
        cmocka_unit_test(test_decoder_fused_equals_separate),
    };
    return cmocka_run_group_tests(tests, df_test_cpu_backend_setup, df_test_cpu_backend_teardown);
}
