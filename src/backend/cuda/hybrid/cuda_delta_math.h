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

/* The log of a token's state decay: -exp(A_log) * softplus(a + dt_bias); neg_a = -exp(A_log). */
__device__ __forceinline__ float delta_log_decay(float neg_a, float a, float dt_bias) {
    return neg_a * softplus_f(a + dt_bias);
}

/* A token's state decay exp(-exp(A_log) * softplus(a + dt_bias)). */
__device__ __forceinline__ float delta_decay(float neg_a, float a, float dt_bias) {
    return expf(delta_log_decay(neg_a, a, dt_bias));
}

/* A staged token's q and k [dk] divided by their l2 norms (q also by sqrt(dk):
 * q_scale = 1 / sqrt(dk)), in place, by one warp; then its gates [2] (a, b as
 * staged) turned into the decay and beta by lane 0. */
__device__ __forceinline__ void delta_prepare_token(float *qs, float *ks, float *gates, int dk, float q_scale,
                                                    float neg_a, float dt_bias) {
    int lane = threadIdx.x % 32;
    float sq = 0.0f, sk = 0.0f;
    for (int i = lane; i < dk; i += 32) {
        sq += qs[i] * qs[i];
        sk += ks[i] * ks[i];
    }
    for (int o = 16; o > 0; o /= 2) {
        sq += __shfl_xor_sync(0xffffffffu, sq, o);
        sk += __shfl_xor_sync(0xffffffffu, sk, o);
    }
    float rq = q_scale / sqrtf(sq + 1e-6f), rk = 1.0f / sqrtf(sk + 1e-6f);
    for (int i = lane; i < dk; i += 32) {
        qs[i] *= rq;
        ks[i] *= rk;
    }
    if (lane == 0) {
        float decay = delta_decay(neg_a, gates[0], dt_bias), beta = sigmoid_f(gates[1]);
        gates[0] = decay;
        gates[1] = beta;
    }
}

#endif
