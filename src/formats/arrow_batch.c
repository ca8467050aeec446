/* One Arrow record batch: field nodes and buffers (decompressed when the body
 * is compressed) -> validated DfArrowArray trees; and the cell accessors. */
#include <lz4frame.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "formats/arrow_internal.h"

enum { RB_LENGTH = 0, RB_NODES = 1, RB_BUFFERS = 2, RB_COMPRESSION = 3 };
enum { CODEC_NONE = -1, CODEC_LZ4_FRAME = 0, CODEC_ZSTD = 1 };
/* No batch array may claim more elements than this (keeps size arithmetic far from overflow). */
#define MAX_ELEMENTS ((int64_t)1 << 40)
#define MAX_BUFFER ((int64_t)1 << 38)

/* ---- batch memory ------------------------------------------------------- */

/* Hands heap block p to the batch's memory, which frees it with the batch. */
static void *memory_adopt(DfArrowBatchMemory *m, void *p) {
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 16;
        m->blocks = df_xrealloc(m->blocks, m->cap * sizeof *m->blocks, "arrow batch memory");
    }
    m->blocks[m->n++] = p;
    return p;
}

void *df_arrow_memory_alloc(DfArrowBatchMemory *m, size_t bytes) {
    return memory_adopt(m, df_xcalloc(1, bytes ? bytes : 1, "arrow batch buffer"));
}

void df_arrow_memory_release(DfArrowBatchMemory *m) {
    for (size_t i = 0; i < m->n; i++) free(m->blocks[i]);
    m->n = 0;
}

void df_arrow_memory_free(DfArrowBatchMemory *m) {
    df_arrow_memory_release(m);
    free(m->blocks);
    memset(m, 0, sizeof *m);
}

/* ---- decoding ------------------------------------------------------------ */

typedef struct Decoder {
    const uint8_t *body;
    size_t body_size;
    DfFbVector nodes, buffers;
    uint32_t next_node, next_buffer;
    int codec;
    DfArrowBatchMemory *mem;
    uint64_t data_bytes; /* of every buffer read so far, decompressed */
} Decoder;

typedef struct Buffer {
    const uint8_t *data;
    size_t size;
} Buffer;

/* Checks an announced uncompressed size against what the frame header says
 * (or, for an LZ4 frame without a content size, against LZ4's largest
 * possible ratio) before anything is allocated for it. */
static int check_raw_size(const Decoder *d, const uint8_t *src, size_t n, int64_t raw, DfError *err) {
    if (d->codec == CODEC_ZSTD) {
        unsigned long long content = ZSTD_getFrameContentSize(src, n);
        if (content == ZSTD_CONTENTSIZE_ERROR) return df_fail(err, "ZSTD: not a ZSTD frame");
        if (content != ZSTD_CONTENTSIZE_UNKNOWN && content != (unsigned long long)raw)
            return df_fail(err, "ZSTD: frame holds %llu bytes where %lld were announced", content, (long long)raw);
        return 0;
    }
    LZ4F_dctx *ctx;
    if (LZ4F_isError(LZ4F_createDecompressionContext(&ctx, LZ4F_VERSION))) return df_fail(err, "LZ4: out of memory");
    LZ4F_frameInfo_t info;
    size_t consumed = n;
    size_t rc = LZ4F_getFrameInfo(ctx, &info, src, &consumed);
    LZ4F_freeDecompressionContext(ctx);
    if (LZ4F_isError(rc)) return df_fail(err, "LZ4 frame: %s", LZ4F_getErrorName(rc));
    if (info.contentSize != 0 && info.contentSize != (unsigned long long)raw)
        return df_fail(err, "LZ4 frame holds %llu bytes where %lld were announced", info.contentSize, (long long)raw);
    if (info.contentSize == 0 && (uint64_t)raw > 256 * (uint64_t)n + 65536)
        return df_fail(err, "LZ4 frame of %zu bytes cannot hold the %lld bytes announced", n, (long long)raw);
    return 0;
}

