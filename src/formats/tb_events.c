#include "formats/tb_events.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/buffer.h"

struct DfTbWriter {
    FILE *fp;
    char path[4400];
};

/* ---- CRC-32C, a byte at a time from a table built on first use ---------- */

static void crc32c_table(uint32_t table[256]) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[i] = c;
    }
}

uint32_t df_crc32c(const void *data, size_t n) {
    uint32_t table[256];
    crc32c_table(table); /* 256 entries: cheap beside a record's write */
    const unsigned char *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t df_tb_masked_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

/* ---- protobuf encoding of the few fields used --------------------------- */

static void put_varint(DfByteBuf *b, uint64_t v) {
    char byte;
    do {
        byte = (char)((v & 0x7F) | (v >= 0x80 ? 0x80 : 0));
        df_bytebuf_append(b, &byte, 1);
        v >>= 7;
    } while (v);
}

static void put_key(DfByteBuf *b, int field, int wire_type) { put_varint(b, (uint64_t)(field << 3 | wire_type)); }

static void put_le(DfByteBuf *b, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) {
        char c = (char)(v >> (8 * i));
        df_bytebuf_append(b, &c, 1);
    }
}

static void put_bytes_field(DfByteBuf *b, int field, const void *data, size_t n) {
    put_key(b, field, 2);
    put_varint(b, n);
    df_bytebuf_append(b, data, n);
}

static void put_event_header(DfByteBuf *b, double wall_time, int64_t step) {
    uint64_t bits;
    memcpy(&bits, &wall_time, 8);
    put_key(b, 1, 1);
    put_le(b, bits, 8);
    put_key(b, 2, 0);
    put_varint(b, (uint64_t)step);
}

/* ---- records ------------------------------------------------------------- */

static int write_record(DfTbWriter *w, const DfByteBuf *data, DfError *err) {
    unsigned char head[12];
    uint64_t n = data->len;
    for (int i = 0; i < 8; i++) head[i] = (unsigned char)(n >> (8 * i));
    uint32_t head_crc = df_tb_masked_crc(df_crc32c(head, 8)), data_crc = df_tb_masked_crc(df_crc32c(data->data, data->len));
    for (int i = 0; i < 4; i++) head[8 + i] = (unsigned char)(head_crc >> (8 * i));
    unsigned char tail[4];
    for (int i = 0; i < 4; i++) tail[i] = (unsigned char)(data_crc >> (8 * i));
    if (fwrite(head, 1, 12, w->fp) != 12 || fwrite(data->data, 1, data->len, w->fp) != data->len ||
        fwrite(tail, 1, 4, w->fp) != 4 || fflush(w->fp) != 0)
        return df_fail_errno(err, "%s: cannot write", w->path);
    return 0;
}

DfTbWriter *df_tb_open(const char *dir, DfError *err) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        df_fail_errno(err, "%s: cannot create the TensorBoard directory", dir);
        return NULL;
    }
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    DfTbWriter *w = df_xcalloc(1, sizeof *w, "TensorBoard writer");
    snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%ld", dir, (long long)time(NULL), host,
             (long)getpid());
    if (!(w->fp = fopen(w->path, "wb"))) {
        df_fail_errno(err, "%s: cannot create", w->path);
        free(w);
        return NULL;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    DfByteBuf b = {0};
    put_event_header(&b, (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec, 0);
    put_bytes_field(&b, 3, "brain.Event:2", 13);
    int rc = write_record(w, &b, err);
    df_bytebuf_free(&b);
    if (rc != 0) {
        df_tb_close(w);
        return NULL;
    }
    return w;
}

int df_tb_write_scalars(DfTbWriter *w, int64_t step, double wall_time, const char *const *tags, const double *values,
                        int n, DfError *err) {
    DfByteBuf summary = {0}, value = {0}, event = {0};
    for (int i = 0; i < n; i++) {
        value.len = 0;
        put_bytes_field(&value, 1, tags[i], strlen(tags[i]));
        float f = (float)values[i];
        uint32_t bits;
        memcpy(&bits, &f, 4);
        put_key(&value, 2, 5);
        put_le(&value, bits, 4);
        put_bytes_field(&summary, 1, value.data, value.len);
    }
    put_event_header(&event, wall_time, step);
    put_bytes_field(&event, 5, summary.data, summary.len);
    int rc = write_record(w, &event, err);
    df_bytebuf_free(&summary);
    df_bytebuf_free(&value);
    df_bytebuf_free(&event);
    return rc;
}

const char *df_tb_path(const DfTbWriter *w) { return w->path; }

void df_tb_close(DfTbWriter *w) {
    if (!w) return;
    if (w->fp) fclose(w->fp);
    free(w);
}
