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
 * latency: the sequence length in serial steps. Where both head dims are 128
 * the chunked form on tensor cores runs instead (cuda_delta_rule_chunked.cu;
 * this kernel stays for the other shapes and the variant delta_rule_recurrent). */
#include "backend/cuda/hybrid/cuda_delta_math.h"
#include "backend/cuda/common/cuda_internal.h"

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
 * FMA chains and two shuffle reductions. Three barriers per chunk. The
 * state starts at zero and is dropped at the end (a forward over whole
 * sequences); a decode step's, from and into slot states, is
 * cuda_delta_rule_step.cu's kernel. */

template <int P>
__global__ void __launch_bounds__(DELTA_MAX_THREADS)
    k_gated_delta_rule(bf16 *out, const bf16 *qkv, const bf16 *b, const bf16 *a, const float *a_log,
                       const float *dt_bias, const int32_t *seq_starts, int nk, int nv, int dk, int dv) {
    extern __shared__ float stage[]; /* [DELTA_CHUNK][2*dk + dv + 2] */
    int hv = blockIdx.x, seq = blockIdx.y, hk = hv / (nv / nk);
    int tid = threadIdx.x, j = tid / P, p = tid % P, warp = tid / 32, warps = blockDim.x / 32;
    bool active = j < dv;
    int n_stage = 2 * dk + dv + 2;
    size_t key_dim = (size_t)nk * dk, width = 2 * key_dim + (size_t)nv * dv;
    size_t q_off = (size_t)hk * dk, k_off = key_dim + (size_t)hk * dk, v_off = 2 * key_dim + (size_t)hv * dv;
    long begin = seq_starts[seq], end = seq_starts[seq + 1];
    float neg_a = -expf(a_log[hv]), dtb = dt_bias[hv], q_scale = 1.0f / sqrtf((float)dk);
    float state[DELTA_MAX_ROWS]; /* rows p, p + P, ... of column j of the [dk, dv] state */
#pragma unroll
    for (int r = 0; r < DELTA_MAX_ROWS; r++) state[r] = 0.0f;

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
            float *tok = stage + (size_t)u * n_stage;
            delta_prepare_token(tok, tok + dk, tok + 2 * dk + dv, dk, q_scale, neg_a, dtb);
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
            if (active && p == 0) out[(size_t)(c0 + u) * nv * dv + (size_t)hv * dv + j] = __float2bfloat16_rn(acc);
        }
        __syncthreads(); /* the chunk's inputs are read before the next chunk overwrites them */
    }
}

/* Threads per value column: the fewest that keep the state rows per thread
 * within the registers' budget and the block within DELTA_MAX_THREADS; 0 if none. */
static int delta_threads_per_column(int dk, int dv) {
    for (int p = 4; p <= 32; p *= 2)
        if (dk <= DELTA_MAX_ROWS * p && p * dv <= DELTA_MAX_THREADS) return p;
    return 0;
}

/* What a launch runs over: sequences starting at seq_starts (device), and their count. */
struct DeltaLaunch {
    const int32_t *seq_starts;
    int n_seqs;
};

template <int P>
static void launch_delta_rule(DfBackend *be, DfBuffer out, DfBuffer qkv, DfBuffer b, DfBuffer a, DfBuffer a_log,
                              DfBuffer dt_bias, const DeltaLaunch *l, const DfDeltaRuleShape *s) {
    DfCudaState *st = df_cuda_state(be);
    unsigned threads = (unsigned)((P * s->value_dim + 31) / 32 * 32);
    size_t smem = (size_t)DELTA_CHUNK * (2 * s->key_dim + s->value_dim + 2) * sizeof(float);
    if (smem > 48 * 1024 && !df_cuda_set_smem(be, k_gated_delta_rule<P>, smem, "gated_delta_rule")) return;
    dim3 grid((unsigned)s->value_heads, (unsigned)l->n_seqs);
    k_gated_delta_rule<P><<<grid, threads, smem, st->stream>>>(
        (bf16 *)out.ptr, (const bf16 *)qkv.ptr, (const bf16 *)b.ptr, (const bf16 *)a.ptr, (const float *)a_log.ptr,
        (const float *)dt_bias.ptr, l->seq_starts, s->key_heads, s->value_heads, s->key_dim, s->value_dim);
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
    DeltaLaunch l = {(const int32_t *)batch->seq_starts.ptr, batch->n_seqs};
    if (!df_cuda_state(be)->variant.delta_rule_recurrent && df_cuda_delta_rule_chunked_fits(s, qkv)) {
        df_cuda_delta_rule_chunked(be, out, qkv, b, a, a_log, dt_bias, l.seq_starts, l.n_seqs, s);
        return;
    }
    run_delta_rule(be, out, qkv, b, a, a_log, dt_bias, &l, s);
}

/* --- row norms: one warp per row ------------------------------------------------ */

