/* Training checkpoints: save/load round trips bit-exactly (params, AdamW
 * moments and step, progress, options) and the restored optimizer continues
 * bit-identically; keep_last rotation; latest picks the highest step and
 * ignores leftover temporaries; a flipped byte is caught by the checksum
 * (the file named) and df_checkpoint_latest_valid falls back to the previous
 * checkpoint; a different drafter config is refused naming the field. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdint.h>
#include <inttypes.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/drafter_io.h"
#include "base/hash64.h"
#include "formats/safetensors.h"
#include "train/checkpoint.h"
#include "adamw_ref.h"
#include "test_util.h"

#define assert_contains(haystack, needle)                                                                  \
    do {                                                                                                    \
        if (!strstr((haystack), (needle))) fail_msg("'%s' does not contain '%s'", (haystack), (needle));    \
    } while (0)

/* A small training state: config, layout, params and an optimizer that has
 * taken a few steps (so the moments are not zero). */
typedef struct State {
    DfDrafterConfig cfg;
    DfDrafterLayout layout;
    float *params;
    DfAdamW opt;
    size_t *sizes;
} State;

static const DfAdamWConfig ADAM = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0};

static void small_config(DfDrafterConfig *c, int mask_token_id) {
    DfModelConfig t;
    memset(&t, 0, sizeof t);
    t.num_layers = 8;
    t.hidden_size = 32;
    t.num_heads = 4;
    t.head_dim = 8;
    t.num_kv_heads = 2;
    t.intermediate_size = 48;
    t.vocab_size = 300;
    t.rms_norm_eps = 1e-6;
    t.rope.theta = 1e6;
    t.max_position_embeddings = 512;
    DfError err = {{0}};
    DfDrafterOptions dopt = {.num_layers = 2, .block_size = 16, .mask_token_id = mask_token_id};
    assert_int_equal(df_drafter_config_from_target(c, &t, &dopt, &err), 0);
}

static void init_optimizer(State *s) {
    s->sizes = malloc((size_t)s->layout.n_params * sizeof *s->sizes);
    for (int i = 0; i < s->layout.n_params; i++) s->sizes[i] = s->layout.params[i].count;
    DfError err = {{0}};
    assert_int_equal(df_adamw_init(&s->opt, &ADAM, s->sizes, s->layout.n_params, &err), 0);
}

/* One AdamW step with gradients drawn from `seed`. */
static void take_step(State *s, uint64_t seed) {
    size_t total = s->layout.total;
    float *grads = malloc(total * sizeof *grads);
    df_test_fill_random(grads, total, seed, 1.0f);
    int n = s->layout.n_params;
    float **p = malloc((size_t)n * sizeof *p);
    const float **g = malloc((size_t)n * sizeof *g);
    for (int i = 0; i < n; i++) {
        p[i] = s->params + s->layout.params[i].offset;
        g[i] = grads + s->layout.params[i].offset;
    }
    df_test_adamw_step(&s->opt, p, g, 1e-3);
    free(p);
    free(g);
    free(grads);
}

static void state_init(State *s, int mask_token_id) {
    small_config(&s->cfg, mask_token_id);
    df_drafter_layout_build(&s->layout, &s->cfg);
    s->params = malloc(s->layout.total * sizeof *s->params);
    df_drafter_init_params(&s->layout, s->params, 42);
    init_optimizer(s);
    for (int k = 0; k < 3; k++) take_step(s, 100 + (uint64_t)k);
}

static void state_free(State *s) {
    free(s->params);
    df_adamw_free(&s->opt);
    df_drafter_layout_free(&s->layout);
    free(s->sizes);
}

static DfTrainProgress progress_at(int64_t step) {
    return (DfTrainProgress){.step = step, .total_steps = 1000, .epoch = 2, .batch_in_epoch = 17 + step,
                             .seed = 0xF00DCAFEDEADBEEFull, /* above INT64_MAX: all 64 bits kept */
                             .tokens_seen = 123456789012ll + step};
}

static const char *OPTIONS = "{\"lr\": 0.0006, \"epochs\": 6, \"data\": \"assets/data/train.jsonl\"}";

static void save(const char *dir, State *s, int64_t step, int keep_last) {
    DfTrainProgress p = progress_at(step);
    DfError err = {{0}};
    if (df_checkpoint_save(dir, &s->cfg, &s->layout, s->params, &s->opt, &p, OPTIONS, keep_last, &err) != 0)
        fail_msg("%s", err.msg);
}

