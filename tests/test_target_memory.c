/* The target's memory plan (target/target_memory.h) against what is really
 * there, for the dense coder-tiny and the hybrid fixtures (both layouts):
 *   - the weight bytes equal the loaded tensors' sizes read from the
 *     safetensors header (an independent count), and what the CPU backend
 *     holds after df_target_load and df_target_init_random(_layers), for
 *     several layer counts, with and without the head, tied and untied;
 *   - a partial random build has the values of the full one (the head's rng
 *     streams do not move with the layers built);
 *   - the forward's workspace bytes equal what the CPU backend holds after
 *     forwards of growing batches (and its peak: the forward allocates
 *     nothing else on the backend);
 *   - a decoder slot's bytes (KV cache, a hybrid's recurrent states and
 *     their rollback copies) equal what each further slot of a decoder
 *     takes on the CPU backend. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend/cpu/cpu_memory.h"
#include "target/model_config.h"
#include "formats/safetensors.h"
#include "target/target.h"
#include "target/target_memory.h"
#include "target/target_decode.h"
#include "target/target_random.h"

#define DENSE_DIR "assets/coder-tiny"
#define HYBRID_DIR "tests/fixtures/hybrid/qwen35-random"
#define HYBRID_VL_DIR "tests/fixtures/hybrid/qwen35-vl-random"
#define CPU_ACT 4 /* fp32 activations on the CPU backend */

static const char *const MODEL_DIRS[] = {DENSE_DIR, HYBRID_DIR, HYBRID_VL_DIR};
#define N_MODELS (sizeof MODEL_DIRS / sizeof MODEL_DIRS[0])

static void load_config(DfModelConfig *c, const char *dir) {
    DfError err;
    if (df_model_config_load(c, df_test_path(dir), &err)) fail_msg("%s", err.msg);
}

static DfBackend *cpu(void) {
    DfError err;
    DfBackend *be = df_backend_cpu_create(&err);
    if (!be) fail_msg("%s", err.msg);
    return be;
}

/* ---- the reference: the safetensors header ------------------------------------ */

/* Layer index of "<prefix>layers.<i>.<...>", or -1. */
static int layer_of(const char *name, const char *prefix) {
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) != 0 || strncmp(name + n, "layers.", 7) != 0) return -1;
    return atoi(name + n + 7);
}

/* Is a tensor one that the loader reads for (n_layers, with_head)? */
static int is_loaded(const DfModelConfig *c, const char *name, int n_layers, int with_head) {
    const char *prefix = c->weight_prefix[0] ? c->weight_prefix : "model.";
    char want[256];
    snprintf(want, sizeof want, "%sembed_tokens.weight", prefix);
    if (strcmp(name, want) == 0) return 1;
    int layer = layer_of(name, prefix);
    if (layer >= 0) return layer < n_layers;
    snprintf(want, sizeof want, "%snorm.weight", prefix);
    if (strcmp(name, want) == 0) return with_head;
    return strcmp(name, "lm_head.weight") == 0 && with_head && !c->tie_word_embeddings;
}

/* A hybrid target's small parameters, kept fp32 (target/hybrid_layer.h): by name. */
static int is_small_param(const char *name) {
    return strstr(name, "norm") || strstr(name, "conv1d") || strstr(name, "A_log") || strstr(name, "dt_bias");
}

/* Sum over the loaded tensors of their values times the size they take on a
 * backend whose ACT elements are act_elem bytes. */
static size_t safetensors_bytes(const DfModelConfig *c, const DfSafetensors *st, int n_layers, int with_head,
                                size_t act_elem) {
    size_t total = 0;
    for (int i = 0; i < st->n_tensors; i++) {
        const DfTensorInfo *t = &st->tensors[i];
        if (!is_loaded(c, t->name, n_layers, with_head)) continue;
        size_t values = t->nbytes / df_dtype_size(t->dtype);
        total += values * (c->is_hybrid && is_small_param(t->name) ? 4 : act_elem);
    }
    return total;
}

/* The same sum in the file's own bytes: the plan at the file's element size
 * (coder-tiny is bf16, the hybrid fixtures fp32, small parameters included). */
static size_t file_bytes(const DfModelConfig *c, const DfSafetensors *st, int n_layers, int with_head) {
    size_t total = 0;
    for (int i = 0; i < st->n_tensors; i++)
        if (is_loaded(c, st->tensors[i].name, n_layers, with_head)) total += st->tensors[i].nbytes;
    return total;
}

