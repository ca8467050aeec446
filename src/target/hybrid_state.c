#include "target/hybrid_state.h"

#include <stdlib.h>
#include <string.h>

#include "target/target_family.h"
#include "target/target_memory.h"

/* Layer li's part of a [n_linear][n_slots][per_slot] buffer. */
static DfBuffer layer_part(const DfHybridState *s, DfBuffer b, int li, size_t per_slot) {
    return df_buffer_view(b, (size_t)li * s->n_slots * per_slot, (size_t)s->n_slots * per_slot);
}

/* Slot's cell of layer li in such a buffer: per_slot values from `first`, n of them. */
static DfBuffer slot_part(const DfHybridState *s, DfBuffer b, int li, int slot, size_t per_slot, size_t n) {
    return df_buffer_view(b, ((size_t)li * s->n_slots + (size_t)slot) * per_slot, n);
}

static int alloc_zero(DfHybridState *s, DfBuffer *b, DfBufKind kind, size_t n, const char *what, DfError *err) {
    if (df_buffer_alloc(s->be, b, kind, n ? n : 1, err)) return df_context(err, "hybrid state: %s", what);
    df_op_fill_zero(s->be, *b);
    return 0;
}

int df_hybrid_state_init(DfHybridState *s, DfBackend *be, const DfModelConfig *c, int n_slots, DfError *err) {
    memset(s, 0, sizeof *s);
    if (!df_target_family(c)->hybrid_layers) return df_fail(err, "hybrid state: %s is not a hybrid target", c->architecture_name);
    if (n_slots < 1) return df_fail(err, "hybrid state: %d slots", n_slots);
    const DfLinearAttnConfig *la = &c->linear;
    s->be = be;
    for (int l = 0; l < DF_MAX_LAYERS; l++) s->linear_index[l] = -1;
    for (int l = 0; l < c->num_layers; l++)
        if (df_target_layer_kind(c, l) == DF_LAYER_GATED_DELTANET) s->linear_index[l] = s->n_linear++;
    s->n_slots = n_slots;
    s->value_heads = la->num_value_heads;
    s->conv_dim = (int)df_target_conv_channels(la);
    s->kernel = la->conv_kernel;
    s->shape = (DfDeltaRuleShape){la->num_key_heads, la->num_value_heads, la->key_head_dim, la->value_head_dim};
    s->window_floats = (size_t)(s->kernel - 1) * s->conv_dim;
    s->state_floats = (size_t)la->num_value_heads * la->key_head_dim * la->value_head_dim;
    s->step_start = df_xmalloc((size_t)n_slots * sizeof *s->step_start, "step starts");
    s->step_rows = df_xmalloc((size_t)n_slots * sizeof *s->step_rows, "step rows");
    s->zeros = df_xmalloc((size_t)n_slots * sizeof *s->zeros, "zeros");
    for (int i = 0; i < n_slots; i++) s->step_start[i] = 0, s->step_rows[i] = -1, s->zeros[i] = 0;
    size_t cells = (size_t)s->n_linear * n_slots;
    if (alloc_zero(s, &s->conv, DF_BUF_F32, cells * s->window_floats, "convolution windows", err) ||
        alloc_zero(s, &s->rec, DF_BUF_F32, cells * s->state_floats, "delta rule states", err)) {
        df_hybrid_state_free(s);
        return -1;
    }
    return 0;
}

static void free_records(DfHybridState *s) {
    DfBuffer *bufs[] = {&s->saved_conv, &s->saved_rec, &s->step_mixed, &s->step_qkv, &s->step_b, &s->step_a};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) df_buffer_free(s->be, bufs[i]);
    s->record_rows = 0;
}

void df_hybrid_state_free(DfHybridState *s) {
    if (!s->be) return;
    free_records(s);
    df_buffer_free(s->be, &s->conv);
    df_buffer_free(s->be, &s->rec);
    df_kv_batch_free(&s->record_kb, s->be);
    df_kv_batch_free(&s->replay_kb, s->be);
    free(s->step_start), free(s->step_rows), free(s->zeros);
    memset(s, 0, sizeof *s);
}

