/* Parsing a JSON document for the readers of records, prompts, configs,
 * tokenizer.json and resume files. cJSON decodes a \u0000 escape into a NUL
 * byte, and every later use of the C string would stop there: a prompt, a
 * vocab key or an added token would silently be cut short. No reader takes
 * such a text: a NUL in any string or key of the document (escaped or raw)
 * refuses it, naming the file, the line and the field. Duplicate keys keep
 * the last value (df_json_keep_last). */
#ifndef DF_JSON_JSON_PARSE_H
#define DF_JSON_JSON_PARSE_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "base/error.h"

enum {
    DF_JSON_OK = 0,
    DF_JSON_INVALID = -1, /* not valid JSON, or more than one value */
    DF_JSON_NUL = -2,     /* valid JSON with a NUL in a string or key */
};

/* Parses text[0..len) into *out (NULL unless DF_JSON_OK). path and line
 * (the line the text starts on; 0 for a whole file, whose lines are counted
 * from 1) name where it came from in the messages:
 *   "PATH:LINE: not valid JSON (error near byte N)"
 *   "PATH:LINE: field 'messages[1].content' holds a NUL character (\u0000), ..."
 * A NULL path (a one-line record whose reader names the file and line)
 * leaves the prefix out: "invalid JSON (parse error at column N)". */
int df_json_parse(const char *text, size_t len, const char *path, long line, cJSON **out, DfError *err);

/* The first string or key of a valid JSON text that holds a NUL: 1, with its
 * field (as "a.b[2].c", the key itself for a key) in field[cap], *is_key and
 * its line counted from 1 in *line; 0 when there is none. */
int df_json_find_nul(const char *text, size_t len, char *field, size_t cap, int *is_key, long *line);

#endif
