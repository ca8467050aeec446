/* A target checkpoint that dflash cannot run as its config describes is
 * refused through ./dflash in real processes, each fault made the way a user
 * would make it: an edited copy of coder-tiny's config.json or a rewritten
 * model.safetensors.
 * - config fields that change the forward: hidden_act gelu, mlp_bias and
 *   attention_bias true, a sliding window in effect, layer_types with a
 *   sliding layer or of the wrong length: refused naming config.json and the
 *   field (a window that covers no layer, or that use_sliding_window turns
 *   off, runs);
 * - counts: num_hidden_layers 1e9 refused naming the field before any
 *   allocation; one layer more than the file holds names the first missing
 *   tensor;
 * - tensors the model would not use (a bias, a layer past the last, an
 *   lm_head that differs from the embedding it is tied to), in a dense and a
 *   hybrid checkpoint, are refused naming the first one; a tied lm_head that
 *   copies the embedding runs, as does a hybrid's mtp.* head;
 * - non-finite logits: one NaN column of the lm head among finite ones, and
 *   a rope_theta of 1e-300, fail forward, generate (greedy and sampled) and
 *   eval naming the target, the record and the position;
 * - an explicit --num-taps beyond the distinct layers is exit 2 naming the
 *   bound. */
#define _GNU_SOURCE
#include "test_util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/numeric.h"
#include "formats/safetensors.h"

#define LOG_CAP 65536
#define TINY "assets/coder-tiny"
/* a row of coder-tiny's embedding past its tokenizer's vocabulary: never in a tokenized prompt */
#define UNUSED_ROW 8191

static char *g_dir;

static int setup(void **state) {
    g_dir = df_test_tmpdir("faults-model");
    return 0;
}

static int teardown(void **state) {
    df_test_rmtree(g_dir);
    free(g_dir);
    return 0;
}

static const char *path_in(const char *name) {
    static char buf[4][1024];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, 1024, "%s/%s", g_dir, name);
    return p;
}

/* Runs `dflash ARGS` in the test directory; its exit status, output in log. */
static int dflash(const char *args, char *log) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cd %s && OMP_NUM_THREADS=2 timeout 120 %s %s", g_dir, df_test_path("dflash"), args);
    return df_test_run(cmd, log, LOG_CAP);
}

/* Exit `want_rc` and every string of `want` (NULL-terminated) in the output. */
static void expect(const char *args, int want_rc, const char *const *want) {
    char *log = malloc(LOG_CAP);
    int rc = dflash(args, log);
    if (rc != want_rc) fail_msg("exit %d (want %d) for: %s\n%s", rc, want_rc, args, log);
    for (int i = 0; want && want[i]; i++)
        if (!strstr(log, want[i])) fail_msg("no '%s' in the output of: %s\n%s", want[i], args, log);
    if (strstr(log, "out of memory")) fail_msg("an allocation was tried for: %s\n%s", args, log);
    free(log);
}

/* A copy of coder-tiny in the test directory whose config.json has the
 * fields of the JSON object `patch` set (the string "(absent)" removes one). */
