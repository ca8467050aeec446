/* The drafter backward, from g.dx = d(loss)/d(out) (written by the fused
 * lm-head cross-entropy, already scaled by grad_scale) into the flat grads
 * (+=). It walks drafter_forward.c in reverse:
 * - linear y = x W^T: dx = dy W (matmul), dW += dy^T x (linear_weight_grad;
 *   its first writer writes it where the step's gradients start afresh,
 *   df_drafter_compute_grads);
 * - k_proj and v_proj see [ctx; h]: their weight gradients sum both row
 *   ranges, the ctx rows' input gradient goes to dctx, the block rows' to dh;
 * - ctx feeds every layer, so dctx sums over layers and goes back through
 *   hidden_norm and fc once at the end;
 * - no gradient into the features, the embedding or the lm head.
 * Each parameter's gradient has its writers in one place: the final norm's
 * at the start, a layer's eleven all in that layer's mlp_backward and
 * attention_backward, hidden_norm's and fc's at the end. So the flat
 * gradient becomes final from its end toward its start: after the last
 * layer (with the final norm behind it), after each layer below, and last fc
 * and hidden_norm; the grad_ready hook (model/drafter.h) is told so, in
 * the backward of the step's last micro-batch (the earlier ones add to the
 * same ranges). */
#include <math.h>

#include "model/drafter_internal.h"

static DfBuffer rows_of(DfBuffer b, size_t row0, size_t rows, size_t width) {
    return df_buffer_view(b, row0 * width, rows * width);
}

/* dW += dy^T x for parameter `param` (y = x W^T, dy [m, n], x [m, k]); its
 * first writer in a pass that starts the gradients afresh
 * (df_drafter_compute_grads' first micro-batch) writes it instead. */
static void weight_grad(DfDrafter *d, int param, DfBuffer dy, DfBuffer x, int m, int n, int k, int first_writer) {
    float beta = d->work->grads_overwrite && first_writer ? 0.0f : 1.0f;
    df_op_linear_weight_grad(d->be, df_drafter_grad(d, param), dy, x, m, n, k, beta);
}

/* dx (+)= dy W for y = x W^T, W [n, k], dy [m, n], dx [m, k]. */
static void input_grad(DfBackend *be, DfBuffer dx, DfBuffer dy, DfBuffer w, int m, int n, int k, int accumulate) {
    df_op_matmul(be, dx, dy, w, m, k, n, 0, 0, accumulate ? 1.0f : 0.0f);
}

static void mlp_backward(DfDrafter *d, int l) {
    const DfDrafterConfig *c = &d->cfg;
    const DfDrafterLayerIndex *ix = &d->layout.layers[l];
    DfDrafterWork *w = d->work;
    DfDrafterLayerActs *a = &w->layers[l];
    DfDrafterGradScratch *g = &w->g;
    DfBackend *be = d->be;
    int Q = w->host.rows->n_q, H = c->hidden_size, I = c->intermediate_size;
    input_grad(be, g->dact, g->dx, df_drafter_param(d, ix->down_proj), Q, H, I, 0);
    weight_grad(d, ix->down_proj, g->dx, a->act, Q, H, I, 1);
    df_op_swiglu_backward(be, g->dgate, g->dup, g->dact, a->gate, a->up);
    input_grad(be, g->dh, g->dgate, df_drafter_param(d, ix->gate_proj), Q, I, H, 0);
    input_grad(be, g->dh, g->dup, df_drafter_param(d, ix->up_proj), Q, I, H, 1);
    weight_grad(d, ix->gate_proj, g->dgate, a->n, Q, I, H, 1);
    weight_grad(d, ix->up_proj, g->dup, a->n, Q, I, H, 1);
    df_op_rmsnorm_backward(be, g->dx, df_drafter_grad(d, ix->post_attention_layernorm), g->dh, a->x_mid,
                           df_drafter_param(d, ix->post_attention_layernorm), Q, H, (float)c->rms_norm_eps, 1);
}