static char *ckpt_path(const char *dir, int64_t step) {
    char *p = malloc(strlen(dir) + 64);
    sprintf(p, "%s/step-%08lld.safetensors", dir, (long long)step);
    return p;
}

/* The entries of dir, sorted, space-separated. */
static void list_dir(const char *dir, char *out, size_t cap) {
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    assert_true(n >= 0);
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (names[i]->d_name[0] != '.') {
            strncat(out, names[i]->d_name, cap - strlen(out) - 2);
            strncat(out, " ", cap - strlen(out) - 1);
        }
        free(names[i]);
    }
    free(names);
}

/* A fresh optimizer and state to load into. */
typedef struct Loaded {
    float *params;
    DfAdamW opt;
    DfTrainProgress progress;
    char *options;
} Loaded;

static void loaded_init(Loaded *l, State *s) {
    memset(l, 0, sizeof *l);
    DfError err = {{0}};
    assert_int_equal(df_adamw_init(&l->opt, &ADAM, s->sizes, s->layout.n_params, &err), 0);
}

static void loaded_free(Loaded *l) {
    free(l->params);
    free(l->options);
    df_adamw_free(&l->opt);
}

/* --------------------------------------------------------------- tests */

static void test_round_trip(void **state) {
    (void)state;
    State s;
    state_init(&s, 290);
    char *dir = df_test_tmpdir("ckpt-rt");
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/out/checkpoints", dir); /* created on the way */
    save(sub, &s, 3, 0);
    DfError err = {{0}};
    char *latest = df_checkpoint_latest(sub, &err);
    assert_non_null(latest);
    char *want = ckpt_path(sub, 3);
    assert_string_equal(latest, want);

    Loaded l;
    loaded_init(&l, &s);
    if (df_checkpoint_load(latest, &s.cfg, &s.layout, &l.params, &l.opt, &l.progress, &l.options, &err) != 0)
        fail_msg("%s", err.msg);
    assert_memory_equal(l.params, s.params, s.layout.total * sizeof(float));
    assert_memory_equal(l.opt.exp_avg, s.opt.exp_avg, s.layout.total * sizeof(float));
    assert_memory_equal(l.opt.exp_avg_sq, s.opt.exp_avg_sq, s.layout.total * sizeof(float));
    assert_int_equal(l.opt.step, 3);
    DfTrainProgress p = progress_at(3);
    assert_int_equal(l.progress.step, p.step);
    assert_int_equal(l.progress.total_steps, p.total_steps);
    assert_int_equal(l.progress.epoch, p.epoch);
    assert_int_equal(l.progress.batch_in_epoch, p.batch_in_epoch);
    assert_true(l.progress.seed == p.seed);
    assert_int_equal(l.progress.tokens_seen, p.tokens_seen);
    assert_string_equal(l.options, OPTIONS);

    /* The resumed run continues bit-identically. */
    State resumed = s;
    resumed.params = l.params;
    resumed.opt = l.opt;
    take_step(&s, 7);
    take_step(&resumed, 7);
    assert_memory_equal(resumed.params, s.params, s.layout.total * sizeof(float));
    assert_memory_equal(resumed.opt.exp_avg_sq, s.opt.exp_avg_sq, s.layout.total * sizeof(float));

    free(want);
    free(latest);
    loaded_free(&l);
    state_free(&s);
    df_test_rmtree(dir);
    free(dir);
}

static void test_rotation(void **state) {
    (void)state;
    State s;
    state_init(&s, 290);
    char *dir = df_test_tmpdir("ckpt-rot");
    for (int step = 1; step <= 6; step++) save(dir, &s, step * 10, 3);
    char names[1024];
    list_dir(dir, names, sizeof names);
    assert_string_equal(names, "step-00000040.safetensors step-00000050.safetensors step-00000060.safetensors ");
    /* A save numbered below the others (a run resumed from an older one) is kept. */
    save(dir, &s, 5, 3);
    list_dir(dir, names, sizeof names);
    assert_string_equal(names, "step-00000005.safetensors step-00000050.safetensors step-00000060.safetensors ");
    df_test_rmtree(dir);
    free(dir);

    dir = df_test_tmpdir("ckpt-keepall");
    for (int step = 1; step <= 4; step++) save(dir, &s, step, 0);
    list_dir(dir, names, sizeof names);
    assert_string_equal(names, "step-00000001.safetensors step-00000002.safetensors step-00000003.safetensors "
                               "step-00000004.safetensors ");
    df_test_rmtree(dir);
    free(dir);
    state_free(&s);
}

