/* rmsnorm_rope (backend_ops.def): the q/k norm and rope of the prefill in
 * one pass over memory. head_dim / 8 lanes hold a head row, 8 bf16 each
 * (32 / that many rows a warp); the sum of squares is k_rmsnorm's butterfly
 * over those lanes, and rope's partner is the lane half a head away. The
 * arithmetic is cuda_head_math.h's, laid out as k_rmsnorm's vector path and
 * k_rope_vec lay it out (the same lanes add the same values in the same
 * order, the norm rounded to bf16 before the rotation), so the result is bit
 * for bit that of rmsnorm followed by rope; head dims other than 64, 128
 * and 256, or unaligned buffers or token strides, run those two ops (strided
 * x copied packed into out first). A token's heads are read x_ld values
 * apart from the next token's: only the address of a row's load depends on
 * it. qk_norm_rope is the same kernel over two segments in one launch, q's
 * head rows then k's: the target's q and k calls are small (8 to 34 MB)
 * and each spent much of its time in the ramp and tail of its own grid. */
#include "backend/cuda/elementwise/cuda_head_math.h"
#include "backend/cuda/common/cuda_internal.h"

#define RMSNORM_ROPE_WARPS 8

/* The 16 bytes lane `from` holds. */
__device__ __forceinline__ uint4 shfl_pack8(uint4 v, int from) {
    return make_uint4(__shfl_sync(0xffffffffu, v.x, from), __shfl_sync(0xffffffffu, v.y, from),
                      __shfl_sync(0xffffffffu, v.z, from), __shfl_sync(0xffffffffu, v.w, from));
}

/* Head row `row` as (token, head), stepped along a lane group's rows
 * rather than divided out per row: the division sat in front of every
 * row's load. */
struct HeadRow {
    int t, h;
};

__device__ __forceinline__ HeadRow head_row_step(HeadRow r, int by, int heads) {
    r.h += by;
    while (r.h >= heads) r.h -= heads, r.t++;
    return r;
}

/* ROWS rows a lane group, their loads all issued before any use (a head
 * row is one 16-byte load a lane: with one row a group the kernel waited on
 * memory latency at about 40% of the copy bandwidth). Row r of warp w's
 * group g is (w * ROWS + r) * ROWS_PER_WARP + g, so a warp's loads of one r
 * are contiguous. sin_sign is passed (1), not folded, as k_rope_vec takes it. */
#define RMSNORM_ROPE_ROWS 4

/* The head rows one launch norms and rotates: rows = tokens x heads of x
 * (tokens x_ld apart) into out (packed), with weight w, from grid block
 * first_block on. A launch has one (rmsnorm_rope) or two (qk_norm_rope: q's
 * heads, then k's, of the same tokens). */
struct NormRopeSegment {
    bf16 *out;
    const bf16 *x;
    long x_ld;
    const bf16 *w;
    long rows;
    int heads;
    unsigned first_block;
};
struct NormRopeSegments {
    NormRopeSegment s[2];
};

