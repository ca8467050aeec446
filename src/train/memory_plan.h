/* The memory plan of a training run, made before anything is loaded: for
 * the device that runs the step (GPU memory with CUDA, host memory on the
 * CPU), the target's weights up to the deepest tap, the drafter's state
 * (weights, gradients, fp32 master weights and AdamW moments), the step's
 * inputs (ids and tap features of the largest step), the target forward's
 * workspace, and the drafter's work buffers for one micro-batch, which grow
 * with its block rows (anchors x block size). The block rows of one
 * micro-batch (--max-drafter-tokens) are what the plan sizes: the most that
 * fit beside the rest, unless the user gave a bound. A run that cannot fit
 * even one block per micro-batch fails here, naming the sizes and what to
 * lower. */
#ifndef DF_TRAIN_MEMORY_PLAN_H
#define DF_TRAIN_MEMORY_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"
#include "base/error.h"
#include "target/model_config.h"
#include "model/drafter_config.h"

typedef struct DfMemoryPlanInput {
    const DfModelConfig *target;
    const DfDrafterConfig *drafter;
    const char *device;       /* for the messages: "cuda:0", "cpu" */
    size_t act_elem;          /* bytes of an ACT element on the device (2: bf16 on CUDA; 4: fp32 on the CPU) */
    int target_layers;        /* target layers loaded and run (0: none, a split layout's drafter rank) */
    int with_head;            /* the untied lm head and the final norm are loaded */
    int runs_drafter;         /* 0: a split layout's target rank (no drafter on this device) */
    int host_state;           /* the host copies of the state (checkpoints) live in this memory too (CPU) */
    int64_t step_tokens;      /* context tokens of the largest step (the batch's or one long sample's) */
    int64_t step_seqs;        /* sequences of the largest step, at most */
    int64_t max_seq_len;      /* the longest sequence */
    int64_t step_block_rows;  /* block rows of the step with the most (anchors x block size) */
    int64_t max_drafter_tokens; /* the user's bound on block rows per micro-batch (0: sized here) */
    int64_t eval_slot_rows;   /* train --eval-data on this device: rows of the decoding slot (longest prompt +
                                 new tokens + one block; 0: no eval here); target_layers and with_head must
                                 then be the whole target's */
    int64_t eval_prompt_rows; /* the longest eval prompt (its prefill) */
    DfMemoryInfo memory;      /* the device now (before loading) */
} DfMemoryPlanInput;

typedef struct DfMemoryPlan {
    size_t backend;           /* what the backend holds already (its own workspaces) */
    size_t target_weights;
    size_t target_workspace;  /* the forward's activations for the largest step */
    size_t drafter_state;     /* weights, gradients, master weights, moments */
    size_t host_copies;       /* the state's host copies for checkpoints, where they share the device's memory
                                 (the CPU): checked against the capacity, not part of total (no backend buffer) */
    size_t step_inputs;       /* ids and tap features of the largest step */
    size_t op_scratch;        /* what the backend's ops take for scratch (memory_info) */
    size_t drafter_work;      /* work buffers of one micro-batch of block_rows rows */
    size_t eval;              /* held-out eval's decoding (df_memory_plan_eval_bytes), beyond the weights */
    size_t capacity;          /* what the device has for the run: in use + available - reserve */
    size_t reserve;           /* kept free for what the backend does not count (allocator, libraries) */
    size_t total;             /* the planned peak of the backend's buffers (memory_info's peak): the sum of
                                 the above but host_copies, capacity and reserve */
    int64_t block_rows;       /* block rows per micro-batch */
    int64_t micro_batches;    /* of the step with the most block rows */
    int sized;                /* block_rows was sized by the plan (1) or given (0) */
} DfMemoryPlan;

/* Bytes of the drafter's work for a micro-batch of n_ctx context rows and
 * n_q block rows: its three arenas and the block attention backward's
 * scratch (per step: the dsum rows and fp32 context dK/dV). */
size_t df_memory_plan_drafter_work(const DfDrafterConfig *c, int64_t n_ctx, int64_t n_q, size_t act_elem);

/* What held-out speculative decoding of one prompt at a time takes beside
 * the target's weights (all layers and the head) and the drafter's (the
 * training's, shared): the target decoder's KV cache (a hybrid target's
 * recurrent states and their rollback copies for its linear layers), its
 * workspace for the longest prefill with the block's logits and tap
 * features, and the drafter runner's context cache, workspace, logits and
 * rope tables, for one slot of slot_rows rows. */
size_t df_memory_plan_eval_bytes(const DfModelConfig *target, const DfDrafterConfig *drafter, int64_t slot_rows,
                                 int64_t prompt_rows, size_t act_elem);

/* Makes the plan; fails (with the sizes, naming what to lower) when the
 * fixed part and one block per micro-batch do not fit, or when a given
 * bound does not. */
int df_memory_plan_make(const DfMemoryPlanInput *in, DfMemoryPlan *plan, DfError *err);

/* The plan, a few lines, for the start of a run. */
void df_memory_plan_print(const DfMemoryPlan *plan, const char *device, FILE *fp);

#endif
