/* Hopper's warpgroup matrix products (wgmma, sm_90a) for the kernels that
 * keep their tiles in shared memory themselves (no TMA): the 128-byte
 * swizzled tile layout, its matrix descriptors, and the product shapes the
 * attention kernels use (A from shared memory or from registers). A
 * warpgroup is the 4 warps of a 128-thread CTA; every thread of it executes
 * every call here.
 *
 * Tile layout ("sw128"): a tile of R rows x 64c bf16 is stored as c slabs
 * of R rows x 128 bytes (64 values), a slab R x 128 bytes apart; within a
 * slab, 16-byte chunk k of row r sits at chunk k ^ (r % 8) of the row (the
 * hardware's 128-byte swizzle, which repeats every 8 rows = 1024 bytes, so
 * a tile starts on a 1024-byte boundary). The same bytes serve as a K-major
 * operand (rows are M or N, the 64 values of a slab run along K) and as an
 * MN-major one (rows are K, the values run along N): a [rows][head_dim]
 * tile of Q is B of S = K Q^T one way and B of dK = dS^T Q the other.
 *
 * Accumulators: m64nN f32 gives each thread N/2 floats, laid out for warp w
 * as the mma.sync m16n8 tiles of rows 16w..16w+15 (cuda_mma.h), so acc[n][4]
 * is n-tile n of the warp's 16 rows. An A operand from registers is, per
 * warp, the m16n8k16 A fragment of its 16 rows. */
#ifndef DF_BACKEND_CUDA_CUDA_WGMMA_H
#define DF_BACKEND_CUDA_CUDA_WGMMA_H

#include "backend/cuda/common/cuda_mma.h"

/* wgmma and the async proxy exist only in sm_90a code. The fat binary's
 * other code (sm_80, compute_80 PTX: the portable tier) compiles the wgmma
 * kernels with each instruction below a trap; they are never launched there,
 * since dispatch picks a wgmma kernel only where the device runs the sm_90a
 * code (DfCudaState.tier, common/cuda_tier.cu). */
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DF_WGMMA_ASM(...) asm volatile(__VA_ARGS__)
#else
#define DF_WGMMA_ASM(...) __trap()
#endif

