/* The exported drafter against what the serving stacks' DFlash loaders read.
 *
 * Every config.json key and weight name below was read from the loaders'
 * source, at these commits:
 *   vLLM   vllm-project/vllm
 *          vllm/model_executor/models/qwen3_dflash.py          036a00d1f5d00d449d02dce9babdd15a5b4d06c9
 *          vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py 0cfdd2e15d6991f354c6e22fd7f7e7577afe0424
 *          vllm/config/speculative.py                          002e77c1f0ef9b19cff8b9e21cfbd6feb3d6b443
 *   SGLang sgl-project/sglang 7f151c5ebdb3af4467c2a5d3ccc5f54e71d2ba35
 *          python/sglang/srt/models/dflash.py, python/sglang/srt/speculative/dflash_utils.py,
 *          python/sglang/srt/speculative/dflash_worker.py
 *   z-lab  z-lab/dflash 44947fbf71114e241c96de194f4b382b5dd330d0, dflash/model.py (DFlashDraftModel)
 *
 * A drafter is trained briefly on assets/coder-tiny, exported with the built
 * `dflash export`, and its config.json (read here with cJSON, as the loaders
 * read the raw JSON) and model.safetensors are checked key by key and tensor
 * by tensor. The tap convention the three share: dflash_config.target_layer_ids
 * are 0-based decoder layer ids whose outputs the drafter reads, transformers'
 * hidden_states[id + 1] (z-lab indexes hidden_states[id + 1]; vLLM and SGLang
 * capture the input of layer id + 1). The ids are checked against the
 * trainer's taps, z-lab's default rule, and the target forward's features at
 * those ids against transformers' hidden_states[id + 1] (tests/ref/target_ref.py). */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TARGET_DIR "assets/coder-tiny"
#define TARGET_REFERENCE "tests/fixtures/target/coder-tiny.safetensors"
#define DRAFT_LAYERS 2
#define BLOCK_SIZE 8
#define NUM_TAPS 2
#define TRAIN_OPTIONS                                                                                       \
    "--draft-layers 2 --intermediate-size 256 --num-taps 2 --block-size 8 --num-anchors 12 --token-budget 1100 " \
    "--lr 3e-3 --warmup 0.1 --seed 7 --steps 2"
#define PARITY_TOL 1e-3

typedef enum { K_INT, K_NUMBER, K_STRING, K_BOOL, K_INT_ARRAY, K_STRING_ARRAY, K_OBJECT, K_NULL_OR_OBJECT } Kind;

/* The keys the loaders read and the JSON type they take them as; "a.b" is
 * key b inside object a. */
static const struct {
    const char *key;
    Kind kind;
    const char *readers;
} CONFIG_KEYS[] = {
    {"architectures", K_STRING_ARRAY, "SGLang model class, vLLM registry, transformers"},
    {"auto_map.AutoModel", K_STRING, "transformers AutoModel (z-lab)"},
    {"model_type", K_STRING, "transformers AutoConfig -> Qwen3Config (all three)"},
    {"block_size", K_INT, "z-lab DFlashDraftModel.block_size; SGLang DFlashDraftModel.block_size"},
    {"num_target_layers", K_INT, "z-lab build_target_layer_ids"},
    {"dflash_config", K_OBJECT, "all three"},
    {"dflash_config.mask_token_id", K_INT, "z-lab; vLLM DFlashQwen3Model.mask_token_id"},
    {"dflash_config.target_layer_ids", K_INT_ARRAY,
     "z-lab extract_context_feature; vLLM get_eagle3_aux_layers_from_config (+1); SGLang "
     "resolve_dflash_target_layer_ids"},
    {"hidden_size", K_INT, "all three (fc, norms, layers)"},
    {"intermediate_size", K_INT, "all three (MLP)"},
    {"num_hidden_layers", K_INT, "all three (draft layer count)"},
    {"num_attention_heads", K_INT, "all three"},
    {"num_key_value_heads", K_INT, "all three"},
    {"head_dim", K_INT, "all three"},
    {"vocab_size", K_INT, "vLLM (draft_vocab_size default, embeddings)"},
    {"rms_norm_eps", K_NUMBER, "all three"},
    {"rope_theta", K_NUMBER, "SGLang get_rope base; transformers Qwen3Config -> rope_parameters (vLLM, z-lab)"},
    {"rope_scaling", K_NULL_OR_OBJECT, "SGLang get_rope; transformers Qwen3Config"},
    {"max_position_embeddings", K_INT, "all three (rotary cache)"},
    {"layer_types", K_STRING_ARRAY, "z-lab sliding_window per layer; vLLM _resolve_layer_attention (causality)"},
    {"hidden_act", K_STRING, "vLLM Qwen3MLP; SGLang DFlashMLP (silu only)"},
    {"attention_bias", K_BOOL, "all three (q/k/v/o bias)"},
    {"tie_word_embeddings", K_BOOL, "transformers Qwen3Config"},
};

