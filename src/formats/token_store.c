#define _GNU_SOURCE
#include "formats/token_store.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/checksum.h"
#include "base/hash64.h"
#include "base/mapped_file.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the token store is read by mapping little-endian integers directly; this needs a little-endian machine"
#endif

/* Byte offsets of the header fields (see the format in token_store.h). */
enum {
    H_MAGIC = 0,
    H_VERSION = 8,
    H_HEADER_SIZE = 12,
    H_VOCAB = 16,
    H_FINGERPRINT = 24,
    H_SAMPLES = 32,
    H_TOKENS = 40,
    H_LOSS_TOKENS = 48,
    H_IDS_OFF = 56,
    H_IDS_SIZE = 64,
    H_MASK_OFF = 72,
    H_MASK_SIZE = 80,
    H_OFFSETS_OFF = 88,
    H_OFFSETS_SIZE = 96,
    H_PAYLOAD_SUM = 104,
    H_HEADER_SUM = 120,
};

/* ---- header ------------------------------------------------------------ */

static uint64_t align_up(uint64_t x) {
    return (x + DF_TOKEN_STORE_ALIGN - 1) / DF_TOKEN_STORE_ALIGN * DF_TOKEN_STORE_ALIGN;
}

static void put_u32(unsigned char *h, int at, uint32_t v) { memcpy(h + at, &v, 4); }
static void put_u64(unsigned char *h, int at, uint64_t v) { memcpy(h + at, &v, 8); }
static uint32_t get_u32(const unsigned char *h, int at) {
    uint32_t v;
    memcpy(&v, h + at, 4);
    return v;
}
static uint64_t get_u64(const unsigned char *h, int at) {
    uint64_t v;
    memcpy(&v, h + at, 8);
    return v;
}

/* ---- writer ------------------------------------------------------------ */

struct DfTokenStoreWriter {
    DfAtomicFile out; /* header placeholder, then ids as they come */
    FILE *mask_fp;    /* unlinked temporary file with the masks */
    char *path;
    uint32_t vocab_size;
    uint64_t fingerprint;
    int64_t *offsets; /* n_samples + 1 entries */
    size_t n_samples, offsets_cap;
    uint64_t n_tokens, n_loss;
    DfChecksum *payload; /* over every byte written after the header */
    int broken;       /* a write failed: commit must fail */
};

static FILE *open_unlinked_temp(const char *path, DfError *err) {
    size_t n = strlen(path) + 48;
    char *tmp = df_xmalloc(n, "temporary path");
    snprintf(tmp, n, "%s.mask.tmp.%ld", path, (long)getpid());
    FILE *fp = fopen(tmp, "w+b");
    if (!fp) df_fail_errno(err, "%s: cannot create temporary file", tmp);
    else unlink(tmp); /* it lives on while open and vanishes on any exit */
    free(tmp);
    return fp;
}

DfTokenStoreWriter *df_token_store_writer_open(const char *path, int vocab_size, uint64_t tokenizer_fingerprint,
                                               DfError *err) {
    if (vocab_size <= 0) {
        df_fail(err, "%s: vocabulary size %d is not positive", path, vocab_size);
        return NULL;
    }
    DfTokenStoreWriter *w = df_xcalloc(1, sizeof *w, "token store writer");
    if (df_atomic_open(&w->out, path, err) != 0) {
        free(w);
        return NULL;
    }
    w->mask_fp = open_unlinked_temp(path, err);
    unsigned char zeros[DF_TOKEN_STORE_HEADER_SIZE] = {0};
    if (!w->mask_fp || fwrite(zeros, 1, sizeof zeros, w->out.fp) != sizeof zeros) {
        if (w->mask_fp) df_fail_errno(err, "%s: cannot write", w->out.tmp_path);
        df_token_store_writer_abort(w);
        return NULL;
    }
    w->path = df_xstrdup(path);
    w->vocab_size = (uint32_t)vocab_size;
    w->fingerprint = tokenizer_fingerprint;
    w->offsets_cap = 1024;
    w->offsets = df_xmalloc(w->offsets_cap * sizeof *w->offsets, "token store offsets");
    w->offsets[0] = 0;
    w->payload = df_checksum_new();
    return w;
}

