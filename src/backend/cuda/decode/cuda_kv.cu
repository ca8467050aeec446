/* Inference against per-sequence KV caches (see DfKvBatch in backend.h):
 * appending a step's new K/V rows to their sequences' cache rows (a slot's,
 * or its pages' in a paged cache), and decode-shaped GQA attention of the
 * new query rows against them.
 *
 * kv_attention is memory-bound at decode (one or a block of new rows per
 * sequence, long caches): the kernel is organised so that each cached
 * key/value row is read once per (sequence, kv head) and the reads are
 * always in flight:
 *   - a block owns one (sequence, kv head) and up to 16 query rows of that
 *     group (one m16 tile): row r is new row j = r / group of head
 *     g * group + r % group, so every query head of the group shares the K/V
 *     tiles the block loads; rows past the sequence's are zero and unused;
 *   - the key range is cut into `splits` chunks (split-K, "flash-decoding")
 *     when sequences x kv heads alone would leave SMs idle; a chunk's partial
 *     result (unnormalised output, base-2 max and sum) goes to a workspace
 *     that a second kernel merges; with one chunk the block writes the output;
 *   - tiles of 32 keys go through 3 shared-memory stages with cp.async
 *     (two load while one is used; keys at or past the visible end are
 *     zero-filled, never read: a cache row past a slot's length may hold
 *     anything), rows padded by 16 bytes for ldmatrix; a tile starts at a
 *     multiple of 32 keys, so in a paged cache (DfKvBatch's page table) its
 *     keys are consecutive rows of one page, from its first key's row;
 *   - the 4 warps work on tensor cores (mma.sync m16n8k16, cuda_mma.h):
 *     warps 2g and 2g + 1 take keys 16g .. 16g + 15 of each tile, compute the
 *     same S = Q K^T and online softmax (fp32, base-2), and each O += P V
 *     over its half of the head's columns (P's accumulators as the A
 *     fragment); the two key groups' (max, sum, output) are merged through
 *     shared memory at the end;
 *   - 120 registers and 55 KiB of shared memory a block (head_dim 128): four
 *     blocks per SM, so that a decode batch of 64 x 8 kv heads runs in one
 *     wave on an H200 (the first version, 64-key double-buffered tiles and a
 *     16-key group per warp, took 160 registers and 74 KiB: three blocks per
 *     SM, 1.3 waves, and the SMs idle for a third of its time).
 * Grid: x = split, y = tile of 16 query rows, z = sequence * kv_heads + g. */
#include <math.h>

#include "backend/cuda/common/cuda_internal.h"
#include "backend/cuda/decode/cuda_kv_rows.h"
#include "backend/cuda/common/cuda_mma.h"

#define KV_WARPS 4
#define KV_THREADS (KV_WARPS * 32)
#define KV_MROWS 16      /* query rows per block: one m16 tile */
#define KV_KEY_GROUPS 2  /* warps 2g, 2g + 1 take keys 16g .. 16g + 15 of a tile ... */
#define KV_DIM_PARTS 2   /* ... warp 2g + h the output columns of part h of the head */
#define KV_BN (16 * KV_KEY_GROUPS) /* keys per tile */
#define KV_STAGES 3      /* tiles in shared memory: two load while one is used */
#define KV_MIN_CHUNK 64   /* keys per split at least: two tiles */
#define KV_MAX_SPLITS 64
#define KV_BLOCKS_PER_SM 2 /* split-K target (the variant kv_attention_blocks_per_sm overrides it) */

/* --- kv_cache_write ------------------------------------------------------- */

typedef struct KvWriteParams {
    bf16 *cache;
    const bf16 *rows;
    const int32_t *slots, *cache_lens, *row_starts, *pages; /* pages NULL: contiguous slots */
    int n_seqs, n_rows, dim, capacity, pages_per_seq;
} KvWriteParams;

/* One thread per VEC-element chunk of a new row: new row j of sequence i
 * goes to its cache row cache_lens[i] + j. */
