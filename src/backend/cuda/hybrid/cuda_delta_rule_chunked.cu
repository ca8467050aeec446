/* The gated delta rule (formulas: backend/gated_deltanet.h) by chunks of 32
 * tokens on tensor cores, for key and value head dims of 128 (every Qwen3.5 /
 * Qwen3.6 model); cuda_hybrid.cu's token-by-token kernel serves the other
 * shapes and the variant delta_rule_recurrent.
 *
 * Within a chunk with state S0 [dk, dv] before it, write g_t for the sum of
 * the log decays of the chunk's tokens up to t (inclusive). Unrolling the
 * recurrence (S *= decay_t; delta_t = beta_t (v_t - S^T k_t); S += k_t
 * delta_t^T; o_t = S^T q_t) gives, with D the chunk's deltas [C, dv]:
 *   (I + A) D = X,  A[t,s] = beta_t e^(g_t - g_s) k_t.k_s  (s < t),
 *                   X[t]   = beta_t (v_t - e^(g_t) S0^T k_t)
 *   O[t]  = e^(g_t) S0^T q_t + sum over s <= t of e^(g_t - g_s) (q_t.k_s) D[s]
 *   S_end = e^(g_last) S0 + sum over s of e^(g_last - g_s) k_s D[s]^T
 * (the same algebra as flash-linear-attention's chunked form). A is strictly
 * lower triangular, so D comes by forward substitution, 32 short steps a chunk
 * instead of 32 recurrence steps over the whole state; every other term is a
 * matrix product, run here as mma.sync m16n8k8 on TF32 operands rounded to
 * nearest, fp32 accumulation. The state stays fp32 in shared memory between
 * chunks.
 *
 * One CTA of 8 warps per (sequence, value head), the chunks in order:
 *   1. stage q, k (divided by their l2 norms, q also by sqrt(dk)) and v of the
 *      chunk's tokens, zeros past the sequence's end, from registers loaded
 *      during the previous chunk; one warp turns the gates into beta and the
 *      running sum g of log decays;
 *   2. A and the masked Q K^T (warps 0-7, two 16 x 8 tiles each); S0^T k and
 *      S0^T q as K S0 and Q S0 (each warp 16 rows x 32 columns), X in place
 *      over v, Q S0 kept in registers;
 *   3. D: warp w solves columns 16w .. 16w+15, two lanes a column;
 *   4. O = e^g Q S0 + (masked Q K^T) D written out as bf16; the state updated
 *      (warp w its rows 16w .. 16w+15). */
#include "backend/cuda/hybrid/cuda_delta_math.h"
#include "backend/cuda/common/cuda_internal.h"
#include "backend/cuda/common/cuda_mma.h"

