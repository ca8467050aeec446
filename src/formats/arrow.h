/* Reading Apache Arrow IPC data: the streaming format (what Hugging Face
 * `datasets` writes, one .arrow file per shard) and the random-access file
 * format ("ARROW1" magic and a footer), with LZ4-frame or ZSTD compressed
 * bodies, validity bitmaps, and several record batches.
 *
 * Column types read: signed and unsigned integers of 8..64 bits, utf8 and
 * binary (and their large variants), list and large_list, struct, nested in
 * any way (e.g. list<struct<role: string, content: string>>). Columns of other
 * types are described in the schema (their type name) and their buffers are
 * skipped; dictionary-encoded columns, unions and views are refused.
 *
 * Safety: the file is memory-mapped and treated as untrusted. The flatbuffer
 * metadata is read through src/formats/flatbuf.h; every buffer and offset of a
 * batch is checked (buffer inside the body, body inside the file, sizes enough
 * for the node's length, offsets non-decreasing and inside their data) before
 * a batch is handed out, so the accessors below never read out of bounds for
 * indices below the array's length. Errors name the file. */
#ifndef DF_FORMATS_ARROW_H
#define DF_FORMATS_ARROW_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef enum DfArrowKind {
    DF_ARROW_INT,    /* any bit width, signed or not */
    DF_ARROW_STRING, /* utf8, large_utf8, binary, large_binary */
    DF_ARROW_LIST,   /* list, large_list: one child */
    DF_ARROW_STRUCT, /* children by name */
    DF_ARROW_OTHER   /* described, not readable */
} DfArrowKind;

typedef struct DfArrowField {
    char *name;
    DfArrowKind kind;
    uint8_t type_id;   /* the Arrow Type union tag */
    int bit_width;     /* DF_ARROW_INT */
    int is_signed;     /* DF_ARROW_INT */
    int is_large;      /* 64-bit offsets (large_utf8/binary/list) */
    int is_utf8;       /* DF_ARROW_STRING: utf8 rather than binary */
    int nullable;
    int n_buffers;     /* buffers this field's node owns in a batch */
    int n_children;
    struct DfArrowField *children;
} DfArrowField;

typedef struct DfArrowSchema {
    int n_fields;
    DfArrowField *fields;
} DfArrowSchema;

/* One column (or nested child) of a record batch. */
typedef struct DfArrowArray {
    const DfArrowField *field;
    int64_t length, null_count;
    const uint8_t *validity; /* NULL when no value is null */
    const uint8_t *offsets;  /* STRING, LIST: length + 1 offsets of 4 or 8 bytes */
    const uint8_t *values;   /* INT: length values; STRING: the bytes */
    size_t values_size;
    struct DfArrowArray *children; /* field->n_children of them */
} DfArrowArray;

typedef struct DfArrowBatch {
    int64_t length; /* rows */
    int n_columns;
    DfArrowArray *columns;
} DfArrowBatch;

typedef struct DfArrowReader DfArrowReader;

/* Opens an .arrow file of either format (told apart by the magic). */
DfArrowReader *df_arrow_open(const char *path, DfError *err);
void df_arrow_close(DfArrowReader *r);

const DfArrowSchema *df_arrow_schema(const DfArrowReader *r);
const char *df_arrow_path(const DfArrowReader *r);
int df_arrow_is_file_format(const DfArrowReader *r);
/* "none", "lz4" or "zstd": the compression of the last batch read. */
const char *df_arrow_compression(const DfArrowReader *r);

/* Reads the next record batch: 1 and *batch (valid until the next call or
 * close), 0 at the end, -1 on error. */
int df_arrow_next_batch(DfArrowReader *r, const DfArrowBatch **batch, DfError *err);

/* ---- schema helpers ---------------------------------------------------- */

/* Index of the top-level column called name, or -1. */
int df_arrow_schema_find(const DfArrowSchema *s, const char *name);
/* Index of the child called name, or -1. */
int df_arrow_field_find_child(const DfArrowField *f, const char *name);
/* The type as text, e.g. "list<struct<role: string, content: string>>". */
void df_arrow_type_string(const DfArrowField *f, char *buf, size_t cap);

/* ---- cell accessors: i must be in [0, a->length) ------------------------ */

static inline int df_arrow_is_null(const DfArrowArray *a, int64_t i) {
    return a->validity && !(a->validity[i >> 3] >> (i & 7) & 1);
}
int64_t df_arrow_int(const DfArrowArray *a, int64_t i);
/* The bytes of a string cell (not NUL-terminated). */
const char *df_arrow_string(const DfArrowArray *a, int64_t i, size_t *len);
/* A list cell is children[0] elements [*start, *end). */
void df_arrow_list_range(const DfArrowArray *a, int64_t i, int64_t *start, int64_t *end);

#endif
