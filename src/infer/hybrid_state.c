#include "infer/hybrid_state.h"

#include <stdlib.h>
#include <string.h>

#include "model/gated_deltanet.h"
#include "model/hybrid_layer.h"

static size_t window_floats(const DfHybridState *s) { return (size_t)(s->kernel - 1) * s->conv_dim; }

/* Index of (linear layer li, slot) in the per-(layer, slot) arrays. */
static size_t cell(const DfHybridState *s, int li, int slot) { return (size_t)li * s->n_slots + (size_t)slot; }

static float *zalloc(size_t n, const char *what) {
    float *p = df_xmalloc((n ? n : 1) * sizeof *p, what);
    memset(p, 0, (n ? n : 1) * sizeof *p);
    return p;
}

int df_hybrid_state_init(DfHybridState *s, const DfModelConfig *c, int n_slots, DfError *err) {
    memset(s, 0, sizeof *s);
    if (!c->is_hybrid) return df_fail(err, "hybrid state: %s is not a hybrid target", c->architecture_name);
    if (n_slots < 1) return df_fail(err, "hybrid state: %d slots", n_slots);
    const DfLinearAttnConfig *la = &c->linear;
    for (int l = 0; l < DF_MAX_LAYERS; l++) s->linear_index[l] = -1;
    for (int l = 0; l < c->num_layers; l++)
        if (c->layer_is_linear[l]) s->linear_index[l] = s->n_linear++;
    s->n_slots = n_slots;
    s->value_heads = la->num_value_heads;
    s->conv_dim = 2 * la->num_key_heads * la->key_head_dim + la->num_value_heads * la->value_head_dim;
    s->kernel = la->conv_kernel;
    s->state_floats = (size_t)la->num_value_heads * la->key_head_dim * la->value_head_dim;
    size_t cells = (size_t)s->n_linear * n_slots;
    s->conv = zalloc(cells * window_floats(s), "convolution windows");
    s->rec = zalloc(cells * s->state_floats, "delta rule states");
    s->saved_conv = zalloc(cells * window_floats(s), "convolution window snapshots");
    s->saved_rec = zalloc(cells * s->state_floats, "delta rule state snapshots");
    s->step_start = df_xmalloc((size_t)n_slots * sizeof *s->step_start, "step starts");
    s->step_rows = df_xmalloc((size_t)n_slots * sizeof *s->step_rows, "step rows");
    for (int i = 0; i < n_slots; i++) s->step_start[i] = 0, s->step_rows[i] = -1;
    return 0;
}

static void free_records(DfHybridState *s) {
    free(s->step_mixed), free(s->step_qkv), free(s->step_b), free(s->step_a);
    s->step_mixed = s->step_qkv = s->step_b = s->step_a = NULL;
    s->record_rows = 0;
}

void df_hybrid_state_free(DfHybridState *s) {
    free_records(s);
    free(s->conv), free(s->rec), free(s->saved_conv), free(s->saved_rec);
    free(s->step_start), free(s->step_rows);
    memset(s, 0, sizeof *s);
}

int df_hybrid_state_set_record_rows(DfHybridState *s, int rows, DfError *err) {
    if (rows < 0) return df_fail(err, "hybrid state: %d rows to record", rows);
    if (rows <= s->record_rows) return 0;
    free_records(s);
    size_t cells = (size_t)s->n_linear * s->n_slots;
    s->step_mixed = zalloc(cells * rows * s->conv_dim, "step convolution inputs");
    s->step_qkv = zalloc(cells * rows * s->conv_dim, "step recurrence inputs");
    s->step_b = zalloc(cells * rows * s->value_heads, "step b rows");
    s->step_a = zalloc(cells * rows * s->value_heads, "step a rows");
    s->record_rows = rows;
    for (int i = 0; i < s->n_slots; i++) s->step_rows[i] = -1; /* records of the old size are gone */
    return 0;
}