static const char *target_with(const char *name, const char *patch) {
    static char dirs[4][1024]; /* apart from path_in's: a caller keeps it across those */
    static int next;
    char *dir = dirs[next++ % 4];
    snprintf(dir, 1024, "%s/%s", g_dir, name);
    char cmd[4096], path[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && cp %s/* '%s'/", dir, dir, df_test_path(TINY), dir);
    assert_int_equal(system(cmd), 0);
    char *text = df_test_read_file(df_test_path(TINY "/config.json"), NULL);
    cJSON *root = cJSON_Parse(text), *edit = cJSON_Parse(patch);
    assert_non_null(root);
    assert_non_null(edit);
    for (cJSON *f = edit->child; f; f = f->next) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, f->string);
        if (!cJSON_IsString(f) || strcmp(f->valuestring, "(absent)") != 0) cJSON_AddItemToObject(root, f->string, cJSON_Duplicate(f, 1));
    }
    char *out = cJSON_Print(root);
    snprintf(path, sizeof path, "%s/config.json", dir);
    df_test_write_file(path, out);
    cJSON_free(out);
    cJSON_Delete(root), cJSON_Delete(edit);
    free(text);
    return dir;
}

/* How rewrite_weights changes coder-tiny's tensors. */
typedef enum Rewrite {
    ADD_COPY,       /* a tensor named `name` holding a copy of `from` */
    LM_HEAD_COPY,   /* lm_head.weight: the embedding's bytes */
    LM_HEAD_OTHER,  /* lm_head.weight: the embedding with one value changed */
    NAN_HEAD_ROW,   /* the (tied) embedding's row UNUSED_ROW all NaN */
} Rewrite;

/* dir/model.safetensors: the tensors of the model in src (relative to the
 * source tree), rewritten as `how` says. */
static void rewrite_weights_of(const char *src, const char *dir, Rewrite how, const char *name, const char *from) {
    DfSafetensors st;
    DfError err;
    if (df_safetensors_open(&st, df_test_path(src), &err)) fail_msg("%s", err.msg);
    DfTensorOut *out = calloc((size_t)st.n_tensors + 1, sizeof *out);
    int n = 0;
    const DfTensorInfo *embed = df_safetensors_find(&st, "model.embed_tokens.weight");
    if (!embed) embed = df_safetensors_find(&st, "model.language_model.embed_tokens.weight");
    assert_non_null(embed);
    if (how != ADD_COPY) assert_int_equal(embed->dtype, DF_DTYPE_BF16);
    uint16_t *changed = malloc(embed->nbytes);
    memcpy(changed, embed->data, embed->nbytes);
    int64_t hidden = embed->shape[1];
    if (how == LM_HEAD_OTHER) changed[17] ^= 0x0100; /* one value of the embedding, another */
    if (how == NAN_HEAD_ROW)
        for (int64_t j = 0; j < hidden; j++) changed[UNUSED_ROW * hidden + j] = 0x7fc0; /* bf16 NaN */
    for (int i = 0; i < st.n_tensors; i++) {
        const DfTensorInfo *t = &st.tensors[i];
        out[n] = (DfTensorOut){t->name, t->dtype, t->ndim, {0}, t->data};
        memcpy(out[n].shape, t->shape, sizeof t->shape);
        if (t == embed && how == NAN_HEAD_ROW) out[n].data = changed;
        n++;
    }
    const DfTensorInfo *copied = how == ADD_COPY ? df_safetensors_find(&st, from) : embed;
    assert_non_null(copied);
    if (how != NAN_HEAD_ROW) {
        out[n] = (DfTensorOut){how == ADD_COPY ? name : "lm_head.weight", copied->dtype, copied->ndim, {0},
                               how == LM_HEAD_OTHER ? (const void *)changed : copied->data};
        memcpy(out[n].shape, copied->shape, sizeof copied->shape);
        n++;
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (df_safetensors_write(path, out, n, NULL, &err)) fail_msg("%s", err.msg);
    free(changed);
    free(out);
    df_safetensors_close(&st);
}

static void rewrite_weights(const char *dir, Rewrite how, const char *name, const char *from) {
    rewrite_weights_of(TINY, dir, how, name, from);
}

static void write_ids(void) {
    df_test_write_file(path_in("ids.jsonl"), "{\"ids\": [5, 6, 7, 8]}\n{\"ids\": [9, 10, 11]}\n");
}

/* forward --logits on the target in dir: the quickest full load and run. */
static void expect_forward(const char *dir, int want_rc, const char *const *want) {
    char args[4096];
    write_ids();
    snprintf(args, sizeof args, "forward --target '%s' --input '%s' --output '%s' --logits", dir, path_in("ids.jsonl"),
             path_in("out.safetensors"));
    expect(args, want_rc, want);
    if (want_rc != 0) assert_false(df_test_file_exists(path_in("out.safetensors")));
    remove(path_in("out.safetensors"));
}

/* ---- config fields ------------------------------------------------------ */

static void test_config_fields_that_change_the_forward(void **state) {
    struct {
        const char *patch, *field;
    } cases[] = {
        {"{\"hidden_act\": \"gelu\"}", "'hidden_act'"},
        {"{\"hidden_act\": \"gelu_pytorch_tanh\"}", "'hidden_act'"},
        {"{\"mlp_bias\": true}", "'mlp_bias'"},
        {"{\"attention_bias\": true}", "'attention_bias'"},
        {"{\"use_sliding_window\": true, \"sliding_window\": 64, \"max_window_layers\": 4}", "'use_sliding_window'"},
        /* Qwen3Config's default sliding_window (4096) when the field is absent */
        {"{\"use_sliding_window\": true, \"sliding_window\": \"(absent)\", \"max_window_layers\": 0}",
         "'use_sliding_window'"},
        {"{\"layer_types\": [\"full_attention\", \"full_attention\", \"full_attention\", \"full_attention\", "
         "\"full_attention\", \"sliding_attention\", \"full_attention\", \"full_attention\"]}",
         "'layer_types[5]'"},
        {"{\"layer_types\": [\"full_attention\", \"full_attention\", \"full_attention\", \"full_attention\", "
         "\"full_attention\", \"full_attention\", \"full_attention\"]}",
         "'layer_types' lists 7 layers"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "field-%zu", i);
        const char *dir = target_with(name, cases[i].patch);
        const char *want[] = {"config.json", cases[i].field, NULL};
        expect_forward(dir, 1, want);
    }
    /* runs as before: a window in no layer (max_window_layers >= the layer count, or use_sliding_window
     * false), swish (silu's other name), sliding_window null */
    const char *fine[] = {
        "{\"use_sliding_window\": true, \"sliding_window\": 64, \"max_window_layers\": 28}",
        "{\"use_sliding_window\": false, \"sliding_window\": 64, \"max_window_layers\": 0}",
        "{\"use_sliding_window\": true, \"sliding_window\": null, \"max_window_layers\": 0}",
        "{\"hidden_act\": \"swish\", \"mlp_bias\": false}",
    };
    for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "fine-%zu", i);
        expect_forward(target_with(name, fine[i]), 0, NULL);
    }
}

/* ---- counts --------------------------------------------------------------- */

static void test_counts_bounded_before_allocating(void **state) {
    const char *dir = target_with("layers-1e9", "{\"num_hidden_layers\": 1e9, \"layer_types\": null}");
    const char *want[] = {"config.json", "'num_hidden_layers'", "1000000000", NULL};
    expect_forward(dir, 1, want);
    /* generate reads the same config: same refusal, not "out of memory" */
    char args[4096];
    df_test_write_data_slice(path_in("prompts.jsonl"), 1);
    snprintf(args, sizeof args, "generate --target '%s' --input '%s' --output '%s' --max-new-tokens 2", dir,
             path_in("prompts.jsonl"), path_in("gen.jsonl"));
    expect(args, 1, want);
    /* one layer more than the file holds: the first tensor it lacks */
    dir = target_with("layers-9", "{\"num_hidden_layers\": 9, \"layer_types\": null}");
    const char *missing[] = {"model.layers.8.input_layernorm.weight", "missing", "num_hidden_layers 9", NULL};
    expect_forward(dir, 1, missing);
}

/* ---- tensors the model does not use --------------------------------------- */

static void test_unused_tensors_refused(void **state) {
    const char *dir = target_with("bias", "{}");
    rewrite_weights(dir, ADD_COPY, "model.layers.0.mlp.gate_proj.bias", "model.layers.0.input_layernorm.weight");
    const char *bias[] = {"unknown tensor 'model.layers.0.mlp.gate_proj.bias'", "model.safetensors", NULL};
    expect_forward(dir, 1, bias);

    dir = target_with("layer-8", "{}");
    rewrite_weights(dir, ADD_COPY, "model.layers.8.input_layernorm.weight", "model.layers.7.input_layernorm.weight");
    const char *extra[] = {"unknown tensor 'model.layers.8.input_layernorm.weight'", NULL};
    expect_forward(dir, 1, extra);

    dir = target_with("head-other", "{}");
    rewrite_weights(dir, LM_HEAD_OTHER, NULL, NULL);
    const char *other[] = {"'lm_head.weight' differs from the embedding", "tie_word_embeddings true", NULL};
    expect_forward(dir, 1, other);

    /* the hybrid loader reads through the same check: a bias of a DeltaNet projection, a layer past the last */
    char cmd[4096], hybrid_dir[1024];
    snprintf(hybrid_dir, sizeof hybrid_dir, "%s", path_in("hybrid-bias"));
    dir = hybrid_dir;
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && cp %s/* '%s'/", dir, dir,
             df_test_path("tests/fixtures/hybrid/qwen35-random"), dir);
    assert_int_equal(system(cmd), 0);
    rewrite_weights_of("tests/fixtures/hybrid/qwen35-random", dir, ADD_COPY, "model.layers.1.linear_attn.in_proj_a.bias",
                       "model.layers.1.linear_attn.dt_bias");
    const char *hybrid[] = {"unknown tensor 'model.layers.1.linear_attn.in_proj_a.bias'", NULL};
    expect_forward(dir, 1, hybrid);
    rewrite_weights_of("tests/fixtures/hybrid/qwen35-random", dir, ADD_COPY, "model.layers.4.input_layernorm.weight",
                       "model.layers.3.input_layernorm.weight");
    const char *hybrid_layer[] = {"unknown tensor 'model.layers.4.input_layernorm.weight'", NULL};
    expect_forward(dir, 1, hybrid_layer);
    rewrite_weights_of("tests/fixtures/hybrid/qwen35-random", dir, ADD_COPY, "mtp.fc.weight",
                       "model.layers.3.input_layernorm.weight");
    expect_forward(dir, 0, NULL); /* the multi-token-prediction head the family ships: not the decoder's */

    /* a tied head saved beside the embedding it copies: what transformers ties anyway */
    dir = target_with("head-copy", "{}");
    rewrite_weights(dir, LM_HEAD_COPY, NULL, NULL);
    expect_forward(dir, 0, NULL);
}

/* ---- non-finite logits ------------------------------------------------------ */

/* generate (greedy: the choice made on the backend; sampled: the host's
 * scan of the downloaded rows) and eval fail on dir naming the target, the
 * record and the position; no output record is written. */
static void expect_nonfinite_decode(const char *dir) {
    char args[4096];
    df_test_write_data_slice(path_in("prompts.jsonl"), 3);
    const char *want[] = {dir, "not finite", "record 1", "position", NULL};
    const char *modes[] = {"", "--temperature 0.7 --seed 3"};
    for (int m = 0; m < 2; m++) {
        remove(path_in("gen.jsonl"));
        snprintf(args, sizeof args, "generate --target '%s' --input '%s' --output '%s' --max-new-tokens 4 --batch 2 %s",
                 dir, path_in("prompts.jsonl"), path_in("gen.jsonl"), modes[m]);
        expect(args, 1, want);
        char *out = df_test_file_exists(path_in("gen.jsonl")) ? df_test_read_file(path_in("gen.jsonl"), NULL) : NULL;
        if (out && strchr(out, '{')) fail_msg("generate wrote records from a broken target:\n%s", out);
        free(out);
    }
    snprintf(args, sizeof args, "eval --target '%s' --draft '%s' --input '%s' --max-new-tokens 4", dir,
             df_test_path("tests/fixtures/export/drafter"), path_in("prompts.jsonl"));
    expect(args, 1, want);
}

/* One NaN column of the lm head among finite ones: every row's maximum is
 * finite where the NaN is skipped, so only a check that sees it fails. */
static void test_nan_logit_column(void **state) {
    const char *dir = target_with("nan-column", "{}");
    rewrite_weights(dir, NAN_HEAD_ROW, NULL, NULL);
    const char *want[] = {dir, "logits are not finite", "record 1, position 0", NULL};
    expect_forward(dir, 1, want);
    expect_nonfinite_decode(dir);
}

static void test_tiny_rope_theta(void **state) {
    const char *dir = target_with("rope-tiny", "{\"rope_parameters\": {\"rope_theta\": 1e-300, \"rope_type\": \"default\"}}");
    const char *want[] = {dir, "not finite", "record 1", NULL};
    expect_forward(dir, 1, want);
    expect_nonfinite_decode(dir);
}

/* ---- --num-taps ------------------------------------------------------------- */

static void test_num_taps_bounded(void **state) {
    char args[4096];
    df_test_write_data_slice(path_in("train.jsonl"), 4);
    const int given[] = {9, 6, 7};
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args,
                 "train --target %s --data '%s' --output '%s' --num-taps %d --draft-layers 1 --steps 1",
                 df_test_path(TINY), path_in("train.jsonl"), path_in("run"), given[i]);
        const char *want[] = {"--num-taps", "1..5", "8-layer", NULL};
        expect(args, 2, want);
        assert_false(df_test_file_exists(path_in("run")));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_fields_that_change_the_forward),
        cmocka_unit_test(test_counts_bounded_before_allocating),
        cmocka_unit_test(test_unused_tensors_refused),
        cmocka_unit_test(test_nan_logit_column),
        cmocka_unit_test(test_tiny_rope_theta),
        cmocka_unit_test(test_num_taps_bounded),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