static void test_latest(void **state) {
    (void)state;
    State s;
    state_init(&s, 290);
    char *dir = df_test_tmpdir("ckpt-latest");
    DfError err = {{0}};
    assert_null(df_checkpoint_latest(dir, &err)); /* empty: none, no error */
    assert_string_equal(err.msg, "");
    char missing[4200];
    snprintf(missing, sizeof missing, "%s/none", dir);
    assert_null(df_checkpoint_latest(missing, &err));
    assert_string_equal(err.msg, "");

    save(dir, &s, 100, 0);
    save(dir, &s, 5, 0);
    save(dir, &s, 20, 0);
    /* Leftovers of an interrupted save and unrelated files are not checkpoints. */
    char junk[4200];
    snprintf(junk, sizeof junk, "%s/step-00000200.safetensors.tmp.12345", dir);
    df_test_write_file(junk, "half a checkpoint");
    snprintf(junk, sizeof junk, "%s/step-x.safetensors", dir);
    df_test_write_file(junk, "not one");
    snprintf(junk, sizeof junk, "%s/notes.txt", dir);
    df_test_write_file(junk, "");
    char *latest = df_checkpoint_latest(dir, &err);
    char *want = ckpt_path(dir, 100);
    assert_non_null(latest);
    assert_string_equal(latest, want);
    free(latest);

    /* latest_valid loads it without complaint; rotation leaves the leftovers alone. */
    Loaded l;
    loaded_init(&l, &s);
    char *loaded_path = NULL;
    int rc = df_checkpoint_latest_valid(dir, &s.cfg, &s.layout, &l.params, &l.opt, &l.progress, &l.options,
                                        &loaded_path, &err);
    if (rc != 0) fail_msg("%d: %s", rc, err.msg);
    assert_string_equal(loaded_path, want);
    assert_int_equal(l.progress.step, 100);
    free(loaded_path);
    loaded_free(&l);
    save(dir, &s, 110, 1);
    char names[1024];
    list_dir(dir, names, sizeof names);
    assert_string_equal(names, "notes.txt step-00000110.safetensors step-00000200.safetensors.tmp.12345 "
                               "step-x.safetensors ");

    /* An empty directory: latest_valid says "none" with 1. */
    char *empty = df_test_tmpdir("ckpt-empty");
    loaded_init(&l, &s);
    assert_int_equal(df_checkpoint_latest_valid(empty, &s.cfg, &s.layout, &l.params, &l.opt, &l.progress,
                                                &l.options, &loaded_path, &err),
                     1);
    assert_null(loaded_path);
    loaded_free(&l);
    df_test_rmtree(empty);
    free(empty);
    free(want);
    df_test_rmtree(dir);
    free(dir);
    state_free(&s);
}

static void flip_byte(const char *path, long offset_from_end) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, -offset_from_end, SEEK_END), 0);
    int c = fgetc(f);
    assert_int_equal(fseek(f, -offset_from_end, SEEK_END), 0);
    fputc(c ^ 0x10, f);
    assert_int_equal(fclose(f), 0);
}

static void test_corruption_fallback(void **state) {
    (void)state;
    State s;
    state_init(&s, 290);
    char *dir = df_test_tmpdir("ckpt-corrupt");
    save(dir, &s, 10, 0);
    float *params_at_10 = malloc(s.layout.total * sizeof(float));
    memcpy(params_at_10, s.params, s.layout.total * sizeof(float));
    take_step(&s, 11);
    save(dir, &s, 20, 0);
    char *newest = ckpt_path(dir, 20), *older = ckpt_path(dir, 10);

    /* One flipped bit deep in the data section (inside the moments or params). */
    struct stat sb;
    assert_int_equal(stat(newest, &sb), 0);
    flip_byte(newest, (long)sb.st_size / 3);
    Loaded l;
    loaded_init(&l, &s);
    DfError err = {{0}};
    assert_int_equal(df_checkpoint_load(newest, &s.cfg, &s.layout, &l.params, &l.opt, &l.progress, &l.options, &err),
                     -1);
    assert_contains(err.msg, newest);
    assert_contains(err.msg, "checksum");
    assert_null(l.params);
    assert_int_equal(l.opt.step, 0); /* nothing restored from a corrupt file */

    char *loaded_path = NULL;
    int rc = df_checkpoint_latest_valid(dir, &s.cfg, &s.layout, &l.params, &l.opt, &l.progress, &l.options,
                                        &loaded_path, &err);
    if (rc != 0) fail_msg("%d: %s", rc, err.msg);
    assert_string_equal(loaded_path, older);
    assert_int_equal(l.progress.step, 10);
    assert_int_equal(l.opt.step, 3);
    assert_memory_equal(l.params, params_at_10, s.layout.total * sizeof(float));
    free(loaded_path);
    loaded_free(&l);

    /* A flipped byte in the last progress scalar, then a truncated older file: nothing usable. */
    save(dir, &s, 20, 0);
    flip_byte(newest, 1);
    assert_int_equal(truncate(older, 100), 0);
    loaded_init(&l, &s);
    rc = df_checkpoint_latest_valid(dir, &s.cfg, &s.layout, &l.params, &l.opt, &l.progress, &l.options, &loaded_path,
                                    &err);
    assert_int_equal(rc, -1);
    assert_null(loaded_path);
    assert_contains(err.msg, newest);
    assert_contains(err.msg, "none of the 2 checkpoints");
    loaded_free(&l);

    free(params_at_10);
    free(newest);
    free(older);
    df_test_rmtree(dir);
    free(dir);
    state_free(&s);
}