template <int HD>
__global__ void __launch_bounds__(RMSNORM_ROPE_WARPS * 32)
    k_rmsnorm_rope(NormRopeSegments segs, const int32_t *pos, const float *cos_t, const float *sin_t, float sin_sign,
                   float eps, int table_rows, DfCudaDeviceError *bad) {
    constexpr int LANES = HD / 8, HALF_LANES = LANES / 2, ROWS_PER_WARP = 32 / LANES, R = RMSNORM_ROPE_ROWS;
    /* the block's segment, field by field (a struct selected at run time would go to local memory) */
    bool second = blockIdx.x >= segs.s[1].first_block;
    bf16 *out = second ? segs.s[1].out : segs.s[0].out;
    const bf16 *x = second ? segs.s[1].x : segs.s[0].x, *w = second ? segs.s[1].w : segs.s[0].w;
    long x_ld = second ? segs.s[1].x_ld : segs.s[0].x_ld, rows = second ? segs.s[1].rows : segs.s[0].rows;
    int heads = second ? segs.s[1].heads : segs.s[0].heads;
    int lane = threadIdx.x % 32, gl = lane % LANES;
    long block = (long)(blockIdx.x - (second ? segs.s[1].first_block : 0u));
    long first_row = (block * RMSNORM_ROPE_WARPS + threadIdx.x / 32) * R * ROWS_PER_WARP + lane / LANES;
    Pack8 v[R], wp;
    float ss[R];
    HeadRow hr[R];
    int fr = (int)first_row; /* below 2^31 with the grid's last rows (the host checks) */
    hr[0] = {fr / heads, fr % heads};
#pragma unroll
    for (int r = 1; r < R; r++) hr[r] = head_row_step(hr[r - 1], ROWS_PER_WARP, heads);
#pragma unroll
    for (int r = 0; r < R; r++) { /* a row past the end takes part in the shuffles with zeros */
        long row = first_row + r * ROWS_PER_WARP;
        v[r].u = row < rows ? *(const uint4 *)(x + hr[r].t * x_ld + (long)hr[r].h * HD + gl * 8)
                            : make_uint4(0, 0, 0, 0);
    }
    wp.u = *(const uint4 *)(w + gl * 8);
#pragma unroll
    for (int r = 0; r < R; r++) ss[r] = df_pack8_add_squares(0.0f, v[r]);
    for (int o = LANES / 2; o > 0; o /= 2)
#pragma unroll
        for (int r = 0; r < R; r++) ss[r] += __shfl_xor_sync(0xffffffffu, ss[r], o);
    bool first = gl < HALF_LANES;
    int j0 = (first ? gl : gl - HALF_LANES) * 8;
#pragma unroll
    for (int r = 0; r < R; r++) {
        long row = first_row + r * ROWS_PER_WARP;
        Pack8 normed, partner;
        normed.u = df_pack8_rmsnorm(v[r], wp, df_rms_inverse(ss[r], HD, eps));
        partner.u = shfl_pack8(normed.u, lane ^ HALF_LANES);
        if (row >= rows) continue;
        int t = hr[r].t, p = pos[t];
        if (p < 0 || p >= table_rows) {
            if (gl == 0 && atomicCAS(&bad->code, DF_CUDA_BAD_NONE, DF_CUDA_BAD_POSITION) == DF_CUDA_BAD_NONE) {
                bad->value = p;
                bad->row = t;
                bad->limit = table_rows;
            }
            continue;
        }
        const float4 *c4 = (const float4 *)(cos_t + (size_t)p * (HD / 2) + j0);
        const float4 *s4 = (const float4 *)(sin_t + (size_t)p * (HD / 2) + j0);
        float4 cv[2] = {c4[0], c4[1]}, sv[2] = {s4[0], s4[1]};
        Pack8 a, b, oa, ob; /* selected by value: a select of references would put the packs in local memory */
        a.u = first ? normed.u : partner.u;
        b.u = first ? partner.u : normed.u;
        df_pack8_rope(a, b, (const float *)cv, (const float *)sv, sin_sign, oa, ob);
        *(uint4 *)(out + row * HD + gl * 8) = first ? oa.u : ob.u;
    }
}