template <typename V>
__global__ void kv_cache_write_kernel(KvWriteParams p) {
    constexpr int VEC = sizeof(V) / sizeof(bf16);
    int chunks = p.dim / VEC;
    size_t total = (size_t)p.n_rows * chunks;
    for (size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x; c < total; c += (size_t)gridDim.x * blockDim.x) {
        int row = (int)(c / chunks), col = (int)(c % chunks) * VEC;
        int i = df_kv_seq_of_row(p.row_starts, p.n_seqs, row);
        int r = p.cache_lens[i] + (row - p.row_starts[i]);
        size_t dst = df_kv_cache_row_dev(p.pages, p.pages_per_seq, p.slots, p.capacity, i, r) * p.dim + col;
        *(V *)(p.cache + dst) = *(const V *)(p.rows + (size_t)row * p.dim + col);
    }
}

void df_cuda_kv_cache_write(DfBackend *be, DfBuffer cache, DfBuffer rows, const DfKvBatch *batch, int dim) {
    DfCudaState *st = df_cuda_state(be);
    int vec16 = dim % 8 == 0 && ((uintptr_t)cache.ptr % 16) == 0 && ((uintptr_t)rows.ptr % 16) == 0;
    size_t n = (size_t)batch->n_rows * (vec16 ? dim / 8 : dim);
    unsigned blocks = df_cuda_blocks(n, 256);
    KvWriteParams p;
    p.cache = (bf16 *)cache.ptr;
    p.rows = (const bf16 *)rows.ptr;
    p.slots = (const int32_t *)batch->slots.ptr;
    p.cache_lens = (const int32_t *)batch->cache_lens.ptr;
    p.row_starts = (const int32_t *)batch->row_starts.ptr;
    p.pages = (const int32_t *)batch->pages.ptr;
    p.n_seqs = batch->n_seqs, p.n_rows = batch->n_rows, p.dim = dim;
    p.capacity = batch->slot_capacity, p.pages_per_seq = batch->pages_per_seq;
    if (vec16) kv_cache_write_kernel<uint4><<<blocks, 256, 0, st->stream>>>(p);
    else kv_cache_write_kernel<bf16><<<blocks, 256, 0, st->stream>>>(p);
    DF_CUDA_CHECK_LAUNCH(be, "kv_cache_write");
}

/* --- kv_attention --------------------------------------------------------- */

typedef struct KvAttnParams {
    bf16 *out;
    const bf16 *q, *k, *v;
    const int32_t *slots, *cache_lens, *row_starts;
    const int32_t *pages; /* the batch's page tables, NULL: contiguous slots */
    float *part_o;  /* [splits][n_rows * heads][hd] when splits > 1 */
    float2 *part_ml; /* [splits][n_rows * heads]: (max, sum) in base 2 */
    int heads, kv_heads, group, capacity, pages_per_seq, n_rows, splits, chunk, causal;
    float qscale; /* scale * log2(e) */
} KvAttnParams;

template <int HD>
constexpr size_t kv_attention_smem() {
    return (size_t)(KV_MROWS + 2 * KV_STAGES * KV_BN) * (HD + 8) * sizeof(bf16); /* Q + the K and V stages */
}

/* Blocks an SM holds, which bounds the registers a thread gets: four at
 * head_dim <= 128 (55 KiB of shared memory at 128); at 256 the 107 KiB of
 * shared memory allow two, and the Q fragments and output accumulators of a
 * 256-wide head need more than the 128 registers that four would leave
 * (ptxas spilled 384 bytes). */
template <int HD>
constexpr int kv_blocks_per_sm() {
    return HD <= 128 ? 4 : 2;
}

/* A tile's KV_BN keys, consecutive rows of a head slice from `base` (the
 * tile's first key), into shared [KV_BN][HD + 8]; keys n and past (at or past
 * the visible end) zero-filled without a read. */
