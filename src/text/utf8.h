/* UTF-8 validation and Rust-style lossy conversion (String::from_utf8_lossy:
 * each maximal invalid subpart becomes one U+FFFD). */
#ifndef DF_TEXT_UTF8_H
#define DF_TEXT_UTF8_H

#include <stddef.h>
#include <stdint.h>

#include "base/buffer.h"

/* Length of the valid UTF-8 sequence starting at s[0..n) (1..4), or 0 when it
 * is invalid; then *bad_len is the length of the maximal invalid subpart (>= 1). */
size_t df_utf8_sequence_len(const unsigned char *s, size_t n, size_t *bad_len);

/* Byte offset of the first invalid sequence in s[0..n), or n when all is valid. */
size_t df_utf8_first_invalid(const unsigned char *s, size_t n);

/* Appends s[0..n) to out, replacing invalid sequences by U+FFFD as Rust does. */
void df_utf8_append_lossy(DfByteBuf *out, const unsigned char *s, size_t n);

/* Decodes the code point at s[0..n) (which must be valid UTF-8); sets *len. */
uint32_t df_utf8_decode(const unsigned char *s, size_t n, size_t *len);

/* Writes the UTF-8 form of cp into buf (4 bytes room); returns its length. */
size_t df_utf8_encode(uint32_t cp, char *buf);

#endif
