/* GPT-2's byte <-> unicode map: every byte gets a printable character (bytes
 * that are printable Latin-1 map to themselves, the others to U+0100...), so
 * that byte-level BPE tokens are valid strings. */
#ifndef DF_TEXT_BYTE_LEVEL_H
#define DF_TEXT_BYTE_LEVEL_H

#include <stddef.h>
#include <stdint.h>

typedef struct DfByteLevel {
    uint32_t byte_to_cp[256];
    char utf8[256][3];      /* UTF-8 of byte_to_cp[b] */
    uint8_t utf8_len[256];
    int16_t cp_to_byte[324]; /* -1 for code points outside the map */
} DfByteLevel;

void df_byte_level_init(DfByteLevel *bl);

/* The byte that code point cp stands for, or -1. */
static inline int df_byte_level_byte(const DfByteLevel *bl, uint32_t cp) {
    return cp < 324 ? bl->cp_to_byte[cp] : -1;
}

#endif