template <int HD>
__device__ __forceinline__ void load_kv_rows(bf16 *dst, const bf16 *base, int ld, int n) {
    constexpr int SD = HD + 8, CH = HD / 8;
    for (int c = threadIdx.x; c < KV_BN * CH; c += KV_THREADS) {
        int r = c / CH, col = (c % CH) * 8;
        bool ok = r < n;
        cp_async16(dst + r * SD + col, ok ? base + (size_t)r * ld + col : base, ok ? 16 : 0);
    }
}

/* The block's query rows into shared [KV_MROWS][HD + 8], zeros past n_qrows. */
template <int HD>
__device__ __forceinline__ void load_query_rows(bf16 *sq, const KvAttnParams &p, int r0, int g, int tile_row0,
                                                int n_qrows) {
    constexpr int SD = HD + 8, CH = HD / 8;
    for (int c = threadIdx.x; c < KV_MROWS * CH; c += KV_THREADS) {
        int r = c / CH, col = (c % CH) * 8, qr = tile_row0 + r;
        bool ok = qr < n_qrows;
        const bf16 *src = p.q;
        if (ok) src = p.q + (size_t)(r0 + qr / p.group) * p.heads * HD + (size_t)(g * p.group + qr % p.group) * HD + col;
        cp_async16(sq + r * SD + col, src, ok ? 16 : 0);
    }
}

/* A warp's running softmax state for its rows gq and gq + 8 (lane / 4):
 * max and sum over its key group's keys, and its part of the output
 * columns (HD / KV_DIM_PARTS of them, as m16n8 accumulator tiles). */
template <int HD>
struct KvWarpState {
    float o[HD / 8 / KV_DIM_PARTS][4];
    float m[2], l[2];
};

/* One warp's 16 keys kw0 .. kw0 + 15 of the tile (K rows at skb, V rows at
 * svb): scores, online softmax, O += P V over its part `part` of the output
 * columns (the two warps of a key group compute the same scores). Keys at
 * or past limit[r] are masked for row r. */
template <int HD>
__device__ __forceinline__ void kv_warp_keys(KvWarpState<HD> &w, const uint32_t (*qf)[4], const bf16 *skb,
                                             const bf16 *svb, int kw0, int part, const int limit[2], float qscale) {
    constexpr int SD = HD + 8, KSTEPS = HD / 16;
    const int lane = threadIdx.x % 32, tq = lane % 4;
    float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int kk = 0; kk < KSTEPS; kk++) {
        uint32_t b[4];
        ldmatrix_x4(b, skb + ((lane & 7) + ((lane >> 4) & 1) * 8) * SD + kk * 16 + ((lane >> 3) & 1) * 8);
        mma_bf16(sc[0], qf[kk], b[0], b[1]);
        mma_bf16(sc[1], qf[kk], b[2], b[3]);
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 2; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int key = kw0 + n * 8 + 2 * tq + (e & 1);
            float x = key < limit[e >> 1] ? sc[n][e] * qscale : -INFINITY;
            sc[n][e] = x;
            mx[e >> 1] = fmaxf(mx[e >> 1], x);
        }
    float ref[2], alpha[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        float m_new = fmaxf(w.m[r], mx[r]);
        /* a row with no visible key yet keeps m = -inf: exponentials against 0 give 0, never NaN */
        ref[r] = m_new == -INFINITY ? 0.f : m_new;
        alpha[r] = fast_exp2(w.m[r] - ref[r]);
        w.m[r] = m_new;
        w.l[r] *= alpha[r];
    }
#pragma unroll
    for (int n = 0; n < 2; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float pr = fast_exp2(sc[n][e] - ref[e >> 1]);
            sc[n][e] = pr;
            w.l[e >> 1] += pr;
        }
    scale_acc_rows(w.o, alpha);
    uint32_t pa[4] = {pack_bf16(sc[0][0], sc[0][1]), pack_bf16(sc[0][2], sc[0][3]), pack_bf16(sc[1][0], sc[1][1]),
                      pack_bf16(sc[1][2], sc[1][3])};
    constexpr int PART_DP = HD / 16 / KV_DIM_PARTS; /* 16-column steps of a part */
