/* Drafter export and load in the section 7 format: config.json (built and
 * parsed with cJSON) and model.safetensors (bf16 on export, any float type on
 * load), tensor names exactly as the flat layout's. */
#define _GNU_SOURCE /* renameat2 (RENAME_EXCHANGE), nftw */
#include "model/drafter_io.h"

#include "json/json_fields.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/mapped_file.h"
#include "base/numeric.h"
#include "formats/safetensors.h"
#include "model/dflash_py.h"
#include "model/anchors.h"
#include "json/json_parse.h"

#define DF_DEFAULT_BLOCK_SIZE 16
/* Far above any real drafter; keeps a hostile config from sizing huge tables. */

/* ------------------------------------------------------------ writing JSON */

/* Shortest text that reads back as exactly v (cJSON's own printer only
 * round-trips to within an epsilon), with ".0" on integral values so that
 * Python reads a float, as transformers writes these fields. */
static void format_float(char *buf, size_t cap, double v) {
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(buf, cap, "%.1f", v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

static void add_float(cJSON *obj, const char *name, double v) {
    char buf[64];
    format_float(buf, sizeof buf, v);
    cJSON_AddRawToObject(obj, name, buf);
}

/* rope_theta is an integer in the published configs (1000000, 500000). */
static void add_theta(cJSON *obj, double theta) {
    char buf[64];
    if (theta == floor(theta) && fabs(theta) < 9007199254740992.0) snprintf(buf, sizeof buf, "%.0f", theta);
    else format_float(buf, sizeof buf, theta);
    cJSON_AddRawToObject(obj, "rope_theta", buf);
}

static void add_rope_scaling(cJSON *root, const DfRopeConfig *rope) {
    if (rope->type != DF_ROPE_LLAMA3) {
        cJSON_AddNullToObject(root, "rope_scaling");
        return;
    }
    cJSON *s = cJSON_AddObjectToObject(root, "rope_scaling");
    cJSON_AddStringToObject(s, "rope_type", "llama3");
    add_float(s, "factor", rope->factor);
    add_float(s, "low_freq_factor", rope->low_freq_factor);
    add_float(s, "high_freq_factor", rope->high_freq_factor);
    cJSON_AddNumberToObject(s, "original_max_position_embeddings", rope->original_max_position_embeddings);
}

char *df_drafter_config_json(const DfDrafterConfig *c) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "architectures"), cJSON_CreateString("DFlashDraftModel"));
    cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "auto_map"), "AutoModel", "dflash.DFlashDraftModel");
    cJSON_AddStringToObject(root, "model_type", "qwen3");
    cJSON_AddNumberToObject(root, "block_size", c->block_size);
    cJSON_AddNumberToObject(root, "num_target_layers", c->num_target_layers);
    cJSON *dflash = cJSON_AddObjectToObject(root, "dflash_config");
    if (c->mask_token_id >= 0) cJSON_AddNumberToObject(dflash, "mask_token_id", c->mask_token_id);
    cJSON_AddItemToObject(dflash, "target_layer_ids", cJSON_CreateIntArray(c->target_layer_ids, c->n_taps));
    cJSON_AddNumberToObject(root, "hidden_size", c->hidden_size);
    cJSON_AddNumberToObject(root, "intermediate_size", c->intermediate_size);
    cJSON_AddNumberToObject(root, "num_hidden_layers", c->num_layers);
    cJSON_AddNumberToObject(root, "num_attention_heads", c->num_heads);
    cJSON_AddNumberToObject(root, "num_key_value_heads", c->num_kv_heads);
    cJSON_AddNumberToObject(root, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(root, "vocab_size", c->vocab_size);
    add_float(root, "rms_norm_eps", c->rms_norm_eps);
    add_theta(root, c->rope.theta);
    add_rope_scaling(root, &c->rope);
    cJSON_AddNumberToObject(root, "max_position_embeddings", c->max_position_embeddings);
    cJSON_AddFalseToObject(root, "tie_word_embeddings");
    cJSON *types = cJSON_AddArrayToObject(root, "layer_types");
    for (int i = 0; i < c->num_layers; i++)
        cJSON_AddItemToArray(types, cJSON_CreateString(c->sliding[i] ? "sliding_attention" : "full_attention"));
    if (c->sliding_window > 0) { /* transformers' Qwen3Config keeps sliding_window only with use_sliding_window */
        cJSON_AddTrueToObject(root, "use_sliding_window");
        cJSON_AddNumberToObject(root, "sliding_window", c->sliding_window);
        /* the block attends both ways in every layer; vLLM runs a sliding_attention layer causally unless this
         * says otherwise */
        cJSON_AddFalseToObject(dflash, "causal");
    }
    cJSON_AddStringToObject(root, "hidden_act", "silu");
    cJSON_AddFalseToObject(root, "attention_bias");
    cJSON_AddStringToObject(root, "dtype", "bfloat16");
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return NULL;
    size_t n = strlen(text);
    char *out = df_xmalloc(n + 2, "config.json");
    memcpy(out, text, n);
    memcpy(out + n, "\n", 2);
    cJSON_free(text);
    return out;
}

