/* config.json of a Qwen3 / Llama-3 / Qwen3.5 target. Each field is read
 * through a helper that checks presence and JSON type, so that every error
 * names the file and the field. A Qwen3_5ForConditionalGeneration keeps the
 * text model's fields in "text_config" (its vision tower is ignored). */
#include "target/model_config.h"

#include "target/dense_config.h"
#include "target/hybrid_config.h"
#include "json/json_fields.h"
#include "target/target_family.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/mapped_file.h"
#include "json/json_parse.h"

/* The architectures dflash runs, each of a family (target/target_family.h). */
static const struct {
    const char *architecture;
    const char *model_type;
    DfArchitecture arch;
    const DfTargetFamily *family;
    int has_qk_norm;
    int nested; /* text model fields in "text_config", tensors under "model.language_model." */
} ARCHITECTURES[] = {
    {"Qwen3ForCausalLM", "qwen3", DF_ARCH_QWEN3, &df_dense_family, 1, 0},
    {"LlamaForCausalLM", "llama", DF_ARCH_LLAMA, &df_dense_family, 0, 0},
    {"Qwen3_5ForCausalLM", "qwen3_5_text", DF_ARCH_QWEN3_5, &df_hybrid_family, 1, 0},
    {"Qwen3_5ForConditionalGeneration", "qwen3_5", DF_ARCH_QWEN3_5, &df_hybrid_family, 1, 1},
};
#define N_ARCHITECTURES (sizeof ARCHITECTURES / sizeof ARCHITECTURES[0])
#define SUPPORTED_ARCHS "Qwen3ForCausalLM, LlamaForCausalLM, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration"
#define SUPPORTED_MODEL_TYPES "qwen3, llama, qwen3_5_text, qwen3_5"

/* Transformers' default RoPE base for both families when the config gives none. */
#define DF_DEFAULT_ROPE_THETA 10000.0

/* Sets cfg->arch and the architecture's traits; *family, *nested: see ARCHITECTURES. */
static int read_architecture(const DfJsonReader *r, const cJSON *root, DfModelConfig *cfg,
                             const DfTargetFamily **family, int *nested) {
    const cJSON *archs = df_json_field(root, "architectures");
    const char *name = NULL;
    if (archs) {
        if (!cJSON_IsArray(archs) || !cJSON_IsString(archs->child))
            return df_fail(r->err, "%s: field 'architectures' must be an array of strings", r->path);
        name = archs->child->valuestring;
    } else {
        const char *model_type;
        if (df_json_read_string(r, root, "", "model_type", &model_type) != 0) return -1;
        if (!model_type)
            return df_fail(r->err, "%s: neither 'architectures' nor 'model_type' is given (supported: %s)", r->path,
                           SUPPORTED_ARCHS);
        for (size_t i = 0; i < N_ARCHITECTURES && !name; i++)
            if (strcmp(model_type, ARCHITECTURES[i].model_type) == 0) name = ARCHITECTURES[i].architecture;
        if (!name)
            return df_fail(r->err, "%s: model_type '%s' is not supported (supported: %s)", r->path, model_type,
                           SUPPORTED_MODEL_TYPES);
    }
    for (size_t i = 0; i < N_ARCHITECTURES; i++)
        if (strcmp(name, ARCHITECTURES[i].architecture) == 0) {
            cfg->arch = ARCHITECTURES[i].arch;
            cfg->has_qk_norm = ARCHITECTURES[i].has_qk_norm;
            *nested = ARCHITECTURES[i].nested;
            *family = ARCHITECTURES[i].family;
            snprintf(cfg->weight_prefix, sizeof cfg->weight_prefix, "%s", *nested ? "model.language_model." : "model.");
            snprintf(cfg->architecture_name, sizeof cfg->architecture_name, "%s", name);
            return 0;
        }
    return df_fail(r->err, "%s: architecture '%s' is not supported (supported: %s)", r->path, name, SUPPORTED_ARCHS);
}

