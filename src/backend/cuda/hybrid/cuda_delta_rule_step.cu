/* delta_rule_step (backend.h, DfDeltaStepArgs): the gated delta rule of a
 * decode or verification step, from each sequence's slot state and back
 * into it (formulas: backend/gated_deltanet.h, as the forward's
 * k_gated_delta_rule in cuda_hybrid.cu).
 *
 * A decode step is bound by moving the states (F32 [value heads, key dim,
 * value dim] per slot and layer: 3 MiB at the Qwen3.6-27B shape, 20 GB read
 * and written per step at batch 64), so the layout serves the loads:
 *   - a CTA owns 32 value columns of one (sequence, value head): lane j holds
 *     column j, warp w the key rows w, w + W, ... of it, so that each load
 *     and store of a warp is 128 contiguous bytes of one state row;
 *   - the sums over key rows (S^T k, S^T q) are a warp's partial per lane,
 *     added over the W warps through shared memory (two barriers a token);
 *   - the step's tokens are staged in chunks (q, k normalised once per
 *     chunk, the CTA's v columns, decay and beta), as the forward does.
 * The forward's kernel (one CTA per head, P threads a column reducing by
 * shuffles) took 0.47 ms a layer at batch 64 here: 0.86 TB/s, its warps'
 * accesses spread over 4 rows of 32 bytes. A rollback's replay runs this
 * kernel too, so a replay and the step it undoes round alike. */
#include "backend/cuda/hybrid/cuda_delta_math.h"
#include "backend/cuda/common/cuda_internal.h"

#define DSTEP_COLS 32     /* value columns a CTA: one a lane */
#define DSTEP_MAX_ROWS 32 /* key rows a thread holds (registers) */
#define DSTEP_CHUNK 32    /* tokens staged at once */

struct DeltaStepParams {
    bf16 *out;
    const bf16 *qkv, *b, *a;
    const float *a_log, *dt_bias;
    const int32_t *slots, *row_starts;
    float *states, *save;
    int nk, nv, dk, dv;
};

/* A chunk's token u in shared memory: q [dk], k [dk] (normalised), the CTA's v columns, decay, beta. */
__device__ __forceinline__ int dstep_token_floats(int dk) {
    return 2 * dk + DSTEP_COLS + 2;
}

/* Stages tokens r0 .. r0 + n - 1 (rows of the step), then normalises q and k
 * (a warp a token) and turns a, b into the decay and beta. Ends on a barrier. */
__device__ void dstep_stage(float *tok, const DeltaStepParams &p, long r0, int n, int hv, int c0) {
    int hk = hv / (p.nv / p.nk), per = dstep_token_floats(p.dk);
    size_t key_dim = (size_t)p.nk * p.dk, width = 2 * key_dim + (size_t)p.nv * p.dv;
    for (int e = threadIdx.x; e < n * per; e += blockDim.x) {
        int u = e / per, idx = e % per;
        const bf16 *row = p.qkv + (size_t)(r0 + u) * width;
        float v = 0.0f;
        if (idx < p.dk) v = __bfloat162float(row[(size_t)hk * p.dk + idx]);
        else if (idx < 2 * p.dk) v = __bfloat162float(row[key_dim + (size_t)hk * p.dk + idx - p.dk]);
        else if (idx < 2 * p.dk + DSTEP_COLS) {
            int j = c0 + idx - 2 * p.dk;
            if (j < p.dv) v = __bfloat162float(row[2 * key_dim + (size_t)hv * p.dv + j]);
        } else if (idx == 2 * p.dk + DSTEP_COLS) v = __bfloat162float(p.a[(size_t)(r0 + u) * p.nv + hv]);
        else v = __bfloat162float(p.b[(size_t)(r0 + u) * p.nv + hv]);
        tok[e] = v;
    }
    __syncthreads();
    int warp = threadIdx.x / 32, warps = blockDim.x / 32;
    float neg_a = -expf(p.a_log[hv]), dtb = p.dt_bias[hv], q_scale = 1.0f / sqrtf((float)p.dk);
    for (int u = warp; u < n; u += warps) {
        float *qs = tok + (size_t)u * per;
        delta_prepare_token(qs, qs + p.dk, qs + 2 * p.dk + DSTEP_COLS, p.dk, q_scale, neg_a, dtb);
    }
    __syncthreads();
}

/* The sum over the CTA's W warps of each lane's value (red: [W][32] shared). */
template <int W>
__device__ __forceinline__ float dstep_sum_warps(float *red, float v) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    red[warp * 32 + lane] = v;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < W; w++) total += red[w * 32 + lane];
    __syncthreads(); /* red is read before the next sum writes it */
    return total;
}