/* ------------------------------------------------------------ reading JSON */

static int has_string(const cJSON *array, const char *s) {
    for (const cJSON *e = cJSON_IsArray(array) ? array->child : NULL; e; e = e->next)
        if (cJSON_IsString(e) && strcmp(e->valuestring, s) == 0) return 1;
    return 0;
}

/* A DFlash drafter: "architectures" lists DFlashDraftModel, or a qwen3 /
 * llama model_type comes with a dflash_config. */
static int check_identity(const DfJsonReader *r, const cJSON *root) {
    const cJSON *archs = df_json_field(root, "architectures");
    if (archs && !cJSON_IsArray(archs))
        return df_fail(r->err, "%s: field 'architectures' must be an array, not %s", r->path, df_json_type_name(archs));
    if (has_string(archs, "DFlashDraftModel")) return 0;
    const cJSON *type = df_json_field(root, "model_type");
    int family = cJSON_IsString(type) && (strcmp(type->valuestring, "qwen3") == 0 ||
                                          strcmp(type->valuestring, "llama") == 0);
    if (family && df_json_field(root, "dflash_config")) return 0;
    return df_fail(r->err,
                   "%s: not a DFlash drafter config: field 'architectures' does not list DFlashDraftModel and there "
                   "is no qwen3/llama 'model_type' with a 'dflash_config'",
                   r->path);
}

static int read_sizes(const DfJsonReader *r, const cJSON *root, DfDrafterConfig *c) {
    if (df_json_read_int(r, root, "", "hidden_size", 1, 0, &c->hidden_size) ||
        df_json_read_int(r, root, "", "intermediate_size", 1, 0, &c->intermediate_size) ||
        df_json_read_int(r, root, "", "num_hidden_layers", 1, 0, &c->num_layers) ||
        df_json_read_int(r, root, "", "num_attention_heads", 1, 0, &c->num_heads) ||
        df_json_read_int(r, root, "", "vocab_size", 1, 0, &c->vocab_size) ||
        df_json_read_int(r, root, "", "max_position_embeddings", 1, 0, &c->max_position_embeddings) ||
        df_json_read_int(r, root, "", "num_target_layers", 1, 0, &c->num_target_layers) ||
        df_json_read_double(r, root, "", "rms_norm_eps", 1, 0, &c->rms_norm_eps) ||
        df_json_read_int(r, root, "", "num_key_value_heads", 0, c->num_heads, &c->num_kv_heads))
        return -1;
    int default_head_dim = c->num_heads > 0 ? c->hidden_size / c->num_heads : 0;
    return df_json_read_int(r, root, "", "head_dim", 0, default_head_dim, &c->head_dim);
}

static int read_taps(const DfJsonReader *r, const cJSON *dflash, DfDrafterConfig *c) {
    const cJSON *ids = df_json_field(dflash, "target_layer_ids");
    if (!ids) { /* the reference's build_target_layer_ids(num_target_layers, num_hidden_layers) */
        if (c->num_layers < 1 || c->num_layers > DF_MAX_TAPS)
            return df_fail(r->err, "%s: no 'dflash_config.target_layer_ids' and the default needs %d taps (1..%d)",
                           r->path, c->num_layers, DF_MAX_TAPS);
        c->n_taps = c->num_layers;
        df_default_target_layer_ids(c->num_target_layers, c->n_taps, c->target_layer_ids);
        return 0;
    }
    if (!cJSON_IsArray(ids))
        return df_fail(r->err, "%s: field 'dflash_config.target_layer_ids' must be an array, not %s", r->path,
                       df_json_type_name(ids));
    int n = cJSON_GetArraySize(ids);
    if (n < 1 || n > DF_MAX_TAPS)
        return df_fail(r->err, "%s: field 'dflash_config.target_layer_ids' lists %d ids (1..%d supported)", r->path, n,
                       DF_MAX_TAPS);
    int i = 0;
    for (const cJSON *e = ids->child; e; e = e->next, i++) {
        if (!df_json_is_int(e))
            return df_fail(r->err, "%s: field 'dflash_config.target_layer_ids' item %d must be an integer, not %s",
                           r->path, i, df_json_type_name(e));
        c->target_layer_ids[i] = (int)e->valuedouble;
    }
    c->n_taps = n;
    return 0;
}

