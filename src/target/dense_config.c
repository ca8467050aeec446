/* Dense Qwen3 / Llama-3 config fields that change the forward: checked
 * against the one forward dflash runs (target/dense_config.h). */
#include "target/dense_config.h"

#include <string.h>

static int check_activation(const DfJsonReader *r, const cJSON *obj) {
    const char *act;
    if (df_json_read_string(r, obj, "", "hidden_act", &act)) return -1;
    /* transformers' ACT2FN maps both names to the same SiLU */
    if (act && strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0)
        return df_fail(r->err, "%s: field 'hidden_act' is '%s': only silu is supported", r->path, act);
    return 0;
}

static int check_no_bias(const DfJsonReader *r, const cJSON *obj, const char *name) {
    int on;
    if (df_json_read_bool(r, obj, "", name, 0, &on)) return -1;
    if (on) return df_fail(r->err, "%s: field '%s' is true: biases are not supported", r->path, name);
    return 0;
}

/* Qwen3Config: sliding_window counts only with use_sliding_window, and then
 * for layers from max_window_layers on (its defaults: 4096 and 28). */
static int check_window(const DfJsonReader *r, const cJSON *obj, const DfModelConfig *cfg) {
    int use, window, window_layers;
    if (cfg->arch != DF_ARCH_QWEN3) return 0; /* LlamaConfig has no sliding window */
    if (df_json_read_bool(r, obj, "", "use_sliding_window", 0, &use)) return -1;
    /* an absent sliding_window takes Qwen3Config's default 4096; null is none */
    const cJSON *given = cJSON_GetObjectItemCaseSensitive(obj, "sliding_window");
    if (!use || cJSON_IsNull(given)) return 0;
    if (df_json_read_int(r, obj, "", "sliding_window", 0, 4096, &window) ||
        df_json_read_int(r, obj, "", "max_window_layers", 0, 28, &window_layers))
        return -1;
    if (window_layers >= cfg->num_layers) return 0;
    return df_fail(r->err,
                   "%s: field 'use_sliding_window' is true with sliding_window %d from layer max_window_layers %d of "
                   "%d: sliding-window attention is not supported",
                   r->path, window, window_layers, cfg->num_layers);
}

static int check_layer_types(const DfJsonReader *r, const cJSON *obj, const DfModelConfig *cfg) {
    const cJSON *types = df_json_field(obj, "layer_types");
    if (!types) return 0;
    if (df_json_check_layer_list(r, types, "layer_types", cfg->num_layers)) return -1;
    int i = 0;
    for (const cJSON *t = types->child; t; t = t->next, i++) {
        if (strcmp(t->valuestring, "full_attention") != 0)
            return df_fail(r->err, "%s: field 'layer_types[%d]' is '%s' (supported: full_attention)", r->path, i,
                           t->valuestring);
    }
    return 0;
}

int df_dense_config_read(const DfJsonReader *r, const cJSON *obj, DfModelConfig *cfg) {
    return check_activation(r, obj) || check_no_bias(r, obj, "mlp_bias") ||
                   check_window(r, obj, cfg) || check_layer_types(r, obj, cfg)
               ? -1
               : 0;
}
