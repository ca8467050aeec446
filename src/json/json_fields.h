/* Typed reads of JSON config fields (config.json, a drafter's config.json)
 * with errors that name the file and the field: "PATH: field 'rope_scaling.factor'
 * must be a number, not a string". Absent and null fields are both "not given":
 * an optional one takes its default, a required one is an error. */
#ifndef DF_JSON_JSON_FIELDS_H
#define DF_JSON_JSON_FIELDS_H

#include <cjson/cJSON.h>

#include "base/error.h"

typedef struct DfJsonReader {
    const char *path; /* named in every message */
    DfError *err;
} DfJsonReader;

/* Duplicate keys: the last one wins, as in Python's json module and Hugging
 * Face's loaders ({"hidden_size": 256, "hidden_size": 512} is 512). Every
 * loader of a JSON document (configs, tokenizer.json, JSONL records) calls
 * this right after parsing, so that every lookup sees one value per key;
 * it removes the earlier duplicates from every object of the tree. */
void df_json_keep_last(cJSON *root);

/* "a number", "a string", ... ("missing" for NULL). */
const char *df_json_type_name(const cJSON *item);

/* A number with an integer value that fits an int. */
int df_json_is_int(const cJSON *item);

/* obj[name], or NULL when obj is NULL, the field is absent or it is null. */
const cJSON *df_json_field(const cJSON *obj, const char *name);

/* scope prefixes the field's name in messages: "" at the top level, else
 * e.g. "rope_scaling." for a nested object. */
int df_json_read_int(const DfJsonReader *r, const cJSON *obj, const char *scope, const char *name, int required,
                     int fallback, int *out);
int df_json_read_double(const DfJsonReader *r, const cJSON *obj, const char *scope, const char *name, int required,
                        double fallback, double *out);
int df_json_read_bool(const DfJsonReader *r, const cJSON *obj, const char *scope, const char *name, int fallback,
                      int *out);
/* *out = NULL when not given. */
int df_json_read_string(const DfJsonReader *r, const cJSON *obj, const char *scope, const char *name,
                        const char **out);
/* *out = NULL when not given. */
int df_json_read_object(const DfJsonReader *r, const cJSON *obj, const char *scope, const char *name,
                        const cJSON **out);
/* A per-layer list such as `layer_types`: an array of num_layers strings;
 * 0 when it is one, else fails naming the field, or the entry that is not a
 * string. */
int df_json_check_layer_list(const DfJsonReader *r, const cJSON *list, const char *name, int num_layers);

#endif