/* Byte offset of 16-byte chunk `chunk` (of head_dim/8) of row `row` in an sw128 tile of `rows` rows. */
__device__ __forceinline__ uint32_t sw128_offset(int rows, int row, int chunk) {
    return (uint32_t)((chunk >> 3) * rows * 128 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

/* The matrix descriptor of an sw128 operand starting at `p` (a 1024-byte
 * aligned tile plus whole 8-row groups, or plus 32-byte K steps within a
 * slab): lbo and sbo in bytes, 128-byte swizzle (mode 1, bits 62-63). */
__device__ __forceinline__ uint64_t sw128_desc(const void *p, uint32_t lbo, uint32_t sbo) {
    uint64_t d = (uint64_t)((smem_addr(p) & 0x3FFFF) >> 4);
    d |= (uint64_t)((lbo & 0x3FFFF) >> 4) << 16;
    d |= (uint64_t)((sbo & 0x3FFFF) >> 4) << 32;
    d |= 1ull << 62;
    return d;
}

/* The descriptor of the operand `bytes` (a multiple of 16) further on than
 * the one of d: its start address field (bits 0-13, the address / 16) moves
 * by bytes / 16. No carry leaves that field while the operand stays inside
 * shared memory (below 256 KiB). The products below build a tile's
 * descriptor once and step it so: building it for every k-step (address
 * conversion, masks, shifts) took about 9 uniform instructions a wgmma,
 * issue slots the backward's dK/dV kernel waited on (ncu). */
__device__ __forceinline__ uint64_t desc_advance(uint64_t d, uint32_t bytes) {
    uint32_t lo = (uint32_t)d + (bytes >> 4), hi = (uint32_t)(d >> 32); /* one 32-bit add, no 64-bit carry */
    return (uint64_t)hi << 32 | lo;
}

/* K-major operands of 16 K values: an sw128 tile's descriptor, and the byte
 * offset of its k-step kk (64 values a slab: 4 k-steps of 32 bytes); 8-row
 * groups 1024 bytes apart. */
__device__ __forceinline__ uint64_t sw128_k_major_desc(const bf16 *tile) { return sw128_desc(tile, 16, 1024); }
__device__ __forceinline__ constexpr uint32_t sw128_k_step(int rows, int kk) {
    return (uint32_t)((kk >> 2) * rows * 128 + (kk & 3) * 32);
}

/* MN-major operands whose K rows are rows 16kk..16kk+15 of an sw128 tile:
 * N runs along the slabs (lbo: one slab), the two 8-row K groups 1024 bytes
 * apart, k-step kk 2048 bytes on. */
__device__ __forceinline__ uint64_t sw128_mn_major_desc(const bf16 *tile, int rows) {
    return sw128_desc(tile, (uint32_t)rows * 128, 1024);
}
__device__ __forceinline__ constexpr uint32_t sw128_mn_step(int kk) { return (uint32_t)kk * 2048; }

/* Shared-memory writes of the generic proxy (plain stores, cp.async) made
 * visible to the async proxy that wgmma reads through; each writing thread
 * runs it after its writes, before the barrier. */
__device__ __forceinline__ void fence_proxy_async() {
    DF_WGMMA_ASM("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_fence() {
    DF_WGMMA_ASM("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    DF_WGMMA_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    DF_WGMMA_ASM("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* Keeps the compiler from moving reads or writes of accumulators across a
 * wgmma's issue and its wait (the registers change behind its back). */
template <int N>
__device__ __forceinline__ void wgmma_fence_acc(float (&acc)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+f"(acc[i][e])::"memory");
}

/* The accumulators of an m64n64 (32 floats a thread) or m64n128 (64) wgmma:
 * the instruction's D operand text and its in-out asm operands %0.., in the
 * order of acc[n][e]; the other operands follow from %32 (%64). */
#define DF_WGMMA_D32                                                                                            \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                                 \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
#define DF_WGMMA_D64                                                                                            \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                                 \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"                                        \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"                                        \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
#define DF_WGMMA_ACC8(acc, n) "+f"(acc[n][0]), "+f"(acc[n][1]), "+f"(acc[n][2]), "+f"(acc[n][3])
#define DF_WGMMA_ACC32(acc)                                                                                     \
    DF_WGMMA_ACC8(acc, 0), DF_WGMMA_ACC8(acc, 1), DF_WGMMA_ACC8(acc, 2), DF_WGMMA_ACC8(acc, 3),             \
        DF_WGMMA_ACC8(acc, 4), DF_WGMMA_ACC8(acc, 5), DF_WGMMA_ACC8(acc, 6), DF_WGMMA_ACC8(acc, 7)
#define DF_WGMMA_ACC64(acc)                                                                                     \
    DF_WGMMA_ACC32(acc), DF_WGMMA_ACC8(acc, 8), DF_WGMMA_ACC8(acc, 9), DF_WGMMA_ACC8(acc, 10),               \
        DF_WGMMA_ACC8(acc, 11), DF_WGMMA_ACC8(acc, 12), DF_WGMMA_ACC8(acc, 13), DF_WGMMA_ACC8(acc, 14),        \
        DF_WGMMA_ACC8(acc, 15)

/* acc (64 x 64, m64n64 layout) = (accumulate ? acc : 0) + A B^T, both K-major from shared memory. */
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&acc)[8][4], uint64_t da, uint64_t db, int accumulate) {
    DF_WGMMA_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 DF_WGMMA_D32
                 "%32, %33, p, 1, 1, 0, 0;\n}\n"
                 : DF_WGMMA_ACC32(acc)
                 : "l"(da), "l"(db), "r"(accumulate)
                 : "memory");
}

/* acc (64 x 64) = (accumulate ? acc : 0) + A B^T, A (64 x 16) from registers, B K-major from shared memory. */
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&acc)[8][4], const uint32_t (&a)[4], uint64_t db,
                                                   int accumulate) {
    DF_WGMMA_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 DF_WGMMA_D32
                 "{%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
                 : DF_WGMMA_ACC32(acc)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate)
                 : "memory");
}

