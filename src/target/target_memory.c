/* The target's memory in bytes from its config (see target_memory.h). */
#include "target/target_memory.h"

#include "target/target_family.h"

size_t df_target_conv_channels(const DfLinearAttnConfig *la) {
    return 2 * (size_t)la->num_key_heads * la->key_head_dim + (size_t)la->num_value_heads * la->value_head_dim;
}

size_t df_buf_spec_bytes(DfBufSpec s, size_t act_elem) {
    return s.count * (s.kind == DF_BUF_ACT ? act_elem : 4);
}

static size_t sum_specs(const DfBufSpec *s, size_t n, size_t act_elem) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += df_buf_spec_bytes(s[i], act_elem);
    return total;
}

#define SUM_SPECS(s, act_elem) sum_specs((s), sizeof(s) / sizeof((s)[0]), (act_elem))

/* --- weights --------------------------------------------------------------- */

/* A dense layer (dense_load.c, target_layer_storage.c). */
static size_t dense_layer_bytes(const DfModelConfig *c, size_t act_elem) {
    size_t h = (size_t)c->hidden_size, hd = (size_t)c->head_dim, inter = (size_t)c->intermediate_size;
    size_t q = (size_t)c->num_heads * hd, kv = (size_t)c->num_kv_heads * hd;
    const DfBufSpec w[] = {
        {DF_BUF_ACT, h},                  /* input_norm */
        {DF_BUF_ACT, (q + 2 * kv) * h},   /* qkv_proj: q_proj, k_proj, v_proj */
        {DF_BUF_ACT, h * q},              /* o_proj */
        {DF_BUF_ACT, h},                  /* post_norm */
        {DF_BUF_ACT, 2 * inter * h},      /* gate_up_proj: gate_proj, up_proj */
        {DF_BUF_ACT, h * inter},          /* down_proj */
        {DF_BUF_ACT, c->has_qk_norm ? hd : 0}, /* q_norm */
        {DF_BUF_ACT, c->has_qk_norm ? hd : 0}, /* k_norm */
    };
    return SUM_SPECS(w, act_elem);
}

/* A hybrid layer's gated attention (hybrid_load.c load_gated_attention). */
static size_t gated_attention_bytes(const DfModelConfig *c, size_t act_elem) {
    size_t h = (size_t)c->hidden_size, hd = (size_t)c->head_dim;
    size_t q = (size_t)c->num_heads * hd, kv = (size_t)c->num_kv_heads * hd;
    const DfBufSpec w[] = {
        {DF_BUF_ACT, 2 * q * h}, /* q_proj: [query | gate] per head */
        {DF_BUF_ACT, kv * h},    /* k_proj */
        {DF_BUF_ACT, kv * h},    /* v_proj */
        {DF_BUF_ACT, h * q},     /* o_proj */
        {DF_BUF_F32, hd},        /* q_norm */
        {DF_BUF_F32, hd},        /* k_norm */
    };
    return SUM_SPECS(w, act_elem);
}

/* A hybrid layer's Gated DeltaNet (hybrid_load.c load_gated_deltanet). */
static size_t gated_deltanet_bytes(const DfModelConfig *c, size_t act_elem) {
    const DfLinearAttnConfig *la = &c->linear;
    size_t h = (size_t)c->hidden_size, nv = (size_t)la->num_value_heads;
    size_t value_dim = nv * la->value_head_dim, conv_dim = df_target_conv_channels(la);
    const DfBufSpec w[] = {
        {DF_BUF_ACT, conv_dim * h},                       /* in_proj_qkv */
        {DF_BUF_ACT, value_dim * h},                      /* in_proj_z */
        {DF_BUF_ACT, nv * h},                             /* in_proj_b */
        {DF_BUF_ACT, nv * h},                             /* in_proj_a */
        {DF_BUF_ACT, h * value_dim},                      /* out_proj */
        {DF_BUF_F32, conv_dim * (size_t)la->conv_kernel}, /* conv1d */
        {DF_BUF_F32, nv},                                 /* dt_bias */
        {DF_BUF_F32, nv},                                 /* A_log */
        {DF_BUF_F32, (size_t)la->value_head_dim},         /* the gated norm */
    };
    return SUM_SPECS(w, act_elem);
}

/* What every hybrid layer has (hybrid_load.c df_hybrid_load_layer). */
static size_t hybrid_common_bytes(const DfModelConfig *c, size_t act_elem) {
    size_t h = (size_t)c->hidden_size, inter = (size_t)c->intermediate_size;
    const DfBufSpec w[] = {
        {DF_BUF_F32, h},         /* input_norm */
        {DF_BUF_F32, h},         /* post_norm */
        {DF_BUF_ACT, inter * h}, /* gate_proj */
        {DF_BUF_ACT, inter * h}, /* up_proj */
        {DF_BUF_ACT, h * inter}, /* down_proj */
    };
    return SUM_SPECS(w, act_elem);
}

