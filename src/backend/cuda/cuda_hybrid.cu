/* The hybrid targets' ops on CUDA (formulas: backend/gated_deltanet.h): the
 * causal depthwise convolution + SiLU, the gated delta rule, the gated
 * RMSNorm, the sigmoid output gate, partial RoPE and RMSNorm with an fp32
 * weight. Activations bf16, small parameters fp32, all math in fp32.
 *
 * The delta rule runs its recurrence token by token: one CTA per (sequence,
 * value head) holds the [key_dim, value_dim] fp32 state in registers (P
 * threads per value column, each keeping key_dim / P rows of it) and walks
 * the sequence in chunks staged in shared memory (k_gated_delta_rule), with
 * no barrier or global load between the tokens of a chunk. Its cost is
 * latency: the sequence length in serial steps. A chunked form (WY / UT transform over
 * chunks of ~64 tokens, as flash-linear-attention does) would turn the three
 * mat-vecs per token into tensor-core matmuls per chunk and the serial
 * steps into length / 64, at the price of a much larger kernel. */
#include "backend/cuda/cuda_internal.h"

__device__ __forceinline__ float sigmoid_f(float x) {
    return 1.0f / (1.0f + expf(-x));
}

/* torch.nn.functional.softplus: linear above 20 */
__device__ __forceinline__ float softplus_f(float x) {
    return x > 20.0f ? x : log1pf(expf(x));
}

/* --- causal depthwise conv1d + SiLU: one thread per (token, channel) -------- */

/* A row's sequence starts at t - positions[t]: the window stops there. */
__global__ void k_causal_conv_silu(bf16 *out, const bf16 *x, const float *w, const int32_t *pos, int n_tokens,
                                   int channels, int kernel) {
    size_t total = (size_t)n_tokens * channels;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        long t = (long)(i / channels);
        int c = (int)(i % channels);
        long start = t - pos[t];
        if (start < 0) start = 0;
        float acc = 0.0f;
        for (int j = 0; j < kernel; j++) {
            long src = t - (kernel - 1) + j;
            if (src >= start) acc += w[(size_t)c * kernel + j] * __bfloat162float(x[(size_t)src * channels + c]);
        }
        out[i] = __float2bfloat16_rn(acc * sigmoid_f(acc));
    }
}

void df_cuda_causal_conv_silu(DfBackend *be, DfBuffer out, DfBuffer x, DfBuffer w, const DfPackedBatch *batch,
                                  int channels, int kernel) {
    DfCudaState *st = df_cuda_state(be);
    size_t total = (size_t)batch->n_tokens * channels;
    k_causal_conv_silu<<<df_cuda_blocks(total, 256), 256, 0, st->stream>>>(
        (bf16 *)out.ptr, (const bf16 *)x.ptr, (const float *)w.ptr, (const int32_t *)batch->positions.ptr,
        batch->n_tokens, channels, kernel);
    DF_CUDA_CHECK_LAUNCH(be, "causal_conv_silu");
}

/* --- gated delta rule --------------------------------------------------------- */

#define DELTA_MAX_ROWS 32 /* state rows per thread (registers) */
#define DELTA_CHUNK 32    /* tokens staged in shared memory at once */
#define DELTA_MAX_THREADS 512 /* per block: up to 128 registers a thread for the state */

/* One value of a token's inputs, as staged: q [dk], k [dk], v [dv], a, b. */
__device__ __forceinline__ float stage_value(const bf16 *qkv, const bf16 *b, const bf16 *a, long t, int idx, int dk,
                                             int dv, size_t width, size_t q_off, size_t k_off, size_t v_off, int nv,
                                             int hv) {
    const bf16 *row = qkv + (size_t)t * width;
    if (idx < dk) return __bfloat162float(row[q_off + idx]);
    if (idx < 2 * dk) return __bfloat162float(row[k_off + idx - dk]);
    if (idx < 2 * dk + dv) return __bfloat162float(row[v_off + idx - 2 * dk]);
    if (idx == 2 * dk + dv) return __bfloat162float(a[(size_t)t * nv + hv]);
    return __bfloat162float(b[(size_t)t * nv + hv]);
}

