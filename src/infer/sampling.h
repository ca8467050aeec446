/* Choosing the next token from a logits row: greedy (temperature 0) or
 * temperature sampling with nucleus (top-p) truncation. Each sampled token
 * consumes exactly one df_rng_double draw from the sequence's own generator,
 * keyed by (seed, record index), so a record's output does not depend on the
 * batch it ran in or on the records before it. */
#ifndef DF_INFER_SAMPLING_H
#define DF_INFER_SAMPLING_H

#include <stdint.h>

#include "base/rng.h"

/* Generator stream of generation sampling; a domain number kept apart from
 * the training domains listed in base/rng.h. */
#define DF_RNG_DOMAIN_SAMPLING 0x20u

typedef struct DfSampler {
    double temperature; /* <= 0: greedy */
    double top_p;       /* in (0, 1]; 1: no truncation */
    int vocab;
    float *probs;       /* scratch [vocab] */
    int32_t *order;     /* scratch [vocab] */
} DfSampler;

void df_sampler_init(DfSampler *s, int vocab, double temperature, double top_p);
void df_sampler_free(DfSampler *s);

/* The generator of record `index` under `seed`. */
DfRng df_sampler_rng(uint64_t seed, uint64_t index);

/* Next token from logits[0..vocab-1]: the first maximum when greedy; else a
 * draw from softmax(logits / T) restricted to the smallest set of most
 * probable tokens (ties broken by id) whose mass reaches top_p. */
int32_t df_sample_token(DfSampler *s, const float *logits, DfRng *rng);

#endif