size_t df_target_layer_weight_bytes(const DfModelConfig *c, int layer, size_t act_elem) {
    switch (df_target_layer_kind(c, layer)) {
    case DF_LAYER_ATTENTION: return dense_layer_bytes(c, act_elem);
    case DF_LAYER_GATED_ATTENTION: return hybrid_common_bytes(c, act_elem) + gated_attention_bytes(c, act_elem);
    case DF_LAYER_GATED_DELTANET: return hybrid_common_bytes(c, act_elem) + gated_deltanet_bytes(c, act_elem);
    }
    return 0;
}

size_t df_target_weight_bytes(const DfModelConfig *c, int n_layers, int with_head, size_t act_elem) {
    size_t h = (size_t)c->hidden_size, table = (size_t)c->vocab_size * h;
    size_t total = table * act_elem; /* embedding */
    for (int i = 0; i < n_layers; i++) total += df_target_layer_weight_bytes(c, i, act_elem);
    if (!with_head) return total;
    total += h * (c->norm_unit_offset ? 4 : act_elem); /* final norm: a (1 + w) norm stays F32 */
    if (!c->tie_word_embeddings) total += table * act_elem;
    return total;
}

/* --- the forward's activations ------------------------------------------------ */

void df_target_workspace_specs(const DfModelConfig *c, int n_tokens, DfBufSpec out[DF_TARGET_WS_BUFFERS]) {
    size_t t = (size_t)n_tokens, hid = (size_t)c->hidden_size, inter = (size_t)c->intermediate_size;
    size_t q = (size_t)c->num_heads * c->head_dim, kv = (size_t)c->num_kv_heads * c->head_dim;
    const DfBufSpec s[DF_TARGET_WS_BUFFERS] = {
        {DF_BUF_I32, t},         /* ids */
        {DF_BUF_ACT, t * hid},   /* x: the residual stream */
        {DF_BUF_ACT, t * hid},   /* h: normed x */
        {DF_BUF_ACT, t * q},     /* q */
        {DF_BUF_ACT, t * kv},    /* k */
        {DF_BUF_ACT, t * kv},    /* v */
        {DF_BUF_ACT, t * q},     /* attn */
        {DF_BUF_ACT, t * inter}, /* gate */
        {DF_BUF_ACT, t * inter}, /* up */
    };
    for (int i = 0; i < DF_TARGET_WS_BUFFERS; i++) out[i] = s[i];
}

void df_hybrid_workspace_specs(const DfModelConfig *c, int n_tokens, DfBufSpec out[DF_HYBRID_WS_BUFFERS]) {
    const DfLinearAttnConfig *la = &c->linear;
    size_t t = (size_t)n_tokens, q = (size_t)c->num_heads * c->head_dim, nv = (size_t)la->num_value_heads;
    size_t value_dim = nv * la->value_head_dim, conv_dim = df_target_conv_channels(la);
    const DfBufSpec s[DF_HYBRID_WS_BUFFERS] = {
        {DF_BUF_ACT, t * 2 * q},      /* qg: the gated q_proj's output */
        {DF_BUF_ACT, t * q},          /* attn_gate */
        {DF_BUF_ACT, t * conv_dim},   /* mixed: in_proj_qkv's output */
        {DF_BUF_ACT, t * conv_dim},   /* conv: its convolution */
        {DF_BUF_ACT, t * value_dim},  /* z */
        {DF_BUF_ACT, t * nv},         /* beta: raw b */
        {DF_BUF_ACT, t * nv},         /* decay: raw a */
        {DF_BUF_ACT, t * value_dim},  /* core: the recurrence's output */
    };
    for (int i = 0; i < DF_HYBRID_WS_BUFFERS; i++) out[i] = s[i];
}

size_t df_target_workspace_bytes(const DfModelConfig *c, int n_tokens, size_t act_elem) {
    DfBufSpec ws[DF_TARGET_WS_BUFFERS], hws[DF_HYBRID_WS_BUFFERS];
    df_target_workspace_specs(c, n_tokens, ws);
    size_t total = SUM_SPECS(ws, act_elem);
    if (!df_target_family(c)->hybrid_layers) return total;
    df_hybrid_workspace_specs(c, n_tokens, hws);
    return total + SUM_SPECS(hws, act_elem);
}

int df_target_kv_layers(const DfModelConfig *c) {
    int n = 0;
    for (int l = 0; l < c->num_layers; l++) n += df_target_layer_kind(c, l) != DF_LAYER_GATED_DELTANET;
    return n;
}

