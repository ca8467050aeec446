#include "infer/sampling.h"

#include <math.h>
#include <stdlib.h>

#include "base/error.h"
#include "target/target_decode.h"

void df_sampler_init(DfSampler *s, int vocab, double temperature, double top_p) {
    s->temperature = temperature;
    s->top_p = top_p > 0 && top_p < 1 ? top_p : 1.0;
    s->vocab = vocab;
    s->probs = NULL;
    s->order = NULL;
    if (temperature > 0) {
        s->probs = df_xmalloc((size_t)vocab * sizeof *s->probs, "sampling probabilities");
        s->order = df_xmalloc((size_t)vocab * sizeof *s->order, "sampling order");
    }
}

void df_sampler_free(DfSampler *s) {
    free(s->probs);
    free(s->order);
    s->probs = NULL;
    s->order = NULL;
}

DfRng df_sampler_rng(uint64_t seed, uint64_t index) {
    return df_rng_key(seed, df_rng_stream(DF_RNG_DOMAIN_SAMPLING, 0), index);
}

/* qsort has no context argument: sort (probability, id) pairs packed into
 * one comparable key instead. Probabilities are non-negative floats, whose
 * bit patterns order like the values. */
static int by_prob_desc(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int32_t df_sample_token(DfSampler *s, const float *logits, DfRng *rng) {
    int v = s->vocab;
    if (s->temperature <= 0) return df_argmax_f32(logits, v);
    float mx = logits[df_argmax_f32(logits, v)];
    double total = 0;
    for (int i = 0; i < v; i++) {
        s->probs[i] = expf((float)((logits[i] - mx) / s->temperature));
        total += s->probs[i];
    }
    double u = df_rng_double(rng);
    if (s->top_p >= 1.0) {
        double target = u * total, acc = 0;
        for (int i = 0; i < v; i++) {
            acc += s->probs[i];
            if (acc > target) return i;
        }
        return df_argmax_f32(logits, v);
    }
    /* key: probability bits high, inverted id low, so equal probabilities
     * put the smaller id first in descending order */
    uint64_t *keys = df_xmalloc((size_t)v * sizeof *keys, "sampling keys");
    for (int i = 0; i < v; i++) {
        union {
            float f;
            uint32_t u;
        } bits = {s->probs[i]};
        keys[i] = ((uint64_t)bits.u << 32) | (uint32_t)(UINT32_MAX - (uint32_t)i);
    }
    qsort(keys, (size_t)v, sizeof *keys, by_prob_desc);
    int kept = 0;
    double mass = 0;
    while (kept < v && mass < s->top_p * total) {
        s->order[kept] = (int32_t)(UINT32_MAX - (uint32_t)keys[kept]);
        mass += s->probs[s->order[kept]];
        kept++;
    }
    free(keys);
    double target = u * mass, acc = 0;
    for (int i = 0; i < kept; i++) {
        acc += s->probs[s->order[i]];
        if (acc > target) return s->order[i];
    }
    return s->order[0];
}
