/* Drafter export/load (spec section 7): config.json checked field by field
 * against the spec's Qwen3-8B example (parsed with cJSON here, independently
 * of the writer); model.safetensors read back through the safetensors reader
 * (names, shapes, BF16, exact set) with values compared to an independent
 * bf16 rounding; export -> load round trips; a directory written the way
 * another trainer writes one (F32, extra lm_head, no block_size, sharded)
 * loads; malformed directories fail naming the file and the tensor/field;
 * exports replace a directory whole, and a failed export leaves it intact. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/safetensors.h"
#include "model/drafter_io.h"
#include "test_util.h"

/* ------------------------------------------------------------- fixtures */

static void qwen3_8b_target(DfModelConfig *t) {
    memset(t, 0, sizeof *t);
    t->arch = DF_ARCH_QWEN3;
    t->num_layers = 36;
    t->hidden_size = 4096;
    t->num_heads = 32;
    t->head_dim = 128;
    t->num_kv_heads = 8;
    t->intermediate_size = 12288;
    t->vocab_size = 151936;
    t->rms_norm_eps = 1e-6;
    t->rope.theta = 1e6;
    t->rope.type = DF_ROPE_DEFAULT;
    t->max_position_embeddings = 40960;
    t->has_qk_norm = 1;
}

/* A drafter small enough to export for real: 2 layers over an 8-layer target. */
static void small_config(DfDrafterConfig *c) {
    DfModelConfig t;
    memset(&t, 0, sizeof t);
    t.num_layers = 8;
    t.hidden_size = 64;
    t.num_heads = 4;
    t.head_dim = 16;
    t.num_kv_heads = 2;
    t.intermediate_size = 96;
    t.vocab_size = 300;
    t.rms_norm_eps = 1e-6;
    t.rope.theta = 1e6;
    t.max_position_embeddings = 512;
    DfError err = {{0}};
    DfDrafterOptions dopt = {.num_layers = 2, .block_size = 16, .mask_token_id = 290};
    assert_int_equal(df_drafter_config_from_target(c, &t, &dopt, &err), 0);
}

static float *random_params(const DfDrafterLayout *l, uint64_t seed) {
    float *p = malloc(l->total * sizeof *p);
    df_test_fill_random(p, l->total, seed, 0.5f);
    return p;
}

/* bf16 round to nearest even, by comparing the dropped half with 0x8000
 * (the library adds a bias instead). Finite inputs only. */
static float ref_round_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t low = u & 0xffffu, high = u & 0xffff0000u;
    if (low > 0x8000u || (low == 0x8000u && (high & 0x10000u))) high += 0x10000u;
    float f;
    memcpy(&f, &high, 4);
    return f;
}

static char *path_in(const char *dir, const char *name) {
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = calloc(1, (size_t)n + 1);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return s;
}

/* Names in dir other than `except`, as one space-separated string. */
static void list_dir(const char *dir, char *out, size_t cap) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    out[0] = '\0';
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        strncat(out, e->d_name, cap - strlen(out) - 2);
        strncat(out, " ", cap - strlen(out) - 1);
    }
    closedir(d);
}

/* A list_dir of an export: config.json, model.safetensors and dflash.py, nothing else. */
static void assert_export_files(const char *names) {
    const char *files[] = {"config.json ", "model.safetensors ", "dflash.py "};
    size_t len = 0;
    for (int i = 0; i < 3; i++) {
        if (!strstr(names, files[i])) fail_msg("the export holds '%s', without %s", names, files[i]);
        len += strlen(files[i]);
    }
    if (strlen(names) != len) fail_msg("the export holds '%s': more than its three files", names);
}

#define assert_contains(haystack, needle)                                                                  \
    do {                                                                                                    \
        if (!strstr((haystack), (needle))) fail_msg("'%s' does not contain '%s'", (haystack), (needle));    \
    } while (0)

/* ------------------------------------------------------------ config.json */

/* The raw text of a top-level value in config.json (the writer's spelling). */
static void raw_value(const char *text, const char *key, char *out, size_t cap) {
    char quoted[128];
    snprintf(quoted, sizeof quoted, "\"%s\":", key);
    const char *p = strstr(text, quoted);
    assert_non_null(p);
    p += strlen(quoted);
    while (*p == ' ' || *p == '\t') p++;
    size_t n = strcspn(p, ",\n}");
    assert_true(n < cap);
    memcpy(out, p, n);
    out[n] = '\0';
}

static void check_int(const cJSON *obj, const char *key, int value) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v)) fail_msg("field '%s' is not a number", key);
    if (v->valuedouble != value) fail_msg("field '%s' is %g, expected %d", key, v->valuedouble, value);
}

static void check_string(const cJSON *obj, const char *key, const char *value) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsString(v)) fail_msg("field '%s' is not a string", key);
    assert_string_equal(v->valuestring, value);
}

static void check_false(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsFalse(v)) fail_msg("field '%s' is not false", key);
}

static void check_text(const char *text, const char *key, const char *spelled) {
    char raw[64];
    raw_value(text, key, raw, sizeof raw);
    assert_string_equal(raw, spelled);
}

