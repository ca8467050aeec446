/* The drafter's hyper-parameters (spec sections 3 and 7): what config.json of
 * an exported drafter holds, derived from the target's config plus the
 * training options. */
#ifndef DF_MODEL_DRAFTER_CONFIG_H
#define DF_MODEL_DRAFTER_CONFIG_H

#include "base/error.h"
#include "formats/model_config.h"

#define DF_MAX_TAPS 16
#define DF_MAX_DRAFT_LAYERS 256

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
    /* Sliding-window layers (config.json "layer_types": "sliding_attention"
     * with "sliding_window"): in such a layer a block sees only the last
     * sliding_window context positions before its anchor, plus its own block
     * (bidirectionally). Note: z-lab's current dflash/model.py makes a
     * sliding layer causal by default, each block row r seeing the keys in
     * (anchor + r - W, anchor + r]; a drafter trained that way loads here but
     * drafts with this mask instead. */
    int sliding_window;                          /* > 0 when any layer slides */
    unsigned char sliding[DF_MAX_DRAFT_LAYERS];  /* [num_layers]: 1 = sliding_attention */
} DfDrafterConfig;

/* Fills cfg from the target's config with the given options; n_taps = 0
 * means the default (spec section 2: n = num_layers of the drafter, as the
 * z-lab drafters do, capped so that taps stay below the target's layer count);
 * intermediate_size = 0 means the target's. Checks the result. */
int df_drafter_config_from_target(DfDrafterConfig *cfg, const DfModelConfig *target, int num_layers,
                                  int intermediate_size, int block_size, int n_taps, int mask_token_id, DfError *err);

/* The context window of decoder layer `layer`: sliding_window for a sliding
 * layer, 0 (unlimited) for a full-attention one. */
int df_drafter_layer_window(const DfDrafterConfig *cfg, int layer);

/* Makes the layers listed in `pattern` sliding with window `window`:
 * pattern is "all", "none", or comma-separated layer indices and ranges
 * ("0,1" or "0-3"; negative indices count from the last layer, "-1" is the
 * last); NULL or "" means every layer but the last. window 0 clears every
 * layer's window (pattern must then be NULL or "none"). */
int df_drafter_set_sliding(DfDrafterConfig *cfg, int window, const char *pattern, DfError *err);

#endif