namespace {

constexpr int CK = 32;       /* tokens a chunk (one per lane of the gates' warp) */
constexpr int HD = 128;      /* key and value head dim */
constexpr int LD = HD + 4;   /* row stride of the [*, HD] tiles: fragment loads free of bank conflicts */
constexpr int LDC = CK + 4;  /* row stride of the [CK, CK] tiles */
constexpr int THREADS = 256; /* 8 warps */

struct ChunkSmem {
    float q[CK * LD], k[CK * LD]; /* normalized q (scaled) and k rows */
    float x[CK * LD];             /* v, then X */
    float d[CK * LD];             /* the chunk's deltas */
    float s[HD * LD];             /* the state [dk, dv] */
    float a[CK * LDC];            /* A (strictly lower) */
    float p[CK * LDC];            /* e^(g_t - g_s) q_t.k_s for s <= t, else 0 */
    float beta[CK], eg[CK];       /* beta_t, e^(g_t) */
    float tail[CK];               /* e^(g_last - g_t) */
    float g[CK];
};

__device__ __forceinline__ uint32_t to_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ void mma_tf32(float c[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* acc[j] (the 16 x 8 tile at rows 0..15, columns 8j..8j+7 of the output)
 * += sum over k < K of A(m, k) B(k, n), for j < NT; a_at(m, k) and b_at(k,
 * n) read the operands' elements (tile-relative m, absolute n). The PTX
 * m16n8k8 TF32 layouts: lane (g = lane / 4, c = lane % 4) holds A rows g and
 * g + 8 at columns c and c + 4, B rows c and c + 4 at column g, and
 * accumulator rows g and g + 8 at columns 2c and 2c + 1. */
template <int K, int NT, class FA, class FB>
__device__ __forceinline__ void tile_row_product(float (*acc)[4], FA a_at, FB b_at) {
    int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
#pragma unroll 4
    for (int k0 = 0; k0 < K; k0 += 8) {
        uint32_t a[4] = {to_tf32(a_at(g, k0 + c)), to_tf32(a_at(g + 8, k0 + c)), to_tf32(a_at(g, k0 + c + 4)),
                         to_tf32(a_at(g + 8, k0 + c + 4))};
#pragma unroll
        for (int j = 0; j < NT; j++) {
            uint32_t b[2] = {to_tf32(b_at(k0 + c, 8 * j + g)), to_tf32(b_at(k0 + c + 4, 8 * j + g))};
            mma_tf32(acc[j], a, b);
        }
    }
}

/* 1. A chunk's inputs in registers: thread (task, part = tid % 16) holds 8
 * values of row t of q, k or v for each of its STAGE_TASKS tasks (task =
 * tid / 16 + 16 i: kind task / CK, 0 q, 1 k, 2 v; t = task % CK), zeros past
 * the sequence's end; lane t of warp 0 also the raw gates a and b of token t.
 * The next chunk's are loaded while this one is computed. */
constexpr int STAGE_TASKS = 3 * CK / (THREADS / 16);

struct ChunkInputs {
    uint4 rows[STAGE_TASKS];
    float a, b;
};

struct ChunkSource {
    const bf16 *q, *k, *v, *a, *b; /* q, k, v: the head's columns of qkv's first row; a, b: column hv */
    size_t width;                  /* qkv's row length */
    int nv;
};

__device__ __forceinline__ void load_chunk(ChunkInputs &in, const ChunkSource &src, long c0, int n) {
    int tid = threadIdx.x, part = tid & 15;
#pragma unroll
    for (int i = 0; i < STAGE_TASKS; i++) {
        int task = (tid >> 4) + i * (THREADS / 16), kind = task / CK, t = task % CK;
        const bf16 *base = kind == 0 ? src.q : kind == 1 ? src.k : src.v;
        in.rows[i] = t < n ? *reinterpret_cast<const uint4 *>(base + (size_t)(c0 + t) * src.width + part * 8)
                           : make_uint4(0, 0, 0, 0);
    }
    if (tid < 32 && tid < n) {
        size_t at = (size_t)(c0 + tid) * src.nv;
        in.a = __bfloat162float(src.a[at]), in.b = __bfloat162float(src.b[at]);
    }
}

/* The loaded chunk into shared memory, q and k divided by their l2 norms as
 * delta_prepare_token does (q also by sqrt(dk)); the gates, by warp 0, into
 * beta and the running sum g of log decays (no decay and no update past the
 * end). */
__device__ void stage_chunk(ChunkSmem &sm, const ChunkInputs &in, int n, float neg_a, float dtb) {
    int tid = threadIdx.x, part = tid & 15;
    float q_scale = 1.0f / sqrtf((float)HD);
#pragma unroll
    for (int i = 0; i < STAGE_TASKS; i++) {
        int task = (tid >> 4) + i * (THREADS / 16), kind = task / CK, t = task % CK;
        const __nv_bfloat162 *h2 = reinterpret_cast<const __nv_bfloat162 *>(&in.rows[i]);
        float v[8];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 f = __bfloat1622float2(h2[j]);
            v[2 * j] = f.x, v[2 * j + 1] = f.y;
        }
        float scale = 1.0f;
        if (kind < 2) { /* the same for both half warps: tasks 2w + 16i and 2w + 1 + 16i share a kind */
            float ss = 0.0f;
#pragma unroll
            for (int j = 0; j < 8; j++) ss += v[j] * v[j];
#pragma unroll
            for (int o = 8; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
            scale = (kind == 0 ? q_scale : 1.0f) / sqrtf(ss + 1e-6f);
        }
        float *dst = (kind == 0 ? sm.q : kind == 1 ? sm.k : sm.x) + t * LD + part * 8;
        *reinterpret_cast<float4 *>(dst) = make_float4(v[0] * scale, v[1] * scale, v[2] * scale, v[3] * scale);
        *reinterpret_cast<float4 *>(dst + 4) = make_float4(v[4] * scale, v[5] * scale, v[6] * scale, v[7] * scale);
    }
    if (tid < 32) {
        int t = tid;
        float log_decay = 0.0f, beta = 0.0f;
        if (t < n) log_decay = delta_log_decay(neg_a, in.a, dtb), beta = sigmoid_f(in.b);
        float g = log_decay;
#pragma unroll
        for (int o = 1; o < 32; o *= 2) {
            float up = __shfl_up_sync(0xffffffffu, g, o);
            if (t >= o) g += up;
        }
        float g_last = __shfl_sync(0xffffffffu, g, n - 1);
        sm.g[t] = g, sm.beta[t] = beta, sm.eg[t] = expf(g);
        sm.tail[t] = t < n ? expf(g_last - g) : 0.0f;
    }
}

/* 2a. Warp w: two of the 16 tiles of A (ids 0-7) and P (8-15). */
__device__ void chunk_scores(ChunkSmem &sm, int warp) {
    int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int u = 0; u < 2; u++) {
        int id = 2 * warp + u, is_p = id >= 8, m0 = (id % 8) / 4 * 16, n0 = (id % 4) * 8;
        const float *rows = is_p ? sm.q : sm.k;
        float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
        tile_row_product<HD, 1>(
            acc, [&](int m, int k) { return rows[(m0 + m) * LD + k]; },
            [&](int k, int n) { return sm.k[(n0 + n) * LD + k]; });
        float *out = is_p ? sm.p : sm.a;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int t = m0 + g + (e >> 1) * 8, s = n0 + 2 * c + (e & 1);
            bool keep = is_p ? s <= t : s < t;
            float f = keep ? expf(sm.g[t] - sm.g[s]) * (is_p ? 1.0f : sm.beta[t]) : 0.0f;
            out[t * LDC + s] = keep ? acc[0][e] * f : 0.0f;
        }
    }
}

/* 2b. Warp w: rows m0 = 16 (w / 4), columns n0 = 32 (w % 4) .. + 31 of K S0
 * (turned into X over v) and of Q S0 (scaled by e^g into o, which 4 adds to). */
__device__ void chunk_state_terms(ChunkSmem &sm, int warp, float (*o)[4]) {
    int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3, m0 = (warp / 4) * 16, n0 = (warp % 4) * 32;
    auto s_at = [&](int k, int n) { return sm.s[k * LD + n0 + n]; };
    float ks[4][4] = {};
    tile_row_product<HD, 4>(ks, [&](int m, int k) { return sm.k[(m0 + m) * LD + k]; }, s_at);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int t = m0 + g + (e >> 1) * 8, col = n0 + 8 * j + 2 * c + (e & 1);
            float *x = &sm.x[t * LD + col];
            *x = sm.beta[t] * (*x - sm.eg[t] * ks[j][e]);
        }
    }
    tile_row_product<HD, 4>(o, [&](int m, int k) { return sm.q[(m0 + m) * LD + k]; }, s_at);
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[j][e] *= sm.eg[m0 + g + (e >> 1) * 8];
}