static int read_dflash(const DfJsonReader *r, const cJSON *root, DfDrafterConfig *c) {
    const cJSON *dflash;
    if (df_json_read_object(r, root, "", "dflash_config", &dflash)) return -1;
    if (df_json_read_int(r, dflash, "dflash_config.", "mask_token_id", 0, -1, &c->mask_token_id)) return -1;
    if (df_json_field(dflash, "mask_token_id") && c->mask_token_id < 0) /* -1 is "unset" only inside */
        return df_fail(r->err, "%s: field 'dflash_config.mask_token_id' is %d, not a token id (leave it out to derive "
                       "it from the tokenizer)", r->path, c->mask_token_id);
    if (read_taps(r, dflash, c)) return -1;
    /* block_size at the top level (ours, z-lab's), else inside dflash_config. */
    if (df_json_field(root, "block_size")) return df_json_read_int(r, root, "", "block_size", 1, 0, &c->block_size);
    return df_json_read_int(r, dflash, "dflash_config.", "block_size", 0, DF_DEFAULT_BLOCK_SIZE, &c->block_size);
}

static int read_rope(const DfJsonReader *r, const cJSON *root, DfRopeConfig *rope) {
    memset(rope, 0, sizeof *rope);
    const cJSON *params, *scaling;
    if (df_json_read_object(r, root, "", "rope_parameters", &params) || df_json_read_object(r, root, "", "rope_scaling", &scaling)) return -1;
    if (df_json_field(root, "rope_theta")) {
        if (df_json_read_double(r, root, "", "rope_theta", 1, 0, &rope->theta)) return -1;
    } else if (df_json_field(params, "rope_theta")) {
        if (df_json_read_double(r, params, "rope_parameters.", "rope_theta", 1, 0, &rope->theta)) return -1;
    } else {
        return df_fail(r->err, "%s: field 'rope_theta' (or 'rope_parameters.rope_theta') is missing", r->path);
    }
    const char *scope = scaling ? "rope_scaling." : "rope_parameters.";
    if (!scaling) scaling = params;
    rope->type = DF_ROPE_DEFAULT;
    if (!scaling) return 0;
    const cJSON *type = df_json_field(scaling, "rope_type");
    if (!type) type = df_json_field(scaling, "type");
    if (type && !cJSON_IsString(type))
        return df_fail(r->err, "%s: field '%srope_type' must be a string, not %s", r->path, scope, df_json_type_name(type));
    if (!type || strcmp(type->valuestring, "default") == 0) return 0;
    if (strcmp(type->valuestring, "llama3") != 0)
        return df_fail(r->err, "%s: rope type '%s' (%srope_type) is not supported (supported: default, llama3)",
                       r->path, type->valuestring, scope);
    rope->type = DF_ROPE_LLAMA3;
    return df_json_read_double(r, scaling, scope, "factor", 1, 0, &rope->factor) ||
                   df_json_read_double(r, scaling, scope, "low_freq_factor", 1, 0, &rope->low_freq_factor) ||
                   df_json_read_double(r, scaling, scope, "high_freq_factor", 1, 0, &rope->high_freq_factor) ||
                   df_json_read_int(r, scaling, scope, "original_max_position_embeddings", 1, 0,
                            &rope->original_max_position_embeddings)
               ? -1
               : 0;
}

/* "layer_types" (full_attention / sliding_attention per layer) and
 * "sliding_window". As in transformers' Qwen3Config, use_sliding_window
 * false (or a null sliding_window) leaves every layer unwindowed. */