void df_hybrid_state_reset(DfHybridState *s, int slot) {
    for (int li = 0; li < s->n_linear; li++) {
        memset(s->conv + cell(s, li, slot) * window_floats(s), 0, window_floats(s) * sizeof(float));
        memset(s->rec + cell(s, li, slot) * s->state_floats, 0, s->state_floats * sizeof(float));
    }
    s->step_start[slot] = 0;
    s->step_rows[slot] = -1;
}

void df_hybrid_state_begin_step(DfHybridState *s, int slot, int start, int rows) {
    s->step_start[slot] = start;
    s->step_rows[slot] = rows <= s->record_rows ? rows : -1;
    if (s->step_rows[slot] < 0) return;
    for (int li = 0; li < s->n_linear; li++) {
        size_t w = cell(s, li, slot) * window_floats(s), r = cell(s, li, slot) * s->state_floats;
        memcpy(s->saved_conv + w, s->conv + w, window_floats(s) * sizeof(float));
        memcpy(s->saved_rec + r, s->rec + r, s->state_floats * sizeof(float));
    }
}

void df_hybrid_state_run(DfHybridState *s, const DfTargetLayer *l, const DfLinearAttnConfig *la, int layer, int slot,
                         const float *mixed, const float *b, const float *a, float *conv_out, float *core, int n) {
    int li = s->linear_index[layer];
    size_t c = cell(s, li, slot);
    float *window = s->conv + c * window_floats(s), *state = s->rec + c * s->state_floats;
    df_causal_conv_silu_continue(conv_out, mixed, df_hybrid_host(l->conv1d), window, n, s->conv_dim, s->kernel);
    df_gated_delta_rule_continue(core, conv_out, b, a, df_hybrid_host(l->a_log), df_hybrid_host(l->dt_bias), n, la,
                                 state);
    if (s->step_rows[slot] < 0 || n > s->record_rows) return;
    size_t rows = (size_t)s->record_rows;
    memcpy(s->step_mixed + c * rows * s->conv_dim, mixed, (size_t)n * s->conv_dim * sizeof(float));
    memcpy(s->step_qkv + c * rows * s->conv_dim, conv_out, (size_t)n * s->conv_dim * sizeof(float));
    memcpy(s->step_b + c * rows * s->value_heads, b, (size_t)n * s->value_heads * sizeof(float));
    memcpy(s->step_a + c * rows * s->value_heads, a, (size_t)n * s->value_heads * sizeof(float));
}

int df_hybrid_state_rollback(DfHybridState *s, const DfTargetLayer *layers, const DfLinearAttnConfig *la, int slot,
                             int len, DfError *err) {
    int start = s->step_start[slot], rows = s->step_rows[slot];
    if (rows < 0)
        return df_fail(err, "hybrid state: slot %d's last step (%d tokens from %d) was not recorded (at most %d "
                            "rows can be rolled back)", slot, rows, start, s->record_rows);
    if (len < start || len > start + rows)
        return df_fail(err, "hybrid state: slot %d cannot roll back to %d tokens: its last step covered %d..%d", slot,
                       len, start, start + rows);
    int keep = len - start;
    if (keep == rows) return 0;
    size_t stride = (size_t)s->record_rows;
    for (int layer = 0; layer < DF_MAX_LAYERS; layer++) {
        int li = s->linear_index[layer];
        if (li < 0) continue;
        size_t c = cell(s, li, slot), w = c * window_floats(s), r = c * s->state_floats;
        memcpy(s->conv + w, s->saved_conv + w, window_floats(s) * sizeof(float));
        memcpy(s->rec + r, s->saved_rec + r, s->state_floats * sizeof(float));
        df_conv_window_advance(s->conv + w, s->step_mixed + c * stride * s->conv_dim, keep, s->conv_dim, s->kernel);
        if (keep)
            df_gated_delta_rule_continue(NULL, s->step_qkv + c * stride * s->conv_dim,
                                         s->step_b + c * stride * s->value_heads,
                                         s->step_a + c * stride * s->value_heads, df_hybrid_host(layers[layer].a_log),
                                         df_hybrid_host(layers[layer].dt_bias), keep, la, s->rec + r);
    }
    s->step_rows[slot] = keep; /* rolling back again, to fewer of them, still works */
    return 0;
}
