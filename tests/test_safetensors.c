/* safetensors: the real targets load (single bf16 file, sharded fp16 with an
 * index) with the names and shapes their config.json implies; values match the
 * raw bytes decoded independently here; write/read round trips are exact; and
 * every case of the malformed catalogue (tests/malformed/safetensors, made by
 * tests/ref/make_malformed.py) fails with -1 and a message naming the file,
 * the tensor and the fault. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "target/model_config.h"
#include "formats/safetensors.h"
#include "test_util.h"

/* ------------------------------------------------ independent decoding */

/* Data offsets of `name` read with cJSON straight from the file (not through
 * the library), so that value checks do not trust the code under test. */
static unsigned char *raw_tensor_bytes(const char *path, const char *name, size_t *nbytes) {
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    unsigned char len8[8];
    assert_int_equal(fread(len8, 1, 8, fp), 8);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
    char *header = calloc(1, hlen + 1);
    assert_int_equal(fread(header, 1, hlen, fp), hlen);
    cJSON *root = cJSON_Parse(header);
    assert_non_null(root);
    cJSON *offs = cJSON_GetObjectItem(cJSON_GetObjectItem(root, name), "data_offsets");
    assert_non_null(offs);
    long begin = (long)cJSON_GetArrayItem(offs, 0)->valuedouble, end = (long)cJSON_GetArrayItem(offs, 1)->valuedouble;
    *nbytes = (size_t)(end - begin);
    unsigned char *buf = malloc(*nbytes);
    assert_int_equal(fseek(fp, (long)(8 + hlen) + begin, SEEK_SET), 0);
    assert_int_equal(fread(buf, 1, *nbytes, fp), *nbytes);
    fclose(fp);
    cJSON_Delete(root);
    free(header);
    return buf;
}

