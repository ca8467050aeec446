/* JSON string values that may hold any byte, NUL included (cJSON's strings
 * stop at a NUL, and text corpora do contain "\u0000"). */
#ifndef DF_TEXT_JSON_STRING_H
#define DF_TEXT_JSON_STRING_H

#include <stddef.h>

#include "base/buffer.h"
#include "base/error.h"

/* json[0..len) must be a JSON object (checked). Appends the decoded value of
 * its top-level string member `key` to out. Returns 0; 1 when the member is
 * absent; -1 with err set when the JSON is invalid or the member is not a string. */
int df_json_get_string(const char *json, size_t len, const char *key, DfByteBuf *out, DfError *err);

/* Appends s[0..n) as a JSON string literal, quotes included (UTF-8 kept as is). */
void df_json_append_string(DfByteBuf *out, const char *s, size_t n);

#endif