/* Keys whose presence would change what a loader does: vLLM takes
 * eagle_aux_hidden_state_layer_ids as capture points without the +1, reads
 * fc's input width from target_hidden_size, drops fc without
 * use_aux_hidden_state, maps a draft vocabulary with draft_vocab_size, runs
 * layers causally with is_causal / dflash_config.causal; SGLang prefers
 * dflash_config.block_size to block_size. Each must be absent (or, where
 * `allowed` is given, have that JSON value). */
static const struct {
    const char *key;
    const char *allowed;
} CHANGING_KEYS[] = {
    {"eagle_aux_hidden_state_layer_ids", NULL},
    {"target_hidden_size", NULL},
    {"use_aux_hidden_state", "true"},
    {"draft_vocab_size", NULL},
    {"is_neox_style", "true"},
    {"is_causal", "false"},
    {"dflash_config.causal", "false"},
    {"dflash_config.use_swa", "false"},
    {"dflash_config.block_size", NULL},
    {"dflash_config.layer_ids", NULL},
    {"target_layer_ids", NULL},
};

/* Weight names per decoder layer (prefix layers.{i}.): vLLM's
 * DFlashQwen3DecoderLayer and SGLang's DFlashDecoderLayer load q/k/v into
 * qkv_proj and gate/up into gate_up_proj; z-lab's Qwen3DFlashDecoderLayer
 * holds them as they are named. */
enum { W_Q, W_K, W_V, W_O, W_QN, W_KN, W_GATE, W_UP, W_DOWN, W_IN_NORM, W_POST_NORM, N_LAYER_WEIGHTS };
static const char *const LAYER_WEIGHTS[N_LAYER_WEIGHTS] = {
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
    "self_attn.q_norm.weight", "self_attn.k_norm.weight", "mlp.gate_proj.weight",    "mlp.up_proj.weight",
    "mlp.down_proj.weight",    "input_layernorm.weight",  "post_attention_layernorm.weight",
};
/* Outside the layers: fc and hidden_norm project the target features, norm is the final norm.
 * No embed_tokens and no lm_head: all three take the target's. */
static const char *const TOP_WEIGHTS[] = {"fc.weight", "hidden_norm.weight", "norm.weight"};

typedef struct Sizes {
    int hidden, inter, layers, heads, kv_heads, head_dim, n_taps, target_hidden;
} Sizes;

typedef struct Fixture {
    DfTestRunDir run;
    cJSON *config;        /* the export's config.json */
    cJSON *target_config; /* assets/coder-tiny/config.json */
    char export_dir[1024];
    int trained_taps[16], n_trained_taps; /* as the trainer announced them */
} Fixture;

static cJSON *parse_file(const char *path) {
    char *text = df_test_read_file(path, NULL);
    if (!text) fail_msg("cannot read %s", path);
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) fail_msg("%s is not JSON", path);
    return j;
}

/* The taps the trainer announced ("taps 1,5, block ..."). */
static int trainer_taps(const char *out, int *ids, int cap) {
    const char *p = strstr(out, "parameters, taps ");
    if (!p) fail_msg("the trainer did not print its taps:\n%s", out);
    p += strlen("parameters, taps ");
    int n = 0;
    while (n < cap) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        ids[n++] = (int)v;
        if (*end != ',') break;
        p = end + 1;
    }
    return n;
}