static void test_config_mismatch(void **state) {
    (void)state;
    State s;
    state_init(&s, 290);
    char *dir = df_test_tmpdir("ckpt-mismatch");
    save(dir, &s, 10, 0);
    char *path = ckpt_path(dir, 10);
    DfDrafterConfig other;
    small_config(&other, 291); /* same layout, another mask token */
    Loaded l;
    loaded_init(&l, &s);
    DfError err = {{0}};
    assert_int_equal(df_checkpoint_load(path, &other, &s.layout, &l.params, &l.opt, &l.progress, &l.options, &err),
                     -1);
    assert_contains(err.msg, path);
    assert_contains(err.msg, "mask_token_id: 290 vs 291");
    char *loaded_path = NULL;
    assert_int_equal(df_checkpoint_latest_valid(dir, &other, &s.layout, &l.params, &l.opt, &l.progress, &l.options,
                                                &loaded_path, &err),
                     -1);
    assert_contains(err.msg, "mask_token_id");

    other = s.cfg;
    other.gamma = 5.0; /* training-only fields count too */
    assert_int_equal(df_checkpoint_load(path, &other, &s.layout, &l.params, &l.opt, &l.progress, &l.options, &err),
                     -1);
    assert_contains(err.msg, "gamma");
    other = s.cfg;
    other.rope.theta = 10000;
    assert_int_equal(df_checkpoint_load(path, &other, &s.layout, &l.params, &l.opt, &l.progress, &l.options, &err),
                     -1);
    assert_contains(err.msg, "rope_theta");
    assert_null(l.params);
    loaded_free(&l);
    free(path);
    df_test_rmtree(dir);
    free(dir);
    state_free(&s);
}

/* The checksum's hash: independent of the thread count; any one-bit change
 * anywhere in a multi-chunk buffer changes it. */
static void test_hash(void **state) {
    (void)state;
    size_t n = (3u << 20) + 13; /* three full chunks and a ragged tail */
    unsigned char *buf = malloc(n);
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(i * 2654435761u >> 13);
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    uint64_t one = df_hash64_chunked(buf, n);
    omp_set_num_threads(4);
    uint64_t four = df_hash64_chunked(buf, n);
    omp_set_num_threads(threads);
    assert_true(one == four);
    const size_t positions[] = {0, 7, 8, 31, 32, (1u << 20) - 1, 1u << 20, 2u << 20, n - 13, n - 1};
    for (size_t k = 0; k < sizeof positions / sizeof positions[0]; k++)
        for (int bit = 0; bit < 8; bit += 3) {
            buf[positions[k]] ^= (unsigned char)(1u << bit);
            assert_true(df_hash64_chunked(buf, n) != one);
            buf[positions[k]] ^= (unsigned char)(1u << bit);
        }
    assert_true(df_hash64_chunked(buf, n) == one);
    assert_true(df_hash64_chunked(buf, n - 1) != one); /* the length counts */
    free(buf);
}

/* The "__metadata__" object of a safetensors file (caller deletes). */
static cJSON *file_metadata(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint64_t n = 0;
    assert_int_equal(fread(&n, 8, 1, f), 1);
    char *json = calloc(n + 1, 1);
    assert_int_equal(fread(json, 1, n, f), n);
    fclose(f);
    cJSON *root = cJSON_Parse(json);
    free(json);
    assert_non_null(root);
    cJSON *meta = cJSON_DetachItemFromObjectCaseSensitive(root, "__metadata__");
    cJSON_Delete(root);
    assert_non_null(meta);
    return meta;
}