/* 3. D[t] = X[t] - sum over s < t of A[t, s] D[s]: warp w, columns 16w ..
 * 16w + 15; the lane pair (col, col + 16 lanes) splits the sum by the parity
 * of s and keeps its rows of D in registers. */
__device__ void chunk_solve(ChunkSmem &sm, int warp) {
    int lane = threadIdx.x & 31, half = lane >> 4, col = warp * 16 + (lane & 15);
    float d[CK / 2] = {};
#pragma unroll
    for (int t = 0; t < CK; t++) {
        float part = 0.0f;
#pragma unroll
        for (int i = 0; i < CK / 2; i++)
            if (2 * i + half < t) part += sm.a[t * LDC + 2 * i + half] * d[i];
        part += __shfl_xor_sync(0xffffffffu, part, 16);
        float dt = sm.x[t * LD + col] - part;
        if ((t & 1) == half) d[t >> 1] = dt;
    }
#pragma unroll
    for (int i = 0; i < CK / 2; i++) sm.d[(2 * i + half) * LD + col] = d[i];
}

/* 4a. o += P D over warp w's tiles (2b's), rows below n written out as bf16. */
__device__ void chunk_output(ChunkSmem &sm, int warp, float (*o)[4], bf16 *out, size_t out_ld, long c0, int n) {
    int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3, m0 = (warp / 4) * 16, n0 = (warp % 4) * 32;
    tile_row_product<CK, 4>(
        o, [&](int m, int k) { return sm.p[(m0 + m) * LDC + k]; },
        [&](int k, int n) { return sm.d[k * LD + n0 + n]; });
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int t = m0 + g + 8 * r;
            if (t < n)
                *reinterpret_cast<__nv_bfloat162 *>(out + (size_t)(c0 + t) * out_ld + n0 + 8 * j + 2 * c) =
                    __floats2bfloat162_rn(o[j][2 * r], o[j][2 * r + 1]);
        }
}

/* 4b. S = e^(g_last) S + K'^T D, K'[s] = e^(g_last - g_s) k_s: warp w, state
 * rows 16w .. 16w + 15, all columns, in two halves of 64 columns. */