static int read_sizes(const DfJsonReader *r, const cJSON *root, DfModelConfig *cfg) {
    if (df_json_read_int(r, root, "", "hidden_size", 1, 0, &cfg->hidden_size) != 0 ||
        df_json_read_int(r, root, "", "intermediate_size", 1, 0, &cfg->intermediate_size) != 0 ||
        df_json_read_int(r, root, "", "num_hidden_layers", 1, 0, &cfg->num_layers) != 0 ||
        df_json_read_int(r, root, "", "num_attention_heads", 1, 0, &cfg->num_heads) != 0 ||
        df_json_read_int(r, root, "", "vocab_size", 1, 0, &cfg->vocab_size) != 0 ||
        df_json_read_int(r, root, "", "max_position_embeddings", 1, 0, &cfg->max_position_embeddings) != 0 ||
        df_json_read_double(r, root, "", "rms_norm_eps", 1, 0, &cfg->rms_norm_eps) != 0)
        return -1;
    if (df_json_read_int(r, root, "", "num_key_value_heads", 0, cfg->num_heads, &cfg->num_kv_heads) != 0) return -1;
    int default_head_dim = cfg->num_heads > 0 ? cfg->hidden_size / cfg->num_heads : 0;
    return df_json_read_int(r, root, "", "head_dim", 0, default_head_dim, &cfg->head_dim);
}

static int read_llama3_scaling(const DfJsonReader *r, const cJSON *scaling, const char *scope, DfRopeConfig *rope) {
    rope->type = DF_ROPE_LLAMA3;
    return df_json_read_double(r, scaling, scope, "factor", 1, 0, &rope->factor) != 0 ||
                   df_json_read_double(r, scaling, scope, "low_freq_factor", 1, 0, &rope->low_freq_factor) != 0 ||
                   df_json_read_double(r, scaling, scope, "high_freq_factor", 1, 0, &rope->high_freq_factor) != 0 ||
                   df_json_read_int(r, scaling, scope, "original_max_position_embeddings", 1, 0,
                            &rope->original_max_position_embeddings) != 0
               ? -1
               : 0;
}

/* RoPE base from "rope_parameters.rope_theta" or top-level "rope_theta";
 * scaling from "rope_scaling" (older spelling) or "rope_parameters". */
static int read_rope(const DfJsonReader *r, const cJSON *root, DfRopeConfig *rope) {
    memset(rope, 0, sizeof *rope);
    const cJSON *params = df_json_field(root, "rope_parameters");
    const cJSON *scaling = df_json_field(root, "rope_scaling");
    if (params && !cJSON_IsObject(params))
        return df_fail(r->err, "%s: field 'rope_parameters' must be an object, not %s", r->path,
                       df_json_type_name(params));
    if (scaling && !cJSON_IsObject(scaling))
        return df_fail(r->err, "%s: field 'rope_scaling' must be an object, not %s", r->path,
                       df_json_type_name(scaling));
    if (df_json_read_double(r, root, "", "rope_theta", 0, DF_DEFAULT_ROPE_THETA, &rope->theta) != 0) return -1;
    if (params && df_json_read_double(r, params, "rope_parameters.", "rope_theta", 0, rope->theta, &rope->theta) != 0)
        return -1;
    const char *scope = scaling ? "rope_scaling." : "rope_parameters.";
    if (!scaling) scaling = params;
    rope->type = DF_ROPE_DEFAULT;
    if (!scaling) return 0;
    const char *type;
    if (df_json_read_string(r, scaling, scope, "rope_type", &type) != 0) return -1;
    if (!type && df_json_read_string(r, scaling, scope, "type", &type) != 0) return -1;
    if (!type || strcmp(type, "default") == 0) return 0;
    if (strcmp(type, "llama3") == 0) return read_llama3_scaling(r, scaling, scope, rope);
    return df_fail(r->err, "%s: rope type '%s' (%srope_type) is not supported (supported: default, llama3)", r->path,
                   type, scope);
}

