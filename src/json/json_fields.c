#include "json/json_fields.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>


typedef struct KeyedItem {
    cJSON *item;
    size_t index;
} KeyedItem;

static int by_key_then_index(const void *a, const void *b) {
    const KeyedItem *x = a, *y = b;
    int c = strcmp(x->item->string, y->item->string);
    if (c) return c;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Removes every member of obj whose key appears again after it. */
static void drop_earlier_duplicates(cJSON *obj) {
    size_t n = 0;
    for (cJSON *c = obj->child; c; c = c->next) n++;
    if (n < 2) return;
    KeyedItem *items = df_xmalloc(n * sizeof *items, "JSON keys");
    size_t i = 0;
    for (cJSON *c = obj->child; c; c = c->next, i++) items[i] = (KeyedItem){c, i};
    qsort(items, n, sizeof *items, by_key_then_index);
    for (i = 0; i + 1 < n; i++)
        if (strcmp(items[i].item->string, items[i + 1].item->string) == 0) cJSON_Delete(cJSON_DetachItemViaPointer(obj, items[i].item));
    free(items);
}

void df_json_keep_last(cJSON *node) {
    for (cJSON *c = node ? node->child : NULL; c; c = c->next) df_json_keep_last(c);
    if (cJSON_IsObject(node)) drop_earlier_duplicates(node);
}

const char *df_json_type_name(const cJSON *item) {
    if (!item) return "missing";
    if (cJSON_IsNull(item)) return "null";
    if (cJSON_IsBool(item)) return "a boolean";
    if (cJSON_IsNumber(item)) return "a number";
    if (cJSON_IsString(item)) return "a string";
    if (cJSON_IsArray(item)) return "an array";
    if (cJSON_IsObject(item)) return "an object";
    return "invalid";
}

const cJSON *df_json_field(const cJSON *obj, const char *name) {
    const cJSON *item = obj ? cJSON_GetObjectItemCaseSensitive(obj, name) : NULL;
    return cJSON_IsNull(item) ? NULL : item;
}

int df_json_is_int(const cJSON *item) {
    if (!cJSON_IsNumber(item)) return 0;
    double d = item->valuedouble;
    return isfinite(d) && d == floor(d) && d >= INT_MIN && d <= INT_MAX;
}

/* 1: given (*item set), 0: not given and defaulted, -1: required and missing. */
static int lookup(const DfJsonReader *r, const cJSON *obj, const char *scope, const char *name, int required,
                  const cJSON **item) {
    *item = df_json_field(obj, name);
    if (*item) return 1;
    if (required) return df_fail(r->err, "%s: field '%s%s' is missing", r->path, scope, name);
    return 0;
}

int df_json_read_int(const DfJsonReader *r, const cJSON *obj, const char *scope, const char *name, int required,
                     int fallback, int *out) {
    const cJSON *item;
    int given = lookup(r, obj, scope, name, required, &item);
    if (given <= 0) {
        *out = fallback;
        return given;
    }
    if (cJSON_IsNumber(item) && !df_json_is_int(item) && isfinite(item->valuedouble) &&
        item->valuedouble == floor(item->valuedouble))
        return df_fail(r->err, "%s: field '%s%s' is %.17g, outside the integers supported (%d..%d)", r->path, scope,
                       name, item->valuedouble, INT_MIN, INT_MAX);
    if (cJSON_IsNumber(item) && !df_json_is_int(item))
        return df_fail(r->err, "%s: field '%s%s' must be an integer, not %.17g", r->path, scope, name,
                       item->valuedouble);
    if (!df_json_is_int(item))
        return df_fail(r->err, "%s: field '%s%s' must be an integer, not %s", r->path, scope, name,
                       df_json_type_name(item));
    *out = (int)item->valuedouble;
    return 0;
}

int df_json_read_double(const DfJsonReader *r, const cJSON *obj, const char *scope, const char *name, int required,
                        double fallback, double *out) {
    const cJSON *item;
    int given = lookup(r, obj, scope, name, required, &item);
    if (given <= 0) {
        *out = fallback;
        return given;
    }
    if (cJSON_IsNumber(item) && !isfinite(item->valuedouble))
        return df_fail(r->err, "%s: field '%s%s' is too large for a double (it reads as an infinity)", r->path, scope,
                       name);
    if (!cJSON_IsNumber(item))
        return df_fail(r->err, "%s: field '%s%s' must be a number, not %s", r->path, scope, name,
                       df_json_type_name(item));
    *out = item->valuedouble;
    return 0;
}

int df_json_read_bool(const DfJsonReader *r, const cJSON *obj, const char *scope, const char *name, int fallback,
                      int *out) {
    const cJSON *item = df_json_field(obj, name);
    *out = fallback;
    if (!item) return 0;
    if (!cJSON_IsBool(item))
        return df_fail(r->err, "%s: field '%s%s' must be true or false, not %s", r->path, scope, name,
                       df_json_type_name(item));
    *out = cJSON_IsTrue(item);
    return 0;
}

int df_json_read_string(const DfJsonReader *r, const cJSON *obj, const char *scope, const char *name,
                        const char **out) {
    const cJSON *item = df_json_field(obj, name);
    *out = NULL;
    if (!item) return 0;
    if (!cJSON_IsString(item))
        return df_fail(r->err, "%s: field '%s%s' must be a string, not %s", r->path, scope, name,
                       df_json_type_name(item));
    *out = item->valuestring;
    return 0;
}

int df_json_read_object(const DfJsonReader *r, const cJSON *obj, const char *scope, const char *name,
                        const cJSON **out) {
    *out = df_json_field(obj, name);
    if (*out && !cJSON_IsObject(*out))
        return df_fail(r->err, "%s: field '%s%s' must be an object, not %s", r->path, scope, name,
                       df_json_type_name(*out));
    return 0;
}

int df_json_check_layer_list(const DfJsonReader *r, const cJSON *list, const char *name, int num_layers) {
    if (!cJSON_IsArray(list))
        return df_fail(r->err, "%s: field '%s' must be an array of strings, not %s", r->path, name,
                       df_json_type_name(list));
    int n = cJSON_GetArraySize(list);
    if (n != num_layers)
        return df_fail(r->err, "%s: field '%s' lists %d layers, num_hidden_layers is %d", r->path, name, n,
                       num_layers);
    int i = 0;
    for (const cJSON *t = list->child; t; t = t->next, i++)
        if (!cJSON_IsString(t))
            return df_fail(r->err, "%s: field '%s[%d]' must be a string, not %s", r->path, name, i,
                           df_json_type_name(t));
    return 0;
}
