/* Inference against per-sequence KV caches (see DfKvBatch in backend.h):
 * appending a step's new K/V rows to their cache slots, and decode-shaped
 * GQA attention of the new query rows against their slot.
 *
 * kv_attention is memory-bound at decode (one or a block of new rows per
 * sequence, long caches), so it is organised around reading each cached
 * key/value row once per (sequence, kv head):
 *   - a block owns one (sequence, kv head) and up to ROWS query rows of that
 *     group: row r is new row j = r / group of head g*group + r % group, so
 *     every query head of the group shares the K/V tiles it loads;
 *   - the key range is cut into `splits` chunks (split-K, "flash-decoding")
 *     when sequences x kv heads alone would leave SMs idle; each chunk keeps
 *     an online softmax (running max and sum, fp32, base-2 exponentials) and
 *     writes its unnormalised output with (max, sum) to a workspace that a
 *     second kernel merges; with one chunk the block writes the output;
 *   - K/V tiles of TK rows are read with 16-byte loads, all issued before
 *     the first use, into shared memory rows padded by 16 bytes (conflict-free
 *     per-thread row reads); keys past the visible length are zero-filled,
 *     never read (a cache row past a slot's length may hold anything);
 *   - scores: thread -> (key, ROWS/2 query rows), q in shared memory as fp32
 *     (pre-scaled by scale * log2 e), read as broadcasts;
 *   - output: thread -> (query row, HD/16 columns) accumulators.
 * Grid: x = split, y = tile of ROWS query rows, z = sequence * kv_heads + g. */
#include <math.h>

#include "backend/cuda/cuda_internal.h"

#define KV_THREADS 128
#define KV_ROWS 8  /* query rows per block */
#define KV_TK 64   /* keys per tile */
#define KV_MIN_CHUNK 256 /* keys per split at least */
#define KV_MAX_SPLITS 64

/* --- kv_cache_write ------------------------------------------------------- */

