/* A string -> int32 hash map (open addressing) that owns copies of its keys.
 * Read-only after building, so lookups may run from many threads. */
#ifndef DF_TEXT_STR_MAP_H
#define DF_TEXT_STR_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct DfStrMapSlot {
    uint64_t hash;
    uint32_t key_off, key_len;
    int32_t value;
    uint32_t used;
} DfStrMapSlot;

typedef struct DfStrMap {
    DfStrMapSlot *slots;
    size_t mask;  /* capacity - 1 (a power of two) */
    size_t count;
    char *keys;   /* all keys, back to back */
    size_t keys_len, keys_cap;
} DfStrMap;

uint64_t df_str_hash(const char *s, size_t n);

/* expected: a hint of the number of keys. */
void df_str_map_init(DfStrMap *m, size_t expected);
void df_str_map_free(DfStrMap *m);

/* Sets key -> value (replacing an existing value); returns the previous value or -1. */
int32_t df_str_map_put(DfStrMap *m, const char *key, size_t len, int32_t value);
/* The value of key, or -1. */
int32_t df_str_map_get(const DfStrMap *m, const char *key, size_t len);

#endif
