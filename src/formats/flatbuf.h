/* A bounds-checked reader for FlatBuffers binary data (the metadata format of
 * Arrow IPC), written for untrusted input: every offset, vtable and vector is
 * checked against the buffer before it is read, so a corrupt buffer gives an
 * error, never an out-of-bounds read. Only what Arrow needs: tables, scalar
 * fields, sub-tables, unions (as tables), strings, and vectors of tables,
 * scalars or fixed-size structs.
 *
 * Layout reminders (all little-endian): a buffer starts with a u32 offset to
 * the root table; a table starts with an i32 that, subtracted from the
 * table's position, gives its vtable; a vtable is u16 vtable size, u16 table
 * size, then one u16 per field: the field's offset inside the table (0 =
 * absent). Offset-typed fields hold a u32 relative to the field's own
 * position; vectors and strings start with a u32 element count. */
#ifndef DF_FORMATS_FLATBUF_H
#define DF_FORMATS_FLATBUF_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct DfFbTable {
    const uint8_t *buf;
    size_t size;     /* of the whole buffer */
    size_t pos;      /* of the table */
    size_t vtable;   /* position of its vtable */
    uint16_t vt_len; /* vtable size in bytes */
    uint16_t tb_len; /* table (inline part) size in bytes */
} DfFbTable;

typedef struct DfFbVector {
    const uint8_t *buf;
    size_t size;
    size_t pos;   /* of the first element */
    uint32_t len; /* elements */
} DfFbVector;

/* The root table of buf[0..size). */
int df_fb_root(const uint8_t *buf, size_t size, DfFbTable *out, DfError *err);

/* Scalar fields: the field's value, or def when it is absent. -1 on a field
 * that lies outside its table or buffer. */
int df_fb_u8(const DfFbTable *t, int field, uint8_t def, uint8_t *out, DfError *err);
int df_fb_i16(const DfFbTable *t, int field, int16_t def, int16_t *out, DfError *err);
int df_fb_i32(const DfFbTable *t, int field, int32_t def, int32_t *out, DfError *err);
int df_fb_i64(const DfFbTable *t, int field, int64_t def, int64_t *out, DfError *err);

/* Offset fields: 1 and *out set when present, 0 when absent, -1 when corrupt. */
int df_fb_table(const DfFbTable *t, int field, DfFbTable *out, DfError *err);
int df_fb_string(const DfFbTable *t, int field, const char **s, size_t *len, DfError *err);
/* A vector of elem_size-byte elements (4 for tables: their offsets). */
int df_fb_vector(const DfFbTable *t, int field, size_t elem_size, DfFbVector *out, DfError *err);

/* Element i of a vector of tables. */
int df_fb_vector_table(const DfFbVector *v, uint32_t i, DfFbTable *out, DfError *err);
/* Bytes of element i of a vector of elem_size-byte structs or scalars
 * (already bounds-checked by df_fb_vector). */
static inline const uint8_t *df_fb_vector_elem(const DfFbVector *v, uint32_t i, size_t elem_size) {
    return v->buf + v->pos + (size_t)i * elem_size;
}

/* Little-endian loads from possibly unaligned memory. */
static inline uint16_t df_le_u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t df_le_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t df_le_u64(const uint8_t *p) { return (uint64_t)df_le_u32(p) | (uint64_t)df_le_u32(p + 4) << 32; }

#endif