/* The output of a decompression, grown as the data comes out rather than
 * allocated at the announced size up front: a frame header may announce up
 * to MAX_BUFFER bytes for data that holds a few (found by fuzz_arrow: 2.7 GB
 * for a 1.3 KB input), so memory follows what the frame really yields. */
typedef struct Output {
    uint8_t *data;
    size_t pos, cap, want; /* written, allocated, announced */
} Output;

/* Room for more output (to `first` bytes at the start, then twice as much
 * each time), up to the announced size; 0 when there is none left to give. */
static int output_grow(Output *o, size_t first) {
    if (o->cap == o->want) return 0;
    size_t cap = o->cap ? 2 * o->cap : first;
    o->cap = cap < o->want ? cap : o->want;
    o->data = df_xrealloc(o->data, o->cap, "arrow batch buffer");
    return 1;
}

static int decompress_zstd(const uint8_t *src, size_t n, Output *o, DfError *err) {
    ZSTD_DCtx *z = ZSTD_createDCtx();
    if (!z) return df_fail(err, "ZSTD: out of memory");
    ZSTD_inBuffer in = {src, n, 0};
    int rc = 0;
    for (size_t left = 1; rc == 0 && (left != 0 || in.pos < in.size);) {
        size_t in0 = in.pos, out0 = o->pos;
        ZSTD_outBuffer out = {o->data, o->cap, o->pos};
        left = ZSTD_decompressStream(z, &out, &in);
        o->pos = out.pos;
        if (ZSTD_isError(left)) rc = df_fail(err, "ZSTD: %s", ZSTD_getErrorName(left));
        else if (in.pos == in0 && o->pos == out0 && (o->pos < o->cap || !output_grow(o, 0)))
            rc = df_fail(err, o->pos < o->cap ? "ZSTD: truncated data" : "ZSTD: more than the %zu bytes announced",
                         o->want);
    }
    ZSTD_freeDCtx(z);
    return rc;
}

static int decompress_lz4(const uint8_t *src, size_t n, Output *o, DfError *err) {
    LZ4F_dctx *ctx;
    if (LZ4F_isError(LZ4F_createDecompressionContext(&ctx, LZ4F_VERSION))) return df_fail(err, "LZ4: out of memory");
    size_t done_in = 0, hint = 1;
    int rc = 0;
    while (hint != 0 && rc == 0) {
        size_t in_n = n - done_in, out_n = o->cap - o->pos;
        hint = LZ4F_decompress(ctx, o->data + o->pos, &out_n, src + done_in, &in_n, NULL);
        if (LZ4F_isError(hint)) rc = df_fail(err, "LZ4 frame: %s", LZ4F_getErrorName(hint));
        else if (in_n == 0 && out_n == 0 && hint != 0 && (o->pos < o->cap || !output_grow(o, 0)))
            rc = df_fail(err, "LZ4 frame: truncated data");
        done_in += in_n;
        o->pos += out_n;
    }
    LZ4F_freeDecompressionContext(ctx);
    return rc;
}

/* The n bytes at src decompressed to exactly out_size bytes, in the batch's memory at *out. */
static int decompress(const Decoder *d, const uint8_t *src, size_t n, size_t out_size, uint8_t **out, DfError *err) {
    Output o = {df_xmalloc(1, "arrow batch buffer"), 0, 0, out_size}; /* never NULL, even for 0 bytes */
    /* enough at the start for any ordinary ratio, so that real data takes one allocation */
    output_grow(&o, n < SIZE_MAX / 64 && 64 * n > 65536 ? 64 * n : 65536);
    int rc = d->codec == CODEC_ZSTD ? decompress_zstd(src, n, &o, err) : decompress_lz4(src, n, &o, err);
    if (rc == 0 && o.pos != out_size)
        rc = df_fail(err, "%s: %zu bytes where %zu were announced", d->codec == CODEC_ZSTD ? "ZSTD" : "LZ4 frame", o.pos,
                     out_size);
    if (rc < 0) {
        free(o.data);
        return rc;
    }
    *out = memory_adopt(d->mem, o.data);
    return 0;
}