int df_hybrid_state_set_record_rows(DfHybridState *s, int rows, DfError *err) {
    if (rows < 0) return df_fail(err, "hybrid state: %d rows to record", rows);
    if (rows <= s->record_rows) return 0;
    free_records(s);
    size_t cells = (size_t)s->n_linear * s->n_slots, r = (size_t)rows;
    if (alloc_zero(s, &s->saved_conv, DF_BUF_F32, cells * s->window_floats, "window snapshots", err) ||
        alloc_zero(s, &s->saved_rec, DF_BUF_F32, cells * s->state_floats, "state snapshots", err) ||
        alloc_zero(s, &s->step_mixed, DF_BUF_ACT, cells * r * s->conv_dim, "step convolution inputs", err) ||
        alloc_zero(s, &s->step_qkv, DF_BUF_ACT, cells * r * s->conv_dim, "step recurrence inputs", err) ||
        alloc_zero(s, &s->step_b, DF_BUF_ACT, cells * r * s->value_heads, "step b rows", err) ||
        alloc_zero(s, &s->step_a, DF_BUF_ACT, cells * r * s->value_heads, "step a rows", err)) {
        free_records(s);
        return -1;
    }
    s->record_rows = rows;
    for (int i = 0; i < s->n_slots; i++) s->step_rows[i] = -1; /* records of the old size are gone */
    return 0;
}

void df_hybrid_state_reset(DfHybridState *s, int slot) {
    for (int li = 0; li < s->n_linear; li++) {
        df_op_fill_zero(s->be, slot_part(s, s->conv, li, slot, s->window_floats, s->window_floats));
        df_op_fill_zero(s->be, slot_part(s, s->rec, li, slot, s->state_floats, s->state_floats));
    }
    s->step_start[slot] = 0;
    s->step_rows[slot] = -1;
}

int df_hybrid_state_begin_step(DfHybridState *s, const DfKvBatch *kb, DfError *err) {
    /* a step of one token per sequence (plain decoding) holds nothing a verification would undo:
     * not recording it spares greedy decoding the snapshots' writes */
    s->recording = s->record_rows > 0 && kb->max_new >= 2 && kb->max_new <= s->record_rows;
    for (int i = 0; i < kb->n_seqs; i++) {
        int slot = kb->host_slots[i];
        s->step_start[slot] = kb->host_cache_lens[i];
        s->step_rows[slot] = s->recording ? kb->host_row_starts[i + 1] - kb->host_row_starts[i] : -1;
    }
    if (!s->recording) return 0;
    /* the records' layout: slot s's rows of the step from row 0 of its record */
    if (df_kv_batch_set(&s->record_kb, s->be, kb->n_seqs, kb->host_slots, s->zeros, kb->host_row_starts, s->n_slots,
                        s->record_rows, err)) {
        s->recording = 0;
        return df_context(err, "hybrid state: recording a step");
    }
    return 0;
}

/* The recorded step's rows [n_rows, dim] into layer li's records of their slots. */
static void record_rows(DfHybridState *s, DfBuffer records, int li, DfBuffer rows, int dim) {
    df_op_kv_cache_write(s->be, layer_part(s, records, li, (size_t)s->record_rows * dim), rows, &s->record_kb, dim);
}

