/* The hybrid targets' decode steps on the CPU (the reference the CUDA ops
 * are tested against): per sequence of the step, the host functions of
 * backend/gated_deltanet.h continuing from its slot's state. ACT and F32 are
 * both float here. */
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/gated_deltanet.h"

void df_cpu_conv_step(DfBackend *be, const DfConvStepArgs *a) {
    (void)be;
    const DfKvBatch *kb = a->batch;
    size_t ch = (size_t)a->channels, slot_floats = (size_t)(a->kernel - 1) * ch;
    float *out = a->out.ptr, *save = a->save.ptr;
    const float *x = a->x.ptr;
    for (int i = 0; i < kb->n_seqs; i++) {
        int r0 = kb->host_row_starts[i], n = kb->host_row_starts[i + 1] - r0;
        float *window = (float *)a->window.ptr + (size_t)kb->host_slots[i] * slot_floats;
        if (save) memcpy(save + (size_t)kb->host_slots[i] * slot_floats, window, slot_floats * sizeof *window);
        if (out)
            df_causal_conv_silu_continue(out + (size_t)r0 * ch, x + (size_t)r0 * ch, a->w.ptr, window, n, a->channels,
                                         a->kernel);
        else
            df_conv_window_advance(window, x + (size_t)r0 * ch, n, a->channels, a->kernel);
    }
}

void df_cpu_delta_rule_step(DfBackend *be, const DfDeltaStepArgs *a) {
    (void)be;
    const DfKvBatch *kb = a->batch;
    const DfDeltaRuleShape *s = &a->shape;
    size_t value = (size_t)s->value_heads * s->value_dim, nv = (size_t)s->value_heads;
    size_t width = 2 * (size_t)s->key_heads * s->key_dim + value, slot_floats = value * s->key_dim;
    float *out = a->out.ptr, *save = a->save.ptr;
    for (int i = 0; i < kb->n_seqs; i++) {
        size_t r0 = (size_t)kb->host_row_starts[i];
        int n = kb->host_row_starts[i + 1] - (int)r0;
        float *state = (float *)a->state.ptr + (size_t)kb->host_slots[i] * slot_floats;
        if (save) memcpy(save + (size_t)kb->host_slots[i] * slot_floats, state, slot_floats * sizeof *state);
        df_gated_delta_rule_continue(out ? out + r0 * value : NULL, (const float *)a->qkv.ptr + r0 * width,
                                     (const float *)a->b.ptr + r0 * nv, (const float *)a->a.ptr + r0 * nv, a->a_log.ptr,
                                     a->dt_bias.ptr, n, s, state);
    }
}
