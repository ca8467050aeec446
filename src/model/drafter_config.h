/* The drafter's hyper-parameters (spec sections 3 and 7): what config.json of
 * an exported drafter holds, derived from the target's config plus the
 * training options. */
#ifndef DF_MODEL_DRAFTER_CONFIG_H
#define DF_MODEL_DRAFTER_CONFIG_H

#include "base/error.h"
#include "formats/model_config.h"

#define DF_MAX_TAPS 16

typedef struct DfDrafterConfig {
    int hidden_size;       /* = target's */
    int num_heads;         /* = target's */
    int num_kv_heads;      /* = target's */
    int head_dim;          /* = target's */
    int intermediate_size; /* option; default the target's */
    int num_layers;        /* option; default 5 */
    int vocab_size;        /* = target's (embedding rows) */
    int block_size;        /* option; default 16 */
    int mask_token_id;
    int num_target_layers; /* the target's layer count */
    int n_taps;
    int target_layer_ids[DF_MAX_TAPS];
    double rms_norm_eps;   /* = target's */
    DfRopeConfig rope;     /* = target's */
    int max_position_embeddings;
    double gamma;          /* loss decay (spec section 4); training only, not exported */
} DfDrafterConfig;

/* Fills cfg from the target's config with the given options; n_taps = 0
 * means the default (spec section 2: n = num_layers of the drafter, as the
 * z-lab drafters do, capped so that taps stay below the target's layer count);
 * intermediate_size = 0 means the target's. Checks the result. */
int df_drafter_config_from_target(DfDrafterConfig *cfg, const DfModelConfig *target, int num_layers,
                                  int intermediate_size, int block_size, int n_taps, int mask_token_id, DfError *err);

#endif
