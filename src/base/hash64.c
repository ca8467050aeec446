#include "base/hash64.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#define HASH_P1 0xFF51AFD7ED558CCDull
#define HASH_P2 0xC4CEB9FE1A85EC53ull
#define HASH_SEED 0x9E3779B97F4A7C15ull

static inline uint64_t load_u64(const unsigned char *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

static inline uint64_t lane_step(uint64_t v, uint64_t w) {
    v = (v ^ w) * HASH_P1;
    return v ^ (v >> 29);
}

static inline uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= HASH_P2;
    return x ^ (x >> 33);
}

void df_hash64_init(DfHash64 *h) {
    memset(h, 0, sizeof *h);
    for (int j = 0; j < 4; j++) h->lane[j] = HASH_SEED * (uint64_t)(j + 1);
}

static void hash_blocks(uint64_t lane[4], const unsigned char *p, size_t n_blocks) {
    uint64_t v0 = lane[0], v1 = lane[1], v2 = lane[2], v3 = lane[3];
    for (size_t b = 0; b < n_blocks; b++, p += 32) {
        v0 = lane_step(v0, load_u64(p));
        v1 = lane_step(v1, load_u64(p + 8));
        v2 = lane_step(v2, load_u64(p + 16));
        v3 = lane_step(v3, load_u64(p + 24));
    }
    lane[0] = v0, lane[1] = v1, lane[2] = v2, lane[3] = v3;
}

void df_hash64_update(DfHash64 *h, const void *data, size_t n) {
    if (n == 0) return;
    const unsigned char *p = data;
    h->length += n;
    if (h->n_pending > 0) {
        size_t take = 32 - h->n_pending < n ? 32 - h->n_pending : n;
        memcpy(h->pending + h->n_pending, p, take);
        h->n_pending += take;
        p += take;
        n -= take;
        if (h->n_pending < 32) return;
        hash_blocks(h->lane, h->pending, 1);
        h->n_pending = 0;
    }
    hash_blocks(h->lane, p, n / 32);
    memcpy(h->pending, p + (n / 32) * 32, n % 32);
    h->n_pending = n % 32;
}

uint64_t df_hash64_final(const DfHash64 *h) {
    uint64_t lane[4];
    memcpy(lane, h->lane, sizeof lane);
    unsigned char tail[32] = {0}; /* the last partial word zero-padded */
    memcpy(tail, h->pending, h->n_pending);
    size_t n_words = (h->n_pending + 7) / 8;
    for (size_t k = 0; k < n_words; k++) lane[k] = lane_step(lane[k], load_u64(tail + 8 * k));
    uint64_t out = h->length * HASH_P2;
    for (int j = 0; j < 4; j++) out = lane_step(out, mix(lane[j]));
    return out;
}

uint64_t df_hash64(const void *data, size_t n) {
    DfHash64 h;
    df_hash64_init(&h);
    df_hash64_update(&h, data, n);
    return df_hash64_final(&h);
}

uint64_t df_hash64_mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

#define HASH_CHUNK ((size_t)1 << 20)

uint64_t df_hash64_chunked(const void *data, size_t n) {
    const unsigned char *p = data;
    size_t n_chunks = (n + HASH_CHUNK - 1) / HASH_CHUNK;
    uint64_t *chunk = df_xmalloc((n_chunks ? n_chunks : 1) * sizeof *chunk, "checksum");
#pragma omp parallel for schedule(static) if (n_chunks > 1)
    for (size_t c = 0; c < n_chunks; c++) {
        size_t begin = c * HASH_CHUNK, len = n - begin < HASH_CHUNK ? n - begin : HASH_CHUNK;
        chunk[c] = df_hash64(p + begin, len);
    }
    uint64_t h = df_hash64_mix((uint64_t)n ^ HASH_SEED);
    for (size_t c = 0; c < n_chunks; c++) h = df_hash64_mix(h ^ chunk[c]);
    free(chunk);
    return h;
}
