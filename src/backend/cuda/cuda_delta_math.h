/* The gated delta rule's scalar gates on CUDA, shared by the forward
 * (cuda_hybrid.cu) and the decode step (cuda_delta_rule_step.cu) so that
 * both round alike; formulas as backend/gated_deltanet.h. */
#ifndef DF_BACKEND_CUDA_CUDA_DELTA_MATH_H
#define DF_BACKEND_CUDA_CUDA_DELTA_MATH_H

__device__ __forceinline__ float sigmoid_f(float x) {
    return 1.0f / (1.0f + expf(-x));
}

/* torch.nn.functional.softplus: linear above 20 */
__device__ __forceinline__ float softplus_f(float x) {
    return x > 20.0f ? x : log1pf(expf(x));
}

/* A token's state decay exp(-exp(A_log) * softplus(a + dt_bias)); neg_a = -exp(A_log). */
__device__ __forceinline__ float delta_decay(float neg_a, float a, float dt_bias) {
    return expf(neg_a * softplus_f(a + dt_bias));
}

#endif
