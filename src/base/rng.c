#include "base/rng.h"

#include <math.h>

/* Philox-4x32 multipliers and Weyl key increments (from the paper). */
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void df_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

DfRng df_rng_key(uint64_t seed, uint32_t stream, uint64_t index) {
    DfRng r = {
        .key = {(uint32_t)seed, (uint32_t)(seed >> 32)},
        .counter = {0, stream, (uint32_t)index, (uint32_t)(index >> 32)},
        .used = 4,
    };
    return r;
}

uint32_t df_rng_u32(DfRng *r) {
    if (r->used == 4) {
        df_philox4x32_10(r->counter, r->key, r->words);
        r->counter[0]++;
        r->used = 0;
    }
    return r->words[r->used++];
}

uint64_t df_rng_u64(DfRng *r) {
    uint64_t lo = df_rng_u32(r);
    uint64_t hi = df_rng_u32(r);
    return lo | (hi << 32);
}

uint64_t df_rng_below(DfRng *r, uint64_t n) {
    if (n <= 1) return 0;
    /* Values below 2^64 mod n would make the low residues more likely:
     * reject them, leaving a range whose size is a multiple of n. */
    uint64_t threshold = (0 - n) % n;
    for (;;) {
        uint64_t u = df_rng_u64(r);
        if (u >= threshold) return u % n;
    }
}

float df_rng_float(DfRng *r) {
    return (float)(df_rng_u32(r) >> 8) * (1.0f / 16777216.0f);
}

double df_rng_double(DfRng *r) {
    return (double)(df_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

double df_rng_normal(DfRng *r) {
    double u1 = 1.0 - df_rng_double(r); /* (0, 1]: log stays finite */
    double u2 = df_rng_double(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}