static int next_buffer(Decoder *d, Buffer *out, DfError *err) {
    if (d->next_buffer >= d->buffers.len) return df_fail(err, "record batch has too few buffers (%u)", d->buffers.len);
    uint32_t k = d->next_buffer++;
    const uint8_t *b = df_fb_vector_elem(&d->buffers, k, 16);
    int64_t off = (int64_t)df_le_u64(b), len = (int64_t)df_le_u64(b + 8);
    if (off < 0 || len < 0 || (uint64_t)off > d->body_size || (uint64_t)len > d->body_size - (uint64_t)off)
        return df_fail(err, "buffer %u (offset %lld, length %lld) lies outside the %zu-byte message body", k,
                       (long long)off, (long long)len, d->body_size);
    out->data = d->body + off;
    out->size = (size_t)len;
    if (d->codec == CODEC_NONE || len == 0) {
        d->data_bytes += (uint64_t)len;
        return 0;
    }
    if (len < 8) return df_fail(err, "compressed buffer %u is %lld bytes, shorter than its length prefix", k, (long long)len);
    int64_t raw = (int64_t)df_le_u64(out->data);
    if (raw == -1) { /* stored uncompressed */
        out->data += 8, out->size -= 8;
        d->data_bytes += out->size;
        return 0;
    }
    if (raw < 0 || raw > MAX_BUFFER) return df_fail(err, "compressed buffer %u announces %lld bytes", k, (long long)raw);
    if (check_raw_size(d, out->data + 8, out->size - 8, raw, err) < 0) return df_context(err, "buffer %u", k);
    uint8_t *dst;
    if (decompress(d, out->data + 8, out->size - 8, (size_t)raw, &dst, err) < 0) return df_context(err, "buffer %u", k);
    out->data = dst;
    out->size = (size_t)raw;
    d->data_bytes += (uint64_t)raw;
    return 0;
}

static int64_t offset_at(const DfArrowArray *a, int64_t i) {
    if (a->field->is_large) {
        int64_t v;
        memcpy(&v, a->offsets + 8 * i, 8);
        return v;
    }
    int32_t v;
    memcpy(&v, a->offsets + 4 * i, 4);
    return v;
}

/* Offsets: length + 1 of them, non-decreasing, from >= 0 up to <= limit. */
static int check_offsets(const DfArrowArray *a, Buffer b, int64_t limit, DfError *err) {
    size_t width = a->field->is_large ? 8 : 4;
    if (a->length == 0) return 0;
    if (b.size / width < (size_t)a->length + 1)
        return df_fail(err, "column \"%s\": offsets buffer of %zu bytes for %lld values", a->field->name, b.size,
                       (long long)a->length);
    int64_t prev = offset_at(a, 0);
    if (prev < 0) return df_fail(err, "column \"%s\": negative first offset", a->field->name);
    for (int64_t i = 1; i <= a->length; i++) {
        int64_t v = offset_at(a, i);
        if (v < prev) return df_fail(err, "column \"%s\": offsets decrease at %lld", a->field->name, (long long)i);
        prev = v;
    }
    if (prev > limit)
        return df_fail(err, "column \"%s\": offset %lld is past the end of its %lld-element data", a->field->name,
                       (long long)prev, (long long)limit);
    return 0;
}

static int decode_array(Decoder *d, const DfArrowField *f, int depth, DfArrowArray *a, DfError *err);

