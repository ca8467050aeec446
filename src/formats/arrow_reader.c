/* Arrow IPC framing: the streaming format (encapsulated messages one after
 * another) and the file format ("ARROW1", the same messages, a footer that
 * lists the record batches, its length and "ARROW1" again). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mapped_file.h"
#include "formats/arrow_internal.h"

enum { MSG_VERSION = 0, MSG_HEADER_TYPE = 1, MSG_HEADER = 2, MSG_BODY_LENGTH = 3 };
enum { HEADER_SCHEMA = 1, HEADER_DICTIONARY = 2, HEADER_RECORD_BATCH = 3 };
enum { FOOTER_SCHEMA = 1, FOOTER_DICTIONARIES = 2, FOOTER_BATCHES = 3 };
enum { BLOCK_SIZE = 24, METADATA_V4 = 3 };
static const char MAGIC[6] = {'A', 'R', 'R', 'O', 'W', '1'};

struct DfArrowReader {
    DfMappedFile file;
    DfArrowSchema schema;
    int is_file;
    size_t pos;          /* stream: the next message */
    DfFbVector blocks;   /* file: the record batch blocks */
    uint32_t next_block;
    DfArrowBatchMemory mem;
    DfArrowBatch batch;
    int codec;
};

/* One encapsulated message. */
typedef struct Message {
    DfFbTable header; /* the Schema or RecordBatch table */
    uint8_t header_type;
    const uint8_t *body;
    size_t body_size, end; /* end: the byte after the body */
} Message;

/* Reads the message at pos: 1, 0 at the end-of-stream marker or the end of
 * the data, -1 when corrupt. Errors say the byte offset. */
static int read_message(const uint8_t *data, size_t size, size_t pos, Message *m, DfError *err) {
    if (pos == size) return 0;
    if (size - pos < 4) return df_fail(err, "truncated message header at byte %zu", pos);
    size_t prefix = 4;
    uint32_t len = df_le_u32(data + pos);
    if (len == 0xFFFFFFFFu) { /* continuation marker, then the length */
        if (size - pos < 8) return df_fail(err, "truncated message header at byte %zu", pos);
        len = df_le_u32(data + pos + 4);
        prefix = 8;
    }
    if (len == 0) return 0;
    if (len > 0x7FFFFFFFu || len > size - pos - prefix)
        return df_fail(err, "message metadata at byte %zu (%u bytes) runs past the end of the %zu-byte file", pos, len, size);
    DfFbTable msg;
    size_t meta = pos + prefix;
    if (df_fb_root(data + meta, len, &msg, err) < 0) return df_context(err, "message at byte %zu", pos);
    int16_t version;
    int64_t body_len;
    if (df_fb_i16(&msg, MSG_VERSION, 0, &version, err) < 0 || df_fb_u8(&msg, MSG_HEADER_TYPE, 0, &m->header_type, err) < 0 ||
        df_fb_i64(&msg, MSG_BODY_LENGTH, 0, &body_len, err) < 0)
        return df_context(err, "message at byte %zu", pos);
    if (version < METADATA_V4) return df_fail(err, "message at byte %zu: metadata version V%d is too old", pos, version + 1);
    int rc = df_fb_table(&msg, MSG_HEADER, &m->header, err);
    if (rc < 0) return df_context(err, "message at byte %zu", pos);
    if (rc == 0) return df_fail(err, "message at byte %zu has no header", pos);
    size_t body = meta + len;
    if (body_len < 0 || (uint64_t)body_len > size - body)
        return df_fail(err, "message at byte %zu: body of %lld bytes runs past the end of the %zu-byte file", pos,
                       (long long)body_len, size);
    m->body = data + body;
    m->body_size = (size_t)body_len;
    m->end = body + (size_t)body_len;
    return 1;
}

static int open_stream(DfArrowReader *r, DfError *err) {
    Message m;
    int rc = read_message(r->file.data, r->file.size, 0, &m, err);
    if (rc < 0) return df_context(err, "not an Arrow IPC file (no \"ARROW1\" magic) nor a readable stream");
    if (rc == 0 || m.header_type != HEADER_SCHEMA)
        return df_fail(err, "not an Arrow IPC stream: the first message is not a schema");
    if (df_arrow_parse_schema(&m.header, &r->schema, err) < 0) return -1;
    r->pos = m.end;
    return 0;
}