#pragma unroll
    for (int dp = 0; dp < PART_DP; dp++) {
        uint32_t b[4];
        int col = (part * PART_DP + dp) * 16;
        ldmatrix_x4_trans(b, svb + ((lane & 7) + ((lane >> 3) & 1) * 8) * SD + col + ((lane >> 4) & 1) * 8);
        mma_bf16(w.o[2 * dp], pa, b[0], b[1]);
        mma_bf16(w.o[2 * dp + 1], pa, b[2], b[3]);
    }
}

/* The key groups' states merged through shared memory (the tile buffers,
 * free by now) and written: the output, or this split's partial result. */
template <int HD>
__device__ __forceinline__ void kv_merge_and_store(KvWarpState<HD> &w, float *scratch, const KvAttnParams &p, int g,
                                                   int r0, int tile_row0, int n_qrows) {
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4;
    const int group = warp / KV_DIM_PARTS, part = warp % KV_DIM_PARTS;
    float *s_m = scratch, *s_l = s_m + KV_KEY_GROUPS * KV_MROWS; /* [key group][row] */
    float *s_mb = s_l + KV_KEY_GROUPS * KV_MROWS, *s_lb = s_mb + KV_MROWS; /* block max and sum per row */
    float *s_o = s_lb + KV_MROWS;                                            /* [key group][row][HD] */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        w.l[r] += __shfl_xor_sync(0xffffffffu, w.l[r], 1);
        w.l[r] += __shfl_xor_sync(0xffffffffu, w.l[r], 2);
        if (tq == 0 && part == 0) { /* both parts hold the same max and sum */
            s_m[group * KV_MROWS + gq + 8 * r] = w.m[r];
            s_l[group * KV_MROWS + gq + 8 * r] = w.l[r];
        }
    }
    __syncthreads();
    if (tid < KV_MROWS) {
        float mb = -INFINITY, lb = 0.f;
        for (int i = 0; i < KV_KEY_GROUPS; i++) mb = fmaxf(mb, s_m[i * KV_MROWS + tid]);
        for (int i = 0; i < KV_KEY_GROUPS; i++) {
            float mi = s_m[i * KV_MROWS + tid];
            if (mi != -INFINITY) lb += s_l[i * KV_MROWS + tid] * fast_exp2(mi - mb);
        }
        s_mb[tid] = mb;
        s_lb[tid] = lb;
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int row = gq + 8 * r;
        float mb = -INFINITY;
        for (int i = 0; i < KV_KEY_GROUPS; i++) mb = fmaxf(mb, s_m[i * KV_MROWS + row]);
        float f = w.m[r] == -INFINITY ? 0.f : fast_exp2(w.m[r] - mb);
        float *dst = s_o + (group * KV_MROWS + row) * HD + part * (HD / KV_DIM_PARTS) + 2 * tq;
#pragma unroll
        for (int d = 0; d < HD / 8 / KV_DIM_PARTS; d++) {
            dst[d * 8] = w.o[d][2 * r] * f;
            dst[d * 8 + 1] = w.o[d][2 * r + 1] * f;
        }
    }
    __syncthreads();
    for (int c = tid; c < KV_MROWS * HD; c += KV_THREADS) {
        int row = c / HD, col = c % HD, qr = tile_row0 + row;
        if (qr >= n_qrows) continue;
        float acc = 0.f;
#pragma unroll
        for (int i = 0; i < KV_KEY_GROUPS; i++) acc += s_o[(i * KV_MROWS + row) * HD + col];
        size_t gr = (size_t)(r0 + qr / p.group) * p.heads + g * p.group + qr % p.group; /* (row, head) */
        if (p.splits == 1) {
            p.out[gr * HD + col] = __float2bfloat16(acc / s_lb[row]); /* every row sees its own key */
        } else {
            size_t part_ix = (size_t)blockIdx.x * p.n_rows * p.heads + gr;
            p.part_o[part_ix * HD + col] = acc;
            if (col == 0) p.part_ml[part_ix] = make_float2(s_mb[row], s_lb[row]);
        }
    }
}