static int read_layer_types(const DfJsonReader *r, const cJSON *root, DfDrafterConfig *c) {
    memset(c->sliding, 0, sizeof c->sliding);
    c->sliding_window = 0;
    const cJSON *types = df_json_field(root, "layer_types");
    if (!types || cJSON_IsNull(types)) return 0;
    if (!cJSON_IsArray(types))
        return df_fail(r->err, "%s: field 'layer_types' must be an array, not %s", r->path, df_json_type_name(types));
    int n = cJSON_GetArraySize(types), any = 0, i = 0;
    if (n != c->num_layers)
        return df_fail(r->err, "%s: field 'layer_types' lists %d layers, num_hidden_layers is %d", r->path, n,
                       c->num_layers);
    if (n > DF_MAX_DRAFT_LAYERS) return 0; /* check_config refuses the layer count */
    for (const cJSON *e = types->child; e; e = e->next, i++) {
        if (cJSON_IsString(e) && strcmp(e->valuestring, "full_attention") == 0) continue;
        if (!cJSON_IsString(e) || strcmp(e->valuestring, "sliding_attention") != 0)
            return df_fail(r->err, "%s: field 'layer_types[%d]' must be \"full_attention\" or \"sliding_attention\"",
                           r->path, i);
        c->sliding[i] = 1;
        any = 1;
    }
    const cJSON *use = df_json_field(root, "use_sliding_window"), *window = df_json_field(root, "sliding_window");
    if (use && !cJSON_IsBool(use))
        return df_fail(r->err, "%s: field 'use_sliding_window' must be a boolean, not %s", r->path, df_json_type_name(use));
    if (!any || cJSON_IsFalse(use) || !window || cJSON_IsNull(window)) {
        memset(c->sliding, 0, sizeof c->sliding);
        return 0;
    }
    if (df_json_read_int(r, root, "", "sliding_window", 1, 0, &c->sliding_window)) return -1;
    if (c->sliding_window < 1)
        return df_fail(r->err, "%s: field 'sliding_window' must be positive (is %d)", r->path, c->sliding_window);
    return 0;
}

/* The drafter code computes no attention bias and only SiLU. */
static int check_unsupported(const DfJsonReader *r, const cJSON *root) {
    const cJSON *bias = df_json_field(root, "attention_bias");
    if (bias && !cJSON_IsFalse(bias))
        return df_fail(r->err, "%s: field 'attention_bias' is %s: attention biases are not supported", r->path,
                       cJSON_IsTrue(bias) ? "true" : df_json_type_name(bias));
    const cJSON *act = df_json_field(root, "hidden_act");
    if (act && !(cJSON_IsString(act) && strcmp(act->valuestring, "silu") == 0))
        return df_fail(r->err, "%s: field 'hidden_act' must be \"silu\"", r->path);
    return 0;
}

static int check_positive(const char *src, const char *name, double v, DfError *err) {
    if (!(v > 0)) return df_fail(err, "%s: field '%s' must be positive (is %g)", src, name, v);
    return 0;
}

/* The invariants every drafter config must satisfy before a layout is built
 * from it. need_mask: the mask token id must be known (export). */
