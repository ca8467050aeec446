/* The Arrow schema: Schema / Field / type tables -> DfArrowField trees. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/arrow_internal.h"

/* Field table slots (Schema.fbs). */
enum { FIELD_NAME = 0, FIELD_NULLABLE = 1, FIELD_TYPE_TYPE = 2, FIELD_TYPE = 3, FIELD_DICTIONARY = 4, FIELD_CHILDREN = 5 };
enum { SCHEMA_ENDIANNESS = 0, SCHEMA_FIELDS = 1 };

static const char *const TYPE_NAMES[DF_ARROW_T_TYPE_MAX + 1] = {
    "none",   "null",     "int",       "float",    "binary",       "string",        "bool",
    "decimal", "date",    "time",      "timestamp", "interval",    "list",          "struct",
    "union",  "fixed_size_binary", "fixed_size_list", "map", "duration", "large_binary", "large_string", "large_list"};

/* Kind and buffer count of a type tag; -1 for types the reader refuses. */
static int classify(DfArrowField *f, DfError *err) {
    switch (f->type_id) {
    case DF_ARROW_T_NULL: f->kind = DF_ARROW_OTHER, f->n_buffers = 0; return 0;
    case DF_ARROW_T_INT: f->kind = DF_ARROW_INT, f->n_buffers = 2; return 0;
    case DF_ARROW_T_UTF8: case DF_ARROW_T_BINARY: case DF_ARROW_T_LARGE_UTF8: case DF_ARROW_T_LARGE_BINARY:
        f->kind = DF_ARROW_STRING, f->n_buffers = 3;
        f->is_large = f->type_id == DF_ARROW_T_LARGE_UTF8 || f->type_id == DF_ARROW_T_LARGE_BINARY;
        f->is_utf8 = f->type_id == DF_ARROW_T_UTF8 || f->type_id == DF_ARROW_T_LARGE_UTF8;
        return 0;
    case DF_ARROW_T_LIST: case DF_ARROW_T_LARGE_LIST:
        f->kind = DF_ARROW_LIST, f->n_buffers = 2, f->is_large = f->type_id == DF_ARROW_T_LARGE_LIST;
        return 0;
    case DF_ARROW_T_STRUCT: f->kind = DF_ARROW_STRUCT, f->n_buffers = 1; return 0;
    case DF_ARROW_T_FIXED_LIST: f->kind = DF_ARROW_OTHER, f->n_buffers = 1; return 0;
    case DF_ARROW_T_MAP: f->kind = DF_ARROW_OTHER, f->n_buffers = 2; return 0;
    case DF_ARROW_T_FLOAT: case DF_ARROW_T_BOOL: case DF_ARROW_T_DECIMAL: case DF_ARROW_T_DATE: case DF_ARROW_T_TIME:
    case DF_ARROW_T_TIMESTAMP: case DF_ARROW_T_INTERVAL: case DF_ARROW_T_FIXED_BINARY: case DF_ARROW_T_DURATION:
        f->kind = DF_ARROW_OTHER, f->n_buffers = 2;
        return 0;
    default:
        return df_fail(err, "column \"%s\": unsupported Arrow type (tag %u: union, view or run-end encoded)", f->name,
                       f->type_id);
    }
}

static int parse_int_type(const DfFbTable *field, DfArrowField *f, DfError *err) {
    DfFbTable t;
    int rc = df_fb_table(field, FIELD_TYPE, &t, err);
    if (rc < 0) return -1;
    if (rc == 0) return df_fail(err, "column \"%s\": Int type without its table", f->name);
    int32_t width;
    uint8_t is_signed;
    if (df_fb_i32(&t, 0, 0, &width, err) < 0 || df_fb_u8(&t, 1, 0, &is_signed, err) < 0) return -1;
    if (width != 8 && width != 16 && width != 32 && width != 64)
        return df_fail(err, "column \"%s\": integer bit width %d", f->name, width);
    f->bit_width = width;
    f->is_signed = is_signed != 0;
    return 0;
}

static void field_free(DfArrowField *f) {
    for (int i = 0; i < f->n_children; i++) field_free(&f->children[i]);
    free(f->children);
    free(f->name);
}

static int parse_field(const DfFbTable *t, int depth, DfArrowField *f, DfError *err);

static int parse_children(const DfFbTable *t, int depth, DfArrowField *f, DfError *err) {
    DfFbVector kids;
    int rc = df_fb_vector(t, FIELD_CHILDREN, 4, &kids, err);
    if (rc < 0) return -1;
    uint32_t n = rc ? kids.len : 0;
    int want = f->kind == DF_ARROW_LIST || f->type_id == DF_ARROW_T_FIXED_LIST || f->type_id == DF_ARROW_T_MAP ? 1 : -1;
    if (want == 1 && n != 1) return df_fail(err, "column \"%s\": a list type with %u children", f->name, n);
    if (f->kind != DF_ARROW_STRUCT && want != 1 && n != 0)
        return df_fail(err, "column \"%s\": a %s with %u children", f->name, TYPE_NAMES[f->type_id], n);
    if (n > 65536) return df_fail(err, "column \"%s\": %u children", f->name, n);
    f->children = n ? df_xcalloc(n, sizeof *f->children, "arrow fields") : NULL;
    for (uint32_t i = 0; i < n; i++) {
        DfFbTable child;
        if (df_fb_vector_table(&kids, i, &child, err) < 0) return -1;
        f->n_children = (int)i + 1;
        if (parse_field(&child, depth + 1, &f->children[i], err) < 0)
            return df_context(err, "column \"%s\"", f->name);
    }
    return 0;
}

