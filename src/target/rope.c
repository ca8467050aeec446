#include "target/rope.h"

#include <math.h>
#include <stdlib.h>

#include "base/error.h"

#define DF_PI 3.14159265358979323846

/* Mirrors transformers' _compute_llama3_parameters: wavelen = 2 pi / f;
 * wavelen > old_ctx / low_freq_factor: f / factor; wavelen < old_ctx /
 * high_freq_factor: f; otherwise (1 - s) f / factor + s f with
 * s = (old_ctx / wavelen - low) / (high - low). */
static float llama3_scale(const DfRopeConfig *r, float f) {
    double old_ctx = (double)r->original_max_position_embeddings;
    double low_wavelen = old_ctx / r->low_freq_factor;
    double high_wavelen = old_ctx / r->high_freq_factor;
    double wavelen = 2.0 * DF_PI / (double)f;
    if (wavelen > low_wavelen) return (float)((double)f / r->factor);
    if (wavelen < high_wavelen) return f;
    double smooth = (old_ctx / wavelen - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
    return (float)((1.0 - smooth) * (double)f / r->factor + smooth * (double)f);
}

void df_rope_inv_freq(const DfRopeConfig *rope, int head_dim, float *inv_freq) {
    for (int i = 0; i < head_dim / 2; i++) {
        /* transformers: 1 / base ** (arange(0, dim, 2).float() / dim), in fp32 */
        float exponent = (float)(2 * i) / (float)head_dim;
        float f = 1.0f / (float)pow(rope->theta, (double)exponent);
        inv_freq[i] = rope->type == DF_ROPE_LLAMA3 ? llama3_scale(rope, f) : f;
    }
}

void df_rope_tables(const DfRopeConfig *rope, int head_dim, int n_pos, float *cos_out, float *sin_out) {
    int half = head_dim / 2;
    float *inv = df_xmalloc((size_t)half * sizeof *inv, "rope inv_freq");
    df_rope_inv_freq(rope, head_dim, inv);
    for (int p = 0; p < n_pos; p++)
        for (int i = 0; i < half; i++) {
            float angle = (float)p * inv[i]; /* fp32 product, as in the reference */
            cos_out[(size_t)p * half + i] = (float)cos((double)angle);
            sin_out[(size_t)p * half + i] = (float)sin((double)angle);
        }
    free(inv);
}
