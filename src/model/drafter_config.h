/* The drafter's hyper-parameters (spec sections 3 and 7): what config.json of
 * an exported drafter holds, derived from the target's config plus the
 * training options. */
#ifndef DF_MODEL_DRAFTER_CONFIG_H
#define DF_MODEL_DRAFTER_CONFIG_H

#include "base/error.h"
#include "target/model_config.h"

#define DF_MAX_DRAFT_LAYERS 256

typedef struct DfDrafterConfig {
    int hidden_size;       /* = target's */
    int num_heads;         /* the drafter's own (DfDrafterOptions): query heads */
    int num_kv_heads;      /* the drafter's own: key/value heads (GQA) */
    int head_dim;          /* the drafter's own; RoPE turns all of it */
    int intermediate_size; /* option; default the target's */
    int num_layers;        /* option; default 5 */
    int vocab_size;        /* = target's (embedding rows) */
    int block_size;        /* option; default 16 */
    int mask_token_id;
    int num_target_layers; /* the target's layer count */
    int n_taps;
    int target_layer_ids[DF_MAX_TAPS];
    double rms_norm_eps;   /* = target's */
    DfRopeConfig rope;     /* = target's base and scaling, always over the whole head_dim: a hybrid
                              target's partial rotary_dim is the target's alone */
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

/* The training options that shape a drafter (the CLI's --draft-layers,
 * --intermediate-size, --block-size, --num-taps, --mask-token-id,
 * --draft-heads, --draft-kv-heads, --draft-head-dim). */
typedef struct DfDrafterOptions {
    int num_layers;        /* 1..64 */
    int intermediate_size; /* 0: the target's */
    int block_size;        /* 2..64 */
    int n_taps;            /* 0: the default (spec section 2: as many as num_layers, capped at
                              df_drafter_max_taps); else 1..df_drafter_max_taps */
    int mask_token_id;     /* a row of the target's embedding */
    int num_heads;         /* 0: the default attention shape (df_drafter_default_attention) */
    int num_kv_heads;      /* 0: the default */
    int head_dim;          /* 0: the default */
} DfDrafterOptions;

#define DF_MAX_DRAFT_HEADS 256
#define DF_MAX_DRAFT_HEAD_DIM 256 /* the largest head the attention kernels take */
#define DF_MAX_BLOCK_SIZE 256     /* the largest block a drafter config may give (eval --block-size); training takes 2..64 */

/* The drafter's default attention shape for a target (spec section 3): the
 * target's own for the dense families; for the hybrid Qwen3.5/3.6 family 32
 * query heads of 128 and 8 KV heads, as the published drafters of those
 * targets have (their targets' 24 heads of 256 with partial rotary are no
 * shape for a drafter's plain attention). */
void df_drafter_default_attention(const DfModelConfig *target, int *num_heads, int *num_kv_heads, int *head_dim);

/* The most taps a drafter of this target may read with no layer tapped
 * twice: the default ids round(1 + i*(L-4)/(n-1)) are distinct up to
 * n = L - 3 (1 for a target of 4 layers or fewer), and DF_MAX_TAPS. */
int df_drafter_max_taps(const DfModelConfig *target);

/* An explicit tap count (--num-taps) in 1..df_drafter_max_taps, or an
 * error naming the option and the bound. */
int df_drafter_check_num_taps(const DfModelConfig *target, int n_taps, DfError *err);

/* Fills cfg from the target's config with the given options (0 fields:
 * their defaults) and checks them; errors name the option and its range.
 * The drafter keeps the target's hidden size, vocabulary, rms eps and rope
 * base and scaling; its rope always covers its whole head_dim. */
int df_drafter_config_from_target(DfDrafterConfig *cfg, const DfModelConfig *target, const DfDrafterOptions *opt,
                                  DfError *err);

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