/* grid (value heads, sequences); block P * dv threads rounded up to a warp:
 * thread (j = tid / P, p = tid % P) owns state rows p, p+P, ... of column j.
 * The sequence goes by chunks of DELTA_CHUNK tokens: the block stages a
 * chunk's inputs in shared memory, then one warp per token turns them into
 * what the recurrence uses (q and k divided by their l2 norms, q also by
 * sqrt(dk); a and b into the decay and beta), then every thread runs the
 * chunk's tokens with no barrier between them: a token costs two dk/P-long
 * FMA chains and two shuffle reductions. Three barriers per chunk. */
/* Without states (a forward over whole sequences) the state starts at zero
 * and is dropped; with states (a decode step, DfDeltaStepArgs) sequence seq
 * starts from states[slots[seq]], saved into save[slot] when save is set,
 * and stores its last state back; out may then be NULL (state only). A
 * thread loads and stores exactly the state entries it owns. */
struct DeltaStates {
    const int32_t *slots;
    float *states, *save;
};

template <int P>
__global__ void __launch_bounds__(DELTA_MAX_THREADS)
    k_gated_delta_rule(bf16 *out, const bf16 *qkv, const bf16 *b, const bf16 *a, const float *a_log,
                       const float *dt_bias, const int32_t *seq_starts, int nk, int nv, int dk, int dv,
                       DeltaStates sts) {
    extern __shared__ float stage[]; /* [DELTA_CHUNK][2*dk + dv + 2] */
    int hv = blockIdx.x, seq = blockIdx.y, hk = hv / (nv / nk);
    int tid = threadIdx.x, j = tid / P, p = tid % P, lane = tid % 32, warp = tid / 32, warps = blockDim.x / 32;
    bool active = j < dv;
    int n_stage = 2 * dk + dv + 2;
    size_t key_dim = (size_t)nk * dk, width = 2 * key_dim + (size_t)nv * dv;
    size_t q_off = (size_t)hk * dk, k_off = key_dim + (size_t)hk * dk, v_off = 2 * key_dim + (size_t)hv * dv;
    long begin = seq_starts[seq], end = seq_starts[seq + 1];
    float neg_a = -expf(a_log[hv]), dtb = dt_bias[hv], q_scale = 1.0f / sqrtf((float)dk);
    float state[DELTA_MAX_ROWS];
    /* this head's [dk, dv] state of the sequence's slot: entry (i, j) at i * dv + j */
    size_t head_state = sts.states ? ((size_t)sts.slots[seq] * nv + hv) * dk * dv : 0;
#pragma unroll
    for (int r = 0; r < DELTA_MAX_ROWS; r++) {
        int i = p + r * P;
        state[r] = sts.states && active && i < dk ? sts.states[head_state + (size_t)i * dv + j] : 0.0f;
        if (sts.save && active && i < dk) sts.save[head_state + (size_t)i * dv + j] = state[r];
    }

    for (long c0 = begin; c0 < end; c0 += DELTA_CHUNK) {
        int n = end - c0 < DELTA_CHUNK ? (int)(end - c0) : DELTA_CHUNK;
        /* stage (the previous chunk's last reads ended at the barrier below) */
#pragma unroll 4
        for (int i = tid; i < n * n_stage; i += blockDim.x) {
            int u = i / n_stage, idx = i - u * n_stage;
            stage[i] = stage_value(qkv, b, a, c0 + u, idx, dk, dv, width, q_off, k_off, v_off, nv, hv);
        }
        __syncthreads();
        /* prepare: a warp per token */
        for (int u = warp; u < n; u += warps) {
            float *tok = stage + (size_t)u * n_stage, *qs = tok, *ks = tok + dk, *vs = tok + 2 * dk;
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
                float decay = expf(neg_a * softplus_f(vs[dv] + dtb)), beta = sigmoid_f(vs[dv + 1]);
                vs[dv] = decay;
                vs[dv + 1] = beta;
            }
        }
        __syncthreads();
        for (int u = 0; u < n; u++) {
            const float *qs = stage + (size_t)u * n_stage, *ks = qs + dk, *vs = qs + 2 * dk;
            float decay = vs[dv], beta = vs[dv + 1];
            /* S *= decay; delta = beta * (v - S^T k) */
            float part = 0.0f;
#pragma unroll
            for (int r = 0; r < DELTA_MAX_ROWS; r++) {
                int i = p + r * P;
                if (i < dk) {
                    state[r] *= decay;
                    part += state[r] * ks[i];
                }
            }
            for (int o = P / 2; o > 0; o /= 2) part += __shfl_xor_sync(0xffffffffu, part, o);
            float delta = active ? beta * (vs[j] - part) : 0.0f;
            /* S += k delta^T; o = S^T q */
            float acc = 0.0f;
#pragma unroll
            for (int r = 0; r < DELTA_MAX_ROWS; r++) {
                int i = p + r * P;
                if (i < dk) {
                    state[r] += ks[i] * delta;
                    acc += state[r] * qs[i];
                }
            }
            for (int o = P / 2; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
            if (out && active && p == 0) out[(size_t)(c0 + u) * nv * dv + (size_t)hv * dv + j] = __float2bfloat16_rn(acc);
        }
        __syncthreads(); /* the chunk's inputs are read before the next chunk overwrites them */
    }
    if (!sts.states || !active) return;
#pragma unroll
    for (int r = 0; r < DELTA_MAX_ROWS; r++) {
        int i = p + r * P;
        if (i < dk) sts.states[head_state + (size_t)i * dv + j] = state[r];
    }
}