void df_hybrid_state_layer(DfHybridState *s, const DfTargetLayer *l, int layer, const DfKvBatch *kb, DfBuffer mixed,
                           DfBuffer b, DfBuffer a, DfBuffer conv_out, DfBuffer core) {
    int li = s->linear_index[layer], rec = s->recording;
    DfBuffer none = {0};
    DfConvStepArgs ca = {kb, conv_out, mixed, l->conv1d, layer_part(s, s->conv, li, s->window_floats),
                         rec ? layer_part(s, s->saved_conv, li, s->window_floats) : none, s->conv_dim, s->kernel};
    df_op_conv_step(s->be, &ca);
    DfDeltaStepArgs da = {kb, core, conv_out, b, a, l->a_log, l->dt_bias, layer_part(s, s->rec, li, s->state_floats),
                          rec ? layer_part(s, s->saved_rec, li, s->state_floats) : none, s->shape};
    df_op_delta_rule_step(s->be, &da);
    if (!rec) return;
    record_rows(s, s->step_mixed, li, mixed, s->conv_dim);
    record_rows(s, s->step_qkv, li, conv_out, s->conv_dim);
    record_rows(s, s->step_b, li, b, s->value_heads);
    record_rows(s, s->step_a, li, a, s->value_heads);
}

/* Slot's window and state of layer li as they were before its recorded step. */
static void restore(DfHybridState *s, int li, int slot) {
    size_t w = s->window_floats, r = s->state_floats;
    df_op_copy2d(s->be, slot_part(s, s->conv, li, slot, w, w), (int)w, slot_part(s, s->saved_conv, li, slot, w, w),
                 (int)w, 1, (int)w);
    df_op_copy2d(s->be, slot_part(s, s->rec, li, slot, r, r), (int)r, slot_part(s, s->saved_rec, li, slot, r, r),
                 (int)r, 1, (int)r);
}

/* Layer li's convolution window and recurrence over the first `keep` recorded rows of slot. */
static void replay(DfHybridState *s, const DfTargetLayer *l, int li, int slot, int keep) {
    size_t rows = (size_t)s->record_rows, cd = (size_t)s->conv_dim, nv = (size_t)s->value_heads;
    DfBuffer none = {0};
    DfConvStepArgs ca = {&s->replay_kb, none, slot_part(s, s->step_mixed, li, slot, rows * cd, (size_t)keep * cd),
                         l->conv1d, layer_part(s, s->conv, li, s->window_floats), none, s->conv_dim, s->kernel};
    df_op_conv_step(s->be, &ca);
    DfDeltaStepArgs da = {&s->replay_kb,
                          none,
                          slot_part(s, s->step_qkv, li, slot, rows * cd, (size_t)keep * cd),
                          slot_part(s, s->step_b, li, slot, rows * nv, (size_t)keep * nv),
                          slot_part(s, s->step_a, li, slot, rows * nv, (size_t)keep * nv),
                          l->a_log,
                          l->dt_bias,
                          layer_part(s, s->rec, li, s->state_floats),
                          none,
                          s->shape};
    df_op_delta_rule_step(s->be, &da);
}

int df_hybrid_state_rollback(DfHybridState *s, const DfTargetLayer *layers, int slot, int len, DfError *err) {
    int start = s->step_start[slot], rows = s->step_rows[slot];
    if (rows < 0)
        return df_fail(err, "hybrid state: slot %d's last step (from %d tokens) was not recorded (at most %d "
                            "rows a sequence can be rolled back)", slot, start, s->record_rows);
    if (len < start || len > start + rows)
        return df_fail(err, "hybrid state: slot %d cannot roll back to %d tokens: its last step covered %d..%d", slot,
                       len, start, start + rows);
    int keep = len - start;
    if (keep == rows) return 0;
    int32_t one_slot = slot, replay_starts[2] = {0, keep};
    if (keep && df_kv_batch_set(&s->replay_kb, s->be, 1, &one_slot, s->zeros, replay_starts, s->n_slots,
                                s->record_rows, err))
        return df_context(err, "hybrid state: rolling slot %d back", slot);
    for (int layer = 0; layer < DF_MAX_LAYERS; layer++) {
        int li = s->linear_index[layer];
        if (li < 0) continue;
        restore(s, li, slot);
        if (keep) replay(s, &layers[layer], li, slot, keep);
    }
    s->step_rows[slot] = keep; /* rolling back again, to fewer of them, still works */
    return 0;
}