/* Rewrites a checkpoint with metadata "version" set to `version` and
 * "checksum" to the version 1 checksum when legacy_sum (the ranges of
 * checkpoint.h folded with df_hash64_chunked and df_hash64_mix from
 * 0x165667B19E3779F9), else left as it was. */
static void rewrite_as_version(const char *path, const char *version, int legacy_sum) {
    DfSafetensors st;
    DfError err = {{0}};
    if (df_safetensors_open(&st, path, &err) != 0) fail_msg("%s", err.msg);
    cJSON *meta = file_metadata(path);
    uint64_t h = 0x165667B19E3779F9ull;
    DfTensorOut *out = calloc((size_t)st.n_tensors, sizeof *out);
    for (int i = 0; i < st.n_tensors; i++) { /* sorted by name */
        const DfTensorInfo *t = &st.tensors[i];
        h = df_hash64_mix(h ^ df_hash64_chunked(t->name, strlen(t->name)));
        h = df_hash64_mix(h ^ df_hash64_chunked(t->data, t->nbytes));
        out[i] = (DfTensorOut){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .data = t->data};
        memcpy(out[i].shape, t->shape, sizeof t->shape);
    }
    const char *hashed[] = {"drafter_config", "loss_gamma", "options"};
    for (int k = 0; k < 3; k++) {
        const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, hashed[k]));
        assert_non_null(v);
        h = df_hash64_mix(h ^ df_hash64_chunked(v, strlen(v)));
    }
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, h);
    cJSON_ReplaceItemInObjectCaseSensitive(meta, "version", cJSON_CreateString(version));
    if (legacy_sum) cJSON_ReplaceItemInObjectCaseSensitive(meta, "checksum", cJSON_CreateString(hex));
    char *text = cJSON_PrintUnformatted(meta);
    char *tmp = malloc(strlen(path) + 8);
    sprintf(tmp, "%s.new", path);
    if (df_safetensors_write(tmp, out, st.n_tensors, text, &err) != 0) fail_msg("%s", err.msg);
    df_safetensors_close(&st);
    assert_int_equal(rename(tmp, path), 0);
    free(tmp);
    free(text);
    free(out);
    cJSON_Delete(meta);
}

/* Checkpoints are XXH3-64-checksummed (version 2); version 1 checkpoints,
 * checksummed with the older hash, still load; other versions are refused
 * naming the version. */
static void test_version_1_still_loads(void **state) {
    (void)state;
    State s;
    state_init(&s, 290);
    char *dir = df_test_tmpdir("ckpt-v1");
    save(dir, &s, 10, 0);
    char *path = ckpt_path(dir, 10);
    cJSON *meta = file_metadata(path);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "version")), "2");
    cJSON_Delete(meta);

    Loaded l;
    DfError err = {{0}};
    rewrite_as_version(path, "1", 0); /* a version 2 checksum under version 1: corrupt */
    loaded_init(&l, &s);
    assert_int_equal(df_checkpoint_load(path, &s.cfg, &s.layout, &l.params, &l.opt, &l.progress, &l.options, &err), -1);
    assert_contains(err.msg, "checksum");
    loaded_free(&l);

    rewrite_as_version(path, "1", 1);
    loaded_init(&l, &s);
    if (df_checkpoint_load(path, &s.cfg, &s.layout, &l.params, &l.opt, &l.progress, &l.options, &err) != 0)
        fail_msg("version 1 checkpoint refused: %s", err.msg);
    assert_memory_equal(l.params, s.params, s.layout.total * sizeof *s.params);
    assert_int_equal(l.progress.step, 10);
    loaded_free(&l);

    rewrite_as_version(path, "3", 1);
    loaded_init(&l, &s);
    assert_int_equal(df_checkpoint_load(path, &s.cfg, &s.layout, &l.params, &l.opt, &l.progress, &l.options, &err), -1);
    assert_contains(err.msg, "version '3'");
    loaded_free(&l);
    free(path);
    df_test_rmtree(dir);
    free(dir);
    state_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),          cmocka_unit_test(test_rotation),
        cmocka_unit_test(test_latest),              cmocka_unit_test(test_corruption_fallback),
        cmocka_unit_test(test_config_mismatch),     cmocka_unit_test(test_hash),
        cmocka_unit_test(test_version_1_still_loads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
