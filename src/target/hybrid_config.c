/* Hybrid Qwen3.5 / Qwen3.6 config fields, with transformers' defaults
 * (Qwen3_5TextConfig) where a field is absent. */
#include "target/hybrid_config.h"

#include <string.h>

/* transformers' Qwen3_5TextConfig defaults */
#define DEFAULT_HEAD_DIM 256
#define DEFAULT_FULL_ATTENTION_INTERVAL 4
#define DEFAULT_PARTIAL_ROTARY_FACTOR 0.25

/* "layer_types", or every full_attention_interval-th layer full (the
 * others linear) when it is absent. */
static int read_layer_types(const DfJsonReader *r, const cJSON *obj, DfModelConfig *cfg) {
    const cJSON *types = df_json_field(obj, "layer_types");
    if (!types) {
        int interval;
        if (df_json_read_int(r, obj, "", "full_attention_interval", 0, DEFAULT_FULL_ATTENTION_INTERVAL, &interval))
            return -1;
        if (interval < 1) return df_fail(r->err, "%s: field 'full_attention_interval' must be positive", r->path);
        for (int i = 0; i < cfg->num_layers; i++) cfg->layer_is_linear[i] = (i + 1) % interval != 0;
        return 0;
    }
    if (df_json_check_layer_list(r, types, "layer_types", cfg->num_layers)) return -1;
    int i = 0;
    for (const cJSON *t = types->child; t; t = t->next, i++) {
        if (strcmp(t->valuestring, "linear_attention") == 0)
            cfg->layer_is_linear[i] = 1;
        else if (strcmp(t->valuestring, "full_attention") == 0)
            cfg->layer_is_linear[i] = 0;
        else
            return df_fail(r->err,
                           "%s: field 'layer_types[%d]' is '%s' (supported: linear_attention, full_attention)",
                           r->path, i, t->valuestring);
    }
    return 0;
}

static int read_linear_sizes(const DfJsonReader *r, const cJSON *obj, DfLinearAttnConfig *l) {
    struct {
        const char *name;
        int fallback;
        int *out;
    } f[] = {
        {"linear_num_key_heads", 16, &l->num_key_heads},   {"linear_num_value_heads", 32, &l->num_value_heads},
        {"linear_key_head_dim", 128, &l->key_head_dim},    {"linear_value_head_dim", 128, &l->value_head_dim},
        {"linear_conv_kernel_dim", 4, &l->conv_kernel},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (df_json_read_int(r, obj, "", f[i].name, 0, f[i].fallback, f[i].out)) return -1;
        if (*f[i].out < 1) return df_fail(r->err, "%s: field '%s' must be positive (is %d)", r->path, f[i].name, *f[i].out);
    }
    if (l->num_value_heads % l->num_key_heads != 0)
        return df_fail(r->err, "%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", r->path,
                       l->num_value_heads, l->num_key_heads);
    return 0;
}

/* partial_rotary_factor from rope_parameters (current spelling) or the top
 * level (older); rotary_dim = int(head_dim * factor), as transformers. */
static int read_rotary_dim(const DfJsonReader *r, const cJSON *obj, DfModelConfig *cfg) {
    double factor;
    if (df_json_read_double(r, obj, "", "partial_rotary_factor", 0, DEFAULT_PARTIAL_ROTARY_FACTOR, &factor))
        return -1;
    const cJSON *params = df_json_field(obj, "rope_parameters");
    if (params && df_json_read_double(r, params, "rope_parameters.", "partial_rotary_factor", 0, factor, &factor))
        return -1;
    if (!(factor > 0 && factor <= 1))
        return df_fail(r->err, "%s: partial_rotary_factor %g is outside (0, 1]", r->path, factor);
    cfg->rotary_dim = (int)(cfg->head_dim * factor);
    if (cfg->rotary_dim < 2 || cfg->rotary_dim % 2 != 0)
        return df_fail(r->err, "%s: partial_rotary_factor %g of head_dim %d gives %d rotary dims (must be even, >= 2)",
                       r->path, factor, cfg->head_dim, cfg->rotary_dim);
    return 0;
}

static int check_dense_gated(const DfJsonReader *r, const cJSON *obj, DfModelConfig *cfg) {
    const char *act;
    if (df_json_read_string(r, obj, "", "hidden_act", &act)) return -1;
    if (act && strcmp(act, "silu") != 0)
        return df_fail(r->err, "%s: field 'hidden_act' is '%s' (supported: silu)", r->path, act);
    if (df_json_read_bool(r, obj, "", "attn_output_gate", 1, &cfg->attn_output_gate)) return -1;
    if (!cfg->attn_output_gate)
        return df_fail(r->err, "%s: field 'attn_output_gate' is false: only the gated attention of the family is "
                               "supported", r->path);
    return 0;
}

int df_hybrid_config_read(const DfJsonReader *r, const cJSON *obj, DfModelConfig *cfg) {
    cfg->is_hybrid = 1;
    cfg->norm_unit_offset = 1;
    if (!df_json_field(obj, "head_dim")) cfg->head_dim = DEFAULT_HEAD_DIM;
    return read_layer_types(r, obj, cfg) || read_linear_sizes(r, obj, &cfg->linear) || read_rotary_dim(r, obj, cfg) ||
                   check_dense_gated(r, obj, cfg)
               ? -1
               : 0;
}