static void test_weights_match_safetensors(void **state) {
    (void)state;
    for (size_t d = 0; d < N_MODELS; d++) {
        DfModelConfig c;
        load_config(&c, MODEL_DIRS[d]);
        DfSafetensors st;
        DfError err;
        if (df_safetensors_open(&st, df_test_path(MODEL_DIRS[d]), &err)) fail_msg("%s", err.msg);
        size_t file_elem = c.is_hybrid ? 4 : 2;
        const int layer_counts[] = {0, 1, 3, c.num_layers};
        for (int k = 0; k < 4; k++)
            for (int head = 0; head <= 1; head++) {
                int n = layer_counts[k];
                assert_int_equal(df_target_weight_bytes(&c, n, head, file_elem), file_bytes(&c, &st, n, head));
                for (size_t act = 2; act <= 4; act += 2)
                    assert_int_equal(df_target_weight_bytes(&c, n, head, act), safetensors_bytes(&c, &st, n, head, act));
            }
        /* every layer adds something, and different layer kinds differ (a hybrid's) */
        assert_true(df_target_weight_bytes(&c, 2, 0, 2) > df_target_weight_bytes(&c, 1, 0, 2));
        df_safetensors_close(&st);
    }
}

/* ---- the reference: what the CPU backend holds ----------------------------------- */

static void test_weights_match_cpu_load(void **state) {
    (void)state;
    DfBackend *be = cpu();
    for (size_t d = 0; d < N_MODELS; d++) {
        DfModelConfig c;
        load_config(&c, MODEL_DIRS[d]);
        const int layer_counts[] = {0, 2, c.num_layers};
        for (int k = 0; k < 3; k++)
            for (int head = 0; head <= 1; head++) {
                DfTargetModel m;
                DfError err;
                size_t before = df_cpu_bytes_in_use(be);
                if (df_target_load(&m, be, df_test_path(MODEL_DIRS[d]), layer_counts[k], head, &err))
                    fail_msg("%s", err.msg);
                assert_int_equal(df_cpu_bytes_in_use(be) - before,
                                 df_target_weight_bytes(&c, layer_counts[k], head, CPU_ACT));
                df_target_free(&m);
                assert_int_equal(df_cpu_bytes_in_use(be), before);
            }
    }
    df_backend_destroy(be);
}

/* Random builds of cfg, tied and untied, for several layer counts. */
static void check_random_bytes(DfBackend *be, DfModelConfig c) {
    for (int tied = 0; tied <= 1; tied++) {
        c.tie_word_embeddings = tied;
        const int layer_counts[] = {0, 1, c.num_layers};
        for (int k = 0; k < 3; k++)
            for (int head = 0; head <= 1; head++) {
                DfTargetModel m;
                DfError err;
                size_t before = df_cpu_bytes_in_use(be);
                if (df_target_init_random_layers(&m, be, &c, 5, layer_counts[k], head, &err)) fail_msg("%s", err.msg);
                assert_int_equal(df_cpu_bytes_in_use(be) - before,
                                 df_target_weight_bytes(&c, layer_counts[k], head, CPU_ACT));
                df_target_free(&m);
                assert_int_equal(df_cpu_bytes_in_use(be), before);
            }
        /* the all-layers build is n_layers = num_layers */
        DfTargetModel m;
        DfError err;
        size_t before = df_cpu_bytes_in_use(be);
        if (df_target_init_random(&m, be, &c, 5, 1, &err)) fail_msg("%s", err.msg);
        assert_int_equal(df_cpu_bytes_in_use(be) - before, df_target_weight_bytes(&c, c.num_layers, 1, CPU_ACT));
        df_target_free(&m);
    }
}

static void test_weights_match_cpu_random(void **state) {
    (void)state;
    DfBackend *be = cpu();
    DfModelConfig c;
    for (size_t d = 0; d < N_MODELS; d++) {
        load_config(&c, MODEL_DIRS[d]);
        check_random_bytes(be, c);
    }
    /* a dense family without q/k norms (Llama) */
    load_config(&c, DENSE_DIR);
    c.has_qk_norm = 0;
    check_random_bytes(be, c);
    DfTargetModel m;
    DfError err;
    assert_int_equal(df_target_init_random_layers(&m, be, &c, 5, c.num_layers + 1, 1, &err), -1);
    assert_non_null(strstr(err.msg, "layers"));
    df_backend_destroy(be);
}

/* ---- a partial random build is the full one, cut ------------------------------------ */

static float *download(DfBackend *be, DfBuffer b) {
    float *host = df_xmalloc(b.count * sizeof *host, "test download");
    DfError err;
    if (be->ops->download_f32(be, host, b, &err)) fail_msg("%s", err.msg);
    return host;
}