/* Threads per value column: the fewest that keep the state rows per thread
 * within the registers' budget and the block within DELTA_MAX_THREADS; 0 if none. */
static int delta_threads_per_column(int dk, int dv) {
    for (int p = 4; p <= 32; p *= 2)
        if (dk <= DELTA_MAX_ROWS * p && p * dv <= DELTA_MAX_THREADS) return p;
    return 0;
}

/* What a launch runs over: sequences starting at seq_starts (device), their
 * count, and the states (all NULL for a forward). */
struct DeltaLaunch {
    const int32_t *seq_starts;
    int n_seqs;
    DeltaStates sts;
};

template <int P>
static void launch_delta_rule(DfBackend *be, DfBuffer out, DfBuffer qkv, DfBuffer b, DfBuffer a, DfBuffer a_log,
                              DfBuffer dt_bias, const DeltaLaunch *l, const DfDeltaRuleShape *s) {
    DfCudaState *st = df_cuda_state(be);
    unsigned threads = (unsigned)((P * s->value_dim + 31) / 32 * 32);
    size_t smem = (size_t)DELTA_CHUNK * (2 * s->key_dim + s->value_dim + 2) * sizeof(float);
    if (smem > 48 * 1024)
        DF_CUDA_RECORD(be, cudaFuncSetAttribute(k_gated_delta_rule<P>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                (int)smem));
    dim3 grid((unsigned)s->value_heads, (unsigned)l->n_seqs);
    k_gated_delta_rule<P><<<grid, threads, smem, st->stream>>>(
        (bf16 *)out.ptr, (const bf16 *)qkv.ptr, (const bf16 *)b.ptr, (const bf16 *)a.ptr, (const float *)a_log.ptr,
        (const float *)dt_bias.ptr, l->seq_starts, s->key_heads, s->value_heads, s->key_dim, s->value_dim, l->sts);
    DF_CUDA_CHECK_LAUNCH(be, "gated_delta_rule");
}

static void run_delta_rule(DfBackend *be, DfBuffer out, DfBuffer qkv, DfBuffer b, DfBuffer a, DfBuffer a_log,
                           DfBuffer dt_bias, const DeltaLaunch *l, const DfDeltaRuleShape *s) {
    switch (delta_threads_per_column(s->key_dim, s->value_dim)) {
    case 4: launch_delta_rule<4>(be, out, qkv, b, a, a_log, dt_bias, l, s); break;
    case 8: launch_delta_rule<8>(be, out, qkv, b, a, a_log, dt_bias, l, s); break;
    case 16: launch_delta_rule<16>(be, out, qkv, b, a, a_log, dt_bias, l, s); break;
    case 32: launch_delta_rule<32>(be, out, qkv, b, a, a_log, dt_bias, l, s); break;
    default:
        df_cuda_record_failure(be, __FILE__, __LINE__,
                               "gated_delta_rule: key head dim %d with value head dim %d is not supported on CUDA "
                               "(key dim at most %d, key dim x value dim within the block's registers)",
                               s->key_dim, s->value_dim, DELTA_MAX_ROWS * 32);
    }
}

void df_cuda_gated_delta_rule(DfBackend *be, DfBuffer out, DfBuffer qkv, DfBuffer b, DfBuffer a, DfBuffer a_log,
                                  DfBuffer dt_bias, const DfPackedBatch *batch, const DfDeltaRuleShape *s) {
    DeltaLaunch l = {(const int32_t *)batch->seq_starts.ptr, batch->n_seqs, {NULL, NULL, NULL}};
    run_delta_rule(be, out, qkv, b, a, a_log, dt_bias, &l, s);
}

