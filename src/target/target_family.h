/* A target family: what differs between the decoders dflash runs, in one
 * small table per family, chosen once from the config (df_target_family).
 *
 *   dense:  Qwen3 / Llama-3 (every layer full attention, q/k norms per
 *           architecture, one RoPE over the whole head);
 *   hybrid: Qwen3.5 / Qwen3.6 (Gated DeltaNet linear attention mixed with
 *           gated full attention, (1 + w) norms, partial RoPE).
 *
 * What a family decides per layer is its layer kind; the code that differs
 * per kind (tensor names, weight bytes, random fill, the layer's steps)
 * switches on the kind, in the file of its concern. The architectures of a
 * family (Qwen3ForCausalLM, LlamaForCausalLM, ...) are rows of the table in
 * model_config.c that point to it. */
#ifndef DF_TARGET_TARGET_FAMILY_H
#define DF_TARGET_TARGET_FAMILY_H

#include <cjson/cJSON.h>

#include "json/json_fields.h"
#include "formats/safetensors.h"
#include "target/model_config.h"

typedef enum DfTargetLayerKind {
    DF_LAYER_ATTENTION,       /* dense: attention and SwiGLU MLP over fused q/k/v and gate/up weights */
    DF_LAYER_GATED_ATTENTION, /* hybrid full_attention: gated q_proj, (1 + w) norms (target/hybrid_layer.h) */
    DF_LAYER_GATED_DELTANET,  /* hybrid linear_attention: a recurrent state instead of a KV cache */
} DfTargetLayerKind;

struct DfTargetModel;

typedef struct DfTargetFamily {
    const char *name; /* "dense", "hybrid" */
    /* The family's config.json fields after the common ones (sizes, rope, token ids): obj is the
     * text model's object. Fills what the family adds to cfg; refuses what it does not run. */
    int (*read_config)(const DfJsonReader *r, const cJSON *obj, DfModelConfig *cfg);
    DfTargetLayerKind (*layer_kind)(const DfModelConfig *cfg, int layer);
    /* Loads decoder layer `layer`'s tensors into m->layers[layer]. */
    int (*load_layer)(struct DfTargetModel *m, const DfSafetensors *st, int layer, DfError *err);
    /* RoPE turns cfg->rotary_dim values of a head (partial rotary); else all head_dim. */
    int partial_rotary;
    /* Its layers use the DfHybridWorkspace (target/target.h), and decoding keeps the Gated
     * DeltaNet layers' recurrent state (target/hybrid_state.h). */
    int hybrid_layers;
    /* Tensors beside the decoder a checkpoint of the family may hold (a multi-token-prediction
     * head), by name prefix; NULL: none. */
    const char *extra_tensor_prefix;
    /* The drafter attention a run takes when no option says otherwise: heads, kv heads,
     * head_dim; 0: the target's own. */
    int drafter_heads, drafter_kv_heads, drafter_head_dim;
} DfTargetFamily;

extern const DfTargetFamily df_dense_family, df_hybrid_family;

/* The family of cfg: hybrid when cfg->is_hybrid, else dense. */
const DfTargetFamily *df_target_family(const DfModelConfig *cfg);

/* The kind of decoder layer `layer` of cfg (its family's layer_kind). */
DfTargetLayerKind df_target_layer_kind(const DfModelConfig *cfg, int layer);

/* The families' layer loaders (dense_load.c, hybrid_load.c). */
int df_dense_load_layer(struct DfTargetModel *m, const DfSafetensors *st, int layer, DfError *err);
int df_hybrid_load_layer(struct DfTargetModel *m, const DfSafetensors *st, int layer, DfError *err);

#endif