/* Trains briefly on the bundled tiny model and exports the last checkpoint. */
static int setup(void **state) {
    Fixture *f = calloc(1, sizeof *f);
    DfTestRunDir *r = &f->run;
    r->dir = df_test_tmpdir("serving");
    snprintf(r->data, sizeof r->data, "%s/slice.jsonl", r->dir);
    df_test_write_data_slice(r->data, DF_TEST_TRAIN_SLICE);
    char args[4096];
    snprintf(args, sizeof args, "train --target '%s' --data '%s' --output run " TRAIN_OPTIONS, df_test_path(TARGET_DIR),
             r->data);
    if (df_test_dflash_in(r, 2, args) != 0) fail_msg("'%s' failed:\n%s", args, r->out);
    f->n_trained_taps = trainer_taps(r->out, f->trained_taps, 16);
    if (df_test_dflash_in(r, 2, "export run/checkpoints/step-00000002.safetensors --output exported") != 0)
        fail_msg("export failed:\n%s", r->out);
    snprintf(f->export_dir, sizeof f->export_dir, "%s/exported", r->dir);
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", f->export_dir);
    f->config = parse_file(path);
    f->target_config = parse_file(df_test_path(TARGET_DIR "/config.json"));
    *state = f;
    return 0;
}

static int teardown(void **state) {
    Fixture *f = *state;
    cJSON_Delete(f->config);
    cJSON_Delete(f->target_config);
    df_test_rmtree(f->run.dir);
    free(f->run.dir);
    free(f);
    return 0;
}

/* The item at a dotted path, or NULL. */
static const cJSON *lookup(const cJSON *root, const char *path) {
    char part[128];
    const cJSON *at = root;
    while (at && *path) {
        const char *dot = strchr(path, '.');
        size_t n = dot ? (size_t)(dot - path) : strlen(path);
        snprintf(part, sizeof part, "%.*s", (int)n, path);
        at = cJSON_IsObject(at) ? cJSON_GetObjectItemCaseSensitive(at, part) : NULL;
        path += n + (dot != NULL);
    }
    return at;
}

static int is_int(const cJSON *j) {
    return cJSON_IsNumber(j) && j->valuedouble == floor(j->valuedouble) && fabs(j->valuedouble) < 2147483648.0;
}

static int all_items(const cJSON *array, int (*pred)(const cJSON *)) {
    for (const cJSON *e = array->child; e; e = e->next)
        if (!pred(e)) return 0;
    return 1;
}

static int is_string(const cJSON *j) { return cJSON_IsString(j); }

static int has_kind(const cJSON *j, Kind kind) {
    switch (kind) {
    case K_INT: return is_int(j) && !cJSON_IsBool(j);
    case K_NUMBER: return cJSON_IsNumber(j);
    case K_STRING: return cJSON_IsString(j);
    case K_BOOL: return cJSON_IsBool(j);
    case K_INT_ARRAY: return cJSON_IsArray(j) && cJSON_GetArraySize(j) > 0 && all_items(j, is_int);
    case K_STRING_ARRAY: return cJSON_IsArray(j) && cJSON_GetArraySize(j) > 0 && all_items(j, is_string);
    case K_OBJECT: return cJSON_IsObject(j);
    case K_NULL_OR_OBJECT: return cJSON_IsNull(j) || cJSON_IsObject(j);
    }
    return 0;
}

static int int_at(const cJSON *root, const char *path) {
    const cJSON *j = lookup(root, path);
    if (!is_int(j)) fail_msg("config key '%s' is missing or not an integer", path);
    return (int)j->valuedouble;
}

static const char *string_at(const cJSON *root, const char *path) {
    const cJSON *j = lookup(root, path);
    if (!cJSON_IsString(j)) fail_msg("config key '%s' is missing or not a string", path);
    return j->valuestring;
}

/* Every key the loaders read is there, with the type they read it as; none of the keys that would change their
 * reading is. */
static void test_config_keys_and_types(void **state) {
    Fixture *f = *state;
    for (size_t i = 0; i < sizeof CONFIG_KEYS / sizeof *CONFIG_KEYS; i++) {
        const cJSON *j = lookup(f->config, CONFIG_KEYS[i].key);
        if (!j) fail_msg("config.json lacks '%s' (read by %s)", CONFIG_KEYS[i].key, CONFIG_KEYS[i].readers);
        if (!has_kind(j, CONFIG_KEYS[i].kind))
            fail_msg("config.json '%s' has the wrong type (read by %s)", CONFIG_KEYS[i].key, CONFIG_KEYS[i].readers);
    }
    for (size_t i = 0; i < sizeof CHANGING_KEYS / sizeof *CHANGING_KEYS; i++) {
        const cJSON *j = lookup(f->config, CHANGING_KEYS[i].key);
        if (!j) continue;
        char *text = cJSON_PrintUnformatted(j);
        int ok = CHANGING_KEYS[i].allowed && strcmp(text, CHANGING_KEYS[i].allowed) == 0;
        if (!ok) fail_msg("config.json has '%s' = %s, which changes how vLLM/SGLang read the drafter",
                          CHANGING_KEYS[i].key, text);
        free(text);
    }
}