static int check_config(const DfDrafterConfig *c, const char *src, int need_mask, DfError *err) {
    if (check_positive(src, "hidden_size", c->hidden_size, err) ||
        check_positive(src, "intermediate_size", c->intermediate_size, err) ||
        check_positive(src, "num_hidden_layers", c->num_layers, err) ||
        check_positive(src, "num_attention_heads", c->num_heads, err) ||
        check_positive(src, "num_key_value_heads", c->num_kv_heads, err) ||
        check_positive(src, "head_dim", c->head_dim, err) || check_positive(src, "vocab_size", c->vocab_size, err) ||
        check_positive(src, "max_position_embeddings", c->max_position_embeddings, err) ||
        check_positive(src, "num_target_layers", c->num_target_layers, err) ||
        check_positive(src, "rms_norm_eps", c->rms_norm_eps, err) ||
        check_positive(src, "rope_theta", c->rope.theta, err))
        return -1;
    if (c->num_layers > DF_MAX_DRAFT_LAYERS)
        return df_fail(err, "%s: field 'num_hidden_layers' is %d, at most %d supported", src, c->num_layers,
                       DF_MAX_DRAFT_LAYERS);
    if (c->num_heads % c->num_kv_heads != 0)
        return df_fail(err, "%s: num_attention_heads %d is not divisible by num_key_value_heads %d", src, c->num_heads,
                       c->num_kv_heads);
    if (c->head_dim % 2 != 0) return df_fail(err, "%s: field 'head_dim' is %d, odd (RoPE needs pairs)", src, c->head_dim);
    if (c->block_size < 2 || c->block_size > DF_MAX_BLOCK_SIZE)
        return df_fail(err, "%s: field 'block_size' is %d, must be in 2..%d", src, c->block_size, DF_MAX_BLOCK_SIZE);
    if (c->num_heads > DF_MAX_DRAFT_HEADS || c->head_dim > DF_MAX_DRAFT_HEAD_DIM)
        return df_fail(err, "%s: %d attention heads of %d: at most %d heads of at most %d supported", src,
                       c->num_heads, c->head_dim, DF_MAX_DRAFT_HEADS, DF_MAX_DRAFT_HEAD_DIM);
    if (c->n_taps < 1 || c->n_taps > DF_MAX_TAPS)
        return df_fail(err, "%s: %d target layer ids, 1..%d supported", src, c->n_taps, DF_MAX_TAPS);
    for (int i = 0; i < c->n_taps; i++)
        if (c->target_layer_ids[i] < 0 || c->target_layer_ids[i] >= c->num_target_layers)
            return df_fail(err, "%s: field 'dflash_config.target_layer_ids' item %d is %d, outside the target's %d layers",
                           src, i, c->target_layer_ids[i], c->num_target_layers);
    if (need_mask && c->mask_token_id < 0)
        return df_fail(err, "%s: the mask token id is not set (dflash_config.mask_token_id)", src);
    if (c->mask_token_id >= c->vocab_size || c->mask_token_id < -1)
        return df_fail(err, "%s: field 'dflash_config.mask_token_id' is %d, outside the embedding's %d rows", src,
                       c->mask_token_id, c->vocab_size);
    if (c->rope.type == DF_ROPE_LLAMA3 &&
        (check_positive(src, "rope_scaling.factor", c->rope.factor, err) ||
         check_positive(src, "rope_scaling.low_freq_factor", c->rope.low_freq_factor, err) ||
         check_positive(src, "rope_scaling.high_freq_factor", c->rope.high_freq_factor, err) ||
         check_positive(src, "rope_scaling.original_max_position_embeddings",
                        c->rope.original_max_position_embeddings, err)))
        return -1;
    return 0;
}

int df_drafter_config_parse(const char *json_text, const char *source, DfDrafterConfig *cfg, DfError *err) {
    memset(cfg, 0, sizeof *cfg);
    DfJsonReader r = {source, err};
    cJSON *root = NULL;
    if (df_json_parse(json_text, strlen(json_text), source, 0, &root, err) != DF_JSON_OK) return -1;
    int rc = !cJSON_IsObject(root) ? df_fail(err, "%s: not a JSON object", source)
             : check_identity(&r, root) || read_sizes(&r, root, cfg) || read_dflash(&r, root, cfg) ||
                     read_rope(&r, root, &cfg->rope) || read_layer_types(&r, root, cfg) || check_unsupported(&r, root) ||
                     check_config(cfg, source, 0, err)
                 ? -1
                 : 0;
    cJSON_Delete(root);
    if (rc == 0) cfg->gamma = df_default_gamma(cfg->block_size);
    return rc;
}

/* ------------------------------------------------------ config comparison */

#define DIFF_INT(field_name, member)                                                                   \
    if (a->member != b->member) {                                                                      \
        snprintf(what, cap, "%s: %d vs %d", field_name, a->member, b->member);                         \
        return 1;                                                                                      \
    }
#define DIFF_DOUBLE(field_name, member)                                                                \
    if (a->member != b->member) {                                                                          \
        snprintf(what, cap, "%s: %.17g vs %.17g", field_name, a->member, b->member);                   \
        return 1;                                                                                      \
    }

static void format_taps(char *buf, size_t cap, const DfDrafterConfig *c) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < c->n_taps && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%d", i ? ", " : "", c->target_layer_ids[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