/* A decode step: the same kernel over the step's sequences (row_starts),
 * from and into their slots' states. */
void df_cuda_delta_rule_step(DfBackend *be, const DfDeltaStepArgs *a) {
    const DfKvBatch *kb = a->batch;
    DeltaLaunch l = {(const int32_t *)kb->row_starts.ptr, kb->n_seqs,
                     {(const int32_t *)kb->slots.ptr, (float *)a->state.ptr, (float *)a->save.ptr}};
    run_delta_rule(be, a->out, a->qkv, a->b, a->a, a->a_log, a->dt_bias, &l, &a->shape);
}

/* --- row norms: one warp per row ------------------------------------------------ */

/* out = x * rsqrt(mean(x^2) + eps) * w (* silu(z) when z); out may be x. */
__global__ void k_rmsnorm_f32w(bf16 *out, const bf16 *x, const bf16 *z, const float *w, int rows, int dim,
                               float eps) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const bf16 *xr = x + (size_t)row * dim;
    bf16 *orow = out + (size_t)row * dim;
    float ss = 0.0f;
    for (int i = lane; i < dim; i += 32) {
        float f = __bfloat162float(xr[i]);
        ss += f * f;
    }
    for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    float inv = rsqrtf(ss / (float)dim + eps);
    /* each lane rewrites only the elements it read: in place is safe */
    for (int i = lane; i < dim; i += 32) {
        float v = __bfloat162float(xr[i]) * inv * w[i];
        if (z) {
            float g = __bfloat162float(z[(size_t)row * dim + i]);
            v *= g * sigmoid_f(g);
        }
        orow[i] = __float2bfloat16_rn(v);
    }
}

static void rmsnorm_launch(DfBackend *be, DfBuffer out, DfBuffer x, const void *z, DfBuffer w, int rows, int dim,
                           float eps, const char *what) {
    DfCudaState *st = df_cuda_state(be);
    int rows_per_block = 8;
    unsigned blocks = (unsigned)((rows + rows_per_block - 1) / rows_per_block);
    k_rmsnorm_f32w<<<blocks, 32 * rows_per_block, 0, st->stream>>>((bf16 *)out.ptr, (const bf16 *)x.ptr,
                                                                    (const bf16 *)z, (const float *)w.ptr, rows, dim,
                                                                    eps);
    DF_CUDA_CHECK_LAUNCH(be, what);
}

void df_cuda_gated_rmsnorm(DfBackend *be, DfBuffer x, DfBuffer z, DfBuffer w, int rows, int dim, float eps) {
    rmsnorm_launch(be, x, x, z.ptr, w, rows, dim, eps, "gated_rmsnorm");
}

void df_cuda_rmsnorm_f32_weight(DfBackend *be, DfBuffer out, DfBuffer x, DfBuffer w, int rows, int dim,
                                    float eps) {
    rmsnorm_launch(be, out, x, NULL, w, rows, dim, eps, "rmsnorm_f32_weight");
}

/* --- sigmoid gate ------------------------------------------------------------------- */

__global__ void k_sigmoid_gate(bf16 *x, const bf16 *gate, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = __float2bfloat16_rn(__bfloat162float(x[i]) * sigmoid_f(__bfloat162float(gate[i])));
}

void df_cuda_sigmoid_gate(DfBackend *be, DfBuffer x, DfBuffer gate) {
    DfCudaState *st = df_cuda_state(be);
    k_sigmoid_gate<<<df_cuda_blocks(x.count, 256), 256, 0, st->stream>>>((bf16 *)x.ptr, (const bf16 *)gate.ptr,
                                                                         x.count);
    DF_CUDA_CHECK_LAUNCH(be, "sigmoid_gate");
}

/* --- partial RoPE: the rope kernels on the first rotary_dim values of each head */

void df_cuda_rope_partial(DfBackend *be, DfBuffer x, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table,
                          int n_tokens, int heads, int head_dim, int rotary_dim) {
    df_cuda_rope_rotate(be, "rope_partial", x, positions, cos_table, sin_table, n_tokens, heads, head_dim, rotary_dim,
                        1.0f);
}