/* The values mean what the loaders take them to mean. */
static void test_config_meaning(void **state) {
    Fixture *f = *state;
    const cJSON *c = f->config, *t = f->target_config;
    const cJSON *archs = lookup(c, "architectures");
    assert_string_equal(cJSON_GetArrayItem(archs, 0)->valuestring, "DFlashDraftModel");
    assert_string_equal(string_at(c, "model_type"), "qwen3");
    assert_string_equal(string_at(c, "auto_map.AutoModel"), "dflash.DFlashDraftModel");
    assert_string_equal(string_at(c, "hidden_act"), "silu");
    assert_true(cJSON_IsFalse(lookup(c, "attention_bias")));
    /* the drafter's own shape, as trained */
    assert_int_equal(int_at(c, "num_hidden_layers"), DRAFT_LAYERS);
    assert_int_equal(int_at(c, "intermediate_size"), 256);
    assert_int_equal(int_at(c, "block_size"), BLOCK_SIZE);
    /* fc reads n_taps * hidden_size features of the target: the drafter's hidden size is the target's */
    assert_int_equal(int_at(c, "hidden_size"), int_at(t, "hidden_size"));
    assert_int_equal(int_at(c, "vocab_size"), int_at(t, "vocab_size"));
    assert_int_equal(int_at(c, "num_target_layers"), int_at(t, "num_hidden_layers"));
    assert_int_equal(int_at(c, "num_attention_heads") % int_at(c, "num_key_value_heads"), 0); /* GQA groups */
    /* RoPE as the target's (positions are the target's) */
    assert_true(lookup(c, "rope_theta")->valuedouble == lookup(t, "rope_parameters.rope_theta")->valuedouble);
    assert_true(cJSON_IsNull(lookup(c, "rope_scaling")));
    assert_int_equal(int_at(c, "max_position_embeddings"), int_at(t, "max_position_embeddings"));
    /* one layer type per drafter layer; full attention is non-causal over the block in vLLM (sliding layers
     * without dflash_config.causal would run causally there) */
    const cJSON *types = lookup(c, "layer_types");
    assert_int_equal(cJSON_GetArraySize(types), DRAFT_LAYERS);
    for (const cJSON *e = types->child; e; e = e->next) assert_string_equal(e->valuestring, "full_attention");
}

/* The id a tokenizer gives a newly added "<|MASK|>": its length (SGLang at the commit above adds the token to the
 * target's tokenizer and must land on the id the drafter was trained with). */
static int tokenizer_length(const char *tokenizer_json) {
    cJSON *tok = parse_file(tokenizer_json);
    int top = -1;
    const cJSON *vocab = lookup(tok, "model.vocab");
    for (const cJSON *e = vocab ? vocab->child : NULL; e; e = e->next)
        if (is_int(e) && (int)e->valuedouble > top) top = (int)e->valuedouble;
    const cJSON *added = lookup(tok, "added_tokens");
    for (const cJSON *e = added ? added->child : NULL; e; e = e->next) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (is_int(id) && (int)id->valuedouble > top) top = (int)id->valuedouble;
    }
    cJSON_Delete(tok);
    assert_true(top >= 0);
    return top + 1;
}

static void test_mask_token(void **state) {
    Fixture *f = *state;
    int mask = int_at(f->config, "dflash_config.mask_token_id");
    assert_int_equal(mask, tokenizer_length(df_test_path(TARGET_DIR "/tokenizer.json")));
    assert_true(mask < int_at(f->target_config, "vocab_size")); /* a row of the target's embedding */
}

/* z-lab's build_target_layer_ids (the default of z-lab and SGLang when the ids are not given). */
static void zlab_default_taps(int num_target_layers, int n, int *ids) {
    if (n == 1) {
        ids[0] = num_target_layers / 2;
        return;
    }
    double start = 1, span = (num_target_layers - 3) - start;
    for (int i = 0; i < n; i++) ids[i] = (int)lround(start + i * span / (n - 1));
}