__device__ void chunk_state_update(ChunkSmem &sm, int warp, int n) {
    int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3, m0 = warp * 16;
    float decay = sm.eg[n - 1];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int n0 = 64 * h;
        float acc[8][4];
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[j][e] = decay * sm.s[(m0 + g + (e >> 1) * 8) * LD + n0 + 8 * j + 2 * c + (e & 1)];
        tile_row_product<CK, 8>(
            acc, [&](int m, int k) { return sm.tail[k] * sm.k[k * LD + m0 + m]; },
            [&](int k, int n) { return sm.d[k * LD + n0 + n]; });
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                sm.s[(m0 + g + (e >> 1) * 8) * LD + n0 + 8 * j + 2 * c + (e & 1)] = acc[j][e];
    }
}

/* Tokens of the chunk starting at c0 in a sequence ending at end. */
__device__ __forceinline__ int chunk_tokens(long c0, long end) {
    return end - c0 < CK ? (int)(end - c0) : CK;
}

/* grid (value heads, sequences), THREADS threads, sizeof(ChunkSmem) bytes of
 * dynamic shared memory. */
__global__ void __launch_bounds__(THREADS, 1)
    k_delta_rule_chunked(bf16 *out, const bf16 *qkv, const bf16 *b, const bf16 *a, const float *a_log,
                         const float *dt_bias, const int32_t *seq_starts, int nk, int nv) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    ChunkSmem &sm = *reinterpret_cast<ChunkSmem *>(smem_raw);
    int hv = blockIdx.x, seq = blockIdx.y, hk = hv / (nv / nk), warp = threadIdx.x >> 5;
    size_t key_dim = (size_t)nk * HD, out_ld = (size_t)nv * HD;
    ChunkSource src = {qkv + (size_t)hk * HD, qkv + key_dim + (size_t)hk * HD, qkv + 2 * key_dim + (size_t)hv * HD,
                       a + hv, b + hv, 2 * key_dim + out_ld, nv};
    bf16 *o_dst = out + (size_t)hv * HD;
    long begin = seq_starts[seq], end = seq_starts[seq + 1];
    float neg_a = -expf(a_log[hv]), dtb = dt_bias[hv];
    for (int i = threadIdx.x; i < HD * LD; i += THREADS) sm.s[i] = 0.0f; /* zero at the sequence's start */
    ChunkInputs in;
    if (begin < end) load_chunk(in, src, begin, chunk_tokens(begin, end));
    for (long c0 = begin; c0 < end; c0 += CK) {
        int n = chunk_tokens(c0, end);
        stage_chunk(sm, in, n, neg_a, dtb);
        __syncthreads();
        long next = c0 + CK;
        if (next < end) load_chunk(in, src, next, chunk_tokens(next, end));
        float o[4][4];
        chunk_scores(sm, warp);
        chunk_state_terms(sm, warp, o);
        __syncthreads();
        chunk_solve(sm, warp);
        __syncthreads();
        chunk_output(sm, warp, o, o_dst, out_ld, c0, n);
        chunk_state_update(sm, warp, n);
        __syncthreads(); /* the chunk's tiles and state read before the next chunk writes them */
    }
}

} /* namespace */

int df_cuda_delta_rule_chunked_fits(const DfDeltaRuleShape *s, DfBuffer qkv) {
    size_t width = 2 * (size_t)s->key_heads * s->key_dim + (size_t)s->value_heads * s->value_dim;
    return s->key_dim == HD && s->value_dim == HD && width % 8 == 0 && (uintptr_t)qkv.ptr % 16 == 0;
}

void df_cuda_delta_rule_chunked(DfBackend *be, DfBuffer out, DfBuffer qkv, DfBuffer b, DfBuffer a, DfBuffer a_log,
                                DfBuffer dt_bias, const int32_t *seq_starts, int n_seqs, const DfDeltaRuleShape *s) {
    DfCudaState *st = df_cuda_state(be);
    size_t smem = sizeof(ChunkSmem);
    if (!df_cuda_set_smem(be, k_delta_rule_chunked, smem, "gated_delta_rule")) return;
    dim3 grid((unsigned)s->value_heads, (unsigned)n_seqs);
    k_delta_rule_chunked<<<grid, THREADS, smem, st->stream>>>(
        (bf16 *)out.ptr, (const bf16 *)qkv.ptr, (const bf16 *)b.ptr, (const bf16 *)a.ptr, (const float *)a_log.ptr,
        (const float *)dt_bias.ptr, seq_starts, s->key_heads, s->value_heads);
    DF_CUDA_CHECK_LAUNCH(be, "gated_delta_rule (chunked)");
}