static int check_sample(const DfTokenStoreWriter *w, const int32_t *ids, const uint8_t *mask, size_t n,
                        DfError *err) {
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= w->vocab_size)
            return df_fail(err, "%s: sample %zu: token %zu has id %" PRId32 ", outside the vocabulary [0, %" PRIu32 ")",
                           w->path, w->n_samples, i, ids[i], w->vocab_size);
        if (mask[i] > 1)
            return df_fail(err, "%s: sample %zu: loss mask value %u at token %zu is not 0 or 1", w->path, w->n_samples,
                           mask[i], i);
    }
    return 0;
}

int df_token_store_writer_append(DfTokenStoreWriter *w, const int32_t *ids, const uint8_t *mask, size_t n,
                                 DfError *err) {
    if (w->broken) return df_fail(err, "%s: an earlier write failed", w->path);
    if (check_sample(w, ids, mask, n, err) != 0) return -1;
    if (fwrite(ids, sizeof *ids, n, w->out.fp) != n || fwrite(mask, 1, n, w->mask_fp) != n) {
        w->broken = 1;
        return df_fail_errno(err, "%s: cannot write sample %zu", w->path, w->n_samples);
    }
    df_checksum_update(w->payload, ids, n * sizeof *ids);
    for (size_t i = 0; i < n; i++) w->n_loss += mask[i];
    w->n_tokens += n;
    if (w->n_samples + 2 > w->offsets_cap) {
        w->offsets_cap *= 2;
        w->offsets = df_xrealloc(w->offsets, w->offsets_cap * sizeof *w->offsets, "token store offsets");
    }
    w->offsets[++w->n_samples] = (int64_t)w->n_tokens;
    return 0;
}

int64_t df_token_store_writer_num_samples(const DfTokenStoreWriter *w) { return (int64_t)w->n_samples; }

static void free_writer(DfTokenStoreWriter *w) {
    if (w->mask_fp) fclose(w->mask_fp);
    df_checksum_free(w->payload);
    free(w->offsets);
    free(w->path);
    free(w);
}

void df_token_store_writer_abort(DfTokenStoreWriter *w) {
    if (!w) return;
    if (w->out.fp || w->out.tmp_path) df_atomic_abort(&w->out);
    free_writer(w);
}

/* Writes bytes to the output and adds them to the payload checksum. */
static int emit(DfTokenStoreWriter *w, const void *data, size_t n, DfError *err) {
    if (fwrite(data, 1, n, w->out.fp) != n) return df_fail_errno(err, "%s: cannot write", w->out.tmp_path);
    df_checksum_update(w->payload, data, n);
    return 0;
}

/* Zero bytes from `pos` up to the next section boundary. */
static int emit_padding(DfTokenStoreWriter *w, uint64_t pos, DfError *err) {
    static const unsigned char zeros[DF_TOKEN_STORE_ALIGN];
    return emit(w, zeros, (size_t)(align_up(pos) - pos), err);
}

static int copy_masks(DfTokenStoreWriter *w, DfError *err) {
    if (fflush(w->mask_fp) != 0 || fseek(w->mask_fp, 0, SEEK_SET) != 0)
        return df_fail_errno(err, "%s: cannot reread the temporary mask file", w->path);
    size_t cap = 1 << 20;
    unsigned char *buf = df_xmalloc(cap, "mask copy buffer");
    uint64_t copied = 0;
    int rc = 0;
    while (rc == 0 && copied < w->n_tokens) {
        size_t want = w->n_tokens - copied < cap ? (size_t)(w->n_tokens - copied) : cap;
        size_t got = fread(buf, 1, want, w->mask_fp);
        if (got == 0) rc = df_fail(err, "%s: temporary mask file is short (%" PRIu64 " of %" PRIu64 " bytes)", w->path,
                                   copied, w->n_tokens);
        else rc = emit(w, buf, got, err);
        copied += got;
    }
    free(buf);
    return rc;
}

