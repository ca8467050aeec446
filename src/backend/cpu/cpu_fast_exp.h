/* A vectorizable expf for the softmax loops of the CPU backend. glibc's expf
 * is a scalar call per element (and the build targets baseline x86-64, where
 * the compiler does not substitute a vector variant), which made the
 * lm-head softmax cost a fifth of a drafter step. This is the classic
 * Cephes scheme: x = n ln2 + r with |r| <= ln2/2 (ln2 in two parts), a
 * degree-7 polynomial for e^r (about 1 ulp), and 2^n from the exponent bits.
 * Inputs are clamped to [-87, 88] so that 2^n stays a normal float: below
 * -87 the result (about 1.6e-38) is negligible next to the softmax's largest
 * term, 1. */
#ifndef DF_BACKEND_CPU_FAST_EXP_H
#define DF_BACKEND_CPU_FAST_EXP_H

#include <stdint.h>
#include <string.h>

#pragma omp declare simd notinbranch
static inline float df_fast_expf(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    const float round_magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float n = (x * 1.44269504088896341f + round_magic) - round_magic;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float e = p * r * r + r + 1.0f;
    /* NaN in, NaN out (a non-finite training step must show as one), without
     * converting a NaN to an integer, which is undefined */
    int nan_in = x != x;
    uint32_t bits = (uint32_t)((int32_t)(nan_in ? 0.0f : n) + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return nan_in ? x : e * scale;
}

#endif
