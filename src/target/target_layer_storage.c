/* A target layer's weight storage: a dense layer's q/k/v and gate/up
 * projections live in two fused owners (one product each for the decoder),
 * with the separate projections as views into them; freeing knows which
 * buffers own memory. */
#include "target/target_layer_storage.h"

#include <string.h>

int df_target_layer_alloc_fused(DfTargetModel *m, DfTargetLayer *l, DfError *err) {
    const DfModelConfig *c = &m->cfg;
    size_t h = (size_t)c->hidden_size, hd = (size_t)c->head_dim, inter = (size_t)c->intermediate_size;
    size_t q = (size_t)c->num_heads * hd * h, kv = (size_t)c->num_kv_heads * hd * h, mlp = inter * h;
    if (df_buffer_alloc(m->be, &l->qkv_proj, DF_BUF_ACT, q + 2 * kv, err) ||
        df_buffer_alloc(m->be, &l->gate_up_proj, DF_BUF_ACT, 2 * mlp, err))
        return df_context(err, "fused q/k/v and gate/up projections");
    l->q_proj = df_buffer_view(l->qkv_proj, 0, q);
    l->k_proj = df_buffer_view(l->qkv_proj, q, kv);
    l->v_proj = df_buffer_view(l->qkv_proj, q + kv, kv);
    l->gate_proj = df_buffer_view(l->gate_up_proj, 0, mlp);
    l->up_proj = df_buffer_view(l->gate_up_proj, mlp, mlp);
    return 0;
}

/* The views of an owner are forgotten, not freed; then the owner goes. */
static void free_owner(DfBackend *be, DfBuffer *owner, DfBuffer *views[], size_t n_views) {
    if (!owner->ptr) return;
    for (size_t i = 0; i < n_views; i++) memset(views[i], 0, sizeof *views[i]);
    df_buffer_free(be, owner);
}

void df_target_layer_free(DfBackend *be, DfTargetLayer *l) {
    DfBuffer *qkv_views[] = {&l->q_proj, &l->k_proj, &l->v_proj};
    DfBuffer *gate_up_views[] = {&l->gate_proj, &l->up_proj};
    free_owner(be, &l->qkv_proj, qkv_views, 3);
    free_owner(be, &l->gate_up_proj, gate_up_views, 2);
    /* what is left owns its memory (a view was cleared above) */
    DfBuffer *w[] = {&l->input_norm, &l->q_proj,      &l->k_proj,    &l->v_proj,    &l->o_proj,
                     &l->q_norm,     &l->k_norm,      &l->post_norm, &l->gate_proj, &l->up_proj,
                     &l->down_proj,  &l->in_proj_qkv, &l->in_proj_z, &l->in_proj_b, &l->in_proj_a,
                     &l->out_proj,   &l->conv1d,      &l->dt_bias,   &l->a_log,     &l->linear_norm};
    for (size_t j = 0; j < sizeof w / sizeof w[0]; j++) df_buffer_free(be, w[j]);
}