static int decode_children(Decoder *d, const DfArrowField *f, int depth, DfArrowArray *a, DfError *err) {
    if (!f->n_children) return 0;
    a->children = df_arrow_memory_alloc(d->mem, (size_t)f->n_children * sizeof *a->children);
    for (int c = 0; c < f->n_children; c++)
        if (decode_array(d, &f->children[c], depth + 1, &a->children[c], err) < 0) return -1;
    return 0;
}

static int read_node(Decoder *d, const DfArrowField *f, DfArrowArray *a, DfError *err) {
    if (d->next_node >= d->nodes.len) return df_fail(err, "record batch has too few field nodes (%u)", d->nodes.len);
    const uint8_t *n = df_fb_vector_elem(&d->nodes, d->next_node++, 16);
    a->field = f;
    a->length = (int64_t)df_le_u64(n);
    a->null_count = (int64_t)df_le_u64(n + 8);
    if (a->length < 0 || a->length > MAX_ELEMENTS || a->null_count < 0 || a->null_count > a->length)
        return df_fail(err, "column \"%s\": bad field node (length %lld, null count %lld)", f->name,
                       (long long)a->length, (long long)a->null_count);
    return 0;
}

static int decode_array(Decoder *d, const DfArrowField *f, int depth, DfArrowArray *a, DfError *err) {
    if (depth > DF_ARROW_MAX_DEPTH) return df_fail(err, "arrays nested too deep");
    if (read_node(d, f, a, err) < 0) return -1;
    Buffer b[3] = {{0}};
    for (int k = 0; k < f->n_buffers; k++)
        if (next_buffer(d, &b[k], err) < 0) return df_context(err, "column \"%s\"", f->name);
    if (f->n_buffers > 0 && a->null_count > 0 && f->type_id != DF_ARROW_T_NULL) {
        if (b[0].size < (size_t)(a->length + 7) / 8)
            return df_fail(err, "column \"%s\": validity bitmap of %zu bytes for %lld values", f->name, b[0].size,
                           (long long)a->length);
        a->validity = b[0].data;
    }
    if (decode_children(d, f, depth, a, err) < 0) return -1;
    switch (f->kind) {
    case DF_ARROW_INT:
        if (b[1].size / (size_t)(f->bit_width / 8) < (size_t)a->length)
            return df_fail(err, "column \"%s\": data buffer of %zu bytes for %lld int%d values", f->name, b[1].size,
                           (long long)a->length, f->bit_width);
        a->values = b[1].data, a->values_size = b[1].size;
        return 0;
    case DF_ARROW_STRING:
        a->offsets = b[1].data, a->values = b[2].data, a->values_size = b[2].size;
        return check_offsets(a, b[1], (int64_t)b[2].size, err);
    case DF_ARROW_LIST:
        a->offsets = b[1].data;
        return check_offsets(a, b[1], a->children[0].length, err);
    case DF_ARROW_STRUCT:
        for (int c = 0; c < f->n_children; c++)
            if (a->children[c].length < a->length)
                return df_fail(err, "column \"%s\": field \"%s\" has %lld values for %lld rows", f->name,
                               f->children[c].name, (long long)a->children[c].length, (long long)a->length);
        return 0;
    default:
        return 0;
    }
}

/* The longest array in the tree rooted at a. */
static int64_t longest_array(const DfArrowArray *a) {
    int64_t n = a->length;
    for (int c = 0; a->children && c < a->field->n_children; c++) {
        int64_t k = longest_array(&a->children[c]);
        if (k > n) n = k;
    }
    return n;
}

/* Every element of a readable array is backed by at least one bit of data
 * (ints and offsets by bytes); arrays that carry none (structs, null-typed
 * columns) could announce any length, and whoever walks them would spin for
 * hours over nothing. So no array may be longer than 8 per byte of the
 * batch's decompressed data, plus a floor for small batches of nulls. */
