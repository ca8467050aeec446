/* df_hash64: a 64-bit checksum (not cryptographic; it detects corruption).
 * Used by the token store and the training checkpoints.
 *   Input bytes are read as little-endian u64 words; a final partial word is
 *   zero-padded. Four lanes start at L0..L3 = 0x9E3779B97F4A7C15 * (j + 1)
 *   (mod 2^64, j = lane). Word k goes to lane k mod 4:
 *       v = (v ^ w) * 0xFF51AFD7ED558CCD;  v ^= v >> 29
 *   Then h = length_in_bytes * 0xC4CEB9FE1A85EC53, and for each lane j = 0..3:
 *       h = (h ^ mix(v_j)) * 0xFF51AFD7ED558CCD;  h ^= h >> 29
 *   where mix(x) = x ^ (x >> 33) then * 0xC4CEB9FE1A85EC53 then x ^ (x >> 33).
 *   Every step is a bijection of the state for a fixed input, so any change
 *   confined to one 8-byte word always changes the checksum. The four lanes
 *   are independent chains, which lets the CPU run them in parallel (several
 *   GB/s). */
#ifndef DF_BASE_HASH64_H
#define DF_BASE_HASH64_H

#include <stddef.h>
#include <stdint.h>

typedef struct DfHash64 {
    uint64_t lane[4];
    uint64_t length;    /* bytes seen so far */
    unsigned char pending[32];
    size_t n_pending;   /* bytes in pending (a partial 32-byte block) */
} DfHash64;

void df_hash64_init(DfHash64 *h);
void df_hash64_update(DfHash64 *h, const void *data, size_t n);
uint64_t df_hash64_final(const DfHash64 *h);
uint64_t df_hash64(const void *data, size_t n);

/* For large buffers (checkpoints): df_hash64 of each 1 MiB chunk, computed in
 * parallel, folded in order with the total length through df_hash64_mix. The
 * result does not depend on the thread count. */
uint64_t df_hash64_chunked(const void *data, size_t n);

/* A bijective 64-bit finaliser (splitmix64's): spreads every input bit. */
uint64_t df_hash64_mix(uint64_t x);

#endif
