/* The drafter forward (spec section 3) over the backend ops:
 *   ctx = hidden_norm(fc(F))                                  [T, H]
 *   x   = embed(block ids)                                    [Q, H]
 *   per layer: h = input_layernorm(x)
 *              q = rope(q_norm(q_proj(h)))                    at block positions
 *              k = rope(k_norm([k_proj(ctx); k_proj(h)]))     at [0..S-1 of each sequence; block positions]
 *              (each norm and its rope one op: rmsnorm_rope)
 *              v = [v_proj(ctx); v_proj(h)]
 *              x = x + o_proj(block_attention(q, k, v))
 *              x = x + down(silu(gate(n)) * up(n)), n = post_attention_layernorm(x)
 *   out = norm(x)
 * K/V rows are [context rows (T); block rows (Q)] in one buffer, so k_norm
 * and rope run once over both. Every intermediate the backward needs stays
 * in the work buffers (DfDrafterLayerActs). */
#include <math.h>

#include "model/drafter_internal.h"

static DfBuffer rows_of(DfBuffer b, size_t row0, size_t rows, size_t width) {
    return df_buffer_view(b, row0 * width, rows * width);
}

static void layer_forward(DfDrafter *d, int l, DfBuffer x_next) {
    const DfDrafterConfig *c = &d->cfg;
    const DfDrafterLayerIndex *ix = &d->layout.layers[l];
    DfDrafterWork *w = d->work;
    DfDrafterLayerActs *a = &w->layers[l];
    DfBackend *be = d->be;
    int T = w->host.rows->n_ctx, Q = w->host.rows->n_q, H = c->hidden_size, nh = c->num_heads, nkv = c->num_kv_heads,
        hd = c->head_dim, I = c->intermediate_size, qd = nh * hd, kvd = nkv * hd;
    float eps = (float)c->rms_norm_eps;

    df_op_rmsnorm(be, a->h, a->x, df_drafter_param(d, ix->input_layernorm), Q, H, eps);
    df_op_linear(be, a->q_pre, a->h, df_drafter_param(d, ix->q_proj), Q, qd, H, 0);
    DfBuffer wk = df_drafter_param(d, ix->k_proj), wv = df_drafter_param(d, ix->v_proj);
    df_op_linear(be, rows_of(a->k_pre, 0, T, kvd), w->ctx, wk, T, kvd, H, 0);
    df_op_linear(be, rows_of(a->k_pre, T, Q, kvd), a->h, wk, Q, kvd, H, 0);
    df_op_linear(be, rows_of(a->v, 0, T, kvd), w->ctx, wv, T, kvd, H, 0);
    df_op_linear(be, rows_of(a->v, T, Q, kvd), a->h, wv, Q, kvd, H, 0);
    DfBuffer qpos = df_buffer_view(w->kpos, (size_t)T, (size_t)Q);
    df_op_rmsnorm_rope(be, a->q, a->q_pre, qd, df_drafter_param(d, ix->q_norm), qpos, w->rope_cos, w->rope_sin, Q, nh,
                       hd, eps);
    df_op_rmsnorm_rope(be, a->k, a->k_pre, kvd, df_drafter_param(d, ix->k_norm), w->kpos, w->rope_cos, w->rope_sin,
                       T + Q, nkv, hd, eps);
    DfBlockAttnArgs att = {.layout = &w->attn_layout, .q = a->q, .k_ctx = rows_of(a->k, 0, T, kvd),
                           .v_ctx = rows_of(a->v, 0, T, kvd), .k_blk = rows_of(a->k, T, Q, kvd),
                           .v_blk = rows_of(a->v, T, Q, kvd), .out = a->attn, .lse = a->lse, .heads = nh,
                           .kv_heads = nkv, .head_dim = hd, .scale = 1.0f / sqrtf((float)hd),
                           .window = df_drafter_layer_window(c, l)};
    df_op_block_attention(be, &att);
    df_op_linear_residual(be, a->x_mid, a->attn, df_drafter_param(d, ix->o_proj), a->x, Q, H, qd);

    df_op_rmsnorm(be, a->n, a->x_mid, df_drafter_param(d, ix->post_attention_layernorm), Q, H, eps);
    df_op_linear(be, a->gate, a->n, df_drafter_param(d, ix->gate_proj), Q, I, H, 0);
    df_op_linear(be, a->up, a->n, df_drafter_param(d, ix->up_proj), Q, I, H, 0);
    df_op_swiglu(be, a->act, a->gate, a->up);
    df_op_linear_residual(be, x_next, a->act, df_drafter_param(d, ix->down_proj), a->x_mid, Q, H, I);
}

void df_drafter_run_forward(DfDrafter *d, const DfDrafterBatch *batch) {
    const DfDrafterConfig *c = &d->cfg;
    DfDrafterWork *w = d->work;
    DfBackend *be = d->be;
    int T = w->host.rows->n_ctx, Q = w->host.rows->n_q, H = c->hidden_size, L = c->num_layers;
    float eps = (float)c->rms_norm_eps;
    DfBuffer features = df_buffer_view(batch->features, 0, (size_t)T * c->n_taps * H);
    df_op_linear(be, w->ctx_pre, features, df_drafter_param(d, d->layout.fc), T, H, c->n_taps * H, 0);
    df_op_rmsnorm(be, w->ctx, w->ctx_pre, df_drafter_param(d, d->layout.hidden_norm), T, H, eps);
    df_op_embedding(be, w->layers[0].x, d->embed, w->ids, Q, H);
    for (int l = 0; l < L; l++) layer_forward(d, l, l + 1 < L ? w->layers[l + 1].x : w->x_final);
    df_op_rmsnorm(be, w->out, w->x_final, df_drafter_param(d, d->layout.norm), Q, H, eps);
}