/* Sequence owning packed row `row`: the last i with row_starts[i] <= row. */
__device__ __forceinline__ int seq_of_row(const int32_t *row_starts, int n_seqs, int row) {
    int lo = 0, hi = n_seqs - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (row_starts[mid] <= row) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* One thread per VEC-element chunk of a new row. */
template <typename V>
__global__ void kv_cache_write_kernel(bf16 *cache, const bf16 *rows, const int32_t *slots, const int32_t *cache_lens,
                                      const int32_t *row_starts, int n_seqs, int n_rows, int dim, int capacity) {
    constexpr int VEC = sizeof(V) / sizeof(bf16);
    int chunks = dim / VEC;
    size_t total = (size_t)n_rows * chunks;
    for (size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x; c < total; c += (size_t)gridDim.x * blockDim.x) {
        int row = (int)(c / chunks), col = (int)(c % chunks) * VEC;
        int i = seq_of_row(row_starts, n_seqs, row);
        size_t dst = ((size_t)slots[i] * capacity + cache_lens[i] + (row - row_starts[i])) * dim + col;
        *(V *)(cache + dst) = *(const V *)(rows + (size_t)row * dim + col);
    }
}

void df_cuda_kv_cache_write(DfBackend *be, DfBuffer cache, DfBuffer rows, const DfKvBatch *batch, int dim) {
    DfCudaState *st = df_cuda_state(be);
    df_cuda_prof_begin(be, DF_CUDA_OP_COPY);
    int vec16 = dim % 8 == 0 && ((uintptr_t)cache.ptr % 16) == 0 && ((uintptr_t)rows.ptr % 16) == 0;
    size_t n = (size_t)batch->n_rows * (vec16 ? dim / 8 : dim);
    unsigned blocks = df_cuda_blocks(n, 256);
    const int32_t *slots = (const int32_t *)batch->slots.ptr, *lens = (const int32_t *)batch->cache_lens.ptr;
    const int32_t *starts = (const int32_t *)batch->row_starts.ptr;
    if (vec16)
        kv_cache_write_kernel<uint4><<<blocks, 256, 0, st->stream>>>((bf16 *)cache.ptr, (const bf16 *)rows.ptr, slots,
                                                                     lens, starts, batch->n_seqs, batch->n_rows, dim,
                                                                     batch->slot_capacity);
    else
        kv_cache_write_kernel<bf16><<<blocks, 256, 0, st->stream>>>((bf16 *)cache.ptr, (const bf16 *)rows.ptr, slots,
                                                                    lens, starts, batch->n_seqs, batch->n_rows, dim,
                                                                    batch->slot_capacity);
    DF_CUDA_CHECK_LAUNCH(be, "kv_cache_write");
    df_cuda_prof_end(be);
}

/* --- kv_attention --------------------------------------------------------- */

typedef struct KvAttnParams {
    bf16 *out;
    const bf16 *q, *k, *v;
    const int32_t *slots, *cache_lens, *row_starts;
    float *part_o;  /* [splits][n_rows * heads][hd] when splits > 1 */
    float2 *part_ml; /* [splits][n_rows * heads]: (max, sum) in base 2 */
    int heads, kv_heads, group, capacity, n_rows, splits, chunk, causal;
    float qscale; /* scale * log2(e) */
} KvAttnParams;

__device__ __forceinline__ void bf16x8_to_f32(uint4 u, float f[8]) {
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 t = __bfloat1622float2(h[i]);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}

template <int HD>
struct __align__(16) KvSmem {
    static constexpr int SD = HD + 8; /* padded row, bf16 */
    bf16 k[KV_TK][SD];
    bf16 v[KV_TK][SD];
    float q[KV_ROWS][HD];
    float p[KV_ROWS][KV_TK];
    float row_scale[KV_ROWS];
};

/* Keys [k0, k0 + KV_TK) of the slot's head slice into shared memory, keys at
 * or past `end` zero-filled. All loads are issued before the stores. */
template <int HD>
__device__ __forceinline__ void load_kv_tile(KvSmem<HD> &s, const bf16 *kbase, const bf16 *vbase, int ld, int k0,
                                             int end) {
    constexpr int CH = HD / 8, PER = KV_TK * CH / KV_THREADS;
    uint4 kr[PER], vr[PER];
#pragma unroll
    for (int i = 0; i < PER; i++) {
        int c = threadIdx.x + i * KV_THREADS, key = c / CH, col = (c % CH) * 8;
        if (k0 + key < end) {
            kr[i] = *(const uint4 *)(kbase + (size_t)(k0 + key) * ld + col);
            vr[i] = *(const uint4 *)(vbase + (size_t)(k0 + key) * ld + col);
        } else {
            kr[i] = vr[i] = make_uint4(0, 0, 0, 0);
        }
    }
#pragma unroll
    for (int i = 0; i < PER; i++) {
        int c = threadIdx.x + i * KV_THREADS, key = c / CH, col = (c % CH) * 8;
        *(uint4 *)&s.k[key][col] = kr[i];
        *(uint4 *)&s.v[key][col] = vr[i];
    }
}

template <int HD>
__global__ void __launch_bounds__(KV_THREADS) kv_attention_kernel(KvAttnParams p) {
    constexpr int VEC = HD / 16; /* output columns per thread */
    constexpr int RH = KV_ROWS / 2; /* score rows per thread */
    __shared__ KvSmem<HD> s;
    const int g = blockIdx.z % p.kv_heads, seq = blockIdx.z / p.kv_heads, split = blockIdx.x;
    const int r0 = p.row_starts[seq], n_new = p.row_starts[seq + 1] - r0, len = p.cache_lens[seq];
    const int tile_row0 = blockIdx.y * KV_ROWS, n_qrows = n_new * p.group;
    if (tile_row0 >= n_qrows) return;
    const int kv_len = len + n_new;
    const int key_begin = split * p.chunk;
    if (key_begin >= kv_len) return; /* this sequence needs fewer splits */
    /* keys this block can see at all: causal stops at its last row's */
    int last_j = min(n_new - 1, (tile_row0 + KV_ROWS - 1) / p.group);
    int key_end = min(kv_len, key_begin + p.chunk);
    if (p.causal) key_end = min(key_end, len + last_j + 1);

    const int tid = threadIdx.x, ldq = p.heads * HD, ldk = p.kv_heads * HD;
    /* q rows, pre-scaled, zeros for rows past the sequence's */
    for (int c = tid; c < KV_ROWS * (HD / 8); c += KV_THREADS) {
        int r = c / (HD / 8), col = (c % (HD / 8)) * 8, qr = tile_row0 + r;
        float f[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (qr < n_qrows) {
            int j = qr / p.group, h = g * p.group + qr % p.group;
            bf16x8_to_f32(*(const uint4 *)(p.q + (size_t)(r0 + j) * ldq + (size_t)h * HD + col), f);
        }
#pragma unroll
        for (int e = 0; e < 8; e++) s.q[r][col + e] = f[e] * p.qscale;
    }
    /* visible keys of each score row of this thread (causal: len + j + 1) */
    const int skey = tid % KV_TK, srow0 = (tid / KV_TK) * RH;
    int limit[RH];
#pragma unroll
    for (int i = 0; i < RH; i++) {
        int qr = tile_row0 + srow0 + i;
        limit[i] = qr >= n_qrows ? 0 : p.causal ? len + qr / p.group + 1 : kv_len;
    }
    const int orow = tid / 16, ocol = (tid % 16) * VEC;
    float acc[VEC];
#pragma unroll
    for (int e = 0; e < VEC; e++) acc[e] = 0.f;
    float m_run = -INFINITY, l_run = 0.f; /* held by the warp that owns the row's softmax */
    const size_t slot_row = (size_t)p.slots[seq] * p.capacity;
    const bf16 *kbase = p.k + slot_row * ldk + (size_t)g * HD, *vbase = p.v + slot_row * ldk + (size_t)g * HD;
    const int warp = tid / 32, lane = tid % 32;

    for (int k0 = key_begin; k0 < key_end; k0 += KV_TK) {
        __syncthreads(); /* the previous tile is no longer read; q is written */
        load_kv_tile<HD>(s, kbase, vbase, ldk, k0, key_end);
        __syncthreads();
        /* scores of key skey against rows srow0 .. srow0 + RH - 1 */
        float dot[RH];
#pragma unroll
        for (int i = 0; i < RH; i++) dot[i] = 0.f;
#pragma unroll
        for (int c = 0; c < HD; c += 8) {
            float kf[8];
            bf16x8_to_f32(*(const uint4 *)&s.k[skey][c], kf);
#pragma unroll
            for (int i = 0; i < RH; i++)
#pragma unroll
                for (int e = 0; e < 8; e++) dot[i] = fmaf(s.q[srow0 + i][c + e], kf[e], dot[i]);
        }
        int key = k0 + skey;
#pragma unroll
        for (int i = 0; i < RH; i++) s.p[srow0 + i][skey] = key < limit[i] && key < key_end ? dot[i] : -INFINITY;
        __syncthreads();
        /* online softmax: warp w owns rows 2w, 2w+1; each lane 2 keys */
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            int r = warp * 2 + rr;
            float a = s.p[r][lane], b = s.p[r][lane + 32];
            float mx = fmaxf(a, b);
#pragma unroll
            for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            float m_prev = __shfl_sync(0xffffffffu, m_run, rr); /* lane rr keeps row rr's state */
            float l_prev = __shfl_sync(0xffffffffu, l_run, rr);
            float m_new = fmaxf(m_prev, mx);
            float pa = m_new == -INFINITY ? 0.f : exp2f(a - m_new), pb = m_new == -INFINITY ? 0.f : exp2f(b - m_new);
            float sum = pa + pb;
#pragma unroll
            for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            float corr = m_prev == -INFINITY ? 0.f : exp2f(m_prev - m_new);
            s.p[r][lane] = pa;
            s.p[r][lane + 32] = pb;
            if (lane == rr) {
                m_run = m_new;
                l_run = l_prev * corr + sum;
            }
            if (lane == 0) s.row_scale[r] = corr;
        }
        __syncthreads();
        /* acc = acc * corr + P V over the tile's keys */
        float corr = s.row_scale[orow];
#pragma unroll
        for (int e = 0; e < VEC; e++) acc[e] *= corr;
#pragma unroll 4
        for (int kk = 0; kk < KV_TK; kk++) {
            float pw = s.p[orow][kk];
            float vf[8];
            if constexpr (VEC == 8) {
                bf16x8_to_f32(*(const uint4 *)&s.v[kk][ocol], vf);
            } else {
                uint2 u = *(const uint2 *)&s.v[kk][ocol];
                uint4 w = make_uint4(u.x, u.y, 0, 0);
                bf16x8_to_f32(w, vf);
            }
#pragma unroll
            for (int e = 0; e < VEC; e++) acc[e] = fmaf(pw, vf[e], acc[e]);
        }
    }
    /* row state to shared memory for the output threads */
    __syncthreads();
    if (lane < 2) {
        s.p[warp * 2 + lane][0] = m_run;
        s.p[warp * 2 + lane][1] = l_run;
    }
    __syncthreads();
    int qr = tile_row0 + orow;
    if (qr >= n_qrows) return;
    int j = qr / p.group, h = g * p.group + qr % p.group;
    size_t gr = (size_t)(r0 + j) * p.heads + h; /* (row, head) index */
    float m = s.p[orow][0], l = s.p[orow][1];
    if (p.splits == 1) {
        float inv = 1.f / l; /* every row sees at least its own key */
        bf16 *o = p.out + gr * HD + ocol;
#pragma unroll
        for (int e = 0; e < VEC; e++) o[e] = __float2bfloat16(acc[e] * inv);
        return;
    }
    size_t part = (size_t)split * p.n_rows * p.heads + gr;
    float *po = p.part_o + part * HD + ocol;
#pragma unroll
    for (int e = 0; e < VEC; e++) po[e] = acc[e];
    if (ocol == 0) p.part_ml[part] = make_float2(m, l);
}

/* Merges the splits of each (row, head): one warp each, lanes over columns. */
template <int HD>
__global__ void kv_attention_combine_kernel(KvAttnParams p, int n_seqs) {
    int w = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (w >= p.n_rows * p.heads) return;
    int row = w / p.heads;
    int i = seq_of_row(p.row_starts, n_seqs, row);
    int kv_len = p.cache_lens[i] + p.row_starts[i + 1] - p.row_starts[i];
    int used = (kv_len + p.chunk - 1) / p.chunk;
    size_t stride = (size_t)p.n_rows * p.heads;
    float m = -INFINITY;
    for (int sp = 0; sp < used; sp++) m = fmaxf(m, p.part_ml[sp * stride + w].x);
    constexpr int PER = HD / 32;
    float acc[PER];
#pragma unroll
    for (int e = 0; e < PER; e++) acc[e] = 0.f;
    float l = 0.f;
    for (int sp = 0; sp < used; sp++) {
        float2 ml = p.part_ml[sp * stride + w];
        if (ml.x == -INFINITY) continue; /* a causal row with no key in this chunk */
        float c = exp2f(ml.x - m);
        l += ml.y * c;
        const float *po = p.part_o + (sp * stride + w) * HD;
#pragma unroll
        for (int e = 0; e < PER; e++) acc[e] += po[lane + 32 * e] * c;
    }
    float inv = 1.f / l;
#pragma unroll
    for (int e = 0; e < PER; e++) p.out[(size_t)w * HD + lane + 32 * e] = __float2bfloat16(acc[e] * inv);
}

/* Split-K workspace, grown on demand (at least doubling: it grows with the
 * cache lengths during decoding, and every growth waits for the GPU), freed
 * with the backend. */
static int ensure_kv_workspace(DfBackend *be, size_t bytes) {
    DfCudaState *st = df_cuda_state(be);
    if (st->kv_ws_bytes >= bytes) return 0;
    if (bytes < 2 * st->kv_ws_bytes) bytes = 2 * st->kv_ws_bytes;
    if (st->kv_ws) {
        cudaError_t e = cudaFree(st->kv_ws);
        st->bytes_in_use -= st->kv_ws_bytes;
        st->kv_ws = NULL;
        st->kv_ws_bytes = 0;
        if (e != cudaSuccess) {
            df_cuda_record_failure(be, __FILE__, __LINE__, "cudaFree: %s", cudaGetErrorString(e));
            return -1;
        }
    }
    cudaError_t e = cudaMalloc(&st->kv_ws, bytes);
    if (e != cudaSuccess) {
        st->kv_ws = NULL;
        df_cuda_record_failure(be, __FILE__, __LINE__, "kv_attention workspace of %zu bytes: %s", bytes,
                               cudaGetErrorString(e));
        return -1;
    }
    st->kv_ws_bytes = bytes;
    st->bytes_in_use += bytes;
    if (st->bytes_in_use > st->peak_bytes) st->peak_bytes = st->bytes_in_use;
    return 0;
}

/* Keys per split: one split when sequences x kv heads x row tiles already
 * give every SM two blocks; else enough splits for that, none shorter than
 * KV_MIN_CHUNK keys. */
static int kv_chunk(DfCudaState *st, const DfKvBatch *b, int kv_heads, int row_tiles) {
    if (!st->sm_count && cudaDeviceGetAttribute(&st->sm_count, cudaDevAttrMultiProcessorCount, st->device) != cudaSuccess)
        st->sm_count = 132;
    long blocks = (long)b->n_seqs * kv_heads * row_tiles, want = 2L * st->sm_count;
    if (blocks >= want || b->max_visible <= KV_MIN_CHUNK) return b->max_visible;
    long splits = (want + blocks - 1) / blocks;
    if (splits > KV_MAX_SPLITS) splits = KV_MAX_SPLITS;
    long chunk = (b->max_visible + splits - 1) / splits;
    if (chunk < KV_MIN_CHUNK) chunk = KV_MIN_CHUNK;
    chunk = (chunk + KV_TK - 1) / KV_TK * KV_TK;
    return (int)chunk;
}

template <int HD>
static void launch_kv_attention(DfBackend *be, KvAttnParams p, const DfKvBatch *b, int row_tiles) {
    DfCudaState *st = df_cuda_state(be);
    dim3 grid(p.splits, row_tiles, b->n_seqs * p.kv_heads);
    kv_attention_kernel<HD><<<grid, KV_THREADS, 0, st->stream>>>(p);
    DF_CUDA_CHECK_LAUNCH(be, "kv_attention");
    if (p.splits > 1) {
        size_t warps = (size_t)p.n_rows * p.heads;
        kv_attention_combine_kernel<HD><<<(unsigned)((warps + 7) / 8), 256, 0, st->stream>>>(p, b->n_seqs);
        DF_CUDA_CHECK_LAUNCH(be, "kv_attention combine");
    }
}

void df_cuda_kv_attention(DfBackend *be, DfBuffer out, DfBuffer q, DfBuffer k_cache, DfBuffer v_cache,
                          const DfKvBatch *batch, int heads, int kv_heads, int head_dim, float scale, int causal) {
    DfCudaState *st = df_cuda_state(be);
    if (head_dim != 64 && head_dim != 128) {
        df_cuda_record_failure(be, __FILE__, __LINE__, "kv_attention: head_dim %d (this kernel has 64 and 128)",
                               head_dim);
        return;
    }
    const void *ptrs[] = {out.ptr, q.ptr, k_cache.ptr, v_cache.ptr};
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)ptrs[i] % 16) {
            df_cuda_record_failure(be, __FILE__, __LINE__, "kv_attention: a buffer is not 16-byte aligned");
            return;
        }
    df_cuda_prof_begin(be, DF_CUDA_OP_ATTENTION);
    int group = heads / kv_heads;
    int row_tiles = (batch->max_new * group + KV_ROWS - 1) / KV_ROWS;
    int chunk = kv_chunk(st, batch, kv_heads, row_tiles);
    int splits = (batch->max_visible + chunk - 1) / chunk;
    KvAttnParams p;
    p.out = (bf16 *)out.ptr;
    p.q = (const bf16 *)q.ptr;
    p.k = (const bf16 *)k_cache.ptr;
    p.v = (const bf16 *)v_cache.ptr;
    p.slots = (const int32_t *)batch->slots.ptr;
    p.cache_lens = (const int32_t *)batch->cache_lens.ptr;
    p.row_starts = (const int32_t *)batch->row_starts.ptr;
    p.part_o = NULL;
    p.part_ml = NULL;
    p.heads = heads, p.kv_heads = kv_heads, p.group = group, p.capacity = batch->slot_capacity;
    p.n_rows = batch->n_rows, p.splits = splits, p.chunk = chunk, p.causal = causal;
    p.qscale = scale * 1.4426950408889634f;
    if (splits > 1) {
        size_t rh = (size_t)splits * batch->n_rows * heads;
        size_t o_bytes = rh * head_dim * sizeof(float);
        if (ensure_kv_workspace(be, o_bytes + rh * sizeof(float2))) {
            df_cuda_prof_end(be);
            return;
        }
        p.part_o = (float *)st->kv_ws;
        p.part_ml = (float2 *)((char *)st->kv_ws + o_bytes);
    }
    if (head_dim == 64) launch_kv_attention<64>(be, p, batch, row_tiles);
    else launch_kv_attention<128>(be, p, batch, row_tiles);
    df_cuda_prof_end(be);
}