/* One element: x * inv * w (* silu(z) when gated), rounded to bf16. */
__device__ __forceinline__ bf16 norm_value(float x, float inv, float w, const bf16 *z, size_t at) {
    float v = x * inv * w;
    if (z) {
        float g = __bfloat162float(z[at]);
        v *= g * sigmoid_f(g);
    }
    return __float2bfloat16_rn(v);
}

/* The sum over a row's TPR threads (a warp, or a whole block of TPR / 32 warps). */
template <int TPR>
__device__ __forceinline__ float row_sum(float v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (TPR == 32) return v;
    __shared__ float warp_sums[TPR / 32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    float total = 0.0f;
    for (int i = 0; i < TPR / 32; i++) total += warp_sums[i];
    return total;
}

/* out = x * rsqrt(mean(x^2) + eps) * w (* silu(z) when z); out may be x.
 * TPR threads a row: a warp for short rows (heads of 128 or 256, many of
 * them), a block of 256 for the hidden size's. VEC: 8 values a thread per
 * access (16 bytes of x and z, 32 of w). The first version, a warp a row
 * with scalar loads, took ~65 us for a row of 5120 (160 dependent loads a
 * lane): 8.6 ms of a 24 ms Qwen3.6-27B-shaped decode step. */
template <int TPR, bool VEC>
__global__ void k_rmsnorm_f32w(bf16 *out, const bf16 *x, const bf16 *z, const float *w, int rows, int dim,
                               float eps) {
    int row = blockIdx.x * (blockDim.x / TPR) + threadIdx.x / TPR, tid = threadIdx.x % TPR;
    if (row >= rows) return; /* TPR = blockDim: the whole block leaves together */
    const bf16 *xr = x + (size_t)row * dim;
    const bf16 *zr = z ? z + (size_t)row * dim : NULL;
    bf16 *orow = out + (size_t)row * dim;
    constexpr int STEP = VEC ? 8 : 1;
    float ss = 0.0f;
    for (int i = tid * STEP; i < dim; i += TPR * STEP) {
        if (VEC) {
            Pack8 p;
            p.u = *(const uint4 *)(xr + i);
            for (int j = 0; j < 4; j++) {
                float2 f = __bfloat1622float2(p.h2[j]);
                ss += f.x * f.x + f.y * f.y;
            }
        } else {
            float f = __bfloat162float(xr[i]);
            ss += f * f;
        }
    }
    float inv = rsqrtf(row_sum<TPR>(ss) / (float)dim + eps);
    /* each thread rewrites only the elements it read: in place is safe */
    for (int i = tid * STEP; i < dim; i += TPR * STEP) {
        if (VEC) {
            Pack8 p, o;
            p.u = *(const uint4 *)(xr + i);
            float4 w0 = *(const float4 *)(w + i), w1 = *(const float4 *)(w + i + 4);
            float wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
            for (int j = 0; j < 4; j++) {
                float2 f = __bfloat1622float2(p.h2[j]);
                o.h2[j] = __halves2bfloat162(norm_value(f.x, inv, wv[2 * j], zr, i + 2 * j),
                                             norm_value(f.y, inv, wv[2 * j + 1], zr, i + 2 * j + 1));
            }
            *(uint4 *)(orow + i) = o.u;
        } else {
            orow[i] = norm_value(__bfloat162float(xr[i]), inv, w[i], zr, i);
        }
    }
}

template <int TPR, bool VEC>
static void rmsnorm_kernel(cudaStream_t s, DfBuffer out, DfBuffer x, const void *z, DfBuffer w, int rows, int dim,
                           float eps) {
    constexpr int threads = 256, rows_per_block = threads / TPR;
    unsigned blocks = (unsigned)((rows + rows_per_block - 1) / rows_per_block);
    k_rmsnorm_f32w<TPR, VEC><<<blocks, threads, 0, s>>>((bf16 *)out.ptr, (const bf16 *)x.ptr, (const bf16 *)z,
                                                        (const float *)w.ptr, rows, dim, eps);
}

static void rmsnorm_launch(DfBackend *be, DfBuffer out, DfBuffer x, const void *z, DfBuffer w, int rows, int dim,
                           float eps, const char *what) {
    cudaStream_t s = df_cuda_state(be)->stream;
    bool vec = dim % 8 == 0 && df_cuda_aligned16(out.ptr) && df_cuda_aligned16(x.ptr) && df_cuda_aligned16(w.ptr) &&
               (!z || df_cuda_aligned16(z));
    bool wide = dim >= 2048; /* a hidden-size row: a block of 256 threads */
    if (wide && vec) rmsnorm_kernel<256, true>(s, out, x, z, w, rows, dim, eps);
    else if (wide) rmsnorm_kernel<256, false>(s, out, x, z, w, rows, dim, eps);
    else if (vec) rmsnorm_kernel<32, true>(s, out, x, z, w, rows, dim, eps);
    else rmsnorm_kernel<32, false>(s, out, x, z, w, rows, dim, eps);
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