/* The section 7 key set, exactly (rope_scaling null for a default-RoPE target). */
static void check_key_set(const cJSON *root) {
    static const char *const keys[] = {
        "architectures", "auto_map", "model_type", "block_size", "num_target_layers", "dflash_config",
        "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "head_dim", "vocab_size", "rms_norm_eps", "rope_theta", "max_position_embeddings", "tie_word_embeddings",
        "layer_types", "hidden_act", "attention_bias", "dtype", "rope_scaling"};
    const int n = (int)(sizeof keys / sizeof keys[0]);
    assert_int_equal(cJSON_GetArraySize(root), n);
    for (int i = 0; i < n; i++)
        if (!cJSON_GetObjectItemCaseSensitive(root, keys[i])) fail_msg("config.json lacks '%s'", keys[i]);
}

static void test_qwen3_8b_config(void **state) {
    (void)state;
    DfModelConfig t;
    qwen3_8b_target(&t);
    DfDrafterConfig c;
    DfError err = {{0}};
    DfDrafterOptions dopt = {.num_layers = 5, .block_size = 16, .mask_token_id = 151669};
    assert_int_equal(df_drafter_config_from_target(&c, &t, &dopt, &err), 0);
    static const int taps[] = {1, 9, 17, 25, 33}; /* spec sections 2 and 7 */
    assert_int_equal(c.n_taps, 5);
    for (int i = 0; i < 5; i++) assert_int_equal(c.target_layer_ids[i], taps[i]);

    /* Layout counts from the section 3 shapes, without allocating 8B-sized params. */
    DfDrafterLayout l;
    df_drafter_layout_build(&l, &c);
    const size_t H = 4096, I = 12288, q = 32 * 128, kv = 8 * 128, hd = 128;
    size_t per_layer = 2 * H + q * H + 2 * kv * H + H * q + 2 * hd + 3 * I * H;
    assert_int_equal(l.n_params, 3 + 11 * 5);
    assert_int_equal(l.total, H * 5 * H + H + 5 * per_layer + H);
    int fc = df_drafter_layout_find(&l, "fc.weight");
    assert_int_equal(l.params[fc].shape[0], 4096);
    assert_int_equal(l.params[fc].shape[1], 5 * 4096);
    df_drafter_layout_free(&l);

    char *text = df_drafter_config_json(&c);
    assert_non_null(text);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    check_key_set(root);
    const cJSON *archs = cJSON_GetObjectItem(root, "architectures");
    assert_int_equal(cJSON_GetArraySize(archs), 1);
    assert_string_equal(cJSON_GetArrayItem(archs, 0)->valuestring, "DFlashDraftModel");
    const cJSON *auto_map = cJSON_GetObjectItem(root, "auto_map");
    assert_int_equal(cJSON_GetArraySize(auto_map), 1);
    check_string(auto_map, "AutoModel", "dflash.DFlashDraftModel");
    check_string(root, "model_type", "qwen3");
    check_int(root, "block_size", 16);
    check_int(root, "num_target_layers", 36);
    const cJSON *dflash = cJSON_GetObjectItem(root, "dflash_config");
    assert_int_equal(cJSON_GetArraySize(dflash), 2);
    check_int(dflash, "mask_token_id", 151669);
    const cJSON *ids = cJSON_GetObjectItem(dflash, "target_layer_ids");
    assert_int_equal(cJSON_GetArraySize(ids), 5);
    for (int i = 0; i < 5; i++) assert_true(cJSON_GetArrayItem(ids, i)->valuedouble == taps[i]);
    check_int(root, "hidden_size", 4096);
    check_int(root, "intermediate_size", 12288);
    check_int(root, "num_hidden_layers", 5);
    check_int(root, "num_attention_heads", 32);
    check_int(root, "num_key_value_heads", 8);
    check_int(root, "head_dim", 128);
    check_int(root, "vocab_size", 151936);
    check_int(root, "max_position_embeddings", 40960);
    assert_true(cJSON_GetObjectItem(root, "rms_norm_eps")->valuedouble == 1e-6);
    assert_true(cJSON_GetObjectItem(root, "rope_theta")->valuedouble == 1e6);
    check_false(root, "tie_word_embeddings");
    check_false(root, "attention_bias");
    const cJSON *types = cJSON_GetObjectItem(root, "layer_types");
    assert_int_equal(cJSON_GetArraySize(types), 5);
    for (int i = 0; i < 5; i++) assert_string_equal(cJSON_GetArrayItem(types, i)->valuestring, "full_attention");
    check_string(root, "hidden_act", "silu");
    check_string(root, "dtype", "bfloat16");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(root, "rope_scaling")));
    /* Spelled as the spec's example: integers without a fraction, eps as Python prints it. */
    check_text(text, "rms_norm_eps", "1e-06");
    check_text(text, "rope_theta", "1000000");
    check_text(text, "vocab_size", "151936");
    check_text(text, "block_size", "16");
    cJSON_Delete(root);

    /* And it parses back to the same config. */
    DfDrafterConfig back;
    assert_int_equal(df_drafter_config_parse(text, "config.json", &back, &err), 0);
    char what[256];
    if (df_drafter_config_differs(&back, &c, what, sizeof what)) fail_msg("round trip differs: %s", what);
    free(text);
}