static int check_lengths_backed(const Decoder *d, const DfArrowSchema *schema, const DfArrowBatch *out,
                                DfError *err) {
    int64_t cap = 8 * (int64_t)(d->data_bytes > (uint64_t)MAX_ELEMENTS ? (uint64_t)MAX_ELEMENTS : d->data_bytes) + 4096;
    for (int c = 0; c < schema->n_fields; c++) {
        int64_t n = longest_array(&out->columns[c]);
        if (n > cap)
            return df_fail(err, "column \"%s\": %lld values, but the record batch holds only %llu bytes of data",
                           schema->fields[c].name, (long long)n, (unsigned long long)d->data_bytes);
    }
    return 0;
}

static int read_codec(const DfFbTable *rb, int *codec, DfError *err) {
    DfFbTable comp;
    int rc = df_fb_table(rb, RB_COMPRESSION, &comp, err);
    *codec = CODEC_NONE;
    if (rc <= 0) return rc;
    uint8_t c, method;
    if (df_fb_u8(&comp, 0, 0, &c, err) < 0 || df_fb_u8(&comp, 1, 0, &method, err) < 0) return -1;
    if (c > CODEC_ZSTD) return df_fail(err, "unknown body compression codec %u", c);
    if (method != 0) return df_fail(err, "unknown body compression method %u", method);
    *codec = c;
    return 0;
}

int df_arrow_decode_batch(const DfFbTable *rb, const uint8_t *body, size_t body_size, const DfArrowSchema *schema,
                          DfArrowBatchMemory *mem, DfArrowBatch *out, int *codec_out, DfError *err) {
    Decoder d = {.body = body, .body_size = body_size, .mem = mem};
    int64_t length;
    if (df_fb_i64(rb, RB_LENGTH, 0, &length, err) < 0 || read_codec(rb, &d.codec, err) < 0) return -1;
    if (length < 0 || length > MAX_ELEMENTS) return df_fail(err, "record batch of %lld rows", (long long)length);
    if (df_fb_vector(rb, RB_NODES, 16, &d.nodes, err) < 0 || df_fb_vector(rb, RB_BUFFERS, 16, &d.buffers, err) < 0)
        return -1;
    *codec_out = d.codec;
    out->length = length;
    out->n_columns = schema->n_fields;
    out->columns = df_arrow_memory_alloc(mem, (size_t)(schema->n_fields ? schema->n_fields : 1) * sizeof *out->columns);
    for (int c = 0; c < schema->n_fields; c++) {
        if (decode_array(&d, &schema->fields[c], 0, &out->columns[c], err) < 0) return -1;
        if (out->columns[c].length < length)
            return df_fail(err, "column \"%s\" has %lld values for %lld rows", schema->fields[c].name,
                           (long long)out->columns[c].length, (long long)length);
    }
    return check_lengths_backed(&d, schema, out, err);
}

/* ---- accessors ------------------------------------------------------------ */

int64_t df_arrow_int(const DfArrowArray *a, int64_t i) {
    const uint8_t *p = a->values + (size_t)i * (size_t)(a->field->bit_width / 8);
    int s = a->field->is_signed;
    switch (a->field->bit_width) {
    case 8: return s ? (int64_t)(int8_t)p[0] : (int64_t)p[0];
    case 16: { uint16_t v = df_le_u16(p); return s ? (int64_t)(int16_t)v : (int64_t)v; }
    case 32: { uint32_t v = df_le_u32(p); return s ? (int64_t)(int32_t)v : (int64_t)v; }
    default: return (int64_t)df_le_u64(p); /* uint64 above INT64_MAX wraps: callers range-check ids */
    }
}

const char *df_arrow_string(const DfArrowArray *a, int64_t i, size_t *len) {
    int64_t start = offset_at(a, i), end = offset_at(a, i + 1);
    *len = (size_t)(end - start);
    return (const char *)a->values + start;
}

void df_arrow_list_range(const DfArrowArray *a, int64_t i, int64_t *start, int64_t *end) {
    *start = offset_at(a, i);
    *end = offset_at(a, i + 1);
}