int df_drafter_config_differs(const DfDrafterConfig *a, const DfDrafterConfig *b, char *what, size_t cap) {
    DIFF_INT("hidden_size", hidden_size)
    DIFF_INT("intermediate_size", intermediate_size)
    DIFF_INT("num_hidden_layers", num_layers)
    DIFF_INT("num_attention_heads", num_heads)
    DIFF_INT("num_key_value_heads", num_kv_heads)
    DIFF_INT("head_dim", head_dim)
    DIFF_INT("vocab_size", vocab_size)
    DIFF_INT("block_size", block_size)
    DIFF_INT("num_target_layers", num_target_layers)
    DIFF_INT("dflash_config.mask_token_id", mask_token_id)
    int taps_equal = a->n_taps == b->n_taps;
    for (int i = 0; taps_equal && i < a->n_taps; i++) taps_equal = a->target_layer_ids[i] == b->target_layer_ids[i];
    if (!taps_equal) {
        char ta[128], tb[128];
        format_taps(ta, sizeof ta, a);
        format_taps(tb, sizeof tb, b);
        snprintf(what, cap, "dflash_config.target_layer_ids: %s vs %s", ta, tb);
        return 1;
    }
    DIFF_INT("max_position_embeddings", max_position_embeddings)
    DIFF_DOUBLE("rms_norm_eps", rms_norm_eps)
    DIFF_DOUBLE("rope_theta", rope.theta)
    if (a->rope.type != b->rope.type) {
        snprintf(what, cap, "rope_scaling.rope_type: %s vs %s", a->rope.type == DF_ROPE_LLAMA3 ? "llama3" : "default",
                 b->rope.type == DF_ROPE_LLAMA3 ? "llama3" : "default");
        return 1;
    }
    if (a->rope.type == DF_ROPE_LLAMA3) {
        DIFF_DOUBLE("rope_scaling.factor", rope.factor)
        DIFF_DOUBLE("rope_scaling.low_freq_factor", rope.low_freq_factor)
        DIFF_DOUBLE("rope_scaling.high_freq_factor", rope.high_freq_factor)
        DIFF_INT("rope_scaling.original_max_position_embeddings", rope.original_max_position_embeddings)
    }
    DIFF_INT("sliding_window", sliding_window)
    for (int i = 0; i < a->num_layers && i < DF_MAX_DRAFT_LAYERS; i++)
        if (a->sliding[i] != b->sliding[i]) {
            snprintf(what, cap, "layer_types[%d]: %s vs %s", i, a->sliding[i] ? "sliding_attention" : "full_attention",
                     b->sliding[i] ? "sliding_attention" : "full_attention");
            return 1;
        }
    DIFF_DOUBLE("gamma (loss decay)", gamma)
    if (cap) what[0] = '\0';
    return 0;
}

/* ------------------------------------------------------------ filesystem */

static char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = df_xmalloc(n, "path");
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* dir + suffix + "-" + pid: a sibling name unique to this process. */
static char *sibling_path(const char *dir, const char *suffix) {
    size_t n = strlen(dir) + strlen(suffix) + 32;
    char *p = df_xmalloc(n, "path");
    snprintf(p, n, "%s%s-%ld", dir, suffix, (long)getpid());
    return p;
}

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb, (void)type, (void)ftw;
    return remove(path);
}

/* rm -r without following symlinks; -1 when anything could not be removed. */
static int remove_tree(const char *path) {
    return nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh empty directory at tmp. A directory already there is a leftover of
 * an earlier process with our pid (the name is ours); anything else is not
 * ours to delete. */
static int make_fresh_dir(const char *tmp, DfError *err) {
    struct stat sb;
    if (lstat(tmp, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return df_fail(err, "%s: exists and is not a directory (the export's temporary path; remove it)", tmp);
        if (remove_tree(tmp) != 0) return df_fail_errno(err, "%s: cannot remove a stale temporary directory", tmp);
    }
    if (mkdir(tmp, 0755) != 0) return df_fail_errno(err, "%s: cannot create the temporary directory", tmp);
    return 0;
}

/* Puts the finished tmp directory at dir. An existing dir is swapped out
 * atomically where the filesystem can (RENAME_EXCHANGE: dir never goes
 * missing), else renamed aside first and restored if the second rename
 * fails. The old contents are removed only once the new dir is in place. */
static int replace_dir(const char *tmp, const char *dir, DfError *err) {
    struct stat sb;
    if (lstat(dir, &sb) != 0) {
        if (errno != ENOENT) return df_fail_errno(err, "%s: cannot stat", dir);
        if (rename(tmp, dir) != 0) return df_fail_errno(err, "%s: cannot rename %s into place", dir, tmp);
        return df_fsync_parent_dir(dir, err);
    }
    if (!S_ISDIR(sb.st_mode)) return df_fail(err, "%s: exists and is not a directory; not replacing it", dir);
#ifdef RENAME_EXCHANGE
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) == 0) {
        int rc = df_fsync_parent_dir(dir, err);
        if (remove_tree(tmp) != 0) fprintf(stderr, "warning: %s: could not remove the replaced export\n", tmp);
        return rc;
    }
    if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
        return df_fail_errno(err, "%s: cannot swap %s into place", dir, tmp);
#endif
    char *aside = sibling_path(dir, ".old");
    int rc = 0;
    if (rename(dir, aside) != 0) {
        rc = df_fail_errno(err, "%s: cannot rename the previous export aside to %s", dir, aside);
    } else if (rename(tmp, dir) != 0) {
        rc = df_fail_errno(err, "%s: cannot rename %s into place", dir, tmp);
        if (rename(aside, dir) != 0) fprintf(stderr, "warning: the previous %s is left at %s\n", dir, aside);
    } else {
        rc = df_fsync_parent_dir(dir, err);
        if (remove_tree(aside) != 0) fprintf(stderr, "warning: %s: could not remove the replaced export\n", aside);
    }
    free(aside);
    return rc;
}