static void test_llama3_rope_scaling(void **state) {
    (void)state;
    DfModelConfig t;
    qwen3_8b_target(&t);
    t.arch = DF_ARCH_LLAMA;
    t.num_layers = 32;
    t.vocab_size = 128256;
    t.intermediate_size = 14336;
    t.rms_norm_eps = 1e-5;
    t.rope = (DfRopeConfig){.theta = 500000, .type = DF_ROPE_LLAMA3, .factor = 8, .low_freq_factor = 1,
                            .high_freq_factor = 4, .original_max_position_embeddings = 8192};
    t.max_position_embeddings = 131072;
    DfDrafterConfig c;
    DfError err = {{0}};
    DfDrafterOptions dopt = {.num_layers = 5, .block_size = 10, .mask_token_id = 128002};
    assert_int_equal(df_drafter_config_from_target(&c, &t, &dopt, &err), 0);
    char *text = df_drafter_config_json(&c);
    cJSON *root = cJSON_Parse(text);
    const cJSON *s = cJSON_GetObjectItem(root, "rope_scaling");
    assert_true(cJSON_IsObject(s));
    check_string(s, "rope_type", "llama3");
    assert_true(cJSON_GetObjectItem(s, "factor")->valuedouble == 8.0);
    assert_true(cJSON_GetObjectItem(s, "low_freq_factor")->valuedouble == 1.0);
    assert_true(cJSON_GetObjectItem(s, "high_freq_factor")->valuedouble == 4.0);
    check_int(s, "original_max_position_embeddings", 8192);
    assert_non_null(strstr(text, "8.0")); /* a float, as transformers writes and checks it */
    check_text(text, "rope_theta", "500000");
    check_text(text, "rms_norm_eps", "1e-05");
    check_int(root, "block_size", 10);
    cJSON_Delete(root);
    DfDrafterConfig back;
    assert_int_equal(df_drafter_config_parse(text, "config.json", &back, &err), 0);
    char what[256];
    if (df_drafter_config_differs(&back, &c, what, sizeof what)) fail_msg("round trip differs: %s", what);
    assert_int_equal(back.rope.type, DF_ROPE_LLAMA3);
    free(text);
}

/* ------------------------------------------------------------ export/load */

