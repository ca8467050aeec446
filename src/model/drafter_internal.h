/* Private to the drafter's compute files (drafter.c, drafter_work.c,
 * drafter_forward.c, drafter_backward.c): the activations one
 * forward keeps for the backward, the per-batch host arrays, and helpers
 * shared between the forward and the backward. */
#ifndef DF_MODEL_DRAFTER_INTERNAL_H
#define DF_MODEL_DRAFTER_INTERNAL_H

#include "model/drafter.h"
#include "model/drafter_rows.h"
#include "model/drafter_split.h"

/* What one decoder layer's forward keeps (Q = block rows, T = context rows). */
typedef struct DfDrafterLayerActs {
    DfBuffer x;      /* [Q, H] layer input (residual stream) */
    DfBuffer h;      /* [Q, H] input_layernorm(x) */
    DfBuffer q_pre;  /* [Q, nh*hd] q_proj(h) before q_norm */
    DfBuffer q;      /* [Q, nh*hd] after q_norm and rope */
    DfBuffer k_pre;  /* [T+Q, nkv*hd] [k_proj(ctx); k_proj(h)] before k_norm */
    DfBuffer k;      /* [T+Q, nkv*hd] after k_norm and rope */
    DfBuffer v;      /* [T+Q, nkv*hd] [v_proj(ctx); v_proj(h)] */
    DfBuffer attn;   /* [Q, nh*hd] attention output */
    DfBuffer lse;    /* F32 [nh, Q] */
    DfBuffer x_mid;  /* [Q, H] x + o_proj(attn) */
    DfBuffer n;      /* [Q, H] post_attention_layernorm(x_mid) */
    DfBuffer gate, up, act; /* [Q, I]; act = silu(gate) * up */
} DfDrafterLayerActs;

/* Gradient scratch of the backward (reused by every layer). */
typedef struct DfDrafterGradScratch {
    DfBuffer dx, dh;           /* [Q, H] */
    DfBuffer dattn, dq;        /* [Q, nh*hd] */
    DfBuffer dk, dv;           /* [T+Q, nkv*hd] */
    DfBuffer dgate, dup, dact; /* [Q, I] */
    DfBuffer dctx;             /* [T, H], summed over layers */
} DfDrafterGradScratch;

/* Host side of the current pass: its block rows (the batch's, built ahead,
 * or built here) and what comes back from the device. */
typedef struct DfDrafterHostBatch {
    const DfDrafterRows *rows; /* this pass's: the batch's own or &built */
    DfDrafterRows built;
    float *ce;                 /* [Q]: each row's CE, 0 on rows without loss */
    int32_t *argmax;           /* [Q]: each row's argmax, -1 on rows without loss */
    float *loss_ce;            /* [n_loss]: as they come back from the lm head */
    int32_t *loss_argmax;      /* [n_loss] */
    int cap_out;
} DfDrafterHostBatch;

struct DfDrafterWork {
    DfBuffer arena_act, arena_f32, arena_i32; /* every buffer below is a view of these */
    DfDrafterLayerActs *layers;               /* [num_layers] */
    DfBuffer ctx_pre, ctx;                    /* [T, H]: fc(F), hidden_norm of it */
    DfBuffer x_final, out;                    /* [Q, H]: last residual stream, norm of it */
    DfDrafterGradScratch g;
    DfBuffer ids, kpos, labels, weights, ce, argmax; /* I32/F32 per row; kpos [T+Q] */
    DfBuffer loss_rows, loss_slot;            /* I32 [Q]: the host batch's lists of the same names */
    DfBuffer rope_cos, rope_sin;              /* F32 [rope_positions, hd/2] */
    int rope_positions;
    DfBlockAttnLayout attn_layout;
    DfDrafterHostBatch host;
    /* the step's micro-batches and the argmax of all their rows */
    DfDrafterSplit split;
    int32_t *batch_argmax;
    size_t batch_argmax_cap;
    int batch_rows;
    int grads_final; /* this pass is the step's last: its backward reports gradient ranges final */
    int grads_fresh; /* df_drafter_compute_grads: the step's gradients start from nothing */
    int grads_overwrite; /* this pass's first writer of each weight gradient writes it (the first pass of a fresh step) */
    int reserved;    /* the arenas were sized by df_drafter_reserve: grow them only when a batch needs more */
};

/* The rows with a loss weight (drafter_loss_rows.c; their lists are the
 * rows' own, model/drafter_rows.h): the lm head with its cross-entropy
 * on those rows only (their hidden states gathered first, d(loss)/d(out)
 * scattered back into g.dx with zeros elsewhere); their CE and argmax back
 * into the host batch's per-row arrays (0 and -1 for the other rows). */
int df_drafter_loss_rows_upload(DfDrafter *d, DfError *err);
void df_drafter_lm_head(DfDrafter *d, double grad_scale);
int df_drafter_loss_rows_download(DfDrafter *d, DfError *err);

/* Lays the work buffers out for T context rows and Q block rows, growing the
 * arenas when needed (drafter_work.c). */
int df_drafter_work_prepare(DfDrafter *d, int n_ctx, int n_q, DfError *err);
/* rope tables covering positions 0 .. n_positions-1 */
int df_drafter_work_rope(DfDrafter *d, int n_positions, DfError *err);
/* Room for the outputs of n_q block rows. */
void df_drafter_host_prepare(DfDrafterHostBatch *h, int n_q);
void df_drafter_work_free(DfDrafter *d);

/* Views of parameter `index` in the flat params / grads. */
DfBuffer df_drafter_param(const DfDrafter *d, int index);
DfBuffer df_drafter_grad(const DfDrafter *d, int index);

/* The forward from the batch's features to d->work->out (drafter_forward.c)
 * and the backward from work->g.dx = d loss / d out into d->grads
 * (drafter_backward.c). The host batch and uploads are already done. */
void df_drafter_run_forward(DfDrafter *d, const DfDrafterBatch *batch);
void df_drafter_run_backward(DfDrafter *d, const DfDrafterBatch *batch);

#endif