static int open_file_format(DfArrowReader *r, DfError *err) {
    const uint8_t *d = r->file.data;
    size_t size = r->file.size;
    if (size < 8 + 10 || memcmp(d + size - 6, MAGIC, 6) != 0)
        return df_fail(err, "Arrow file format: no \"ARROW1\" at the end (truncated file?)");
    uint32_t footer_len = df_le_u32(d + size - 10);
    if (footer_len > size - 8 - 10)
        return df_fail(err, "Arrow file format: footer length %u does not fit in the %zu-byte file", footer_len, size);
    DfFbTable footer, schema;
    size_t at = size - 10 - footer_len;
    if (df_fb_root(d + at, footer_len, &footer, err) < 0) return df_context(err, "footer at byte %zu", at);
    int rc = df_fb_table(&footer, FOOTER_SCHEMA, &schema, err);
    if (rc <= 0) return rc < 0 ? df_context(err, "footer") : df_fail(err, "footer has no schema");
    if (df_arrow_parse_schema(&schema, &r->schema, err) < 0) return -1;
    DfFbVector dicts;
    if ((rc = df_fb_vector(&footer, FOOTER_DICTIONARIES, BLOCK_SIZE, &dicts, err)) < 0) return df_context(err, "footer");
    if (rc > 0 && dicts.len > 0) return df_fail(err, "dictionary batches are not supported");
    if ((rc = df_fb_vector(&footer, FOOTER_BATCHES, BLOCK_SIZE, &r->blocks, err)) < 0) return df_context(err, "footer");
    return 0;
}

DfArrowReader *df_arrow_open(const char *path, DfError *err) {
    DfArrowReader *r = df_xcalloc(1, sizeof *r, "arrow reader");
    if (df_mapped_file_open(&r->file, path, err) < 0) {
        free(r);
        return NULL;
    }
    int rc;
    if (r->file.size == 0) rc = df_fail(err, "empty file");
    else if (r->file.size >= 8 && memcmp(r->file.data, MAGIC, 6) == 0) r->is_file = 1, rc = open_file_format(r, err);
    else rc = open_stream(r, err);
    if (rc < 0) {
        df_context(err, "%s", path);
        df_arrow_close(r);
        return NULL;
    }
    r->codec = -1;
    return r;
}

void df_arrow_close(DfArrowReader *r) {
    if (!r) return;
    df_arrow_schema_free(&r->schema);
    df_arrow_memory_free(&r->mem);
    df_mapped_file_close(&r->file);
    free(r);
}

/* File format: the message named by the next footer block. */
static int block_message(DfArrowReader *r, Message *m, DfError *err) {
    const uint8_t *b = df_fb_vector_elem(&r->blocks, r->next_block, BLOCK_SIZE);
    int64_t offset = (int64_t)df_le_u64(b), body_len = (int64_t)df_le_u64(b + 16);
    int32_t meta_len = (int32_t)df_le_u32(b + 8);
    size_t size = r->file.size;
    if (offset < 8 || (uint64_t)offset >= size || meta_len <= 0 || body_len < 0)
        return df_fail(err, "record batch block %u (offset %lld) lies outside the file", r->next_block, (long long)offset);
    int rc = read_message(r->file.data, size, (size_t)offset, m, err);
    if (rc < 0) return -1;
    if (rc == 0 || m->body != r->file.data + offset + meta_len || (int64_t)m->body_size != body_len)
        return df_fail(err, "record batch block %u does not match the message at byte %lld", r->next_block,
                       (long long)offset);
    r->next_block++;
    return 1;
}

int df_arrow_next_batch(DfArrowReader *r, const DfArrowBatch **batch, DfError *err) {
    df_arrow_memory_release(&r->mem);
    Message m;
    size_t at = r->is_file ? 0 : r->pos;
    int rc;
    if (r->is_file) rc = r->next_block < r->blocks.len ? block_message(r, &m, err) : 0;
    else rc = read_message(r->file.data, r->file.size, r->pos, &m, err);
    if (rc <= 0) return rc < 0 ? df_context(err, "%s", r->file.path) : 0;
    if (!r->is_file) {
        at = r->pos;
        r->pos = m.end;
    }
    if (m.header_type != HEADER_RECORD_BATCH)
        return df_fail(err, "%s: message at byte %zu: %s where a record batch was expected", r->file.path, at,
                       m.header_type == HEADER_DICTIONARY ? "a dictionary batch (not supported)" : "another message type");
    if (df_arrow_decode_batch(&m.header, m.body, m.body_size, &r->schema, &r->mem, &r->batch, &r->codec, err) < 0)
        return df_context(err, "%s: record batch at byte %zu", r->file.path,
                          r->is_file ? (size_t)(m.body - r->file.data) : at);
    *batch = &r->batch;
    return 1;
}

const DfArrowSchema *df_arrow_schema(const DfArrowReader *r) { return &r->schema; }
const char *df_arrow_path(const DfArrowReader *r) { return r->file.path; }
int df_arrow_is_file_format(const DfArrowReader *r) { return r->is_file; }

const char *df_arrow_compression(const DfArrowReader *r) {
    return r->codec == 0 ? "lz4" : r->codec == 1 ? "zstd" : "none";
}