/* The grid blocks of a segment of `rows` head rows. */
template <int HD>
static unsigned segment_blocks(long rows) {
    constexpr long ROWS_PER_BLOCK = RMSNORM_ROPE_WARPS * RMSNORM_ROPE_ROWS * (32 / (HD / 8));
    return (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
}

/* One launch over segs.s[0] and, when two, segs.s[1] (their first_block set here). */
template <int HD>
static void launch(DfCudaState *st, NormRopeSegments segs, int n_segs, DfBuffer positions, DfBuffer cos_table,
                   DfBuffer sin_table, float eps) {
    unsigned blocks = segment_blocks<HD>(segs.s[0].rows);
    segs.s[0].first_block = 0;
    segs.s[1].first_block = blocks; /* one segment: no block reaches it */
    if (n_segs == 2) blocks += segment_blocks<HD>(segs.s[1].rows);
    int table_rows = (int)(cos_table.count / (size_t)(HD / 2));
    k_rmsnorm_rope<HD><<<blocks, RMSNORM_ROPE_WARPS * 32, 0, st->stream>>>(
        segs, (const int32_t *)positions.ptr, (const float *)cos_table.ptr, (const float *)sin_table.ptr, 1.0f, eps,
        table_rows, st->dev_error);
}

static void launch_hd(DfCudaState *st, NormRopeSegments segs, int n_segs, DfBuffer positions, DfBuffer cos_table,
                      DfBuffer sin_table, int head_dim, float eps) {
    if (head_dim == 64) launch<64>(st, segs, n_segs, positions, cos_table, sin_table, eps);
    else if (head_dim == 128) launch<128>(st, segs, n_segs, positions, cos_table, sin_table, eps);
    else launch<256>(st, segs, n_segs, positions, cos_table, sin_table, eps);
}

static NormRopeSegment segment(DfBuffer out, DfBuffer x, int x_ld, DfBuffer w, int n_tokens, int heads) {
    return NormRopeSegment{(bf16 *)out.ptr, (const bf16 *)x.ptr, (long)x_ld, (const bf16 *)w.ptr,
                           (long)n_tokens * heads, heads, 0};
}

/* Whether the kernel takes this call: every row's 16-byte loads aligned (the
 * buffers and the token stride, 8 bf16), its rows counted in int (the grid's
 * last block included), a head dim it is built for. */
static bool kernel_takes(DfBuffer out, DfBuffer x, int x_ld, DfBuffer w, DfBuffer cos_table, DfBuffer sin_table,
                         long rows, int head_dim) {
    bool aligned = df_cuda_aligned16(out.ptr) && df_cuda_aligned16(x.ptr) && x_ld % 8 == 0 &&
                   df_cuda_aligned16(w.ptr) && df_cuda_aligned16(cos_table.ptr) && df_cuda_aligned16(sin_table.ptr);
    return aligned && rows <= (long)INT_MAX - 4096 && (head_dim == 64 || head_dim == 128 || head_dim == 256);
}

void df_cuda_rmsnorm_rope(DfBackend *be, DfBuffer out, DfBuffer x, int x_ld, DfBuffer w, DfBuffer positions,
                          DfBuffer cos_table, DfBuffer sin_table, int n_tokens, int heads, int head_dim, float eps) {
    DfCudaState *st = df_cuda_state(be);
    if (!kernel_takes(out, x, x_ld, w, cos_table, sin_table, (long)n_tokens * heads, head_dim)) {
        df_backend_rmsnorm_rope_composed(be, out, x, x_ld, w, positions, cos_table, sin_table, n_tokens, heads,
                                         head_dim, eps);
        return;
    }
    NormRopeSegments segs = {{segment(out, x, x_ld, w, n_tokens, heads), {}}};
    launch_hd(st, segs, 1, positions, cos_table, sin_table, head_dim, eps);
    DF_CUDA_CHECK_LAUNCH(be, "rmsnorm_rope");
}

void df_cuda_qk_norm_rope(DfBackend *be, DfBuffer q_out, DfBuffer k_out, DfBuffer x, int x_ld, DfBuffer q_w,
                          DfBuffer k_w, DfBuffer positions, DfBuffer cos_table, DfBuffer sin_table, int n_tokens,
                          int q_heads, int k_heads, int head_dim, float eps) {
    DfCudaState *st = df_cuda_state(be);
    DfBuffer k_x = df_buffer_view(x, (size_t)q_heads * head_dim, x.count - (size_t)q_heads * head_dim);
    long rows = (long)n_tokens * (q_heads + k_heads);
    if (!kernel_takes(q_out, x, x_ld, q_w, cos_table, sin_table, rows, head_dim) ||
        !kernel_takes(k_out, k_x, x_ld, k_w, cos_table, sin_table, rows, head_dim)) {
        df_backend_qk_norm_rope_composed(be, q_out, k_out, x, x_ld, q_w, k_w, positions, cos_table, sin_table,
                                         n_tokens, q_heads, k_heads, head_dim, eps);
        return;
    }
    NormRopeSegments segs = {{segment(q_out, x, x_ld, q_w, n_tokens, q_heads),
                              segment(k_out, k_x, x_ld, k_w, n_tokens, k_heads)}};
    launch_hd(st, segs, 2, positions, cos_table, sin_table, head_dim, eps);
    DF_CUDA_CHECK_LAUNCH(be, "qk_norm_rope");
}