static void build_header(const DfTokenStoreWriter *w, unsigned char *h, uint64_t mask_off, uint64_t offsets_off) {
    memset(h, 0, DF_TOKEN_STORE_HEADER_SIZE);
    memcpy(h + H_MAGIC, DF_TOKEN_STORE_MAGIC, 8);
    put_u32(h, H_VERSION, DF_TOKEN_STORE_VERSION);
    put_u32(h, H_HEADER_SIZE, DF_TOKEN_STORE_HEADER_SIZE);
    put_u32(h, H_VOCAB, w->vocab_size);
    put_u64(h, H_FINGERPRINT, w->fingerprint);
    put_u64(h, H_SAMPLES, w->n_samples);
    put_u64(h, H_TOKENS, w->n_tokens);
    put_u64(h, H_LOSS_TOKENS, w->n_loss);
    put_u64(h, H_IDS_OFF, DF_TOKEN_STORE_HEADER_SIZE);
    put_u64(h, H_IDS_SIZE, 4 * w->n_tokens);
    put_u64(h, H_MASK_OFF, mask_off);
    put_u64(h, H_MASK_SIZE, w->n_tokens);
    put_u64(h, H_OFFSETS_OFF, offsets_off);
    put_u64(h, H_OFFSETS_SIZE, 8 * (w->n_samples + 1));
    put_u64(h, H_PAYLOAD_SUM, df_checksum_final(w->payload));
    put_u64(h, H_HEADER_SUM, df_checksum(h, H_HEADER_SUM));
}

static int finish_file(DfTokenStoreWriter *w, DfError *err) {
    if (w->broken) return df_fail(err, "%s: an earlier write failed", w->path);
    uint64_t ids_end = DF_TOKEN_STORE_HEADER_SIZE + 4 * w->n_tokens;
    uint64_t mask_off = align_up(ids_end);
    uint64_t offsets_off = align_up(mask_off + w->n_tokens);
    if (emit_padding(w, ids_end, err) != 0 || copy_masks(w, err) != 0 ||
        emit_padding(w, mask_off + w->n_tokens, err) != 0 ||
        emit(w, w->offsets, (w->n_samples + 1) * sizeof *w->offsets, err) != 0)
        return -1;
    unsigned char header[DF_TOKEN_STORE_HEADER_SIZE];
    build_header(w, header, mask_off, offsets_off);
    if (fseek(w->out.fp, 0, SEEK_SET) != 0 || fwrite(header, 1, sizeof header, w->out.fp) != sizeof header)
        return df_fail_errno(err, "%s: cannot write the header", w->out.tmp_path);
    return 0;
}

int df_token_store_writer_commit(DfTokenStoreWriter *w, DfError *err) {
    if (finish_file(w, err) != 0) {
        df_token_store_writer_abort(w);
        return -1;
    }
    int rc = df_atomic_commit(&w->out, err); /* removes the temporary itself on failure */
    free_writer(w);
    return rc;
}

/* ---- reader ------------------------------------------------------------ */

struct DfTokenStore {
    DfMappedFile file;
    const int32_t *ids;
    const uint8_t *mask;
    const int64_t *offsets;
    int64_t n_samples, n_tokens, n_loss;
    uint32_t vocab_size;
    uint64_t fingerprint, payload_sum;
    uint32_t version;
};

/* Version 1 stores were checksummed with df_hash64 (kept for reading them);
 * version 2 uses df_checksum (XXH3-64). */
static uint64_t store_checksum(uint32_t version, const void *data, size_t n) {
    return version == DF_TOKEN_STORE_VERSION_LEGACY ? df_hash64(data, n) : df_checksum(data, n);
}

/* A section must start on a 64-byte boundary at or after `min_start` (which
 * keeps the sections in order and apart), have the size its counts imply,
 * and end inside the file. */
static int check_section(const char *path, const char *name, uint64_t off, uint64_t size, uint64_t expected_size,
                         uint64_t min_start, uint64_t file_size, DfError *err) {
    if (off % DF_TOKEN_STORE_ALIGN != 0)
        return df_fail(err, "%s: corrupt header: %s section offset %" PRIu64 " is not a multiple of %u", path, name, off,
                       DF_TOKEN_STORE_ALIGN);
    if (off < min_start)
        return df_fail(err, "%s: corrupt header: %s section offset %" PRIu64 " overlaps what comes before it (ends at %" PRIu64
                       ")", path, name, off, min_start);
    if (size != expected_size)
        return df_fail(err, "%s: corrupt header: %s section is %" PRIu64 " bytes, the counts imply %" PRIu64, path, name,
                       size, expected_size);
    if (off > file_size || size > file_size - off)
        return df_fail(err, "%s: truncated or corrupt: %s section [%" PRIu64 ", %" PRIu64 ") extends past the end of the file (%"
                       PRIu64 " bytes)", path, name, off, off + size, file_size);
    return 0;
}