/* The cache row of tile t's first key (key_begin + t * KV_BN), 0 for a tile
 * past the chunk's (whose page may be none). The tile's keys lie in that
 * key's page: the tile starts at a multiple of KV_BN (key_begin is a
 * multiple of the chunk, a multiple of KV_BN: df_cuda_kv_attention) and
 * KV_BN divides DF_KV_PAGE_ROWS, so its rows are consecutive from there. */
__device__ __forceinline__ size_t kv_tile_row(const KvAttnParams &p, int seq, int key_begin, int key_end, int t) {
    int k0 = key_begin + t * KV_BN;
    return k0 < key_end ? df_kv_cache_row_dev(p.pages, p.pages_per_seq, p.slots, p.capacity, seq, k0) : 0;
}

/* Tile t of the chunk (its first key at cache row `row`) into stage
 * t % KV_STAGES (nothing past the last tile), then a commit either way:
 * cp.async groups stay one per tile. khead / vhead: the caches' column of
 * the block's kv head. */
template <int HD>
__device__ __forceinline__ void load_stage(bf16 *sk, bf16 *sv, const bf16 *khead, const bf16 *vhead, int ldk,
                                           size_t row, int key_begin, int key_end, int t, int n_tiles) {
    constexpr int SD = HD + 8;
    if (t < n_tiles) {
        int stage = t % KV_STAGES, n = key_end - (key_begin + t * KV_BN);
        load_kv_rows<HD>(sk + stage * KV_BN * SD, khead + row * ldk, ldk, n);
        load_kv_rows<HD>(sv + stage * KV_BN * SD, vhead + row * ldk, ldk, n);
    }
    cp_async_commit();
}

template <int HD>
__global__ void __launch_bounds__(KV_THREADS, kv_blocks_per_sm<HD>()) kv_attention_kernel(KvAttnParams p) {
    constexpr int SD = HD + 8, KSTEPS = HD / 16;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sq = (bf16 *)smem_raw;              /* [KV_MROWS][SD] */
    bf16 *sk = sq + KV_MROWS * SD;            /* [KV_STAGES][KV_BN][SD] */
    bf16 *sv = sk + KV_STAGES * KV_BN * SD;   /* [KV_STAGES][KV_BN][SD] */
    const int g = blockIdx.z % p.kv_heads, seq = blockIdx.z / p.kv_heads, split = blockIdx.x;
    const int r0 = p.row_starts[seq], n_new = p.row_starts[seq + 1] - r0, len = p.cache_lens[seq];
    const int tile_row0 = blockIdx.y * KV_MROWS, n_qrows = n_new * p.group;
    if (tile_row0 >= n_qrows) return;
    const int kv_len = len + n_new, key_begin = split * p.chunk;
    if (key_begin >= kv_len) return; /* this sequence needs fewer splits */
    /* keys this block can see at all: causal stops at its last row's */
    int last_j = min(n_new - 1, (tile_row0 + KV_MROWS - 1) / p.group);
    int key_end = min(kv_len, key_begin + p.chunk);
    if (p.causal) key_end = min(key_end, len + last_j + 1);
    /* a causal block whose rows all precede this chunk still writes its (empty) partial result */
    const int n_tiles = key_end > key_begin ? (key_end - key_begin + KV_BN - 1) / KV_BN : 0;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4;
    const int group = warp / KV_DIM_PARTS, part = warp % KV_DIM_PARTS;
    const int ldk = p.kv_heads * HD;
    const bf16 *khead = p.k + (size_t)g * HD, *vhead = p.v + (size_t)g * HD;
    load_query_rows<HD>(sq, p, r0, g, tile_row0, n_qrows); /* in tile 0's group */
    for (int t = 0; t < KV_STAGES - 1; t++)
        load_stage<HD>(sk, sv, khead, vhead, ldk, kv_tile_row(p, seq, key_begin, key_end, t), key_begin, key_end, t,
                       n_tiles);
    /* the row of the next tile to load, looked up a tile ahead: the page-table read is in flight during a tile */
    size_t next_row = kv_tile_row(p, seq, key_begin, key_end, KV_STAGES - 1);

    int limit[2]; /* keys visible to this thread's rows gq and gq + 8 */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int qr = tile_row0 + gq + 8 * r;
        limit[r] = qr >= n_qrows ? 0 : min(key_end, p.causal ? len + qr / p.group + 1 : kv_len);
    }
    KvWarpState<HD> w;
