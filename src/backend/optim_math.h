/* The optimizer's arithmetic in one place, shared by the host optimizer
 * (train/optimizer.c), the CPU backend's ops and the CUDA kernels, so that
 * every path computes the same bits.
 *
 * df_adamw_update_element is torch's single-tensor AdamW element update (see
 * train/optimizer.h for the formula). On the GPU it is written with the
 * round-to-nearest intrinsics (__fmul_rn, __fadd_rn, ...), which the compiler
 * never contracts into fused multiply-adds; on the host every operation is a
 * plain IEEE float operation, and C11 mode (-std=c11, as the Makefile builds)
 * keeps GCC from contracting them (-ffp-contract=off). Each step rounds to
 * float exactly as written, so both sides agree to the bit. */
#ifndef DF_BACKEND_OPTIM_MATH_H
#define DF_BACKEND_OPTIM_MATH_H

#include <math.h>
#include <stddef.h>

/* The per-step scalars of AdamW, computed once on the host (in double, as
 * Python does) and rounded to float as torch uses them. */
typedef struct DfAdamWScalars {
    float decay;         /* 1 - lr*wd */
    float lerp_weight;   /* 1 - b1 */
    float beta2, one_minus_beta2;
    float bc2_sqrt;      /* sqrt(1 - b2^t) */
    float eps;
    float neg_step_size; /* -(lr / (1 - b1^t)) */
    int apply_decay;     /* weight decay != 0 */
} DfAdamWScalars;

#if defined(__CUDACC__)
#define DF_OPT_FN static inline __host__ __device__
#else
#define DF_OPT_FN static inline
#endif
#if defined(__CUDA_ARCH__)
#define DF_FADD(a, b) __fadd_rn((a), (b))
#define DF_FSUB(a, b) __fsub_rn((a), (b))
#define DF_FMUL(a, b) __fmul_rn((a), (b))
#define DF_FDIV(a, b) __fdiv_rn((a), (b))
#define DF_FSQRT(a) __fsqrt_rn(a)
#else
#define DF_FADD(a, b) ((a) + (b))
#define DF_FSUB(a, b) ((a) - (b))
#define DF_FMUL(a, b) ((a) * (b))
#define DF_FDIV(a, b) ((a) / (b))
#define DF_FSQRT(a) sqrtf(a)
#endif

/* One element: master weight *p, moments *m, *v, gradient g (already
 * multiplied by the clip coefficient). In torch's order:
 *   p = p * decay                         (when apply_decay)
 *   m = lerp(m, g, w): w < 0.5: m + w*(g - m); else g - (g - m)*(1 - w)
 *   v = v*b2 + ((1-b2)*g)*g
 *   p = p + (neg_step_size*m) / (sqrt(v)/bc2_sqrt + eps) */
DF_OPT_FN void df_adamw_update_element(float *p, float *m, float *v, float g, const DfAdamWScalars *s) {
    float pi = *p;
    if (s->apply_decay) pi = DF_FMUL(pi, s->decay);
    float w = s->lerp_weight, mi = *m;
    float diff = DF_FSUB(g, mi);
    mi = w < 0.5f && w > -0.5f ? DF_FADD(mi, DF_FMUL(w, diff)) : DF_FSUB(g, DF_FMUL(diff, DF_FSUB(1.0f, w)));
    float vi = DF_FADD(DF_FMUL(*v, s->beta2), DF_FMUL(DF_FMUL(s->one_minus_beta2, g), g));
    float denom = DF_FADD(DF_FDIV(DF_FSQRT(vi), s->bc2_sqrt), s->eps);
    *p = DF_FADD(pi, DF_FDIV(DF_FMUL(s->neg_step_size, mi), denom));
    *m = mi;
    *v = vi;
}

#ifdef __cplusplus
extern "C" {
#endif

/* Sum of x[i]^2 in double on the host, in a fixed order: the buffer is cut
 * into at most 256 chunks whose bounds depend only on n, summed in parallel
 * (OpenMP) and added in chunk order, so the result does not depend on the
 * thread count. */
double df_sum_squares_host(const float *x, size_t n);

#ifdef __cplusplus
}
#endif

#endif