static int check_header(DfTokenStore *s, DfError *err) {
    const char *path = s->file.path;
    const unsigned char *h = s->file.data;
    uint64_t file_size = s->file.size;
    if (file_size < DF_TOKEN_STORE_HEADER_SIZE)
        return df_fail(err, "%s: truncated: %" PRIu64 " bytes, a token store header alone is %u", path, file_size,
                       DF_TOKEN_STORE_HEADER_SIZE);
    if (memcmp(h + H_MAGIC, DF_TOKEN_STORE_MAGIC, 8) != 0)
        return df_fail(err, "%s: not a token store (bad magic, expected \"%s\")", path, DF_TOKEN_STORE_MAGIC);
    uint32_t version = get_u32(h, H_VERSION);
    if (version != DF_TOKEN_STORE_VERSION && version != DF_TOKEN_STORE_VERSION_LEGACY)
        return df_fail(err, "%s: token store format version %" PRIu32 ", this build reads versions %u and %u", path,
                       version, DF_TOKEN_STORE_VERSION_LEGACY, DF_TOKEN_STORE_VERSION);
    s->version = version;
    if (get_u32(h, H_HEADER_SIZE) != DF_TOKEN_STORE_HEADER_SIZE)
        return df_fail(err, "%s: corrupt header: header size %" PRIu32 ", expected %u", path, get_u32(h, H_HEADER_SIZE),
                       DF_TOKEN_STORE_HEADER_SIZE);
    uint64_t stored = get_u64(h, H_HEADER_SUM), actual = store_checksum(version, h, H_HEADER_SUM);
    if (stored != actual)
        return df_fail(err, "%s: header checksum mismatch (stored %016" PRIx64 ", computed %016" PRIx64 ")", path, stored,
                       actual);

    uint64_t n = get_u64(h, H_SAMPLES), t = get_u64(h, H_TOKENS);
    s->vocab_size = get_u32(h, H_VOCAB);
    if (s->vocab_size == 0 || s->vocab_size > INT32_MAX)
        return df_fail(err, "%s: corrupt header: vocabulary size %" PRIu32, path, s->vocab_size);
    if (t > file_size || n >= file_size / 8) /* bounds the products below */
        return df_fail(err, "%s: truncated or corrupt: %" PRIu64 " samples and %" PRIu64 " tokens cannot fit in %" PRIu64
                       " bytes", path, n, t, file_size);
    if (get_u64(h, H_LOSS_TOKENS) > t)
        return df_fail(err, "%s: corrupt header: %" PRIu64 " loss tokens out of %" PRIu64 " tokens", path,
                       get_u64(h, H_LOSS_TOKENS), t);
    uint64_t ids_off = get_u64(h, H_IDS_OFF), mask_off = get_u64(h, H_MASK_OFF), offs_off = get_u64(h, H_OFFSETS_OFF);
    if (check_section(path, "ids", ids_off, get_u64(h, H_IDS_SIZE), 4 * t, DF_TOKEN_STORE_HEADER_SIZE, file_size, err) ||
        check_section(path, "mask", mask_off, get_u64(h, H_MASK_SIZE), t, ids_off + 4 * t, file_size, err) ||
        check_section(path, "offsets", offs_off, get_u64(h, H_OFFSETS_SIZE), 8 * (n + 1), mask_off + t, file_size, err))
        return -1;
    if (offs_off + 8 * (n + 1) != file_size)
        return df_fail(err, "%s: corrupt: %" PRIu64 " unexpected bytes after the offsets section", path,
                       file_size - (offs_off + 8 * (n + 1)));
    s->n_samples = (int64_t)n;
    s->n_tokens = (int64_t)t;
    s->n_loss = (int64_t)get_u64(h, H_LOSS_TOKENS);
    s->fingerprint = get_u64(h, H_FINGERPRINT);
    s->payload_sum = get_u64(h, H_PAYLOAD_SUM);
    s->ids = (const int32_t *)(h + ids_off);
    s->mask = h + mask_off;
    s->offsets = (const int64_t *)(h + offs_off);
    return 0;
}