#pragma unroll
    for (int d = 0; d < HD / 8 / KV_DIM_PARTS; d++) w.o[d][0] = w.o[d][1] = w.o[d][2] = w.o[d][3] = 0.f;
    w.m[0] = w.m[1] = -INFINITY;
    w.l[0] = w.l[1] = 0.f;
    uint32_t qf[KSTEPS][4];
    for (int t = 0; t < n_tiles; t++) {
        cp_async_wait<KV_STAGES - 2>(); /* tile t has landed (for this thread) ... */
        __syncthreads();                /* ... for every thread; and tile t - 1's stage is no longer read */
        size_t row = next_row;
        next_row = kv_tile_row(p, seq, key_begin, key_end, t + KV_STAGES);
        load_stage<HD>(sk, sv, khead, vhead, ldk, row, key_begin, key_end, t + KV_STAGES - 1, n_tiles);
        if (t == 0) {
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk++)
                ldmatrix_x4(qf[kk], sq + (lane & 15) * SD + kk * 16 + (lane >> 4) * 8);
        }
        int stage = t % KV_STAGES, kw0 = key_begin + t * KV_BN + group * 16;
        if (kw0 < key_end) /* warp-uniform: a warp past the visible keys skips the tile */
            kv_warp_keys<HD>(w, qf, sk + (stage * KV_BN + group * 16) * SD, sv + (stage * KV_BN + group * 16) * SD,
                             kw0, part, limit, p.qscale);
    }
    cp_async_wait<0>();
    __syncthreads(); /* every stage read: their memory becomes the merge's scratch */
    kv_merge_and_store<HD>(w, (float *)sk, p, g, r0, tile_row0, n_qrows);
}

/* Merges the splits of each (row, head): one warp each, lanes over columns. */
template <int HD>
__global__ void kv_attention_combine_kernel(KvAttnParams p, int n_seqs) {
    int w = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (w >= p.n_rows * p.heads) return;
    int row = w / p.heads;
    int i = df_kv_seq_of_row(p.row_starts, n_seqs, row);
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
    st->mem_epoch++;
    st->bytes_in_use += bytes;
    if (st->bytes_in_use > st->peak_bytes) st->peak_bytes = st->bytes_in_use;
    return 0;
}

/* A tile (KV_BN keys from a multiple of KV_BN) lies in one page of a paged
 * cache when KV_BN divides the page; a chunk starts tiles at multiples of
 * KV_BN when it is one: the bucketed bound it may be, or rounded up to. */
static_assert(DF_KV_PAGE_ROWS % KV_BN == 0, "a key tile straddles no page");
static_assert(DF_KV_VISIBLE_BUCKET % KV_BN == 0, "a one-split chunk is a whole number of tiles");

/* Keys per split: one split when sequences x kv heads x row tiles already
 * give every SM KV_BLOCKS_PER_SM blocks; else enough splits for that, none shorter than
 * KV_MIN_CHUNK keys. Sized by the bucketed bound (df_kv_visible_bound), not
 * the exact longest sequence, so that a recorded step's launch shape holds
 * for the following steps. A multiple of KV_BN either way (see above). */