/* ----------------------------------------------------------------- export */

/* The layout must be the one cfg implies: same names, shapes and offsets. */
static int check_layout(const DfDrafterLayout *layout, const DfDrafterConfig *cfg, const char *dir, DfError *err) {
    DfDrafterLayout want;
    df_drafter_layout_build(&want, cfg);
    int rc = 0;
    if (want.n_params != layout->n_params || want.total != layout->total)
        rc = df_fail(err, "%s: parameter layout (%d tensors, %zu values) does not match the config (%d, %zu)", dir,
                     layout->n_params, layout->total, want.n_params, want.total);
    for (int i = 0; rc == 0 && i < want.n_params; i++) {
        const DfParamInfo *p = &layout->params[i], *q = &want.params[i];
        if (strcmp(p->name, q->name) != 0 || p->offset != q->offset || p->count != q->count || p->ndim != q->ndim ||
            p->shape[0] != q->shape[0] || p->shape[1] != q->shape[1])
            rc = df_fail(err, "%s: parameter %d ('%s') does not match the config's layout ('%s')", dir, i, p->name,
                         q->name);
    }
    df_drafter_layout_free(&want);
    return rc;
}

static int write_export_files(const char *tmp, const DfDrafterConfig *cfg, const DfDrafterLayout *layout,
                              const float *params, DfError *err) {
    char *json = df_drafter_config_json(cfg);
    if (!json) return df_fail(err, "%s: cannot build config.json (out of memory)", tmp);
    char *config_path = path_join(tmp, "config.json"), *module_path = path_join(tmp, "dflash.py");
    int rc = df_atomic_write_text(config_path, json, 0, err);
    if (rc == 0) rc = df_atomic_write_text(module_path, df_dflash_py, 0, err); /* auto_map's module */
    free(config_path);
    free(module_path);
    free(json);
    if (rc != 0) return -1;

    uint16_t *bf16 = df_xmalloc((layout->total ? layout->total : 1) * sizeof *bf16, "bf16 export");
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < layout->total; i++) bf16[i] = df_f32_to_bf16(params[i]);
    DfTensorOut *outs = df_xcalloc((size_t)layout->n_params, sizeof *outs, "export tensors");
    for (int i = 0; i < layout->n_params; i++) {
        const DfParamInfo *p = &layout->params[i];
        outs[i] = (DfTensorOut){.name = p->name, .dtype = DF_DTYPE_BF16, .ndim = p->ndim, .data = bf16 + p->offset};
        outs[i].shape[0] = p->shape[0];
        outs[i].shape[1] = p->shape[1];
    }
    char *model_path = path_join(tmp, "model.safetensors");
    /* transformers refuses safetensors files whose metadata lacks a known "format". */
    rc = df_safetensors_write(model_path, outs, layout->n_params, "{\"format\":\"pt\"}", err);
    free(model_path);
    free(outs);
    free(bf16);
    return rc;
}

/* dir without trailing slashes (so that "out/d/" gets its siblings next to
 * it, not inside it); NULL for names that cannot be replaced by a rename. */
static char *export_dir_name(const char *dir, DfError *err) {
    char *d = df_xstrdup(dir);
    size_t n = strlen(d);
    while (n > 1 && d[n - 1] == '/') d[--n] = '\0';
    const char *base = strrchr(d, '/') ? strrchr(d, '/') + 1 : d;
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
        df_fail(err, "'%s': not a directory name that an export can replace", dir);
        free(d);
        return NULL;
    }
    return d;
}