/* bf16 is the top half of an fp32. */
static float ref_bf16(const unsigned char *p) {
    uint32_t u = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 24;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* IEEE half by its definition (finite values only; the fixtures have no inf). */
static float ref_f16(const unsigned char *p) {
    unsigned h = p[0] | (unsigned)p[1] << 8;
    int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
    double v = exp == 0 ? ldexp(man, -24) : ldexp(1024 + man, exp - 25);
    return (float)(sign ? -v : v);
}

/* --------------------------------------------- expected target tensors */

typedef struct Expected {
    char name[96];
    int ndim;
    int64_t shape[2];
} Expected;

static int expect(Expected *e, int n, const char *name, int ndim, int64_t d0, int64_t d1) {
    snprintf(e[n].name, sizeof e[n].name, "%s", name);
    e[n].ndim = ndim;
    e[n].shape[0] = d0;
    e[n].shape[1] = d1;
    return n + 1;
}

/* Names and shapes of a Qwen3 / Llama checkpoint as transformers writes it. */
static int expected_tensors(const DfModelConfig *c, Expected *e) {
    int64_t H = c->hidden_size, I = c->intermediate_size, V = c->vocab_size, hd = c->head_dim;
    int64_t q = c->num_heads * hd, kv = c->num_kv_heads * hd;
    int n = 0;
    char name[96];
    n = expect(e, n, "model.embed_tokens.weight", 2, V, H);
    n = expect(e, n, "model.norm.weight", 1, H, 0);
    if (!c->tie_word_embeddings) n = expect(e, n, "lm_head.weight", 2, V, H);
    for (int l = 0; l < c->num_layers; l++) {
        const struct {
            const char *suffix;
            int ndim;
            int64_t d0, d1;
        } layer[] = {
            {"self_attn.q_proj.weight", 2, q, H},       {"self_attn.k_proj.weight", 2, kv, H},
            {"self_attn.v_proj.weight", 2, kv, H},      {"self_attn.o_proj.weight", 2, H, q},
            {"mlp.gate_proj.weight", 2, I, H},          {"mlp.up_proj.weight", 2, I, H},
            {"mlp.down_proj.weight", 2, H, I},          {"input_layernorm.weight", 1, H, 0},
            {"post_attention_layernorm.weight", 1, H, 0}, {"self_attn.q_norm.weight", 1, hd, 0},
            {"self_attn.k_norm.weight", 1, hd, 0},
        };
        int count = c->has_qk_norm ? 11 : 9;
        for (int k = 0; k < count; k++) {
            snprintf(name, sizeof name, "model.layers.%d.%s", l, layer[k].suffix);
            n = expect(e, n, name, layer[k].ndim, layer[k].d0, layer[k].d1);
        }
    }
    return n;
}

static void check_target(const char *model_dir, DfDtype dtype, int n_files) {
    DfModelConfig cfg;
    DfError err = {0};
    assert_int_equal(df_model_config_load(&cfg, model_dir, &err), 0);
    DfSafetensors st;
    if (df_safetensors_open(&st, model_dir, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(st.n_files, n_files);
    Expected *e = calloc(16 + 11 * (size_t)cfg.num_layers, sizeof *e);
    int n = expected_tensors(&cfg, e);
    assert_int_equal(st.n_tensors, n);
    for (int i = 0; i < n; i++) {
        const DfTensorInfo *t = df_safetensors_find(&st, e[i].name);
        if (!t) fail_msg("%s: missing %s", model_dir, e[i].name);
        assert_int_equal(t->dtype, dtype);
        assert_int_equal(t->ndim, e[i].ndim);
        for (int d = 0; d < t->ndim; d++) assert_int_equal(t->shape[d], e[i].shape[d]);
        assert_int_equal(t->nbytes, 2 * (size_t)e[i].shape[0] * (size_t)(e[i].ndim == 2 ? e[i].shape[1] : 1));
    }
    assert_null(df_safetensors_find(&st, "model.layers.0.nonexistent"));
    free(e);
    df_safetensors_close(&st);
}

static void test_coder_tiny_names_and_shapes(void **state) {
    (void)state;
    check_target(df_test_path("assets/coder-tiny"), DF_DTYPE_BF16, 1);
}

static void test_llama3_sharded_names_and_shapes(void **state) {
    (void)state;
    check_target(df_test_path("tests/fixtures/target/llama3-random"), DF_DTYPE_F16, 4);
    /* The index itself is also accepted as the path. */
    DfSafetensors st;
    DfError err = {0};
    assert_int_equal(
        df_safetensors_open(&st, df_test_path("tests/fixtures/target/llama3-random/model.safetensors.index.json"), &err),
        0);
    assert_non_null(df_safetensors_find(&st, "lm_head.weight"));
    df_safetensors_close(&st);
}

/* load_f32 against the raw bytes decoded independently. */
static void check_values(const char *open_path, const char *file, const char *name, DfDtype dtype) {
    DfSafetensors st;
    DfError err = {0};
    assert_int_equal(df_safetensors_open(&st, open_path, &err), 0);
    const DfTensorInfo *t = df_safetensors_find(&st, name);
    assert_non_null(t);
    assert_int_equal(t->dtype, dtype);
    float *v = df_safetensors_load_f32(&st, name, t->ndim, t->shape, &err);
    if (!v) fail_msg("%s", err.msg);
    size_t nbytes;
    unsigned char *raw = raw_tensor_bytes(file, name, &nbytes);
    assert_int_equal(nbytes, t->nbytes);
    int nonzero = 0;
    for (size_t i = 0; i < nbytes / 2; i++) {
        float want = dtype == DF_DTYPE_BF16 ? ref_bf16(raw + 2 * i) : ref_f16(raw + 2 * i);
        if (memcmp(&want, &v[i], 4) != 0) fail_msg("%s[%zu]: %g != %g", name, i, v[i], want);
        nonzero += want != 0;
    }
    assert_true(nonzero > 0);
    free(raw);
    free(v);
    df_safetensors_close(&st);
}

static void test_coder_tiny_bf16_values(void **state) {
    (void)state;
    const char *file = df_test_path("assets/coder-tiny/model.safetensors");
    check_values(file, file, "model.layers.0.self_attn.q_norm.weight", DF_DTYPE_BF16);
    /* Large enough for the OpenMP path. */
    check_values(file, file, "model.embed_tokens.weight", DF_DTYPE_BF16);
}

static void test_llama3_f16_values(void **state) {
    (void)state;
    const char *dir = df_test_path("tests/fixtures/target/llama3-random");
    char file[4096];
    snprintf(file, sizeof file, "%s/model-00004-of-00004.safetensors", dir);
    check_values(dir, file, "lm_head.weight", DF_DTYPE_F16);
}

/* A tensor present in a shard but absent from the index still loads. */
static void test_tensor_missing_from_index_is_loadable(void **state) {
    (void)state;
    char *tmp = df_test_tmpdir("st-index");
    char cmd[8192], index[4200];
    snprintf(cmd, sizeof cmd, "cp %s/*.safetensors '%s'", df_test_path("tests/fixtures/target/llama3-random"), tmp);
    assert_int_equal(df_test_run(cmd, NULL, 0), 0);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", tmp);
    df_test_write_file(index, "{\"weight_map\": {\"lm_head.weight\": \"model-00004-of-00004.safetensors\","
                              " \"model.norm.weight\": \"model-00004-of-00004.safetensors\"}}");
    DfSafetensors st;
    DfError err = {0};
    if (df_safetensors_open(&st, tmp, &err) != 0) fail_msg("%s", err.msg);
    /* Only shard 4 is listed, so only it is opened. */
    assert_int_equal(st.n_files, 1);
    const DfTensorInfo *t = df_safetensors_find(&st, "lm_head.weight");
    assert_non_null(t);
    assert_non_null(strstr(t->file, "model-00004-of-00004.safetensors"));
    df_safetensors_close(&st);
    df_test_rmtree(tmp);
    free(tmp);
}

/* ------------------------------------------------------- round trip */

static void test_write_read_round_trip(void **state) {
    (void)state;
    enum { A = 300, B = 257, C = 7 };
    float *f32 = malloc(sizeof(float) * A * B);
    df_test_fill_random(f32, (size_t)A * B, 1234, 3.0f);
    float *tmpf = malloc(sizeof(float) * C * B);
    df_test_fill_random(tmpf, (size_t)C * B, 99, 1.0f);
    uint16_t *bf16 = malloc(2 * (size_t)C * B);
    for (size_t i = 0; i < (size_t)C * B; i++) {
        uint32_t u;
        memcpy(&u, &tmpf[i], 4);
        bf16[i] = (uint16_t)(u >> 16); /* truncation: any bit pattern must survive */
    }
    int32_t ids[5] = {1, -2, 3, 2147483647, 0};
    DfTensorOut out[] = {
        {"z.weight", DF_DTYPE_F32, 2, {A, B}, f32},
        {"a \"quoted\" name", DF_DTYPE_BF16, 2, {C, B}, bf16},
        {"ids", DF_DTYPE_I32, 1, {5}, ids},
        {"scalar_empty", DF_DTYPE_F32, 1, {0}, NULL},
    };
    char *tmp = df_test_tmpdir("st-write");
    char path[4200];
    snprintf(path, sizeof path, "%s/out.safetensors", tmp);
    DfError err = {0};
    if (df_safetensors_write(path, out, 4, "{\"format\": \"pt\"}", &err) != 0) fail_msg("%s", err.msg);

    /* The header is padded so that the data section starts 8-byte aligned. */
    FILE *fp = fopen(path, "rb");
    unsigned char len8[8];
    assert_int_equal(fread(len8, 1, 8, fp), 8);
    fclose(fp);
    assert_int_equal(len8[0] % 8, 0);

    DfSafetensors st;
    if (df_safetensors_open(&st, path, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(st.n_tensors, 4);
    const DfTensorInfo *t = df_safetensors_find(&st, "z.weight");
    assert_non_null(t);
    assert_memory_equal(t->data, f32, sizeof(float) * A * B);
    float *back = df_safetensors_load_f32(&st, "z.weight", 2, (int64_t[]){A, B}, &err);
    assert_non_null(back);
    assert_memory_equal(back, f32, sizeof(float) * A * B);
    free(back);
    t = df_safetensors_find(&st, "a \"quoted\" name");
    assert_non_null(t);
    assert_int_equal(t->dtype, DF_DTYPE_BF16);
    assert_memory_equal(t->data, bf16, 2 * (size_t)C * B);
    back = df_safetensors_load_f32(&st, "a \"quoted\" name", 2, (int64_t[]){C, B}, &err);
    assert_non_null(back);
    for (size_t i = 0; i < (size_t)C * B; i++) assert_true(back[i] == ref_bf16((unsigned char *)&bf16[i]));
    free(back);
    t = df_safetensors_find(&st, "ids");
    assert_memory_equal(t->data, ids, sizeof ids);
    assert_int_equal(df_safetensors_find(&st, "scalar_empty")->nbytes, 0);
    df_safetensors_close(&st);

    /* A refused write leaves nothing behind. */
    char bad[4200];
    snprintf(bad, sizeof bad, "%s/bad.safetensors", tmp);
    DfTensorOut dup[] = {{"x", DF_DTYPE_I32, 1, {5}, ids}, {"x", DF_DTYPE_I32, 1, {5}, ids}};
    assert_int_equal(df_safetensors_write(bad, dup, 2, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "'x' given twice"));
    assert_false(df_test_file_exists(bad));
    char cmd[4400], listing[256];
    snprintf(cmd, sizeof cmd, "ls -A '%s'", tmp);
    assert_int_equal(df_test_run(cmd, listing, sizeof listing), 0);
    assert_string_equal(listing, "out.safetensors\n");
    df_test_rmtree(tmp);
    free(tmp);
    free(f32);
    free(tmpf);
    free(bf16);
}

/* ------------------------------------------------- malformed catalogue */

typedef struct MalformedCase {
    const char *path;   /* under tests/malformed/safetensors */
    const char *named;  /* the file the message must name */
    const char *fault;  /* what it must say */
    const char *tensor; /* the tensor it must name, or NULL */
} MalformedCase;

static const MalformedCase CASES[] = {
    {"truncated.safetensors", "truncated.safetensors", "too short for the 8-byte header length", NULL},
    {"header_past_end.safetensors", "header_past_end.safetensors", "header length 1000 past the end of the file (15 bytes)", NULL},
    {"header_not_json.safetensors", "header_not_json.safetensors", "header is not valid JSON", NULL},
    {"trailing_garbage.safetensors", "trailing_garbage.safetensors", "header is not valid JSON", NULL},
    {"header_not_object.safetensors", "header_not_object.safetensors", "header is not a JSON object", NULL},
    {"unknown_dtype.safetensors", "unknown_dtype.safetensors", "unknown dtype 'Q4'", "'w'"},
    {"negative_dim.safetensors", "negative_dim.safetensors", "negative dim -2", "'w'"},
    {"fractional_dim.safetensors", "fractional_dim.safetensors", "dim 0 is not a non-negative integer", "'w'"},
    {"too_many_dims.safetensors", "too_many_dims.safetensors", "9 dims, at most 8", "'w'"},
    {"offsets_past_end.safetensors", "offsets_past_end.safetensors",
     "data_offsets [0, 64] past the end of the data (16 bytes)", "'model.layers.3.mlp.up_proj.weight'"},
    {"begin_after_end.safetensors", "begin_after_end.safetensors", "[8, 4] begin after end", "'w'"},
    {"offsets_vs_shape.safetensors", "offsets_vs_shape.safetensors", "hold 8 bytes, but shape [2, 2] of F32 needs 16",
     "'w'"},
    {"shape_overflow.safetensors", "shape_overflow.safetensors", "overflows", "'w'"},
    {"bad_offsets_type.safetensors", "bad_offsets_type.safetensors", "\"data_offsets\" must be [begin, end]", "'w'"},
    {"overlap.safetensors", "overlap.safetensors", "overlap", "'a' [0, 8] and 'b' [4, 12]"},
    {"overlap_around_empty.safetensors", "overlap_around_empty.safetensors", "overlap", "'a' [0, 8] and 'b' [6, 14]"},
    {"duplicate.safetensors", "duplicate.safetensors", "appears twice in the header", "'w'"},
    {"missing_shard", "model.safetensors.index.json", "model-00002-of-00002.safetensors: cannot open", "'b'"},
    {"index_tensor_missing", "model.safetensors.index.json",
     "model-00001-of-00001.safetensors, which does not contain it", "'model.norm.weight'"},
    {"shard_escapes", "model.safetensors.index.json", "leaves the index's directory", "'a'"},
    {".", "tests/malformed/safetensors", "neither model.safetensors nor model.safetensors.index.json exists", NULL},
    {"no_such_file.safetensors", "no_such_file.safetensors", "cannot open", NULL},
};

static void test_malformed_catalogue(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "tests/malformed/safetensors/%s", CASES[i].path);
        DfSafetensors st;
        DfError err = {0};
        int rc = df_safetensors_open(&st, df_test_path(rel), &err);
        if (rc != -1) fail_msg("%s: accepted", rel);
        if (!strstr(err.msg, CASES[i].named) || !strstr(err.msg, CASES[i].fault) ||
            (CASES[i].tensor && !strstr(err.msg, CASES[i].tensor)))
            fail_msg("%s: unexpected message: %s", rel, err.msg);
        /* A failed open leaves an empty, closable struct. */
        assert_int_equal(st.n_tensors, 0);
        assert_int_equal(st.n_files, 0);
        df_safetensors_close(&st);
    }
}

static void test_load_f32_errors(void **state) {
    (void)state;
    DfSafetensors st;
    DfError err = {0};
    assert_int_equal(df_safetensors_open(&st, df_test_path("assets/coder-tiny"), &err), 0);
    float *v = df_safetensors_load_f32(&st, "model.layers.0.mlp.up_proj.weight", 2, (int64_t[]){256, 512}, &err);
    assert_null(v);
    assert_non_null(strstr(err.msg, "model.safetensors: tensor 'model.layers.0.mlp.up_proj.weight': expected [256, 512], file has [512, 256]"));
    v = df_safetensors_load_f32(&st, "model.norm.weight", 2, (int64_t[]){256, 1}, &err);
    assert_null(v);
    assert_non_null(strstr(err.msg, "expected [256, 1], file has [256]"));
    v = df_safetensors_load_f32(&st, "lm_head.weight", 2, (int64_t[]){8192, 256}, &err);
    assert_null(v);
    assert_non_null(strstr(err.msg, "model.safetensors: no tensor 'lm_head.weight'"));
    df_safetensors_close(&st);

    /* The parity fixture holds int32 token ids: not a float tensor. */
    assert_int_equal(df_safetensors_open(&st, df_test_path("tests/fixtures/target/coder-tiny.safetensors"), &err), 0);
    const DfTensorInfo *t = df_safetensors_find(&st, "input_ids");
    assert_non_null(t);
    v = df_safetensors_load_f32(&st, "input_ids", t->ndim, t->shape, &err);
    assert_null(v);
    assert_non_null(strstr(err.msg, "coder-tiny.safetensors: tensor 'input_ids': dtype I32 is not a float type"));
    df_safetensors_close(&st);

    /* Sharded: the message names the shard that holds the tensor. */
    assert_int_equal(df_safetensors_open(&st, df_test_path("tests/fixtures/target/llama3-random"), &err), 0);
    v = df_safetensors_load_f32(&st, "lm_head.weight", 2, (int64_t[]){64, 320}, &err);
    assert_null(v);
    assert_non_null(strstr(err.msg, "model-00004-of-00004.safetensors: tensor 'lm_head.weight': expected [64, 320], file has [320, 64]"));
    df_safetensors_close(&st);
}

/* Random byte corruptions of a valid file: each open either fails cleanly or
 * yields tensors that lie inside their mapping (run under ASan to see reads). */
static void test_corrupted_bytes_never_escape(void **state) {
    (void)state;
    float w[6] = {1, 2, 3, 4, 5, 6};
    uint16_t h[4] = {0x3f80, 0x4000, 0x4040, 0x4080};
    DfTensorOut out[] = {{"model.w", DF_DTYPE_F32, 2, {2, 3}, w}, {"model.h", DF_DTYPE_BF16, 1, {4}, h}};
    char *tmp = df_test_tmpdir("st-fuzz");
    char path[4200], bad[4200];
    snprintf(path, sizeof path, "%s/good.safetensors", tmp);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", tmp);
    DfError err = {0};
    assert_int_equal(df_safetensors_write(path, out, 2, NULL, &err), 0);
    FILE *fp = fopen(path, "rb");
    unsigned char good[4096];
    size_t size = fread(good, 1, sizeof good, fp);
    fclose(fp);
    const unsigned char printable[] = "0123456789-.,:[]{}\" eE";
    uint64_t rng = 42;
    int opened = 0;
    for (int iter = 0; iter < 600; iter++) {
        unsigned char buf[4096];
        memcpy(buf, good, size);
        size_t len = size;
        for (int k = 0; k < 1 + iter % 3; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(rng >> 33) % size;
            buf[at] = (rng & 1) ? printable[(rng >> 8) % (sizeof printable - 1)] : (unsigned char)(rng >> 16);
        }
        if (iter % 7 == 0) len = (size_t)(rng >> 40) % size; /* truncation */
        fp = fopen(bad, "wb");
        fwrite(buf, 1, len, fp);
        fclose(fp);
        DfSafetensors st;
        if (df_safetensors_open(&st, bad, &err) != 0) {
            assert_true(strstr(err.msg, "bad.safetensors") != NULL);
            continue;
        }
        opened++;
        const unsigned char *lo = st.files[0].data, *hi = lo + st.files[0].size;
        for (int i = 0; i < st.n_tensors; i++) {
            const unsigned char *d = st.tensors[i].data;
            assert_true(st.tensors[i].nbytes == 0 || (d >= lo && d + st.tensors[i].nbytes <= hi));
        }
        df_safetensors_close(&st);
    }
    assert_true(opened > 0); /* some corruptions land in the data and still load */
    df_test_rmtree(tmp);
    free(tmp);
}

/* dflash inspect: its parameter count and byte total equal the metadata that
 * transformers wrote into the index. */
static void test_inspect_command(void **state) {
    (void)state;
    const char *dir = df_test_path("tests/fixtures/target/llama3-random");
    char index_path[4200];
    snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json", dir);
    FILE *fp = fopen(index_path, "rb");
    assert_non_null(fp);
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[n] = '\0';
    cJSON *root = cJSON_Parse(text);
    cJSON *meta = cJSON_GetObjectItem(root, "metadata");
    long long want_params = (long long)cJSON_GetObjectItem(meta, "total_parameters")->valuedouble;
    long long want_bytes = (long long)cJSON_GetObjectItem(meta, "total_size")->valuedouble;
    cJSON_Delete(root);

    char cmd[8400], out[8192], line[128];
    snprintf(cmd, sizeof cmd, "%s inspect --summary %s", df_test_path("dflash"), dir);
    assert_int_equal(df_test_run(cmd, out, sizeof out), 0);
    snprintf(line, sizeof line, "parameters: %lld ", want_params);
    if (!strstr(out, line)) fail_msg("no '%s' in:\n%s", line, out);
    snprintf(line, sizeof line, "data: %lld bytes", want_bytes);
    if (!strstr(out, line)) fail_msg("no '%s' in:\n%s", line, out);
    assert_non_null(strstr(out, "config: LlamaForCausalLM"));
    assert_non_null(strstr(out, "llama3 scaling: factor 8"));

    snprintf(cmd, sizeof cmd, "%s inspect %s", df_test_path("dflash"),
             df_test_path("tests/malformed/safetensors/overlap.safetensors"));
    assert_int_equal(df_test_run(cmd, out, sizeof out), 1);
    assert_non_null(strstr(out, "overlap.safetensors: tensors 'a' [0, 8] and 'b' [4, 12] overlap"));
}

static void test_dtype_table(void **state) {
    (void)state;
    assert_string_equal(df_dtype_name(DF_DTYPE_BF16), "BF16");
    assert_string_equal(df_dtype_name(DF_DTYPE_BOOL), "BOOL");
    assert_int_equal(df_dtype_size(DF_DTYPE_F64), 8);
    assert_int_equal(df_dtype_size(DF_DTYPE_F16), 2);
    assert_int_equal(df_dtype_size(DF_DTYPE_U8), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coder_tiny_names_and_shapes),
        cmocka_unit_test(test_llama3_sharded_names_and_shapes),
        cmocka_unit_test(test_coder_tiny_bf16_values),
        cmocka_unit_test(test_llama3_f16_values),
        cmocka_unit_test(test_tensor_missing_from_index_is_loadable),
        cmocka_unit_test(test_write_read_round_trip),
        cmocka_unit_test(test_malformed_catalogue),
        cmocka_unit_test(test_load_f32_errors),
        cmocka_unit_test(test_corrupted_bytes_never_escape),
        cmocka_unit_test(test_inspect_command),
        cmocka_unit_test(test_dtype_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