static int parse_field(const DfFbTable *t, int depth, DfArrowField *f, DfError *err) {
    if (depth > DF_ARROW_MAX_DEPTH) return df_fail(err, "fields nested more than %d deep", DF_ARROW_MAX_DEPTH);
    const char *name = "";
    size_t len = 0;
    if (df_fb_string(t, FIELD_NAME, &name, &len, err) < 0) return -1;
    f->name = df_xmalloc(len + 1, "arrow field name");
    memcpy(f->name, name, len);
    f->name[len] = '\0';
    uint8_t nullable, type_id;
    if (df_fb_u8(t, FIELD_NULLABLE, 0, &nullable, err) < 0 || df_fb_u8(t, FIELD_TYPE_TYPE, 0, &type_id, err) < 0)
        return -1;
    f->nullable = nullable != 0;
    f->type_id = type_id;
    DfFbTable dict;
    int rc = df_fb_table(t, FIELD_DICTIONARY, &dict, err);
    if (rc < 0) return -1;
    if (rc > 0) return df_fail(err, "column \"%s\": dictionary-encoded columns are not supported", f->name);
    if (classify(f, err) < 0) return -1;
    if (f->kind == DF_ARROW_INT && parse_int_type(t, f, err) < 0) return -1;
    return parse_children(t, depth, f, err);
}

void df_arrow_schema_free(DfArrowSchema *s) {
    for (int i = 0; i < s->n_fields; i++) field_free(&s->fields[i]);
    free(s->fields);
    memset(s, 0, sizeof *s);
}

int df_arrow_parse_schema(const DfFbTable *schema, DfArrowSchema *out, DfError *err) {
    memset(out, 0, sizeof *out);
    int16_t endianness;
    if (df_fb_i16(schema, SCHEMA_ENDIANNESS, 0, &endianness, err) < 0) return -1;
    if (endianness != 0) return df_fail(err, "big-endian Arrow data is not supported");
    DfFbVector fields;
    int rc = df_fb_vector(schema, SCHEMA_FIELDS, 4, &fields, err);
    if (rc < 0) return -1;
    uint32_t n = rc ? fields.len : 0;
    if (n > 65536) return df_fail(err, "schema with %u columns", n);
    out->fields = n ? df_xcalloc(n, sizeof *out->fields, "arrow schema") : NULL;
    for (uint32_t i = 0; i < n; i++) {
        DfFbTable t;
        out->n_fields = (int)i + 1;
        if (df_fb_vector_table(&fields, i, &t, err) < 0 || parse_field(&t, 0, &out->fields[i], err) < 0) {
            df_context(err, "schema column %u", i);
            df_arrow_schema_free(out);
            return -1;
        }
    }
    return 0;
}

int df_arrow_schema_find(const DfArrowSchema *s, const char *name) {
    for (int i = 0; i < s->n_fields; i++)
        if (strcmp(s->fields[i].name, name) == 0) return i;
    return -1;
}

int df_arrow_field_find_child(const DfArrowField *f, const char *name) {
    for (int i = 0; i < f->n_children; i++)
        if (strcmp(f->children[i].name, name) == 0) return i;
    return -1;
}

static size_t type_string(const DfArrowField *f, char *buf, size_t cap, size_t at) {
#define PUT(...) (at += (size_t)snprintf(buf + (at < cap ? at : cap), at < cap ? cap - at : 0, __VA_ARGS__))
    if (f->kind == DF_ARROW_INT) {
        PUT("%sint%d", f->is_signed ? "" : "u", f->bit_width);
    } else if (f->type_id <= DF_ARROW_T_TYPE_MAX) {
        PUT("%s", TYPE_NAMES[f->type_id]);
    } else {
        PUT("type%u", f->type_id);
    }
    if (f->n_children) {
        PUT("<");
        for (int i = 0; i < f->n_children; i++) {
            if (i) PUT(", ");
            if (f->kind == DF_ARROW_STRUCT) PUT("%s: ", f->children[i].name);
            at = type_string(&f->children[i], buf, cap, at);
        }
        PUT(">");
    }
    return at;
#undef PUT
}

void df_arrow_type_string(const DfArrowField *f, char *buf, size_t cap) {
    if (cap == 0) return;
    buf[0] = '\0';
    type_string(f, buf, cap, 0);
}