/* target_layer_ids are the decoder layers whose outputs the drafter was trained on, hidden_states[id + 1]. */
static void test_target_layer_ids(void **state) {
    Fixture *f = *state;
    const cJSON *c = f->config;
    const cJSON *ids_json = lookup(c, "dflash_config.target_layer_ids");
    int n = cJSON_GetArraySize(ids_json), L = int_at(f->target_config, "num_hidden_layers");
    assert_int_equal(n, NUM_TAPS);
    int ids[NUM_TAPS], want[NUM_TAPS];
    for (int i = 0; i < n; i++) {
        ids[i] = (int)cJSON_GetArrayItem(ids_json, i)->valuedouble;
        /* SGLang refuses ids outside [0, num_target_layers); vLLM captures the input of layer id + 1 */
        if (ids[i] < 0 || ids[i] >= L) fail_msg("target_layer_ids[%d] = %d is not a decoder layer of %d", i, ids[i], L);
        if (i > 0 && ids[i] <= ids[i - 1]) fail_msg("target_layer_ids are not increasing");
    }
    zlab_default_taps(L, n, want);
    assert_int_equal(f->n_trained_taps, n);
    for (int i = 0; i < n; i++) {
        if (ids[i] != f->trained_taps[i])
            fail_msg("exported tap %d is layer %d, the trainer read layer %d", i, ids[i], f->trained_taps[i]);
        if (ids[i] != want[i]) fail_msg("exported tap %d is layer %d, z-lab's default rule gives %d", i, ids[i], want[i]);
    }

    /* the target forward the trainer uses, at those ids, gives transformers' hidden_states[id + 1] */
    DfModelConfig cfg;
    DfError err;
    if (df_model_config_load(&cfg, df_test_path(TARGET_DIR), &err)) fail_msg("%s", err.msg);
    DfTargetReference r;
    df_test_target_reference_load(&r, TARGET_REFERENCE, &cfg);
    DfTargetModel m;
    DfBackend *be;
    df_test_load_cpu_target(&m, &be, TARGET_DIR, cfg.num_layers, 0);
    float *features = malloc((size_t)r.n_tokens * n * r.hidden * sizeof *features);
    if (df_target_forward(&m, r.ids, r.starts, r.n_seqs, ids, n, features, NULL, &err)) fail_msg("%s", err.msg);
    for (int j = 0; j < n; j++) {
        double e = df_test_tap_error(features, n, j, &r, ids[j]); /* layer_out[l] = hidden_states[l + 1] */
        if (!(e < PARITY_TOL)) fail_msg("tap %d (layer %d): relative error %g against hidden_states[%d]", j, ids[j], e,
                                        ids[j] + 1);
    }
    free(features);
    df_target_free(&m);
    df_backend_destroy(be);
    df_test_target_reference_free(&r);
}

static Sizes config_sizes(const Fixture *f) {
    Sizes s = {
        .hidden = int_at(f->config, "hidden_size"),
        .inter = int_at(f->config, "intermediate_size"),
        .layers = int_at(f->config, "num_hidden_layers"),
        .heads = int_at(f->config, "num_attention_heads"),
        .kv_heads = int_at(f->config, "num_key_value_heads"),
        .head_dim = int_at(f->config, "head_dim"),
        .n_taps = cJSON_GetArraySize(lookup(f->config, "dflash_config.target_layer_ids")),
        .target_hidden = int_at(f->target_config, "hidden_size"),
    };
    return s;
}

static void layer_weight_shape(const Sizes *s, int w, int64_t shape[2], int *ndim) {
    int64_t H = s->hidden, q = (int64_t)s->heads * s->head_dim, kv = (int64_t)s->kv_heads * s->head_dim;
    *ndim = 2;
    switch (w) {
    case W_Q: shape[0] = q, shape[1] = H; break;
    case W_K:
    case W_V: shape[0] = kv, shape[1] = H; break;
    case W_O: shape[0] = H, shape[1] = q; break;
    case W_QN:
    case W_KN: shape[0] = s->head_dim, *ndim = 1; break;
    case W_GATE:
    case W_UP: shape[0] = s->inter, shape[1] = H; break;
    case W_DOWN: shape[0] = H, shape[1] = s->inter; break;
    default: shape[0] = H, *ndim = 1; break;
    }
}

