#include "text/str_map.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

uint64_t df_str_hash(const char *s, size_t n) {
    /* FNV-1a, then a final mix so that the low bits used for the slot index
     * depend on every byte. */
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    h ^= h >> 31;
    h *= 0x7fb5d329728ea185ull;
    h ^= h >> 27;
    return h;
}

void df_str_map_init(DfStrMap *m, size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2) cap *= 2;
    memset(m, 0, sizeof *m);
    m->slots = df_xcalloc(cap, sizeof *m->slots, "string map");
    m->mask = cap - 1;
}

void df_str_map_free(DfStrMap *m) {
    free(m->slots);
    free(m->keys);
    memset(m, 0, sizeof *m);
}

static DfStrMapSlot *find_slot(const DfStrMap *m, const char *key, size_t len, uint64_t h) {
    size_t i = (size_t)h & m->mask;
    for (;;) {
        DfStrMapSlot *s = &m->slots[i];
        if (!s->used) return s;
        if (s->hash == h && s->key_len == len && memcmp(m->keys + s->key_off, key, len) == 0) return s;
        i = (i + 1) & m->mask;
    }
}

static void grow(DfStrMap *m) {
    size_t old_cap = m->mask + 1;
    DfStrMapSlot *old = m->slots;
    m->slots = df_xcalloc(old_cap * 2, sizeof *m->slots, "string map");
    m->mask = old_cap * 2 - 1;
    for (size_t i = 0; i < old_cap; i++) {
        if (!old[i].used) continue;
        size_t j = (size_t)old[i].hash & m->mask;
        while (m->slots[j].used) j = (j + 1) & m->mask;
        m->slots[j] = old[i];
    }
    free(old);
}

int32_t df_str_map_put(DfStrMap *m, const char *key, size_t len, int32_t value) {
    if ((m->count + 1) * 2 > m->mask + 1) grow(m);
    uint64_t h = df_str_hash(key, len);
    DfStrMapSlot *s = find_slot(m, key, len, h);
    if (s->used) {
        int32_t prev = s->value;
        s->value = value;
        return prev;
    }
    /* allocated even for an empty first key, so that keys + key_off is never
     * NULL + 0 (undefined; found by fuzzing tokenizer.json) */
    if (!m->keys || m->keys_len + len > m->keys_cap) {
        size_t cap = m->keys_cap ? m->keys_cap : 4096;
        while (cap < m->keys_len + len) cap *= 2;
        m->keys = df_xrealloc(m->keys, cap, "string map keys");
        m->keys_cap = cap;
    }
    memcpy(m->keys + m->keys_len, key, len);
    s->hash = h;
    s->key_off = (uint32_t)m->keys_len;
    s->key_len = (uint32_t)len;
    s->value = value;
    s->used = 1;
    m->keys_len += len;
    m->count++;
    return -1;
}

int32_t df_str_map_get(const DfStrMap *m, const char *key, size_t len) {
    if (!m->slots) return -1;
    const DfStrMapSlot *s = find_slot(m, key, len, df_str_hash(key, len));
    return s->used ? s->value : -1;
}
