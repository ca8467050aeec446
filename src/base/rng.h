/* Counter-based random numbers: every draw is a pure function of
 * (seed, stream, index, draw number), so a resumed or re-sharded run draws
 * exactly what an uninterrupted one would, and no generator state has to be
 * saved in checkpoints or shared between threads.
 *
 * Generator: Philox-4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random
 * numbers: as easy as 1, 2, 3", SC 2011), a 10-round bijection of a 128-bit
 * counter under a 64-bit key; it passes TestU01 BigCrush.
 *
 *   key     = seed                  (k0 = low 32 bits, k1 = high 32 bits)
 *   counter = (c0, c1, c2, c3) = (block, stream, index low 32, index high 32)
 *
 * One block (one Philox evaluation) gives four 32-bit words, handed out in
 * order w0, w1, w2, w3; then the block number c0 advances. So draw number d
 * (counting 32-bit words) is word d % 4 of block d / 4. A generator that has
 * handed out 2^34 words wraps around; nothing in training comes near that.
 *
 * Streams keep independent uses apart: df_rng_stream(domain, epoch) packs a
 * purpose (DF_RNG_DOMAIN_*) into the top 8 bits and the epoch into the low 24.
 *
 * Derived values (all exact, no floating-point rounding surprises):
 *   df_rng_u64    = w_a | (w_b << 32)  for the next two words a, b
 *   df_rng_below  = uniform in [0, n) by rejection: draw u64 values until one
 *                   is >= (2^64 mod n), return it mod n (no modulo bias)
 *   df_rng_float  = (next word >> 8) * 2^-24, in [0, 1)
 *   df_rng_double = (next u64 >> 11) * 2^-53, in [0, 1)
 *   df_rng_normal = Box-Muller on two doubles, one value per call (the
 *                   second of the pair is dropped, keeping draws stateless). */
#ifndef DF_BASE_RNG_H
#define DF_BASE_RNG_H

#include <stdint.h>

enum {
    DF_RNG_DOMAIN_ANCHORS = 1, /* anchor selection: index = sample index */
    DF_RNG_DOMAIN_SHUFFLE = 2, /* epoch order of samples */
    DF_RNG_DOMAIN_INIT = 3,    /* parameter initialization: index = tensor index */
};

typedef struct DfRng {
    uint32_t key[2];
    uint32_t counter[4];
    uint32_t words[4]; /* output of the current block */
    int used;          /* words of the current block already handed out (4: none left) */
} DfRng;

/* The generator for (seed, stream, index), positioned at draw number 0. */
DfRng df_rng_key(uint64_t seed, uint32_t stream, uint64_t index);

/* stream = domain << 24 | (epoch mod 2^24). */
static inline uint32_t df_rng_stream(uint32_t domain, uint32_t epoch) {
    return (domain << 24) | (epoch & 0xffffffu);
}

/* One Philox-4x32-10 evaluation (exposed for known-answer tests). */
void df_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);

uint32_t df_rng_u32(DfRng *r);
uint64_t df_rng_u64(DfRng *r);
/* Uniform integer in [0, n); n = 0 returns 0. */
uint64_t df_rng_below(DfRng *r, uint64_t n);
float df_rng_float(DfRng *r);
double df_rng_double(DfRng *r);
/* Standard normal (mean 0, variance 1). */
double df_rng_normal(DfRng *r);

#endif