static void assert_same_buffer(DfBackend *be, DfBuffer a, DfBuffer b) {
    assert_int_equal(a.count, b.count);
    float *x = download(be, a), *y = download(be, b);
    assert_memory_equal(x, y, a.count * sizeof *x);
    free(x);
    free(y);
}

static void check_partial_random(DfBackend *be, DfModelConfig c) {
    c.tie_word_embeddings = 0;
    DfTargetModel full, part;
    DfError err;
    if (df_target_init_random(&full, be, &c, 11, 1, &err) ||
        df_target_init_random_layers(&part, be, &c, 11, 1, 1, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(part.n_layers_loaded, 1);
    assert_same_buffer(be, full.embed, part.embed);
    assert_same_buffer(be, full.layers[0].down_proj, part.layers[0].down_proj);
    assert_same_buffer(be, full.final_norm, part.final_norm);
    assert_same_buffer(be, full.lm_head, part.lm_head);
    df_target_free(&full);
    df_target_free(&part);
}

static void test_partial_random_keeps_values(void **state) {
    (void)state;
    DfBackend *be = cpu();
    DfModelConfig c;
    load_config(&c, DENSE_DIR);
    check_partial_random(be, c);
    c.has_qk_norm = 0;
    check_partial_random(be, c);
    load_config(&c, HYBRID_DIR);
    check_partial_random(be, c);
    df_backend_destroy(be);
}

/* ---- the forward's workspace ------------------------------------------------------- */

typedef struct Shape {
    int n_seqs;
    int32_t starts[5];
} Shape;

/* Growing and shrinking batches: the workspace keeps its largest size, the
 * rope tables their longest (300 tokens: 512 rows, past the first 256). */
static const Shape SHAPES[] = {
    {1, {0, 5}},
    {3, {0, 3, 10, 17}},
    {2, {0, 2, 4}},
    {1, {0, 300}},
    {4, {0, 100, 200, 300, 301}},
};
#define N_SHAPES (sizeof SHAPES / sizeof SHAPES[0])
#define MAX_TOKENS 301

static void check_forward_bytes(const char *dir, int n_layers, int tap) {
    DfBackend *be = cpu();
    DfTargetModel m;
    DfError err;
    if (df_target_load(&m, be, df_test_path(dir), n_layers, 0, &err)) fail_msg("%s", err.msg);
    const DfModelConfig *c = &m.cfg;
    int32_t *ids = df_xcalloc(MAX_TOKENS, sizeof *ids, "test ids");
    for (int i = 0; i < MAX_TOKENS; i++) ids[i] = (i * 37 + 11) % c->vocab_size;
    DfBuffer dev_ids, features;
    if (df_buffer_alloc(be, &dev_ids, DF_BUF_I32, MAX_TOKENS, &err) ||
        be->ops->upload_i32(be, dev_ids, ids, &err) ||
        df_buffer_alloc(be, &features, DF_BUF_ACT, (size_t)MAX_TOKENS * c->hidden_size, &err))
        fail_msg("%s", err.msg);
    size_t base = df_cpu_bytes_in_use(be);
    int most_tokens = 0, longest = 0;
    for (size_t s = 0; s < N_SHAPES; s++) {
        DfPackedBatch pb;
        df_cpu_reset_peak(be);
        if (df_packed_batch_init(&pb, be, SHAPES[s].starts, SHAPES[s].n_seqs, &err)) fail_msg("%s", err.msg);
        DfBuffer no_logits = {0};
        if (df_target_forward_batch(&m, &pb, df_buffer_view(dev_ids, 0, (size_t)pb.n_tokens), &tap, 1,
                                    df_buffer_view(features, 0, (size_t)pb.n_tokens * c->hidden_size), no_logits, &err))
            fail_msg("%s", err.msg);
        if (pb.n_tokens > most_tokens) most_tokens = pb.n_tokens;
        if (pb.max_seq_len > longest) longest = pb.max_seq_len;
        /* this batch at its largest: what a plan for it alone reserves */
        size_t now = df_cpu_bytes_in_use(be) - base, peak = df_cpu_peak_bytes(be) - base;
        size_t kept = df_target_workspace_bytes(c, most_tokens, CPU_ACT) + df_target_rope_table_bytes(c, longest);
        assert_int_equal(now, kept + df_packed_batch_bytes(pb.n_tokens, pb.n_seqs));
        /* nothing more at any moment of the forward: a workspace or table that grows is freed first */
        assert_int_equal(peak, now);
        if (s == 0)
            assert_int_equal(now, df_target_forward_workspace_bytes(c, pb.n_tokens, pb.n_seqs, pb.max_seq_len, CPU_ACT));
        df_packed_batch_free(&pb, be);
        assert_int_equal(df_cpu_bytes_in_use(be) - base, kept);
    }
    df_buffer_free(be, &features);
    df_buffer_free(be, &dev_ids);
    free(ids);
    df_target_free(&m);
    assert_int_equal(df_cpu_bytes_in_use(be), 0);
    df_backend_destroy(be);
}

static void test_forward_workspace_dense(void **state) {
    (void)state;
    check_forward_bytes(DENSE_DIR, 3, 2);
}

static void test_forward_workspace_hybrid(void **state) {
    (void)state;
    check_forward_bytes(HYBRID_DIR, 4, 3); /* layers 0, 1, 3 linear, 2 full attention */
}

static void test_forward_workspace_formulas(void **state) {
    (void)state;
    DfModelConfig c;
    load_config(&c, DENSE_DIR); /* H 256, 4 heads / 2 kv of 64, intermediate 512 */
    size_t t = 10, per_token = 4 + 2 * 256 * 2 + 2 * 256 * 2 + 2 * 128 * 2 + 2 * 512 * 2;
    assert_int_equal(df_target_workspace_bytes(&c, (int)t, 2), t * per_token);
    assert_int_equal(df_target_rope_positions(0, 1), 256);
    assert_int_equal(df_target_rope_positions(0, 257), 512);
    assert_int_equal(df_target_rope_positions(1024, 300), 1024);
    assert_int_equal(df_target_rope_table_bytes(&c, 300), 2 * 512 * 32 * 4);
    load_config(&c, HYBRID_DIR); /* rotary_dim 4 */
    assert_int_equal(df_target_rope_table_bytes(&c, 10), 2 * 256 * 2 * 4);
    assert_int_equal(df_packed_batch_bytes(17, 3), (17 + 4) * 4);
    /* the CUDA ops' scratch: only the skinny GEMM's few rows */
    assert_int_equal(df_target_forward_cuda_scratch_bytes(65, 132), 0);
    assert_int_equal(df_target_forward_cuda_scratch_bytes(16, 132), 16 * 1024 * 132 + 8 * 132);
}

/* Bytes the CPU backend holds for a decoder of n_slots slots of `rows`
 * rows (rollback_rows > 0: enabled for that many). */
static size_t decoder_bytes(DfTargetModel *m, DfBackend *be, int n_slots, int rows, int rollback_rows) {
    DfTargetDecoder d;
    DfError err;
    size_t before = df_cpu_bytes_in_use(be);
    if (df_target_decoder_init(&d, m, n_slots, rows, NULL, 0, &err) ||
        (rollback_rows > 0 && df_target_decoder_enable_rollback(&d, rollback_rows, &err)))
        fail_msg("%s", err.msg);
    size_t held = df_cpu_bytes_in_use(be) - before;
    df_target_decoder_free(&d);
    assert_int_equal(df_cpu_bytes_in_use(be), before);
    return held;
}

/* Two slots more take twice a slot's bytes (what does not depend on the
 * slots, the rope tables, cancels). */
static void test_decoder_slot_bytes(void **state) {
    (void)state;
    for (size_t i = 0; i < N_MODELS; i++) {
        DfBackend *be;
        DfTargetModel m;
        DfModelConfig cfg;
        load_config(&cfg, MODEL_DIRS[i]);
        df_test_load_cpu_target(&m, &be, MODEL_DIRS[i], cfg.num_layers, 1);
        const DfModelConfig *c = &m.cfg;
        for (int rollback = 0; rollback <= 5; rollback += 5) {
            size_t one = decoder_bytes(&m, be, 1, 100, rollback), three = decoder_bytes(&m, be, 3, 100, rollback);
            assert_int_equal(three - one, 2 * df_target_decoder_slot_bytes(c, 100, rollback, CPU_ACT));
        }
        if (c->is_hybrid) /* the recurrent states are there */
            assert_true(df_target_decoder_slot_bytes(c, 100, 0, CPU_ACT) >
                        (size_t)df_target_kv_layers(c) * 2 * 100 * c->num_kv_heads * c->head_dim * CPU_ACT);
        df_target_free(&m);
        df_backend_destroy(be);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_weights_match_safetensors),
        cmocka_unit_test(test_weights_match_cpu_load),
        cmocka_unit_test(test_weights_match_cpu_random),
        cmocka_unit_test(test_partial_random_keeps_values),
        cmocka_unit_test(test_forward_workspace_dense),
        cmocka_unit_test(test_forward_workspace_hybrid),
        cmocka_unit_test(test_forward_workspace_formulas),
        cmocka_unit_test(test_decoder_slot_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