/* grid (column blocks, value heads, sequences); block 32 * W threads. */
template <int W>
__global__ void __launch_bounds__(32 * W) k_delta_rule_step(DeltaStepParams p, int chunk) {
    extern __shared__ float smem[]; /* red [W][32], then the staged tokens */
    float *red = smem, *tok = smem + W * 32;
    int c0 = blockIdx.x * DSTEP_COLS, hv = blockIdx.y, seq = blockIdx.z;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, j = c0 + lane;
    bool active = j < p.dv;
    size_t head_state = ((size_t)p.slots[seq] * p.nv + hv) * p.dk * p.dv;
    float state[DSTEP_MAX_ROWS];
#pragma unroll
    for (int r = 0; r < DSTEP_MAX_ROWS; r++) {
        int i = warp + r * W;
        bool own = active && i < p.dk;
        state[r] = own ? p.states[head_state + (size_t)i * p.dv + j] : 0.0f;
        if (own && p.save) p.save[head_state + (size_t)i * p.dv + j] = state[r];
    }
    long begin = p.row_starts[seq], end = p.row_starts[seq + 1];
    int per = dstep_token_floats(p.dk);
    for (long r0 = begin; r0 < end; r0 += chunk) {
        int n = end - r0 < chunk ? (int)(end - r0) : chunk;
        dstep_stage(tok, p, r0, n, hv, c0);
        for (int u = 0; u < n; u++) {
            const float *qs = tok + (size_t)u * per, *ks = qs + p.dk, *vs = qs + 2 * p.dk;
            float decay = vs[DSTEP_COLS], beta = vs[DSTEP_COLS + 1];
            /* S *= decay; delta = beta * (v - S^T k) */
            float part = 0.0f;
#pragma unroll
            for (int r = 0; r < DSTEP_MAX_ROWS; r++) {
                int i = warp + r * W;
                if (i < p.dk) {
                    state[r] *= decay;
                    part += state[r] * ks[i];
                }
            }
            float delta = beta * (vs[lane] - dstep_sum_warps<W>(red, part));
            /* S += k delta^T; o = S^T q */
            float acc = 0.0f;
#pragma unroll
            for (int r = 0; r < DSTEP_MAX_ROWS; r++) {
                int i = warp + r * W;
                if (i < p.dk) {
                    state[r] += ks[i] * delta;
                    acc += state[r] * qs[i];
                }
            }
            acc = dstep_sum_warps<W>(red, acc);
            if (p.out && active && warp == 0)
                p.out[(size_t)(r0 + u) * p.nv * p.dv + (size_t)hv * p.dv + j] = __float2bfloat16_rn(acc);
        }
        __syncthreads(); /* the chunk is read before the next one is staged */
    }
#pragma unroll
    for (int r = 0; r < DSTEP_MAX_ROWS; r++) {
        int i = warp + r * W;
        if (active && i < p.dk) p.states[head_state + (size_t)i * p.dv + j] = state[r];
    }
}

template <int W>
static void launch_delta_rule_step(DfBackend *be, const DeltaStepParams &p, const DfKvBatch *kb) {
    DfCudaState *st = df_cuda_state(be);
    int chunk = kb->max_new < 1 ? 1 : kb->max_new < DSTEP_CHUNK ? kb->max_new : DSTEP_CHUNK;
    size_t smem = ((size_t)W * 32 + (size_t)chunk * (2 * p.dk + DSTEP_COLS + 2)) * sizeof(float);
    if (smem > 48 * 1024 && !df_cuda_set_smem(be, k_delta_rule_step<W>, smem, "gated_delta_rule_step")) return;
    dim3 grid((unsigned)((p.dv + DSTEP_COLS - 1) / DSTEP_COLS), (unsigned)p.nv, (unsigned)kb->n_seqs);
    k_delta_rule_step<W><<<grid, 32 * W, smem, st->stream>>>(p, chunk);
    DF_CUDA_CHECK_LAUNCH(be, "delta_rule_step");
}

void df_cuda_delta_rule_step(DfBackend *be, const DfDeltaStepArgs *a) {
    const DfKvBatch *kb = a->batch;
    const DfDeltaRuleShape *s = &a->shape;
    DeltaStepParams p = {(bf16 *)a->out.ptr,        (const bf16 *)a->qkv.ptr,      (const bf16 *)a->b.ptr,
                         (const bf16 *)a->a.ptr,    (const float *)a->a_log.ptr,   (const float *)a->dt_bias.ptr,
                         (const int32_t *)kb->slots.ptr, (const int32_t *)kb->row_starts.ptr, (float *)a->state.ptr,
                         (float *)a->save.ptr,      s->key_heads,                  s->value_heads,
                         s->key_dim,                s->value_dim};
    /* warps a CTA: enough that a thread holds at most DSTEP_MAX_ROWS key rows */
    if (s->key_dim <= 4 * DSTEP_MAX_ROWS) launch_delta_rule_step<4>(be, p, kb);
    else if (s->key_dim <= 8 * DSTEP_MAX_ROWS) launch_delta_rule_step<8>(be, p, kb);
    else if (s->key_dim <= 16 * DSTEP_MAX_ROWS) launch_delta_rule_step<16>(be, p, kb);
    else
        df_cuda_record_failure(be, __FILE__, __LINE__, "delta_rule_step: key head dim %d (at most %d on CUDA)",
                               s->key_dim, 16 * DSTEP_MAX_ROWS);
}