static int read_token_ids(const DfJsonReader *r, const cJSON *root, DfModelConfig *cfg) {
    if (df_json_read_int(r, root, "", "bos_token_id", 0, -1, &cfg->bos_token_id) != 0) return -1;
    const cJSON *eos = df_json_field(root, "eos_token_id");
    cfg->n_eos = 0;
    if (!eos) return 0;
    if (!cJSON_IsArray(eos)) return df_json_read_int(r, root, "", "eos_token_id", 1, 0, &cfg->eos_token_ids[cfg->n_eos++]);
    for (const cJSON *e = eos->child; e; e = e->next) {
        if (!df_json_is_int(e))
            return df_fail(r->err, "%s: field 'eos_token_id' must be an integer or a list of integers", r->path);
        if (cfg->n_eos == DF_MAX_EOS)
            return df_fail(r->err, "%s: field 'eos_token_id' lists more than %d ids", r->path, DF_MAX_EOS);
        cfg->eos_token_ids[cfg->n_eos++] = (int)e->valuedouble;
    }
    return 0;
}

static int read_dtype(const DfJsonReader *r, const cJSON *root, DfModelConfig *cfg) {
    const char *dtype;
    if (df_json_read_string(r, root, "", "torch_dtype", &dtype) != 0) return -1;
    if (!dtype && df_json_read_string(r, root, "", "dtype", &dtype) != 0) return -1;
    if (!dtype) dtype = "";
    if (strlen(dtype) >= sizeof cfg->torch_dtype)
        return df_fail(r->err, "%s: field 'torch_dtype' has an unknown value '%s'", r->path, dtype);
    snprintf(cfg->torch_dtype, sizeof cfg->torch_dtype, "%s", dtype);
    return 0;
}

static int check_positive(const DfJsonReader *r, const char *name, double value) {
    if (!(value > 0)) return df_fail(r->err, "%s: field '%s' must be positive (is %g)", r->path, name, value);
    return 0;
}

static int check_sanity(const DfJsonReader *r, const DfModelConfig *cfg) {
    if (check_positive(r, "hidden_size", cfg->hidden_size) || check_positive(r, "intermediate_size", cfg->intermediate_size) ||
        check_positive(r, "num_hidden_layers", cfg->num_layers) ||
        check_positive(r, "num_attention_heads", cfg->num_heads) ||
        check_positive(r, "num_key_value_heads", cfg->num_kv_heads) || check_positive(r, "head_dim", cfg->head_dim) ||
        check_positive(r, "vocab_size", cfg->vocab_size) ||
        check_positive(r, "max_position_embeddings", cfg->max_position_embeddings) ||
        check_positive(r, "rms_norm_eps", cfg->rms_norm_eps) || check_positive(r, "rope_theta", cfg->rope.theta))
        return -1;
    if (cfg->num_heads % cfg->num_kv_heads != 0)
        return df_fail(r->err, "%s: num_attention_heads %d is not divisible by num_key_value_heads %d", r->path,
                       cfg->num_heads, cfg->num_kv_heads);
    if (cfg->head_dim % 2 != 0) return df_fail(r->err, "%s: head_dim %d is odd (RoPE needs pairs)", r->path, cfg->head_dim);
    if (cfg->attention_bias)
        return df_fail(r->err, "%s: field 'attention_bias' is true: attention biases are not supported", r->path);
    if (cfg->rope.type == DF_ROPE_LLAMA3 &&
        (check_positive(r, "rope_scaling.factor", cfg->rope.factor) ||
         check_positive(r, "rope_scaling.low_freq_factor", cfg->rope.low_freq_factor) ||
         check_positive(r, "rope_scaling.high_freq_factor", cfg->rope.high_freq_factor) ||
         check_positive(r, "rope_scaling.original_max_position_embeddings",
                        cfg->rope.original_max_position_embeddings)))
        return -1;
    if (cfg->rope.type == DF_ROPE_LLAMA3 && cfg->rope.high_freq_factor <= cfg->rope.low_freq_factor)
        return df_fail(r->err, "%s: rope scaling high_freq_factor %g must exceed low_freq_factor %g", r->path,
                       cfg->rope.high_freq_factor, cfg->rope.low_freq_factor);
    return 0;
}

