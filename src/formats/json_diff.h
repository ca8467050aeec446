/* Comparing two flat JSON objects that record what made an output (generate's
 * settings, train's prepared-data key): the first field that differs, as a
 * message can say it. */
#ifndef DF_FORMATS_JSON_DIFF_H
#define DF_FORMATS_JSON_DIFF_H

#include <stddef.h>

/* 0 when both texts are JSON objects with the same fields and values; else 1
 * with `what` set to e.g. "--max-new-tokens is 128, was 256" (a field of
 * either side missing from the other, or a text that is not an object, is a
 * difference too). Fields are named as df_setting_name names them. */
int df_json_diff(const char *was_text, const char *now_text, char *what, size_t cap);

/* What a user changes to change a recorded field: the option that sets it
 * ("max_new_tokens" is --max-new-tokens), or in words for a field derived
 * from an input ("content_hash" is "the content of --data"). */
void df_setting_name(const char *field, char *out, size_t cap);

#endif