static int kv_chunk(DfCudaState *st, const DfKvBatch *b, int kv_heads, int row_tiles) {
    long visible = df_kv_visible_bound(b);
    long per_sm = st->variant.kv_attention_blocks_per_sm > 0 ? st->variant.kv_attention_blocks_per_sm : KV_BLOCKS_PER_SM;
    long blocks = (long)b->n_seqs * kv_heads * row_tiles, want = per_sm * df_cuda_sm_count(st);
    if (blocks >= want || visible <= KV_MIN_CHUNK) return (int)visible;
    long splits = (want + blocks - 1) / blocks;
    if (splits > KV_MAX_SPLITS) splits = KV_MAX_SPLITS;
    long chunk = (visible + splits - 1) / splits;
    if (chunk < KV_MIN_CHUNK) chunk = KV_MIN_CHUNK;
    chunk = (chunk + KV_BN - 1) / KV_BN * KV_BN;
    return (int)chunk;
}

template <int HD>
static void launch_kv_attention(DfBackend *be, KvAttnParams p, const DfKvBatch *b, int row_tiles) {
    DfCudaState *st = df_cuda_state(be);
    constexpr size_t smem = kv_attention_smem<HD>();
    if (!df_cuda_set_smem(be, kv_attention_kernel<HD>, smem, "kv_attention")) return;
    dim3 grid(p.splits, row_tiles, b->n_seqs * p.kv_heads);
    kv_attention_kernel<HD><<<grid, KV_THREADS, smem, st->stream>>>(p);
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
    if (head_dim != 64 && head_dim != 128 && head_dim != 256) { /* e.g. a hybrid test model's 16: CUDA cores */
        df_cuda_kv_attention_generic(be, out, q, k_cache, v_cache, batch, heads, kv_heads, head_dim, scale, causal);
        return;
    }
    const void *ptrs[] = {out.ptr, q.ptr, k_cache.ptr, v_cache.ptr};
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)ptrs[i] % 16) {
            df_cuda_record_failure(be, __FILE__, __LINE__, "kv_attention: a buffer is not 16-byte aligned");
            return;
        }
    int group = heads / kv_heads;
    int row_tiles = (batch->max_new * group + KV_MROWS - 1) / KV_MROWS;
    int chunk = kv_chunk(st, batch, kv_heads, row_tiles);
    if (chunk <= 0 || chunk % KV_BN) { /* kv_tile_row: every tile within one page */
        df_cuda_record_failure(be, __FILE__, __LINE__, "kv_attention: split chunk of %d keys, not a multiple of %d",
                               chunk, KV_BN);
        return;
    }
    int splits = (df_kv_visible_bound(batch) + chunk - 1) / chunk;
    KvAttnParams p;
    p.out = (bf16 *)out.ptr;
    p.q = (const bf16 *)q.ptr;
    p.k = (const bf16 *)k_cache.ptr;
    p.v = (const bf16 *)v_cache.ptr;
    p.slots = (const int32_t *)batch->slots.ptr;
    p.cache_lens = (const int32_t *)batch->cache_lens.ptr;
    p.row_starts = (const int32_t *)batch->row_starts.ptr;
    p.pages = (const int32_t *)batch->pages.ptr;
    p.part_o = NULL;
    p.part_ml = NULL;
    p.heads = heads, p.kv_heads = kv_heads, p.group = group;
    p.capacity = batch->slot_capacity, p.pages_per_seq = batch->pages_per_seq;
    p.n_rows = batch->n_rows, p.splits = splits, p.chunk = chunk, p.causal = causal;
    p.qscale = scale * 1.4426950408889634f;
    if (splits > 1) {
        size_t rh = (size_t)splits * batch->n_rows * heads;
        size_t o_bytes = rh * head_dim * sizeof(float);
        if (ensure_kv_workspace(be, o_bytes + rh * sizeof(float2))) {
            return;
        }
        p.part_o = (float *)st->kv_ws;
        p.part_ml = (float2 *)((char *)st->kv_ws + o_bytes);
    }
    if (head_dim == 64) launch_kv_attention<64>(be, p, batch, row_tiles);
    else if (head_dim == 128) launch_kv_attention<128>(be, p, batch, row_tiles);
    else launch_kv_attention<256>(be, p, batch, row_tiles); /* a hybrid Qwen3.5 / 3.6 target's gated attention */
}