/* acc (64 x 128, m64n128 layout) += A B, A (64 x 16) from registers, B (16 x 128) MN-major from shared memory. */
__device__ __forceinline__ void wgmma_m64n128k16_rs_mn(float (&acc)[16][4], const uint32_t (&a)[4], uint64_t db) {
    DF_WGMMA_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 DF_WGMMA_D64
                 "{%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
                 : DF_WGMMA_ACC64(acc)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
                 : "memory");
}

/* --- products over 64-row tiles of 128 columns (head_dim 128) ------------------------ */

/* The first 1024-byte boundary in the dynamic shared memory (where sw128 tiles start). */
__device__ __forceinline__ bf16 *aligned_tiles(unsigned char *smem) {
    return (bf16 *)(smem + ((1024u - (smem_addr(smem) & 1023u)) & 1023u));
}

/* The warp's 16 x 64 accumulators (P, dS, or their transposes) as the A
 * fragments of the 4 k-steps of a product over those 64 columns. */
__device__ __forceinline__ void pack_a_fragments(uint32_t (&a)[4][4], const float (&p)[8][4]) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        a[kk][0] = pack_bf16(p[2 * kk][0], p[2 * kk][1]);
        a[kk][1] = pack_bf16(p[2 * kk][2], p[2 * kk][3]);
        a[kk][2] = pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]);
        a[kk][3] = pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3]);
    }
}

/* acc (64 x 64) = A B^T over 128 columns, A and B 64-row sw128 tiles (S = Q K^T). */
__device__ __forceinline__ void tile_times_tile_t(float (&acc)[8][4], const bf16 *a, const bf16 *b) {
    uint64_t da = sw128_k_major_desc(a), db = sw128_k_major_desc(b);
#pragma unroll
    for (int kk = 0; kk < 8; kk++)
        wgmma_m64n64k16_ss(acc, desc_advance(da, sw128_k_step(64, kk)), desc_advance(db, sw128_k_step(64, kk)), kk > 0);
}

/* The warp's 16 rows (16w..16w+15) of a 64-row sw128 tile of 128 columns
 * as the A fragments of the 8 k-steps of a product over those columns
 * (ldmatrix: lane l gives row l % 16, chunk 2 kk + l / 16). */
__device__ __forceinline__ void load_a_fragments_sw128(uint32_t (&a)[8][4], const bf16 *tile, int warp, int lane) {
    const unsigned char *base = (const unsigned char *)tile;
    int row = 16 * warp + lane % 16;
#pragma unroll
    for (int kk = 0; kk < 8; kk++) ldmatrix_x4(a[kk], base + sw128_offset(64, row, 2 * kk + lane / 16));
}

/* acc (64 x 64) = A B^T over 128 columns, A as fragments, B a 64-row sw128 tile (S = Q K^T, Q held). */
__device__ __forceinline__ void frags_times_tile_t(float (&acc)[8][4], const uint32_t (&a)[8][4], const bf16 *b) {
    uint64_t db = sw128_k_major_desc(b);
#pragma unroll
    for (int kk = 0; kk < 8; kk++) wgmma_m64n64k16_rs(acc, a[kk], desc_advance(db, sw128_k_step(64, kk)), kk > 0);
}

/* acc (64 x 128) += A B, A (64 x 64) as fragments, B a 64-row sw128 tile (O += P V). */
__device__ __forceinline__ void frags_times_tile(float (&acc)[16][4], const uint32_t (&a)[4][4], const bf16 *b) {
    uint64_t db = sw128_mn_major_desc(b, 64);
#pragma unroll
    for (int kk = 0; kk < 4; kk++) wgmma_m64n128k16_rs_mn(acc, a[kk], desc_advance(db, sw128_mn_step(kk)));
}

#endif