static int check_offsets(const DfTokenStore *s, DfError *err) {
    if (s->offsets[0] != 0)
        return df_fail(err, "%s: corrupt offsets: sample 0 starts at token %" PRId64 ", not 0", s->file.path, s->offsets[0]);
    for (int64_t i = 0; i < s->n_samples; i++)
        if (s->offsets[i + 1] < s->offsets[i])
            return df_fail(err, "%s: corrupt offsets: sample %" PRId64 " ends at token %" PRId64 " before it starts (%" PRId64
                           ")", s->file.path, i, s->offsets[i + 1], s->offsets[i]);
    if (s->offsets[s->n_samples] != s->n_tokens)
        return df_fail(err, "%s: corrupt offsets: the last sample ends at token %" PRId64 ", the header counts %" PRId64
                       " tokens", s->file.path, s->offsets[s->n_samples], s->n_tokens);
    return 0;
}

DfTokenStore *df_token_store_open(const char *path, int verify_payload, DfError *err) {
    DfTokenStore *s = df_xcalloc(1, sizeof *s, "token store");
    if (df_mapped_file_open(&s->file, path, err) != 0) {
        free(s);
        return NULL;
    }
    if (check_header(s, err) != 0 || check_offsets(s, err) != 0 ||
        (verify_payload && df_token_store_verify(s, err) != 0)) {
        df_token_store_close(s);
        return NULL;
    }
    return s;
}

void df_token_store_close(DfTokenStore *s) {
    if (!s) return;
    df_mapped_file_close(&s->file);
    free(s);
}

int df_token_store_verify(const DfTokenStore *s, DfError *err) {
    const char *path = s->file.path;
    uint64_t sum = store_checksum(s->version, s->file.data + DF_TOKEN_STORE_HEADER_SIZE,
                                  s->file.size - DF_TOKEN_STORE_HEADER_SIZE);
    if (sum != s->payload_sum)
        return df_fail(err, "%s: payload checksum mismatch (stored %016" PRIx64 ", computed %016" PRIx64
                       "): the file is corrupt", path, s->payload_sum, sum);
    int64_t loss = 0;
    for (int64_t i = 0; i < s->n_tokens; i++) {
        if (s->ids[i] < 0 || (uint32_t)s->ids[i] >= s->vocab_size)
            return df_fail(err, "%s: token %" PRId64 " has id %" PRId32 ", outside the vocabulary [0, %" PRIu32 ")", path, i,
                           s->ids[i], s->vocab_size);
        if (s->mask[i] > 1)
            return df_fail(err, "%s: token %" PRId64 " has loss mask value %u, not 0 or 1", path, i, s->mask[i]);
        loss += s->mask[i];
    }
    if (loss != s->n_loss)
        return df_fail(err, "%s: %" PRId64 " loss tokens in the mask, the header counts %" PRId64, path, loss, s->n_loss);
    return 0;
}

int64_t df_token_store_num_samples(const DfTokenStore *s) { return s->n_samples; }
int64_t df_token_store_num_tokens(const DfTokenStore *s) { return s->n_tokens; }
int64_t df_token_store_num_loss_tokens(const DfTokenStore *s) { return s->n_loss; }
int df_token_store_vocab_size(const DfTokenStore *s) { return (int)s->vocab_size; }
uint64_t df_token_store_fingerprint(const DfTokenStore *s) { return s->fingerprint; }
const char *df_token_store_path(const DfTokenStore *s) { return s->file.path; }

int df_token_store_sample(const DfTokenStore *s, int64_t i, const int32_t **ids, const uint8_t **mask, int64_t *len,
                          DfError *err) {
    if (i < 0 || i >= s->n_samples)
        return df_fail(err, "%s: sample %" PRId64 " is out of range (the store has %" PRId64 ")", s->file.path, i,
                       s->n_samples);
    int64_t begin = s->offsets[i];
    *ids = s->ids + begin;
    *mask = s->mask + begin;
    *len = s->offsets[i + 1] - begin;
    return 0;
}

int64_t df_token_store_sample_length(const DfTokenStore *s, int64_t i) {
    if (i < 0 || i >= s->n_samples) return 0;
    return s->offsets[i + 1] - s->offsets[i];
}