static void attention_backward(DfDrafter *d, int l) {
    const DfDrafterConfig *c = &d->cfg;
    const DfDrafterLayerIndex *ix = &d->layout.layers[l];
    DfDrafterWork *w = d->work;
    DfDrafterLayerActs *a = &w->layers[l];
    DfDrafterGradScratch *g = &w->g;
    DfBackend *be = d->be;
    int T = w->host.rows->n_ctx, Q = w->host.rows->n_q, H = c->hidden_size, nh = c->num_heads, nkv = c->num_kv_heads,
        hd = c->head_dim, qd = nh * hd, kvd = nkv * hd;
    float eps = (float)c->rms_norm_eps;

    input_grad(be, g->dattn, g->dx, df_drafter_param(d, ix->o_proj), Q, H, qd, 0);
    weight_grad(d, ix->o_proj, g->dx, a->attn, Q, H, qd, 1);
    df_op_fill_zero(be, g->dk);
    df_op_fill_zero(be, g->dv);
    DfBlockAttnArgs att = {.layout = &w->attn_layout, .q = a->q, .k_ctx = rows_of(a->k, 0, T, kvd),
                           .v_ctx = rows_of(a->v, 0, T, kvd), .k_blk = rows_of(a->k, T, Q, kvd),
                           .v_blk = rows_of(a->v, T, Q, kvd), .out = a->attn, .lse = a->lse, .heads = nh,
                           .kv_heads = nkv, .head_dim = hd, .scale = 1.0f / sqrtf((float)hd),
                           .window = df_drafter_layer_window(c, l)};
    DfBlockAttnGrads ag = {.d_out = g->dattn, .dq = g->dq, .dk_ctx = rows_of(g->dk, 0, T, kvd),
                           .dv_ctx = rows_of(g->dv, 0, T, kvd), .dk_blk = rows_of(g->dk, T, Q, kvd),
                           .dv_blk = rows_of(g->dv, T, Q, kvd)};
    df_op_block_attention_backward(be, &att, &ag);
    DfBuffer qpos = df_buffer_view(w->kpos, (size_t)T, (size_t)Q);
    df_op_rmsnorm_rope_backward(be, g->dq, df_drafter_grad(d, ix->q_norm), g->dq, a->q_pre,
                                df_drafter_param(d, ix->q_norm), qpos, w->rope_cos, w->rope_sin, Q, nh, hd, eps);
    df_op_rmsnorm_rope_backward(be, g->dk, df_drafter_grad(d, ix->k_norm), g->dk, a->k_pre,
                                df_drafter_param(d, ix->k_norm), w->kpos, w->rope_cos, w->rope_sin, T + Q, nkv, hd, eps);

    DfBuffer wq = df_drafter_param(d, ix->q_proj), wk = df_drafter_param(d, ix->k_proj), wv = df_drafter_param(d, ix->v_proj);
    DfBuffer dk_ctx = rows_of(g->dk, 0, T, kvd), dk_blk = rows_of(g->dk, T, Q, kvd);
    DfBuffer dv_ctx = rows_of(g->dv, 0, T, kvd), dv_blk = rows_of(g->dv, T, Q, kvd);
    input_grad(be, g->dh, g->dq, wq, Q, qd, H, 0);
    input_grad(be, g->dh, dk_blk, wk, Q, kvd, H, 1);
    input_grad(be, g->dh, dv_blk, wv, Q, kvd, H, 1);
    input_grad(be, g->dctx, dk_ctx, wk, T, kvd, H, 1);
    input_grad(be, g->dctx, dv_ctx, wv, T, kvd, H, 1);
    weight_grad(d, ix->q_proj, g->dq, a->h, Q, qd, H, 1);
    weight_grad(d, ix->k_proj, dk_ctx, w->ctx, T, kvd, H, 1); /* k_proj and v_proj: the context rows first */
    weight_grad(d, ix->k_proj, dk_blk, a->h, Q, kvd, H, 0);
    weight_grad(d, ix->v_proj, dv_ctx, w->ctx, T, kvd, H, 1);
    weight_grad(d, ix->v_proj, dv_blk, a->h, Q, kvd, H, 0);
    df_op_rmsnorm_backward(be, g->dx, df_drafter_grad(d, ix->input_layernorm), g->dh, a->x,
                           df_drafter_param(d, ix->input_layernorm), Q, H, eps, 1);
}

/* First element of layer l's parameters in the flat array. */
static size_t layer_start(const DfDrafterLayout *layout, int l) {
    const DfDrafterLayerIndex *ix = &layout->layers[l];
    const int idx[] = {ix->input_layernorm, ix->q_proj, ix->k_proj, ix->v_proj, ix->o_proj, ix->q_norm, ix->k_norm,
                       ix->post_attention_layernorm, ix->gate_proj, ix->up_proj, ix->down_proj};
    size_t start = layout->params[idx[0]].offset;
    for (size_t i = 1; i < sizeof idx / sizeof *idx; i++)
        if (layout->params[idx[i]].offset < start) start = layout->params[idx[i]].offset;
    return start;
}

/* Tells the hook that [start, *end) is final; *end becomes start. */
static void report_final(DfDrafter *d, size_t start, size_t *end) {
    if (d->grad_ready && d->work->grads_final && start < *end) d->grad_ready(d->grad_ready_ctx, start, *end - start);
    *end = start;
}

void df_drafter_run_backward(DfDrafter *d, const DfDrafterBatch *batch) {
    const DfDrafterConfig *c = &d->cfg;
    DfDrafterWork *w = d->work;
    DfDrafterGradScratch *g = &w->g;
    DfBackend *be = d->be;
    int T = w->host.rows->n_ctx, Q = w->host.rows->n_q, H = c->hidden_size;
    float eps = (float)c->rms_norm_eps;
    df_op_rmsnorm_backward(be, g->dx, df_drafter_grad(d, d->layout.norm), g->dx, w->x_final,
                           df_drafter_param(d, d->layout.norm), Q, H, eps, 0);
    df_op_fill_zero(be, g->dctx);
    size_t final_from = d->layout.total; /* [final_from, total) has been reported final */
    for (int l = c->num_layers - 1; l >= 0; l--) {
        mlp_backward(d, l);
        attention_backward(d, l);
        report_final(d, layer_start(&d->layout, l), &final_from);
    }
    /* dctx through hidden_norm (in place) and fc; the features get no gradient */
    df_op_rmsnorm_backward(be, g->dctx, df_drafter_grad(d, d->layout.hidden_norm), g->dctx, w->ctx_pre,
                           df_drafter_param(d, d->layout.hidden_norm), T, H, eps, 0);
    DfBuffer features = df_buffer_view(batch->features, 0, (size_t)T * c->n_taps * H);
    weight_grad(d, d->layout.fc, g->dctx, features, T, H, c->n_taps * H, 1);
    report_final(d, 0, &final_from);
}
