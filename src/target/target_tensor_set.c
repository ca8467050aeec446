/* The tensor set of a target checkpoint (target/target_tensor_set.h). Names
 * are those of transformers' Qwen3, Llama and Qwen3.5 checkpoints, the same
 * the loaders (dense_load.c, hybrid_load.c) read. */
#include "target/target_tensor_set.h"

#include "target/target_family.h"
#include "target/target_weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const DENSE[] = {
    "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
    "mlp.down_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight", /* the last two: qk-norm families */
};
static const char *const HYBRID_COMMON[] = {
    "input_layernorm.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
    "mlp.down_proj.weight",
};
static const char *const HYBRID_LINEAR[] = {
    "linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight", "linear_attn.in_proj_b.weight",
    "linear_attn.in_proj_a.weight",   "linear_attn.out_proj.weight",  "linear_attn.conv1d.weight",
    "linear_attn.dt_bias",            "linear_attn.A_log",            "linear_attn.norm.weight",
};
static const char *const HYBRID_ATTENTION[] = {
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
};
#define COUNT(a) (sizeof a / sizeof a[0])

typedef struct NameList {
    const char *const *names;
    size_t n;
} NameList;

/* The suffixes of layer `layer`'s tensors, by its kind: lists[0..*n_lists-1]. */
static void layer_lists(const DfModelConfig *c, int layer, NameList lists[2], int *n_lists) {
    DfTargetLayerKind kind = df_target_layer_kind(c, layer);
    if (kind == DF_LAYER_ATTENTION) {
        lists[0] = (NameList){DENSE, c->has_qk_norm ? COUNT(DENSE) : COUNT(DENSE) - 2};
        *n_lists = 1;
        return;
    }
    lists[0] = (NameList){HYBRID_COMMON, COUNT(HYBRID_COMMON)};
    lists[1] = kind == DF_LAYER_GATED_DELTANET ? (NameList){HYBRID_LINEAR, COUNT(HYBRID_LINEAR)}
                                               : (NameList){HYBRID_ATTENTION, COUNT(HYBRID_ATTENTION)};
    *n_lists = 2;
}

static int require(const DfSafetensors *st, const char *name, DfError *err) {
    if (df_safetensors_find(st, name)) return 0;
    const char *file = st->n_tensors ? st->tensors[0].file : "the safetensors";
    return df_fail(err, "tensor %s is missing from %s%s", name, file, st->n_files > 1 ? " and its shards" : "");
}

static int check_present(const DfModelConfig *c, const DfSafetensors *st, DfError *err) {
    char name[512];
    const char *p = df_target_weight_prefix(c);
    for (int i = 0; i < c->num_layers; i++) {
        NameList lists[2];
        int n_lists;
        layer_lists(c, i, lists, &n_lists);
        for (int k = 0; k < n_lists; k++)
            for (size_t j = 0; j < lists[k].n; j++) {
                snprintf(name, sizeof name, "%slayers.%d.%s", p, i, lists[k].names[j]);
                if (require(st, name, err)) return df_context(err, "config.json has num_hidden_layers %d", c->num_layers);
            }
    }
    snprintf(name, sizeof name, "%sembed_tokens.weight", p);
    if (require(st, name, err)) return -1;
    snprintf(name, sizeof name, "%snorm.weight", p);
    if (require(st, name, err)) return -1;
    if (!c->tie_word_embeddings && require(st, "lm_head.weight", err))
        return df_context(err, "config.json has tie_word_embeddings false");
    return 0;
}

static int starts_with(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* rest: "N.SUFFIX" after "layers."; a tensor of decoder layer N < num_layers. */
static int is_layer_tensor(const DfModelConfig *c, const char *rest) {
    char *end;
    long layer = strtol(rest, &end, 10);
    if (end == rest || *end != '.' || layer < 0 || layer >= c->num_layers || (rest[0] == '0' && end - rest > 1))
        return 0;
    NameList lists[2];
    int n_lists;
    layer_lists(c, (int)layer, lists, &n_lists);
    for (int k = 0; k < n_lists; k++)
        for (size_t j = 0; j < lists[k].n; j++)
            if (strcmp(end + 1, lists[k].names[j]) == 0) return 1;
    return 0;
}

/* A tied lm_head.weight that holds the embedding's bytes: what transformers
 * ties it to anyway. */
static int is_tied_copy(const DfModelConfig *c, const DfSafetensors *st, const DfTensorInfo *t) {
    char name[512];
    snprintf(name, sizeof name, "%sembed_tokens.weight", df_target_weight_prefix(c));
    const DfTensorInfo *e = df_safetensors_find(st, name);
    return e && e->dtype == t->dtype && e->nbytes == t->nbytes && e->ndim == t->ndim &&
           memcmp(e->shape, t->shape, (size_t)t->ndim * sizeof *t->shape) == 0 &&
           memcmp(e->data, t->data, t->nbytes) == 0;
}

static int is_known(const DfModelConfig *c, const DfSafetensors *st, const DfTensorInfo *t) {
    const char *name = t->name, *p = df_target_weight_prefix(c);
    if (ends_with(name, "rotary_emb.inv_freq")) return 1;
    if (strcmp(p, "model.language_model.") == 0 && starts_with(name, "model.visual.")) return 1;
    const char *extra = df_target_family(c)->extra_tensor_prefix;
    if (extra && starts_with(name, extra)) return 1;
    if (strcmp(name, "lm_head.weight") == 0) return !c->tie_word_embeddings || is_tied_copy(c, st, t);
    if (!starts_with(name, p)) return 0;
    const char *rest = name + strlen(p);
    if (strcmp(rest, "embed_tokens.weight") == 0 || strcmp(rest, "norm.weight") == 0) return 1;
    return starts_with(rest, "layers.") && is_layer_tensor(c, rest + strlen("layers."));
}

int df_target_check_tensor_set(const DfModelConfig *cfg, const DfSafetensors *st, DfError *err) {
    if (check_present(cfg, st, err)) return -1;
    for (int i = 0; i < st->n_tensors; i++) {
        const DfTensorInfo *t = &st->tensors[i];
        if (is_known(cfg, st, t)) continue;
        if (strcmp(t->name, "lm_head.weight") == 0)
            return df_fail(err, "%s: tensor 'lm_head.weight' differs from the embedding, but config.json has "
                                "tie_word_embeddings true (the model would not use it)", t->file);
        return df_fail(err, "%s: unknown tensor '%s': not a weight of this %d-layer %s (config.json)", t->file,
                       t->name, cfg->num_layers, cfg->architecture_name);
    }
    return 0;
}
