/* Where each drafter parameter lives in one flat fp32 array: names (the
 * checkpoint names of spec section 7), shapes and offsets, in a fixed order
 * (fc, hidden_norm, then per layer input_layernorm, q/k/v/o_proj, q_norm,
 * k_norm, post_attention_layernorm, gate/up/down_proj, and last norm). One
 * flat array for weights, one for gradients: the optimizer, gradient
 * reduction and checkpoints all work on the flat arrays. */
#ifndef DF_MODEL_DRAFTER_LAYOUT_H
#define DF_MODEL_DRAFTER_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "model/drafter_config.h"

typedef enum DfParamKind {
    DF_PARAM_LINEAR, /* [out, in] matrix: init normal(0, 0.02) */
    DF_PARAM_NORM,   /* RMSNorm weight vector: init ones */
} DfParamKind;

typedef struct DfParamInfo {
    char name[96];
    int ndim;
    int64_t shape[2];
    size_t offset; /* elements into the flat array */
    size_t count;
    DfParamKind kind;
} DfParamInfo;

/* Indices into DfDrafterLayout.params for one decoder layer. */
typedef struct DfDrafterLayerIndex {
    int input_layernorm, q_proj, k_proj, v_proj, o_proj, q_norm, k_norm, post_attention_layernorm, gate_proj, up_proj,
        down_proj;
} DfDrafterLayerIndex;

typedef struct DfDrafterLayout {
    DfParamInfo *params;
    int n_params;
    size_t total; /* elements in the flat array */
    int fc, hidden_norm, norm;
    DfDrafterLayerIndex *layers; /* [num_layers] */
    int num_layers;
} DfDrafterLayout;

void df_drafter_layout_build(DfDrafterLayout *layout, const DfDrafterConfig *cfg);
void df_drafter_layout_free(DfDrafterLayout *layout);
int df_drafter_layout_find(const DfDrafterLayout *layout, const char *name); /* index or -1 */

/* Spec section 4 init: linear weights normal(0, 0.02) from the counter-based
 * RNG keyed by (seed, init domain, parameter index), norms ones. */
void df_drafter_init_params(const DfDrafterLayout *layout, float *flat, uint64_t seed);

#endif
