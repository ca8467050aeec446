/* The DFlash drafter (spec sections 3 and 4) over the backend op table:
 * forward over the blocks of a packed batch, the weighted cross-entropy
 * through the frozen lm head (fused, chunked: never the full [Q, V] logits),
 * metrics, and the backward into one flat gradient buffer. */
#ifndef DF_MODEL_DRAFTER_H
#define DF_MODEL_DRAFTER_H

#include <stdint.h>

#include "backend/backend.h"
#include "model/drafter_config.h"
#include "model/drafter_layout.h"
#include "model/metrics.h"

typedef struct DfDrafterRows DfDrafterRows; /* model/drafter_rows.h */

/* One packed batch as the drafter sees it: the context sequences (with the
 * target's tap features already on the backend) and the anchors of each. */
typedef struct DfDrafterBatch {
    int n_seqs;
    const int32_t *seq_starts;    /* host [n_seqs + 1]: rows of the packed context */
    const int32_t *ids;           /* host [T] */
    const uint8_t *loss_mask;     /* host [T] */
    DfBuffer features;            /* ACT [T, n_taps * H] on the drafter's backend */
    const int64_t *anchor_starts; /* host [n_seqs + 1]: sequence s owns anchors[anchor_starts[s] ..] */
    const int64_t *anchors;       /* host, positions inside their sequence, ascending */
    const DfDrafterRows *rows;    /* host: the batch's block rows built ahead (model/drafter_rows.h), or NULL */
} DfDrafterBatch;

typedef struct DfDrafterWork DfDrafterWork; /* activations kept for the backward (private) */

/* Called by the backward each time a range [offset, offset + count) of the
 * flat gradient is final for this forward_backward: every op that adds to it
 * has been queued on the backend (on an asynchronous backend, e.g. CUDA,
 * queued, not yet run: work ordered after the ops queued so far, such as an
 * event recorded on the backend's stream, sees the final values). The ranges
 * come in backward order, each once, and together cover [0, layout.total)
 * exactly: the last layer with the final norm first, then each layer down to
 * layer 0, and last fc with hidden_norm (their gradient comes from every
 * layer's context rows). For gradient reduction that overlaps the backward
 * (dist/comm.h). */
typedef void (*DfDrafterGradReady)(void *ctx, size_t offset, size_t count);

typedef struct DfDrafter {
    DfDrafterConfig cfg;
    DfDrafterLayout layout;
    DfBackend *be;
    DfBuffer params;  /* ACT [layout.total]: every parameter, flat, in layout order */
    DfBuffer grads;   /* F32 [layout.total]: accumulated by forward_backward */
    DfBuffer embed;   /* frozen [V, H], shared with the target (not owned) */
    DfBuffer lm_head; /* frozen [V, H], shared with the target (not owned) */
    DfDrafterWork *work;
    int max_block_rows; /* block rows (anchors x block size) per micro-batch; 0: the whole batch at once */
    DfDrafterGradReady grad_ready; /* optional (NULL): see above */
    void *grad_ready_ctx;
    int owns_state;   /* params and grads were allocated here (df_drafter_create) */
} DfDrafter;

int df_drafter_create(DfDrafter *d, DfBackend *be, const DfDrafterConfig *cfg, DfBuffer embed, DfBuffer lm_head,
                      DfError *err);
/* The same with params (ACT) and grads (F32), of layout.total elements each,
 * in buffers the caller owns and frees after the drafter (e.g. cut from
 * arenas, backend/arena.h); their contents are left as they are. */
int df_drafter_create_in(DfDrafter *d, DfBackend *be, const DfDrafterConfig *cfg, DfBuffer embed, DfBuffer lm_head,
                         DfBuffer params, DfBuffer grads, DfError *err);
void df_drafter_free(DfDrafter *d);