static void check_tensor(const DfSafetensors *st, const char *name, int ndim, const int64_t *shape) {
    const DfTensorInfo *t = df_safetensors_find(st, name);
    if (!t) fail_msg("model.safetensors lacks '%s'", name);
    if (t->dtype != DF_DTYPE_BF16) fail_msg("'%s' is %s, not BF16 (config.json says bfloat16)", name, df_dtype_name(t->dtype));
    int same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (!same) {
        char got[128] = "", want[128] = "";
        for (int d = 0; d < t->ndim; d++) snprintf(got + strlen(got), sizeof got - strlen(got), " %lld", (long long)t->shape[d]);
        for (int d = 0; d < ndim; d++) snprintf(want + strlen(want), sizeof want - strlen(want), " %lld", (long long)shape[d]);
        fail_msg("'%s' has shape [%s ], the loaders expect [%s ]", name, got, want);
    }
}

/* Exactly the weights the loaders take, with the shapes the config implies; none they would refuse or misread
 * (vLLM asserts no mask_hidden and maps d2t/t2d, embed_tokens and lm_head, which the export leaves to the
 * target). */
static void test_weights(void **state) {
    Fixture *f = *state;
    Sizes s = config_sizes(f);
    DfSafetensors st;
    DfError err;
    if (df_safetensors_open(&st, f->export_dir, &err)) fail_msg("%s", err.msg);
    int64_t fc[2] = {s.hidden, (int64_t)s.n_taps * s.target_hidden}, vec[1] = {s.hidden};
    check_tensor(&st, "fc.weight", 2, fc);
    check_tensor(&st, "hidden_norm.weight", 1, vec);
    check_tensor(&st, "norm.weight", 1, vec);
    for (int l = 0; l < s.layers; l++)
        for (int w = 0; w < N_LAYER_WEIGHTS; w++) {
            char name[128];
            int64_t shape[2];
            int ndim;
            snprintf(name, sizeof name, "layers.%d.%s", l, LAYER_WEIGHTS[w]);
            layer_weight_shape(&s, w, shape, &ndim);
            check_tensor(&st, name, ndim, shape);
        }
    int expected = (int)(sizeof TOP_WEIGHTS / sizeof *TOP_WEIGHTS) + s.layers * N_LAYER_WEIGHTS;
    if (st.n_tensors != expected) {
        for (int i = 0; i < st.n_tensors; i++) fprintf(stderr, "  %s\n", st.tensors[i].name);
        fail_msg("model.safetensors holds %d tensors, the loaders take %d", st.n_tensors, expected);
    }
    df_safetensors_close(&st);
}

/* A drafter with sliding-window layers: layer_types names them and sliding_window gives the window (z-lab reads
 * both; vLLM takes the window from sliding_window), and dflash_config.causal is false so that vLLM keeps the
 * block's attention both ways in those layers too, as it was trained. */
static void test_sliding_window_export(void **state) {
    Fixture *f = *state;
    char args[4096];
    snprintf(args, sizeof args,
             "train --target '%s' --data '%s' --output sliding " TRAIN_OPTIONS " --sliding-window 16 --stop-at 1",
             df_test_path(TARGET_DIR), f->run.data);
    if (df_test_dflash_in(&f->run, 2, args) != 0) fail_msg("'%s' failed:\n%s", args, f->run.out);
    char *text = df_test_read_in(&f->run, "sliding/final/config.json");
    cJSON *c = cJSON_Parse(text);
    free(text);
    assert_non_null(c);
    const cJSON *types = lookup(c, "layer_types");
    assert_int_equal(cJSON_GetArraySize(types), DRAFT_LAYERS);
    assert_string_equal(cJSON_GetArrayItem(types, 0)->valuestring, "sliding_attention"); /* all but the last */
    assert_string_equal(cJSON_GetArrayItem(types, 1)->valuestring, "full_attention");
    assert_int_equal(int_at(c, "sliding_window"), 16);
    assert_true(cJSON_IsTrue(lookup(c, "use_sliding_window"))); /* transformers keeps sliding_window only with it */
    if (!cJSON_IsFalse(lookup(c, "dflash_config.causal")))
        fail_msg("a sliding-window export lacks dflash_config.causal = false: vLLM would run its sliding layers causally");
    cJSON_Delete(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_keys_and_types),
        cmocka_unit_test(test_config_meaning),
        cmocka_unit_test(test_mask_token),
        cmocka_unit_test(test_target_layer_ids),
        cmocka_unit_test(test_weights),
        cmocka_unit_test(test_sliding_window_export),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