int df_drafter_export(const char *dir_arg, const DfDrafterConfig *cfg, const DfDrafterLayout *layout,
                      const float *params, DfError *err) {
    if (check_config(cfg, dir_arg, 1, err) != 0 || check_layout(layout, cfg, dir_arg, err) != 0) return -1;
    char *dir = export_dir_name(dir_arg, err);
    if (!dir) return -1;
    char *tmp = sibling_path(dir, ".tmp");
    int rc = make_fresh_dir(tmp, err);
    if (rc == 0) {
        rc = write_export_files(tmp, cfg, layout, params, err);
        if (rc == 0) rc = replace_dir(tmp, dir, err);
        if (rc != 0 && remove_tree(tmp) != 0 && errno != ENOENT)
            fprintf(stderr, "warning: %s: could not remove the temporary export directory\n", tmp);
    }
    free(tmp);
    free(dir);
    return rc;
}

/* ------------------------------------------------------------------- load */

/* Frozen tensors shared with the target: some exporters include them. */
static int is_shared_frozen(const char *name) {
    static const char *const names[] = {"embed_tokens.weight", "model.embed_tokens.weight", "lm_head.weight"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i]) == 0) return 1;
    return 0;
}

static int same_shape(const DfTensorInfo *t, const DfParamInfo *p) {
    return t->ndim == p->ndim && t->shape[0] == p->shape[0] && (p->ndim == 1 || t->shape[1] == p->shape[1]);
}

/* Every layout tensor present with its shape (before anything is allocated:
 * the file's size then bounds the allocation), and no unknown ones. */
static int check_tensor_set(const DfSafetensors *st, const DfDrafterLayout *layout, DfError *err) {
    for (int i = 0; i < layout->n_params; i++) {
        const DfParamInfo *p = &layout->params[i];
        const DfTensorInfo *t = df_safetensors_find(st, p->name);
        if (t && same_shape(t, p)) continue;
        /* Not there or misshapen: the loader's own message names file, tensor and both shapes. */
        float *unused = df_safetensors_load_f32(st, p->name, p->ndim, p->shape, err);
        free(unused);
        if (!unused) return -1;
    }
    for (int i = 0; i < st->n_tensors; i++) {
        const DfTensorInfo *t = &st->tensors[i];
        if (df_drafter_layout_find(layout, t->name) < 0 && !is_shared_frozen(t->name))
            return df_fail(err, "%s: unknown tensor '%s': not a parameter of a %d-layer DFlash drafter", t->file,
                           t->name, layout->num_layers);
    }
    return 0;
}

static int load_tensors(const char *dir, const DfDrafterLayout *layout, float **params_out, DfError *err) {
    DfSafetensors st;
    if (df_safetensors_open(&st, dir, err) != 0) return -1;
    int rc = check_tensor_set(&st, layout, err);
    float *flat = NULL;
    if (rc == 0) flat = df_xmalloc((layout->total ? layout->total : 1) * sizeof *flat, "drafter params");
    for (int i = 0; rc == 0 && i < layout->n_params; i++) {
        const DfParamInfo *p = &layout->params[i];
        float *w = df_safetensors_load_f32(&st, p->name, p->ndim, p->shape, err);
        if (!w) {
            rc = -1;
            break;
        }
        memcpy(flat + p->offset, w, p->count * sizeof *w);
        free(w);
    }
    df_safetensors_close(&st);
    if (rc != 0) {
        free(flat);
        return -1;
    }
    *params_out = flat;
    return 0;
}

int df_drafter_load(const char *dir, DfDrafterConfig *cfg, DfDrafterLayout *layout, float **params, DfError *err) {
    *params = NULL;
    memset(layout, 0, sizeof *layout);
    char *config_path = path_join(dir, "config.json");
    char *text = df_read_text_file(config_path, NULL, err);
    int rc = text ? df_drafter_config_parse(text, config_path, cfg, err) : -1;
    free(text);
    free(config_path);
    if (rc != 0) return -1;
    df_drafter_layout_build(layout, cfg);
    if (load_tensors(dir, layout, params, err) != 0) {
        df_drafter_layout_free(layout);
        return -1;
    }
    return 0;
}