/* Host fp32 flat arrays in layout order <-> the backend. */
int df_drafter_set_params(DfDrafter *d, const float *flat, DfError *err);
int df_drafter_get_grads(DfDrafter *d, float *flat, DfError *err);
void df_drafter_zero_grads(DfDrafter *d);

/* Sets (or with NULL clears) the hook the backward calls as gradient ranges
 * become final. */
void df_drafter_set_grad_ready(DfDrafter *d, DfDrafterGradReady fn, void *ctx);

/* Bounds the block rows (query positions: anchors x block size) one pass
 * of forward_backward holds: a batch with more runs as micro-batches of at
 * most that many rows (rounded down to whole blocks, at least one block;
 * model/drafter_split.h), adding into the same gradients and metrics, so
 * that the step equals the unsplit one up to summation order. 0: no bound. */
void df_drafter_set_max_block_rows(DfDrafter *d, int rows);

/* Sizes the work buffers once for micro-batches of up to n_ctx context rows
 * and n_q block rows (no headroom: a later, larger batch still regrows). */
int df_drafter_reserve(DfDrafter *d, int n_ctx, int n_q, DfError *err);

/* Elements of the work buffers' three arenas (ACT, F32, I32) for n_ctx
 * context rows and n_q block rows: what df_drafter_reserve allocates. */
void df_drafter_work_elements(const DfDrafterConfig *cfg, int n_ctx, int n_q, size_t *act, size_t *f32, size_t *i32);

/* Sum of the loss weights w over every block of the batch (host only, from
 * ids, mask and anchors, or the batch's rows when it has them): the
 * denominator of the loss, summed over the global batch before the backward
 * (spec section 4 step 5). */
double df_drafter_batch_weight_sum(const DfDrafterConfig *cfg, const DfDrafterBatch *batch);

/* Forward over all blocks of the batch; adds sum(w * CE) and sum(w) and the
 * per-position argmax hits to metrics. When grad_scale != 0, also runs the
 * backward and accumulates grads += grad_scale * d(sum w * CE)/d(params)
 * (grad_scale = 1 / global weight sum gives the gradient of the loss). */
int df_drafter_forward_backward(DfDrafter *d, const DfDrafterBatch *batch, double grad_scale, DfMetrics *metrics,
                                DfError *err);

/* df_drafter_zero_grads and then df_drafter_forward_backward, without
 * zeroing the whole gradient first (4 GiB at a 1 B-parameter drafter): the
 * first writer of each weight matrix's gradient in the backward writes it
 * (linear_weight_grad with beta 0), and only the norm weights' gradients
 * are zeroed. grads = grad_scale * the batch's gradient. */
int df_drafter_compute_grads(DfDrafter *d, const DfDrafterBatch *batch, double grad_scale, DfMetrics *metrics,
                             DfError *err);

/* Argmax of every block row (Q = blocks * block_size, blocks in batch order)
 * of the last forward_backward, over all its micro-batches; -1 for the rows
 * without a loss weight (a block's anchor row, rows past the sequence or
 * outside the loss mask), where the lm head does not run; NULL before the
 * first. */
const int32_t *df_drafter_last_argmax(const DfDrafter *d, int *n_rows);

/* Spec section 8: forward FLOPs of the drafter for one sequence of S context
 * tokens with n_anchors blocks (the backward is counted by the caller). */
double df_drafter_forward_flops(const DfDrafterConfig *cfg, int64_t seq_len, int64_t n_anchors);

/* The same forward count summed over a batch, with the block attention term
 * from the actual anchors (df_drafter_forward_flops takes a = S/2). */
double df_drafter_batch_forward_flops(const DfDrafterConfig *cfg, const DfDrafterBatch *batch);

/* Forward + backward of one df_drafter_forward_backward over the batch:
 * forward + 2 * (forward - lm head) + 2*Q*H*V (spec section 8). */
double df_drafter_step_flops(const DfDrafterConfig *cfg, const DfDrafterBatch *batch);

#endif
