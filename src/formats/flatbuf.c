/* Bounds-checked FlatBuffers reading (see flatbuf.h). */
#include "formats/flatbuf.h"

#include <string.h>

/* Does [pos, pos + n) lie inside a buffer of `size` bytes? (no overflow) */
static int in_bounds(size_t size, size_t pos, size_t n) {
    return pos <= size && n <= size - pos;
}

static int open_table(const uint8_t *buf, size_t size, size_t pos, DfFbTable *out, DfError *err) {
    if (!in_bounds(size, pos, 4))
        return df_fail(err, "flatbuffer: table at byte %zu lies outside the %zu-byte buffer", pos, size);
    int64_t vtable = (int64_t)pos - (int64_t)(int32_t)df_le_u32(buf + pos);
    if (vtable < 0 || !in_bounds(size, (size_t)vtable, 4))
        return df_fail(err, "flatbuffer: vtable of the table at byte %zu lies outside the %zu-byte buffer", pos, size);
    uint16_t vt_len = df_le_u16(buf + vtable), tb_len = df_le_u16(buf + vtable + 2);
    if (vt_len < 4 || vt_len % 2 || !in_bounds(size, (size_t)vtable, vt_len))
        return df_fail(err, "flatbuffer: bad vtable (%u bytes) at byte %lld", vt_len, (long long)vtable);
    if (tb_len < 4 || !in_bounds(size, pos, tb_len))
        return df_fail(err, "flatbuffer: table at byte %zu (%u bytes) runs past the %zu-byte buffer", pos, tb_len, size);
    *out = (DfFbTable){buf, size, pos, (size_t)vtable, vt_len, tb_len};
    return 0;
}

int df_fb_root(const uint8_t *buf, size_t size, DfFbTable *out, DfError *err) {
    if (!buf || size < 8) return df_fail(err, "flatbuffer: %zu bytes is too short", size);
    return open_table(buf, size, df_le_u32(buf), out, err);
}

/* Position of a field of n bytes: 1 when present, 0 when absent, -1 corrupt. */
static int field_pos(const DfFbTable *t, int field, size_t n, size_t *pos, DfError *err) {
    size_t entry = 4 + 2 * (size_t)field;
    if (field < 0 || entry + 2 > t->vt_len) return 0;
    uint16_t off = df_le_u16(t->buf + t->vtable + entry);
    if (off == 0) return 0;
    if (off < 4 || (size_t)off + n > t->tb_len)
        return df_fail(err, "flatbuffer: field %d of the table at byte %zu lies outside the table", field, t->pos);
    *pos = t->pos + off;
    return 1;
}

static int scalar(const DfFbTable *t, int field, size_t n, uint64_t def, uint64_t *out, DfError *err) {
    size_t pos = 0;
    int rc = field_pos(t, field, n, &pos, err);
    if (rc < 0) return -1;
    if (rc == 0) {
        *out = def;
        return 0;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v |= (uint64_t)t->buf[pos + i] << (8 * i);
    *out = v;
    return 0;
}

int df_fb_u8(const DfFbTable *t, int field, uint8_t def, uint8_t *out, DfError *err) {
    uint64_t v;
    if (scalar(t, field, 1, def, &v, err) < 0) return -1;
    *out = (uint8_t)v;
    return 0;
}

int df_fb_i16(const DfFbTable *t, int field, int16_t def, int16_t *out, DfError *err) {
    uint64_t v;
    if (scalar(t, field, 2, (uint16_t)def, &v, err) < 0) return -1;
    *out = (int16_t)(uint16_t)v;
    return 0;
}

int df_fb_i32(const DfFbTable *t, int field, int32_t def, int32_t *out, DfError *err) {
    uint64_t v;
    if (scalar(t, field, 4, (uint32_t)def, &v, err) < 0) return -1;
    *out = (int32_t)(uint32_t)v;
    return 0;
}

int df_fb_i64(const DfFbTable *t, int field, int64_t def, int64_t *out, DfError *err) {
    uint64_t v;
    if (scalar(t, field, 8, (uint64_t)def, &v, err) < 0) return -1;
    *out = (int64_t)v;
    return 0;
}

/* Follows the u32 offset stored at pos: the absolute target position. */
static int follow(const uint8_t *buf, size_t size, size_t pos, size_t *target, DfError *err) {
    uint64_t to = (uint64_t)pos + df_le_u32(buf + pos);
    if (to >= size) return df_fail(err, "flatbuffer: offset at byte %zu points past the %zu-byte buffer", pos, size);
    *target = (size_t)to;
    return 0;
}

static int offset_field(const DfFbTable *t, int field, size_t *target, DfError *err) {
    size_t pos = 0;
    int rc = field_pos(t, field, 4, &pos, err);
    if (rc <= 0) return rc;
    return follow(t->buf, t->size, pos, target, err) < 0 ? -1 : 1;
}

int df_fb_table(const DfFbTable *t, int field, DfFbTable *out, DfError *err) {
    size_t target = 0;
    int rc = offset_field(t, field, &target, err);
    if (rc <= 0) return rc;
    return open_table(t->buf, t->size, target, out, err) < 0 ? -1 : 1;
}

int df_fb_vector(const DfFbTable *t, int field, size_t elem_size, DfFbVector *out, DfError *err) {
    size_t target = 0;
    int rc = offset_field(t, field, &target, err);
    if (rc <= 0) return rc;
    if (!in_bounds(t->size, target, 4))
        return df_fail(err, "flatbuffer: vector at byte %zu lies outside the buffer", target);
    uint32_t len = df_le_u32(t->buf + target);
    if ((uint64_t)len * elem_size > t->size - target - 4)
        return df_fail(err, "flatbuffer: vector of %u elements at byte %zu runs past the %zu-byte buffer", len, target,
                       t->size);
    *out = (DfFbVector){t->buf, t->size, target + 4, len};
    return 1;
}

int df_fb_string(const DfFbTable *t, int field, const char **s, size_t *len, DfError *err) {
    DfFbVector v;
    int rc = df_fb_vector(t, field, 1, &v, err);
    if (rc <= 0) return rc;
    *s = (const char *)v.buf + v.pos;
    *len = v.len;
    return 1;
}

int df_fb_vector_table(const DfFbVector *v, uint32_t i, DfFbTable *out, DfError *err) {
    if (i >= v->len) return df_fail(err, "flatbuffer: element %u of a %u-element vector", i, v->len);
    size_t target = 0;
    if (follow(v->buf, v->size, v->pos + (size_t)i * 4, &target, err) < 0) return -1;
    return open_table(v->buf, v->size, target, out, err);
}