static void test_export_read_back(void **state) {
    (void)state;
    DfDrafterConfig c;
    small_config(&c);
    DfDrafterLayout l;
    df_drafter_layout_build(&l, &c);
    float *params = random_params(&l, 1);
    char *tmp = df_test_tmpdir("drafter-export"), *dir = path_in(tmp, "drafter");
    DfError err = {{0}};
    if (df_drafter_export(dir, &c, &l, params, &err) != 0) fail_msg("%s", err.msg);

    char *model = path_in(dir, "model.safetensors");
    DfSafetensors st;
    if (df_safetensors_open(&st, model, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(st.n_tensors, l.n_params); /* exact set: nothing else, no embed_tokens / lm_head */
    assert_null(df_safetensors_find(&st, "embed_tokens.weight"));
    assert_null(df_safetensors_find(&st, "lm_head.weight"));
    for (int i = 0; i < l.n_params; i++) {
        const DfParamInfo *p = &l.params[i];
        const DfTensorInfo *t = df_safetensors_find(&st, p->name);
        if (!t) fail_msg("tensor '%s' is missing", p->name);
        assert_int_equal(t->dtype, DF_DTYPE_BF16);
        assert_int_equal(t->ndim, p->ndim);
        for (int d = 0; d < p->ndim; d++) assert_int_equal(t->shape[d], p->shape[d]);
        float *w = df_safetensors_load_f32(&st, p->name, p->ndim, p->shape, &err);
        assert_non_null(w);
        for (size_t j = 0; j < p->count; j++)
            if (w[j] != ref_round_bf16(params[p->offset + j]))
                fail_msg("%s[%zu]: %g, expected %g", p->name, j, w[j], ref_round_bf16(params[p->offset + j]));
        free(w);
    }
    /* Spec names spot-checked literally (not through the layout). */
    assert_non_null(df_safetensors_find(&st, "fc.weight"));
    assert_non_null(df_safetensors_find(&st, "hidden_norm.weight"));
    assert_non_null(df_safetensors_find(&st, "norm.weight"));
    assert_non_null(df_safetensors_find(&st, "layers.1.self_attn.k_norm.weight"));
    assert_non_null(df_safetensors_find(&st, "layers.0.mlp.down_proj.weight"));
    assert_non_null(df_safetensors_find(&st, "layers.1.post_attention_layernorm.weight"));
    df_safetensors_close(&st);
    char *bytes = read_file(model);
    assert_non_null(strstr(bytes + 8, "\"__metadata__\":{\"format\":\"pt\"}"));
    free(bytes);

    char names[512];
    list_dir(dir, names, sizeof names);
    assert_export_files(names);
    list_dir(tmp, names, sizeof names);
    assert_string_equal(names, "drafter "); /* no temporary sibling left */
    free(model);
    free(params);
    df_drafter_layout_free(&l);
    df_test_rmtree(tmp);
    free(dir);
    free(tmp);
}

static void test_export_load_round_trip(void **state) {
    (void)state;
    DfDrafterConfig c;
    small_config(&c);
    DfDrafterLayout l;
    df_drafter_layout_build(&l, &c);
    float *params = random_params(&l, 2);
    char *tmp = df_test_tmpdir("drafter-rt"), *dir = path_in(tmp, "drafter");
    DfError err = {{0}};
    if (df_drafter_export(dir, &c, &l, params, &err) != 0) fail_msg("%s", err.msg);
    DfDrafterConfig back;
    DfDrafterLayout lb;
    float *loaded = NULL;
    if (df_drafter_load(dir, &back, &lb, &loaded, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(lb.total, l.total);
    for (size_t i = 0; i < l.total; i++)
        if (loaded[i] != ref_round_bf16(params[i])) fail_msg("param %zu: %g vs %g", i, loaded[i], params[i]);
    assert_int_equal(back.hidden_size, 64);
    assert_int_equal(back.num_layers, 2);
    assert_int_equal(back.num_heads, 4);
    assert_int_equal(back.num_kv_heads, 2);
    assert_int_equal(back.head_dim, 16);
    assert_int_equal(back.intermediate_size, 96);
    assert_int_equal(back.vocab_size, 300);
    assert_int_equal(back.block_size, 16);
    assert_int_equal(back.mask_token_id, 290);
    assert_int_equal(back.num_target_layers, 8);
    assert_int_equal(back.n_taps, 2);
    assert_int_equal(back.target_layer_ids[0], 1);
    assert_int_equal(back.target_layer_ids[1], 5);
    assert_true(back.rms_norm_eps == 1e-6);
    assert_true(back.rope.theta == 1e6);
    assert_int_equal(back.max_position_embeddings, 512);
    char what[256];
    if (df_drafter_config_differs(&back, &c, what, sizeof what)) fail_msg("config round trip: %s", what);
    free(loaded);
    df_drafter_layout_free(&lb);
    free(params);
    df_drafter_layout_free(&l);
    df_test_rmtree(tmp);
    free(dir);
    free(tmp);
}

/* Sliding-window layers: layer_types / use_sliding_window / sliding_window
 * written, and read back to the same config through a full export and load. */
static void test_sliding_window_round_trip(void **state) {
    (void)state;
    DfDrafterConfig c;
    small_config(&c);
    DfError err = {{0}};
    assert_int_equal(df_drafter_set_sliding(&c, 24, "0", &err), 0);
    assert_int_equal(df_drafter_layer_window(&c, 0), 24);
    assert_int_equal(df_drafter_layer_window(&c, 1), 0);
    char *text = df_drafter_config_json(&c);
    cJSON *root = cJSON_Parse(text);
    const cJSON *types = cJSON_GetObjectItem(root, "layer_types");
    assert_string_equal(cJSON_GetArrayItem(types, 0)->valuestring, "sliding_attention");
    assert_string_equal(cJSON_GetArrayItem(types, 1)->valuestring, "full_attention");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(root, "use_sliding_window")));
    check_int(root, "sliding_window", 24);
    cJSON_Delete(root);
    free(text);

    DfDrafterLayout l;
    df_drafter_layout_build(&l, &c);
    float *params = random_params(&l, 3);
    char *tmp = df_test_tmpdir("drafter-sliding"), *dir = path_in(tmp, "drafter");
    if (df_drafter_export(dir, &c, &l, params, &err) != 0) fail_msg("%s", err.msg);
    DfDrafterConfig back;
    DfDrafterLayout lb;
    float *loaded = NULL;
    if (df_drafter_load(dir, &back, &lb, &loaded, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(back.sliding_window, 24);
    assert_int_equal(back.sliding[0], 1);
    assert_int_equal(back.sliding[1], 0);
    char what[256];
    if (df_drafter_config_differs(&back, &c, what, sizeof what)) fail_msg("config round trip: %s", what);
    /* a different window or layer choice is a different drafter */
    DfDrafterConfig other = c;
    other.sliding[1] = 1;
    assert_int_equal(df_drafter_config_differs(&other, &c, what, sizeof what), 1);
    assert_non_null(strstr(what, "layer_types[1]"));
    free(loaded);
    df_drafter_layout_free(&lb);
    free(params);
    df_drafter_layout_free(&l);
    df_test_rmtree(tmp);
    free(dir);
    free(tmp);
}

/* --sliding-layers patterns: default all but the last, all, lists, ranges, negatives, errors. */
static void test_sliding_layer_patterns(void **state) {
    (void)state;
    DfDrafterConfig c;
    small_config(&c);
    c.num_layers = 5;
    DfError err = {{0}};
    const struct {
        const char *pattern;
        const char *want; /* per layer, '1' sliding */
    } ok[] = {{NULL, "11110"}, {"", "11110"}, {"all", "11111"}, {"none", "00000"}, {"0,2", "10100"},
              {"1-3", "01110"}, {"-1", "00001"}, {"-2--1", "00011"}, {"0,3-4", "10011"}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        if (df_drafter_set_sliding(&c, 8, ok[i].pattern, &err)) fail_msg("%s: %s", ok[i].pattern, err.msg);
        for (int k = 0; k < 5; k++)
            if (c.sliding[k] != (ok[i].want[k] == '1')) fail_msg("pattern '%s': layer %d", ok[i].pattern, k);
        assert_int_equal(c.sliding_window, strchr(ok[i].want, '1') ? 8 : 0);
    }
    const char *bad[] = {"5", "x", "1,", "3-1", "-6", "2-"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (df_drafter_set_sliding(&c, 8, bad[i], &err) == 0) fail_msg("pattern '%s' accepted", bad[i]);
    assert_int_equal(df_drafter_set_sliding(&c, 0, "0", &err), -1);
    assert_non_null(strstr(err.msg, "--sliding-window"));
    assert_int_equal(df_drafter_set_sliding(&c, 0, NULL, &err), 0);
    assert_int_equal(c.sliding_window, 0);
}

/* ----------------------------------------------- another trainer's files */

/* Writes the layout's tensors as F32 to path, with changes for malformed
 * cases: `skip` left out, `grow` given one more row, `extra` added ([4]). */
static void write_tensors(const char *path, const DfDrafterLayout *l, const float *params, const char *skip,
                          const char *grow, const char *extra, int64_t extra_rows, int64_t extra_cols) {
    DfTensorOut *t = calloc((size_t)l->n_params + 1, sizeof *t);
    float *bigger = calloc(l->total + (size_t)(extra_rows * (extra_cols ? extra_cols : 1)) + 4096, sizeof *bigger);
    int n = 0;
    for (int i = 0; i < l->n_params; i++) {
        const DfParamInfo *p = &l->params[i];
        if (skip && strcmp(p->name, skip) == 0) continue;
        t[n] = (DfTensorOut){.name = p->name, .dtype = DF_DTYPE_F32, .ndim = p->ndim, .data = params + p->offset};
        t[n].shape[0] = p->shape[0];
        t[n].shape[1] = p->shape[1];
        if (grow && strcmp(p->name, grow) == 0) {
            t[n].shape[0]++;
            t[n].data = bigger; /* enough zeros for one more row */
        }
        n++;
    }
    if (extra) {
        t[n] = (DfTensorOut){.name = extra, .dtype = DF_DTYPE_F32, .ndim = extra_cols ? 2 : 1, .data = bigger};
        t[n].shape[0] = extra_rows;
        t[n].shape[1] = extra_cols;
        n++;
    }
    DfError err = {{0}};
    if (df_safetensors_write(path, t, n, NULL, &err) != 0) fail_msg("%s", err.msg);
    free(bigger);
    free(t);
}

static const char *OTHER_CONFIG =
    "{\"architectures\": [\"DFlashDraftModel\"], \"model_type\": \"qwen3\", \"num_target_layers\": 8,\n"
    " \"dflash_config\": {\"mask_token_id\": 290, \"target_layer_ids\": [1, 5]},\n"
    " \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,\n"
    " \"num_key_value_heads\": 2, \"head_dim\": 16, \"vocab_size\": 300, \"rms_norm_eps\": 1e-06,\n"
    " \"rope_parameters\": {\"rope_theta\": 1000000.0, \"rope_type\": \"default\"},\n"
    " \"max_position_embeddings\": 512, \"tie_word_embeddings\": false, \"torch_dtype\": \"float32\",\n"
    " \"hidden_act\": \"silu\", \"attention_bias\": false, \"use_cache\": true}\n";

static void test_other_trainer_dir(void **state) {
    (void)state;
    DfDrafterConfig c;
    small_config(&c);
    DfDrafterLayout l;
    df_drafter_layout_build(&l, &c);
    float *params = random_params(&l, 3);
    char *dir = df_test_tmpdir("drafter-other");
    char *config = path_in(dir, "config.json"), *model = path_in(dir, "model.safetensors");
    df_test_write_file(config, OTHER_CONFIG);
    write_tensors(model, &l, params, NULL, NULL, "lm_head.weight", 300, 64);

    DfDrafterConfig back;
    DfDrafterLayout lb;
    float *loaded = NULL;
    DfError err = {{0}};
    if (df_drafter_load(dir, &back, &lb, &loaded, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(back.block_size, 16); /* the default when absent */
    assert_true(back.rope.theta == 1e6);
    assert_int_equal(back.mask_token_id, 290);
    assert_memory_equal(loaded, params, l.total * sizeof *params); /* F32 in, exact */
    char what[256];
    if (df_drafter_config_differs(&back, &c, what, sizeof what)) fail_msg("config: %s", what);
    free(loaded);
    df_drafter_layout_free(&lb);

    /* No target_layer_ids: build_target_layer_ids(8, 2) = [1, 5]; no mask id: -1. */
    df_test_write_file(config,
                       "{\"model_type\": \"qwen3\", \"num_target_layers\": 8, \"dflash_config\": {},"
                       " \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2,"
                       " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16,"
                       " \"vocab_size\": 300, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000,"
                       " \"max_position_embeddings\": 512, \"block_size\": 8}");
    if (df_drafter_load(dir, &back, &lb, &loaded, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(back.n_taps, 2);
    assert_int_equal(back.target_layer_ids[0], 1);
    assert_int_equal(back.target_layer_ids[1], 5);
    assert_int_equal(back.mask_token_id, -1);
    assert_int_equal(back.block_size, 8);
    free(loaded);
    df_drafter_layout_free(&lb);

    /* Sharded: two files and an index, no model.safetensors. */
    df_test_write_file(config, OTHER_CONFIG);
    assert_int_equal(unlink(model), 0);
    int split = l.n_params / 2;
    DfDrafterLayout first = l, second = l;
    first.n_params = split;
    second.params = l.params + split;
    second.n_params = l.n_params - split;
    char *shard1 = path_in(dir, "model-00001-of-00002.safetensors");
    char *shard2 = path_in(dir, "model-00002-of-00002.safetensors");
    write_tensors(shard1, &first, params, NULL, NULL, NULL, 0, 0);
    write_tensors(shard2, &second, params, NULL, NULL, "model.embed_tokens.weight", 300, 64);
    cJSON *index = cJSON_CreateObject(), *map = cJSON_AddObjectToObject(index, "weight_map");
    for (int i = 0; i < l.n_params; i++)
        cJSON_AddStringToObject(map, l.params[i].name, i < split ? "model-00001-of-00002.safetensors"
                                                                 : "model-00002-of-00002.safetensors");
    cJSON_AddStringToObject(map, "model.embed_tokens.weight", "model-00002-of-00002.safetensors");
    char *index_text = cJSON_Print(index), *index_path = path_in(dir, "model.safetensors.index.json");
    df_test_write_file(index_path, index_text);
    if (df_drafter_load(dir, &back, &lb, &loaded, &err) != 0) fail_msg("%s", err.msg);
    assert_memory_equal(loaded, params, l.total * sizeof *params);
    free(loaded);
    df_drafter_layout_free(&lb);

    cJSON_Delete(index);
    free(index_text);
    free(index_path);
    free(shard1);
    free(shard2);
    free(config);
    free(model);
    free(params);
    df_drafter_layout_free(&l);
    df_test_rmtree(dir);
    free(dir);
}

/* --------------------------------------------------------------- malformed */

/* df_drafter_load must fail with a message holding every needle. */
static void expect_load_error(const char *dir, const char *needle1, const char *needle2, const char *needle3) {
    DfDrafterConfig c;
    DfDrafterLayout l;
    float *params = (float *)1;
    DfError err = {{0}};
    assert_int_equal(df_drafter_load(dir, &c, &l, &params, &err), -1);
    assert_null(params);
    assert_contains(err.msg, needle1);
    if (needle2) assert_contains(err.msg, needle2);
    if (needle3) assert_contains(err.msg, needle3);
}

/* config.json of dir with one top-level field removed or replaced by raw JSON. */
static void edit_config(const char *config_path, const char *original, const char *key, const char *raw) {
    cJSON *root = cJSON_Parse(original);
    cJSON_DeleteItemFromObjectCaseSensitive(root, key);
    if (raw) cJSON_AddRawToObject(root, key, raw);
    char *text = cJSON_Print(root);
    df_test_write_file(config_path, text);
    free(text);
    cJSON_Delete(root);
}

/* A transformers-written Qwen3 config with sliding layers (as z-lab's
 * Qwen3.5/3.6 drafters carry them): the window and the layer types load;
 * use_sliding_window false leaves every layer full, as transformers does. */
static void test_other_trainer_sliding(void **state) {
    (void)state;
    DfDrafterConfig c;
    small_config(&c);
    DfDrafterLayout l;
    df_drafter_layout_build(&l, &c);
    float *params = random_params(&l, 4);
    char *dir = df_test_tmpdir("drafter-other-sliding");
    char *config = path_in(dir, "config.json"), *model = path_in(dir, "model.safetensors");
    write_tensors(model, &l, params, NULL, NULL, NULL, 0, 0);
    static const char *head =
        "{\"architectures\": [\"DFlashDraftModel\"], \"model_type\": \"qwen3\", \"num_target_layers\": 8,"
        " \"dflash_config\": {\"mask_token_id\": 290, \"target_layer_ids\": [1, 5]}, \"block_size\": 16,"
        " \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
        " \"num_key_value_heads\": 2, \"head_dim\": 16, \"vocab_size\": 300, \"rms_norm_eps\": 1e-06,"
        " \"rope_theta\": 1000000, \"max_position_embeddings\": 512, \"max_window_layers\": 2, ";
    const struct {
        const char *tail;
        int window, sliding0, sliding1;
        const char *error; /* NULL: loads */
    } cases[] = {
        {"\"layer_types\": [\"sliding_attention\", \"full_attention\"], \"use_sliding_window\": true, "
         "\"sliding_window\": 2048}", 2048, 1, 0, NULL},
        {"\"layer_types\": [\"sliding_attention\", \"sliding_attention\"], \"sliding_window\": 7}", 7, 1, 1, NULL},
        {"\"layer_types\": [\"sliding_attention\", \"full_attention\"], \"use_sliding_window\": false, "
         "\"sliding_window\": 2048}", 0, 0, 0, NULL},
        {"\"layer_types\": [\"sliding_attention\", \"full_attention\"], \"sliding_window\": null}", 0, 0, 0, NULL},
        {"\"layer_types\": [\"full_attention\", \"full_attention\"], \"sliding_window\": 4096}", 0, 0, 0, NULL},
        {"\"layer_types\": [\"sliding_attention\", \"chunked_attention\"], \"sliding_window\": 8}", 0, 0, 0,
         "layer_types[1]"},
        {"\"layer_types\": [\"sliding_attention\"], \"sliding_window\": 8}", 0, 0, 0, "lists 1 layers"},
        {"\"layer_types\": [\"sliding_attention\", \"full_attention\"], \"sliding_window\": 0}", 0, 0, 0,
         "sliding_window"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[2048];
        snprintf(text, sizeof text, "%s%s", head, cases[i].tail); /* each tail closes the object */
        df_test_write_file(config, text);
        DfDrafterConfig back;
        DfDrafterLayout lb;
        float *loaded = NULL;
        DfError err = {{0}};
        int rc = df_drafter_load(dir, &back, &lb, &loaded, &err);
        if (cases[i].error) {
            assert_int_equal(rc, -1);
            if (!strstr(err.msg, cases[i].error)) fail_msg("case %zu: '%s' lacks '%s'", i, err.msg, cases[i].error);
            continue;
        }
        if (rc) fail_msg("case %zu: %s", i, err.msg);
        assert_int_equal(back.sliding_window, cases[i].window);
        assert_int_equal(df_drafter_layer_window(&back, 0), cases[i].sliding0 ? cases[i].window : 0);
        assert_int_equal(df_drafter_layer_window(&back, 1), cases[i].sliding1 ? cases[i].window : 0);
        assert_memory_equal(loaded, params, l.total * sizeof *params);
        free(loaded);
        df_drafter_layout_free(&lb);
    }
    free(params);
    df_drafter_layout_free(&l);
    df_test_rmtree(dir);
    free(config), free(model), free(dir);
}

static void test_malformed(void **state) {
    (void)state;
    DfDrafterConfig c;
    small_config(&c);
    DfDrafterLayout l;
    df_drafter_layout_build(&l, &c);
    float *params = random_params(&l, 4);
    char *tmp = df_test_tmpdir("drafter-bad"), *dir = path_in(tmp, "d");
    DfError err = {{0}};
    if (df_drafter_export(dir, &c, &l, params, &err) != 0) fail_msg("%s", err.msg);
    char *config = path_in(dir, "config.json"), *model = path_in(dir, "model.safetensors");
    char *good_config = read_file(config);

    write_tensors(model, &l, params, "layers.1.mlp.up_proj.weight", NULL, NULL, 0, 0);
    expect_load_error(dir, model, "'layers.1.mlp.up_proj.weight'", NULL);

    write_tensors(model, &l, params, NULL, "hidden_norm.weight", NULL, 0, 0);
    expect_load_error(dir, model, "'hidden_norm.weight'", "expected [64], file has [65]");

    write_tensors(model, &l, params, NULL, "layers.0.self_attn.k_proj.weight", NULL, 0, 0);
    expect_load_error(dir, "'layers.0.self_attn.k_proj.weight'", "expected [32, 64]", "file has [33, 64]");

    write_tensors(model, &l, params, NULL, NULL, "layers.2.self_attn.q_proj.weight", 4, 0);
    expect_load_error(dir, model, "unknown tensor 'layers.2.self_attn.q_proj.weight'", NULL);

    write_tensors(model, &l, params, NULL, NULL, NULL, 0, 0); /* sound tensors again */
    edit_config(config, good_config, "hidden_size", NULL);
    expect_load_error(dir, config, "'hidden_size'", "missing");
    edit_config(config, good_config, "num_target_layers", NULL);
    expect_load_error(dir, config, "'num_target_layers'", "missing");
    edit_config(config, good_config, "num_hidden_layers", "\"two\"");
    expect_load_error(dir, config, "'num_hidden_layers'", "integer");
    edit_config(config, good_config, "rope_theta", NULL);
    expect_load_error(dir, config, "rope_theta", "missing");
    edit_config(config, good_config, "architectures", "[\"Qwen3ForCausalLM\"]");
    char *edited = read_file(config);
    cJSON *root = cJSON_Parse(edited);
    free(edited);
    cJSON_DeleteItemFromObjectCaseSensitive(root, "dflash_config");
    char *text = cJSON_Print(root);
    df_test_write_file(config, text);
    expect_load_error(dir, config, "not a DFlash drafter", NULL);
    free(text);
    cJSON_Delete(root);

    df_test_write_file(config, "{\"architectures\": [\"DFlashDraftModel\"], \"hidden_size\": 64,");
    expect_load_error(dir, config, "not valid JSON", NULL);
    assert_int_equal(unlink(config), 0);
    expect_load_error(dir, config, NULL, NULL);

    free(good_config);
    free(config);
    free(model);
    free(params);
    df_drafter_layout_free(&l);
    df_test_rmtree(tmp);
    free(dir);
    free(tmp);
}

/* ------------------------------------------------------- replace / failure */

static void expect_dir_holds(const char *dir, const DfDrafterLayout *l, const float *params) {
    DfDrafterConfig c;
    DfDrafterLayout lb;
    float *loaded = NULL;
    DfError err = {{0}};
    if (df_drafter_load(dir, &c, &lb, &loaded, &err) != 0) fail_msg("%s", err.msg);
    for (size_t i = 0; i < l->total; i++)
        if (loaded[i] != ref_round_bf16(params[i])) fail_msg("param %zu: %g vs %g", i, loaded[i], params[i]);
    free(loaded);
    df_drafter_layout_free(&lb);
}

static void test_export_replaces_whole(void **state) {
    (void)state;
    DfDrafterConfig c;
    small_config(&c);
    DfDrafterLayout l;
    df_drafter_layout_build(&l, &c);
    float *a = random_params(&l, 5), *b = random_params(&l, 6);
    char *tmp = df_test_tmpdir("drafter-replace"), *dir = path_in(tmp, "d");
    DfError err = {{0}};
    if (df_drafter_export(dir, &c, &l, a, &err) != 0) fail_msg("%s", err.msg);
    char *stale = path_in(dir, "notes.txt");
    df_test_write_file(stale, "from before");
    if (df_drafter_export(dir, &c, &l, b, &err) != 0) fail_msg("%s", err.msg);
    expect_dir_holds(dir, &l, b);
    assert_false(df_test_file_exists(stale)); /* replaced whole, not merged */
    char names[512];
    list_dir(tmp, names, sizeof names);
    assert_string_equal(names, "d ");
    /* A trailing slash names the same directory (siblings stay outside it). */
    char slashed[4200];
    snprintf(slashed, sizeof slashed, "%s/", dir);
    if (df_drafter_export(slashed, &c, &l, a, &err) != 0) fail_msg("%s", err.msg);
    expect_dir_holds(dir, &l, a);
    list_dir(tmp, names, sizeof names);
    assert_string_equal(names, "d ");
    list_dir(dir, names, sizeof names);
    assert_export_files(names);
    snprintf(slashed, sizeof slashed, "%s/.", dir);
    assert_int_equal(df_drafter_export(slashed, &c, &l, a, &err), -1);
    free(stale);
    free(a);
    free(b);
    df_drafter_layout_free(&l);
    df_test_rmtree(tmp);
    free(dir);
    free(tmp);
}

static void test_failed_export_keeps_old(void **state) {
    (void)state;
    DfDrafterConfig c;
    small_config(&c);
    DfDrafterLayout l;
    df_drafter_layout_build(&l, &c);
    float *a = random_params(&l, 7), *b = random_params(&l, 8);
    char *tmp = df_test_tmpdir("drafter-fail"), *dir = path_in(tmp, "d");
    DfError err = {{0}};
    if (df_drafter_export(dir, &c, &l, a, &err) != 0) fail_msg("%s", err.msg);
    char names[512];

    /* 1. The temporary path is taken by a file that is not ours. */
    char blocker[4200];
    snprintf(blocker, sizeof blocker, "%s.tmp-%ld", dir, (long)getpid());
    df_test_write_file(blocker, "not a directory");
    assert_int_equal(df_drafter_export(dir, &c, &l, b, &err), -1);
    assert_contains(err.msg, blocker);
    expect_dir_holds(dir, &l, a);
    assert_int_equal(unlink(blocker), 0);

    /* 2. A write fails half way (file size limit: config.json fits, the weights do not). */
    struct rlimit old_limit, small;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
    small = old_limit;
    small.rlim_cur = 16384;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    int rc = df_drafter_export(dir, &c, &l, b, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
    signal(SIGXFSZ, old_handler);
    assert_int_equal(rc, -1);
    assert_contains(err.msg, "model.safetensors");
    expect_dir_holds(dir, &l, a);
    list_dir(tmp, names, sizeof names);
    assert_string_equal(names, "d "); /* the temporary directory is gone */

    /* 3. An invalid config is refused before anything is written. */
    DfDrafterConfig bad = c;
    bad.mask_token_id = -1;
    assert_int_equal(df_drafter_export(dir, &bad, &l, b, &err), -1);
    assert_contains(err.msg, "mask");
    bad = c;
    bad.num_layers = 3; /* the layout no longer matches */
    assert_int_equal(df_drafter_export(dir, &bad, &l, b, &err), -1);
    assert_contains(err.msg, "layout");
    expect_dir_holds(dir, &l, a);

    /* 4. A read-only parent (only meaningful when not root). */
    if (geteuid() != 0) {
        char *ro = path_in(tmp, "ro"), *inner = path_in(ro, "d");
        assert_int_equal(mkdir(ro, 0755), 0);
        if (df_drafter_export(inner, &c, &l, a, &err) != 0) fail_msg("%s", err.msg);
        assert_int_equal(chmod(ro, 0555), 0);
        assert_int_equal(df_drafter_export(inner, &c, &l, b, &err), -1);
        assert_int_equal(chmod(ro, 0755), 0);
        expect_dir_holds(inner, &l, a);
        free(ro);
        free(inner);
    }
    list_dir(tmp, names, sizeof names);
    assert_true(strstr(names, ".tmp-") == NULL && strstr(names, ".old-") == NULL);
    free(a);
    free(b);
    df_drafter_layout_free(&l);
    df_test_rmtree(tmp);
    free(dir);
    free(tmp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3_8b_config),      cmocka_unit_test(test_llama3_rope_scaling),
        cmocka_unit_test(test_export_read_back),     cmocka_unit_test(test_export_load_round_trip),
        cmocka_unit_test(test_sliding_window_round_trip), cmocka_unit_test(test_sliding_layer_patterns),
        cmocka_unit_test(test_other_trainer_sliding),
        cmocka_unit_test(test_other_trainer_dir),    cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_export_replaces_whole), cmocka_unit_test(test_failed_export_keeps_old),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