/* Fields of the text model, read from obj: the top level, or text_config. */
static int read_text_model(const DfJsonReader *r, const cJSON *obj, const DfTargetFamily *family,
                           DfModelConfig *cfg) {
    if (read_sizes(r, obj, cfg) || read_rope(r, obj, &cfg->rope) ||
        df_json_read_bool(r, obj, "", "tie_word_embeddings", 0, &cfg->tie_word_embeddings) ||
        df_json_read_bool(r, obj, "", "attention_bias", 0, &cfg->attention_bias) || read_token_ids(r, obj, cfg) ||
        read_dtype(r, obj, cfg))
        return -1;
    cfg->rotary_dim = cfg->head_dim;
    /* before anything is sized by it: the layer arrays are bounded */
    if (cfg->num_layers > DF_MAX_LAYERS)
        return df_fail(r->err, "%s: field 'num_hidden_layers' is %d, more than the %d layers supported", r->path,
                       cfg->num_layers, DF_MAX_LAYERS);
    return family->read_config(r, obj, cfg);
}

/* A wrapper's own top-level fields win over text_config's where both may
 * stand (the lm head's tying, the dtype, the token ids). */
static int read_wrapper(const DfJsonReader *r, const cJSON *root, DfModelConfig *cfg) {
    if (df_json_read_bool(r, root, "", "tie_word_embeddings", cfg->tie_word_embeddings, &cfg->tie_word_embeddings))
        return -1;
    if (!cfg->torch_dtype[0] && read_dtype(r, root, cfg)) return -1;
    if (cfg->n_eos == 0 && df_json_field(root, "eos_token_id")) {
        int bos = cfg->bos_token_id;
        if (read_token_ids(r, root, cfg)) return -1;
        if (cfg->bos_token_id < 0) cfg->bos_token_id = bos;
    }
    return 0;
}

static int parse_config(const DfJsonReader *r, const cJSON *root, DfModelConfig *cfg) {
    if (!cJSON_IsObject(root)) return df_fail(r->err, "%s: not a JSON object", r->path);
    int nested = 0;
    const DfTargetFamily *family = NULL;
    if (read_architecture(r, root, cfg, &family, &nested)) return -1;
    if (!nested) return read_text_model(r, root, family, cfg) || check_sanity(r, cfg) ? -1 : 0;
    const cJSON *text;
    if (df_json_read_object(r, root, "", "text_config", &text)) return -1;
    if (!text) return df_fail(r->err, "%s: %s needs the object 'text_config'", r->path, cfg->architecture_name);
    size_t n = strlen(r->path) + sizeof " (text_config)";
    char *path = df_xmalloc(n, "config path");
    snprintf(path, n, "%s (text_config)", r->path);
    DfJsonReader inner = {path, r->err};
    int rc = read_text_model(&inner, text, family, cfg) || read_wrapper(r, root, cfg) || check_sanity(&inner, cfg) ? -1 : 0;
    free(path);
    return rc;
}

int df_model_config_load(DfModelConfig *cfg, const char *path, DfError *err) {
    memset(cfg, 0, sizeof *cfg);
    struct stat sb;
    char *file;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        size_t n = strlen(path) + sizeof "/config.json";
        file = df_xmalloc(n, "config path");
        snprintf(file, n, "%s/config.json", path);
    } else {
        file = df_xstrdup(path);
    }
    DfJsonReader r = {file, err};
    int rc = -1;
    char *text = df_read_text_file(file, NULL, err);
    if (text) {
        cJSON *root = NULL;
        if (df_json_parse(text, strlen(text), file, 0, &root, err) == DF_JSON_OK) rc = parse_config(&r, root, cfg);
        cJSON_Delete(root);
        free(text);
    }
    free(file);
    return rc;
}

/* round(1 + i*(L-4)/(n-1)) with round half to even, in exact integer
 * arithmetic: value = num/den with num = (n-1) + i*(L-4), den = n-1. */
void df_default_target_layer_ids(int num_layers, int n, int *out) {
    if (n == 1) {
        out[0] = num_layers / 2;
        return;
    }
    long long den = n - 1;
    for (int i = 0; i < n; i++) {
        long long num = den + (long long)i * (num_layers - 4);
        long long q = num / den, rem = num % den;
        if (rem < 0) { /* floor division */
            q -= 1;
            rem += den;
        }
        if (2 * rem > den || (2 * rem == den && (q & 1))) q += 1;
        out[i] = (int)q;
    }
}