size_t df_target_recurrent_floats(const DfModelConfig *c) {
    if (!df_target_family(c)->hybrid_layers) return 0;
    const DfLinearAttnConfig *la = &c->linear;
    size_t window = (size_t)(la->conv_kernel - 1) * df_target_conv_channels(la);
    return window + (size_t)la->num_value_heads * la->key_head_dim * la->value_head_dim;
}

int df_target_rope_dim(const DfModelConfig *c) {
    return df_target_family(c)->partial_rotary ? c->rotary_dim : c->head_dim;
}

int df_target_rope_positions(int have, int max_len) {
    if (have >= max_len) return have;
    int n_pos = have ? have : 256;
    while (n_pos < max_len) n_pos *= 2;
    return n_pos;
}

size_t df_target_recurrent_state_bytes(const DfModelConfig *t, int64_t record_rows, size_t act_elem) {
    if (!df_target_family(t)->hybrid_layers) return 0;
    const DfLinearAttnConfig *la = &t->linear;
    size_t record = (size_t)record_rows * (2 * df_target_conv_channels(la) + 2 * (size_t)la->num_value_heads);
    size_t per_layer = 2 * df_target_recurrent_floats(t) * sizeof(float) + record * act_elem;
    size_t n_linear = (size_t)(t->num_layers - df_target_kv_layers(t));
    return n_linear * per_layer;
}

size_t df_target_decoder_slot_bytes(const DfModelConfig *t, int64_t slot_rows, int64_t rollback_rows,
                                    size_t act_elem) {
    size_t kv = (size_t)t->num_kv_heads * t->head_dim;
    size_t cache = (size_t)df_target_kv_layers(t) * 2 * (size_t)slot_rows * kv * act_elem;
    if (rollback_rows > 0) return cache + df_target_recurrent_state_bytes(t, rollback_rows, act_elem);
    size_t n_linear = (size_t)(t->num_layers - df_target_kv_layers(t));
    return cache + n_linear * df_target_recurrent_floats(t) * sizeof(float);
}

size_t df_target_decoder_workspace_bytes(const DfModelConfig *t, int n_taps, size_t rows, size_t act_elem) {
    int hybrid = df_target_family(t)->hybrid_layers;
    size_t H = (size_t)t->hidden_size, q = (size_t)t->num_heads * t->head_dim;
    size_t kv = (size_t)t->num_kv_heads * t->head_dim, inter = (size_t)t->intermediate_size;
    size_t per_row = 3 * H + 2 * q + inter + (size_t)n_taps * H; /* x, h, last; q, attn; gate; features */
    per_row += hybrid ? 2 * kv + inter : q + 2 * kv + 2 * inter;
    size_t bytes = rows * sizeof(int32_t) + rows * per_row * act_elem;
    if (hybrid) {
        DfBufSpec specs[DF_HYBRID_WS_BUFFERS];
        df_hybrid_workspace_specs(t, (int)rows, specs);
        for (int i = 0; i < DF_HYBRID_WS_BUFFERS; i++) bytes += df_buf_spec_bytes(specs[i], act_elem);
    }
    return bytes;
}

size_t df_target_rope_table_bytes(const DfModelConfig *c, int max_len) {
    size_t rows = (size_t)df_target_rope_positions(0, max_len), half = (size_t)df_target_rope_dim(c) / 2;
    return 2 * rows * half * sizeof(float); /* cos and sin */
}

size_t df_packed_batch_bytes(int n_tokens, int n_seqs) {
    return ((size_t)n_seqs + 1 + (size_t)n_tokens) * sizeof(int32_t);
}

size_t df_target_forward_workspace_bytes(const DfModelConfig *c, int n_tokens, int n_seqs, int max_len,
                                         size_t act_elem) {
    return df_target_workspace_bytes(c, n_tokens, act_elem) + df_target_rope_table_bytes(c, max_len) +
           df_packed_batch_bytes(n_tokens, n_seqs);
}

/* Mirrors cuda_skinny_gemm.cu: DF_SKINNY_GEMM_MAX_M rows at most, blocks of
 * 128 weight rows, splits chosen so that row blocks x splits <= 2 per SM. */
#define SKINNY_MAX_M 64
#define SKINNY_BLOCK_ROWS 128

size_t df_target_forward_cuda_scratch_bytes(int n_tokens, int sm_count) {
    if (n_tokens < 1 || n_tokens > SKINNY_MAX_M) return 0;
    size_t sms = (size_t)sm_count;
    size_t partial = (size_t)n_tokens * 2 * sms * SKINNY_BLOCK_ROWS * sizeof(float);
    return partial + 2 * sms * sizeof(int);
}
