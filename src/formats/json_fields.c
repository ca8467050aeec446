#include "formats/json_fields.h"

#include <limits.h>
#include <math.h>

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
    if (cJSON_IsNumber(item) && !df_json_is_int(item))
        return df_fail(r->err, "%s: field '%s%s' must be an integer, not %g", r->path, scope, name, item->valuedouble);
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
    if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble))
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
