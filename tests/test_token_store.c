/* The token store: round trips of random samples, O(1) access in any order,
 * the empty store, and every kind of damage the reader must refuse (each
 * refusal naming the file); writers that fail or are aborted leave nothing. */
#include "test_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/checksum.h"
#include "base/clock.h"
#include "base/hash64.h"
#include "formats/token_store.h"

#define VOCAB 1000
#define FINGERPRINT 0x0123456789ABCDEFull

typedef struct Samples {
    int n;
    int32_t **ids;
    uint8_t **mask;
    size_t *len;
} Samples;

static uint64_t next_random(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* n samples of random length in [0, max_len], ids in [0, VOCAB), masks 0/1. */
static Samples make_samples(int n, int max_len, uint64_t seed) {
    Samples S = {n, calloc((size_t)n, sizeof(int32_t *)), calloc((size_t)n, sizeof(uint8_t *)),
                 calloc((size_t)n, sizeof(size_t))};
    uint64_t r = seed * 2654435761u + 7;
    for (int i = 0; i < n; i++) {
        S.len[i] = next_random(&r) % (uint64_t)(max_len + 1);
        S.ids[i] = malloc(S.len[i] * sizeof(int32_t) + 1);
        S.mask[i] = malloc(S.len[i] + 1);
        for (size_t k = 0; k < S.len[i]; k++) {
            S.ids[i][k] = (int32_t)(next_random(&r) % VOCAB);
            S.mask[i][k] = (uint8_t)(next_random(&r) & 1);
        }
    }
    return S;
}

static void free_samples(Samples *S) {
    for (int i = 0; i < S->n; i++) free(S->ids[i]), free(S->mask[i]);
    free(S->ids), free(S->mask), free(S->len);
}

static void write_store(const char *path, const Samples *S) {
    DfError err = {{0}};
    DfTokenStoreWriter *w = df_token_store_writer_open(path, VOCAB, FINGERPRINT, &err);
    assert_non_null(w);
    for (int i = 0; i < S->n; i++) assert_int_equal(df_token_store_writer_append(w, S->ids[i], S->mask[i], S->len[i], &err), 0);
    assert_int_equal(df_token_store_writer_num_samples(w), S->n);
    assert_int_equal(df_token_store_writer_commit(w, &err), 0);
}

static int count_dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void test_round_trip_random_access(void **state) {
    char *dir = df_test_tmpdir("store");
    char path[512];
    snprintf(path, sizeof path, "%s/a.store", dir);
    Samples S = make_samples(700, 300, 1);
    write_store(path, &S);
    assert_int_equal(count_dir_entries(dir), 1); /* no temporaries left */

    DfError err = {{0}};
    DfTokenStore *st = df_token_store_open(path, 1, &err);
    assert_non_null(st);
    int64_t tokens = 0, loss = 0;
    for (int i = 0; i < S.n; i++) {
        tokens += (int64_t)S.len[i];
        for (size_t k = 0; k < S.len[i]; k++) loss += S.mask[i][k];
    }
    assert_int_equal(df_token_store_num_samples(st), S.n);
    assert_int_equal(df_token_store_num_tokens(st), tokens);
    assert_int_equal(df_token_store_num_loss_tokens(st), loss);
    assert_int_equal(df_token_store_vocab_size(st), VOCAB);
    assert_true(df_token_store_fingerprint(st) == FINGERPRINT);

    /* Visit the samples in a random order: each lookup stands alone. */
    uint64_t r = 99;
    for (int visit = 0; visit < 3 * S.n; visit++) {
        int i = (int)(next_random(&r) % (uint64_t)S.n);
        const int32_t *ids;
        const uint8_t *mask;
        int64_t len;
        assert_int_equal(df_token_store_sample(st, i, &ids, &mask, &len, &err), 0);
        assert_int_equal(len, (int64_t)S.len[i]);
        assert_int_equal(df_token_store_sample_length(st, i), (int64_t)S.len[i]);
        assert_memory_equal(ids, S.ids[i], S.len[i] * sizeof(int32_t));
        assert_memory_equal(mask, S.mask[i], S.len[i]);
    }
    const int32_t *ids;
    const uint8_t *mask;
    int64_t len;
    assert_int_equal(df_token_store_sample(st, S.n, &ids, &mask, &len, &err), -1);
    assert_non_null(strstr(err.msg, path));
    assert_int_equal(df_token_store_sample(st, -1, &ids, &mask, &len, &err), -1);

    /* Timing only (printed, not asserted): a million random lookups. */
    double t0 = df_now_seconds();
    int64_t sink = 0;
    for (int k = 0; k < 1000000; k++) {
        df_token_store_sample(st, (int64_t)(next_random(&r) % (uint64_t)S.n), &ids, &mask, &len, NULL);
        sink += len > 0 ? ids[len - 1] + mask[0] : 0; /* touch the data, as a reader would */
    }
    double dt = df_now_seconds() - t0;
    print_message("1e6 random sample lookups: %.1f ns each (checksum %lld)\n", dt * 1e3, (long long)sink);

    df_token_store_close(st);
    free_samples(&S);
    df_test_rmtree(dir);
    free(dir);
}

static void test_empty_store(void **state) {
    char *dir = df_test_tmpdir("store");
    char path[512];
    snprintf(path, sizeof path, "%s/empty.store", dir);
    Samples S = make_samples(0, 0, 2);
    write_store(path, &S);
    DfError err = {{0}};
    DfTokenStore *st = df_token_store_open(path, 1, &err);
    assert_non_null(st);
    assert_int_equal(df_token_store_num_samples(st), 0);
    assert_int_equal(df_token_store_num_tokens(st), 0);
    const int32_t *ids;
    const uint8_t *mask;
    int64_t len;
    assert_int_equal(df_token_store_sample(st, 0, &ids, &mask, &len, &err), -1);
    df_token_store_close(st);
    free_samples(&S);
    df_test_rmtree(dir);
    free(dir);
}

/* ---- damaged files ------------------------------------------------------ */

typedef struct Damage {
    char *dir;
    char path[512];
    unsigned char *bytes;
    size_t size;
} Damage;

static Damage *make_damage_fixture(void) {
    Damage *d = calloc(1, sizeof *d);
    d->dir = df_test_tmpdir("store-damage");
    snprintf(d->path, sizeof d->path, "%s/d.store", d->dir);
    Samples S = make_samples(40, 50, 3);
    write_store(d->path, &S);
    free_samples(&S);
    FILE *f = fopen(d->path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    d->size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    d->bytes = malloc(d->size);
    assert_int_equal(fread(d->bytes, 1, d->size, f), d->size);
    fclose(f);
    return d;
}

static void free_damage(Damage *d) {
    df_test_rmtree(d->dir);
    free(d->dir);
    free(d->bytes);
    free(d);
}

/* Writes `size` bytes of (modified) content back and expects open to fail
 * with a message that names the file and contains `expected`. */
static void expect_refused(Damage *d, size_t size, int verify, const char *expected) {
    FILE *f = fopen(d->path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(d->bytes, 1, size, f), size);
    fclose(f);
    DfError err = {{0}};
    DfTokenStore *st = df_token_store_open(d->path, verify, &err);
    if (st) fail_msg("%s: opened a damaged store (expected \"%s\")", d->path, expected);
    if (!strstr(err.msg, d->path) || !strstr(err.msg, expected))
        fail_msg("message \"%s\" should name the file and say \"%s\"", err.msg, expected);
}

static uint64_t get64(const Damage *d, size_t at) {
    uint64_t v;
    memcpy(&v, d->bytes + at, 8);
    return v;
}
static void put64(Damage *d, size_t at, uint64_t v) { memcpy(d->bytes + at, &v, 8); }
static uint32_t version_of(const Damage *d) {
    uint32_t v;
    memcpy(&v, d->bytes + 8, 4);
    return v;
}
/* The header checksum recomputed with the hash its version uses. */
static void reseal_header(Damage *d) {
    put64(d, 120, version_of(d) == 1 ? df_hash64(d->bytes, 120) : df_checksum(d->bytes, 120));
}

static void test_flipped_payload_byte_fails_checksum(void **state) {
    Damage *d = make_damage_fixture();
    size_t at = (size_t)get64(d, 56) + 12; /* inside the ids section */
    d->bytes[at] ^= 0x04;
    expect_refused(d, d->size, 1, "checksum");
    /* Without verification the header alone looks fine. */
    DfError err = {{0}};
    DfTokenStore *st = df_token_store_open(d->path, 0, &err);
    assert_non_null(st);
    df_token_store_close(st);
    d->bytes[at] ^= 0x04;
    d->bytes[get64(d, 72) + 3] ^= 0x01; /* a mask byte */
    expect_refused(d, d->size, 1, "checksum");
    free_damage(d);
}

static void test_truncated_file(void **state) {
    Damage *d = make_damage_fixture();
    expect_refused(d, d->size - 8, 0, "past the end");
    expect_refused(d, 100, 0, "truncated");
    expect_refused(d, 0, 0, "truncated");
    free_damage(d);
}

static void test_bad_magic(void **state) {
    Damage *d = make_damage_fixture();
    d->bytes[0] = 'X';
    expect_refused(d, d->size, 0, "magic");
    free_damage(d);
}

static void test_wrong_version(void **state) {
    Damage *d = make_damage_fixture();
    uint32_t v = 3;
    memcpy(d->bytes + 8, &v, 4);
    reseal_header(d);
    expect_refused(d, d->size, 0, "version 3");
    free_damage(d);
}

/* The payload checksum is XXH3-64 of the bytes after the header, so a
 * standard tool (xxhsum -H3) can check a store. */
static void test_payload_checksum_is_xxh3_of_file_tail(void **state) {
    Damage *d = make_damage_fixture();
    assert_int_equal(version_of(d), 2);
    assert_true(get64(d, 104) == df_checksum(d->bytes + 128, d->size - 128));
    assert_true(get64(d, 120) == df_checksum(d->bytes, 120));
    free_damage(d);
}

/* A version 1 store (df_hash64 checksums, the format otherwise the same) is
 * still read and verified; version 1 with XXH3 checksums is corrupt. */
static void test_version_1_store_still_read(void **state) {
    Damage *d = make_damage_fixture();
    uint32_t v = 1;
    memcpy(d->bytes + 8, &v, 4);
    reseal_header(d); /* XXH3 payload checksum kept: wrong for version 1 */
    expect_refused(d, d->size, 1, "payload checksum");
    put64(d, 104, df_hash64(d->bytes + 128, d->size - 128));
    reseal_header(d);
    FILE *f = fopen(d->path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(d->bytes, 1, d->size, f), d->size);
    fclose(f);
    DfError err = {{0}};
    DfTokenStore *st = df_token_store_open(d->path, 1, &err);
    if (!st) fail_msg("version 1 store refused: %s", err.msg);
    Samples S = make_samples(40, 50, 3); /* what make_damage_fixture wrote */
    assert_int_equal(df_token_store_num_samples(st), S.n);
    for (int i = 0; i < S.n; i++) {
        const int32_t *ids;
        const uint8_t *mask;
        int64_t len;
        assert_int_equal(df_token_store_sample(st, i, &ids, &mask, &len, &err), 0);
        assert_int_equal(len, (int64_t)S.len[i]);
        assert_memory_equal(ids, S.ids[i], S.len[i] * sizeof *ids);
        assert_memory_equal(mask, S.mask[i], S.len[i]);
    }
    free_samples(&S);
    df_token_store_close(st);
    free_damage(d);
}

static void test_header_checksum(void **state) {
    Damage *d = make_damage_fixture();
    put64(d, 32, get64(d, 32) - 1); /* one sample fewer, checksum not updated */
    expect_refused(d, d->size, 0, "header checksum");
    free_damage(d);
}

static void test_section_past_end(void **state) {
    Damage *d = make_damage_fixture();
    put64(d, 88, get64(d, 88) + 1024 * 64); /* offsets section far past the end */
    reseal_header(d);
    expect_refused(d, d->size, 0, "past the end");
    free_damage(d);
}

static void test_section_sizes_and_order(void **state) {
    Damage *d = make_damage_fixture();
    unsigned char *orig = malloc(d->size);
    memcpy(orig, d->bytes, d->size);
    put64(d, 64, get64(d, 64) + 4); /* ids size disagrees with the token count */
    reseal_header(d);
    expect_refused(d, d->size, 0, "counts imply");
    memcpy(d->bytes, orig, d->size);
    put64(d, 72, 64); /* mask section overlapping the header */
    reseal_header(d);
    expect_refused(d, d->size, 0, "overlaps");
    memcpy(d->bytes, orig, d->size);
    put64(d, 72, get64(d, 72) + 1); /* misaligned */
    reseal_header(d);
    expect_refused(d, d->size, 0, "multiple of 64");
    free(orig);
    free_damage(d);
}

static void test_offsets_table(void **state) {
    Damage *d = make_damage_fixture();
    size_t offs = (size_t)get64(d, 88);
    unsigned char *orig = malloc(d->size);
    memcpy(orig, d->bytes, d->size);
    put64(d, offs + 8 * 5, get64(d, offs + 8 * 6) + 1); /* sample 5 ends before it starts */
    expect_refused(d, d->size, 0, "sample 5 ends");
    memcpy(d->bytes, orig, d->size);
    put64(d, offs, 1); /* sample 0 does not start at token 0 */
    expect_refused(d, d->size, 0, "sample 0 starts");
    memcpy(d->bytes, orig, d->size);
    put64(d, offs + 8 * 40, get64(d, offs + 8 * 40) - 1); /* last offset short of the token count */
    expect_refused(d, d->size, 0, "the last sample ends");
    free(orig);
    free_damage(d);
}

/* ---- writers ------------------------------------------------------------ */

static void test_writer_rejects_bad_samples(void **state) {
    char *dir = df_test_tmpdir("store");
    char path[512];
    snprintf(path, sizeof path, "%s/w.store", dir);
    DfError err = {{0}};
    DfTokenStoreWriter *w = df_token_store_writer_open(path, VOCAB, FINGERPRINT, &err);
    assert_non_null(w);
    int32_t ids[3] = {1, VOCAB, 2};
    uint8_t mask[3] = {0, 1, 1};
    assert_int_equal(df_token_store_writer_append(w, ids, mask, 3, &err), -1);
    assert_non_null(strstr(err.msg, "outside the vocabulary"));
    ids[1] = -1;
    assert_int_equal(df_token_store_writer_append(w, ids, mask, 3, &err), -1);
    ids[1] = 5;
    mask[2] = 2;
    assert_int_equal(df_token_store_writer_append(w, ids, mask, 3, &err), -1);
    assert_non_null(strstr(err.msg, "not 0 or 1"));
    mask[2] = 1;
    assert_int_equal(df_token_store_writer_append(w, ids, mask, 3, &err), 0);
    assert_int_equal(df_token_store_writer_commit(w, &err), 0);
    DfTokenStore *st = df_token_store_open(path, 1, &err);
    assert_non_null(st);
    assert_int_equal(df_token_store_num_samples(st), 1); /* the refused appends left no trace */
    assert_int_equal(df_token_store_num_tokens(st), 3);
    df_token_store_close(st);
    df_test_rmtree(dir);
    free(dir);
}

static void test_aborted_writer_leaves_nothing(void **state) {
    char *dir = df_test_tmpdir("store");
    char path[512];
    snprintf(path, sizeof path, "%s/aborted.store", dir);
    Samples S = make_samples(20, 30, 4);
    DfError err = {{0}};
    DfTokenStoreWriter *w = df_token_store_writer_open(path, VOCAB, FINGERPRINT, &err);
    assert_non_null(w);
    for (int i = 0; i < S.n; i++) assert_int_equal(df_token_store_writer_append(w, S.ids[i], S.mask[i], S.len[i], &err), 0);
    df_token_store_writer_abort(w);
    assert_false(df_test_file_exists(path));
    assert_int_equal(count_dir_entries(dir), 0);
    free_samples(&S);
    df_test_rmtree(dir);
    free(dir);
}

static void test_failed_commit_leaves_nothing(void **state) {
    char *dir = df_test_tmpdir("store");
    char path[512];
    snprintf(path, sizeof path, "%s/taken", dir);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/x'", path);
    assert_int_equal(system(cmd), 0);
    /* The output path is a directory: refused before anything is written
     * (base/atomic_file.h: only a regular file is replaced). */
    Samples S = make_samples(5, 10, 5);
    DfError err = {{0}};
    assert_null(df_token_store_writer_open(path, VOCAB, FINGERPRINT, &err));
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "a directory"));
    assert_int_equal(count_dir_entries(dir), 1); /* only the directory in the way */

    /* A commit whose rename fails: the directory appears after the open. */
    char late[600];
    snprintf(late, sizeof late, "%s/late", dir);
    DfTokenStoreWriter *w = df_token_store_writer_open(late, VOCAB, FINGERPRINT, &err);
    assert_non_null(w);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/x'", late);
    assert_int_equal(system(cmd), 0);
    for (int i = 0; i < S.n; i++) assert_int_equal(df_token_store_writer_append(w, S.ids[i], S.mask[i], S.len[i], &err), 0);
    assert_int_equal(df_token_store_writer_commit(w, &err), -1);
    assert_non_null(strstr(err.msg, late));
    assert_int_equal(count_dir_entries(dir), 2); /* only the directories in the way */

    /* A writer that cannot even start (missing directory) says where. */
    char missing[600];
    snprintf(missing, sizeof missing, "%s/no/such/dir/s.store", dir);
    assert_null(df_token_store_writer_open(missing, VOCAB, FINGERPRINT, &err));
    assert_non_null(strstr(err.msg, "no/such/dir"));
    free_samples(&S);
    df_test_rmtree(dir);
    free(dir);
}

/* ---- checksum ----------------------------------------------------------- */

static void test_hash_streaming_and_sensitivity(void **state) {
    unsigned char data[1000];
    for (int i = 0; i < 1000; i++) data[i] = (unsigned char)(i * 37 + 11);
    uint64_t whole = df_hash64(data, sizeof data);
    /* Fed in uneven pieces, the result is the same. */
    for (size_t piece = 1; piece < 70; piece += 7) {
        DfHash64 h;
        df_hash64_init(&h);
        for (size_t at = 0; at < sizeof data; at += piece)
            df_hash64_update(&h, data + at, at + piece <= sizeof data ? piece : sizeof data - at);
        assert_true(df_hash64_final(&h) == whole);
    }
    /* Every single-bit flip changes it. */
    for (size_t i = 0; i < sizeof data; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            data[i] ^= (unsigned char)(1u << bit);
            assert_true(df_hash64(data, sizeof data) != whole);
            data[i] ^= (unsigned char)(1u << bit);
        }
    }
    /* Zero runs of different lengths differ (the length is mixed in). */
    unsigned char zeros[64] = {0};
    for (size_t n = 1; n < 64; n++) assert_true(df_hash64(zeros, n) != df_hash64(zeros, n - 1));
}

/* Known answers from an independent transcription of the checksum as the
 * format comment in token_store.h documents it (Python, arbitrary precision):
 *   M = 2**64 - 1; P1, P2, SEED = 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, 0x9E3779B97F4A7C15
 *   def step(v, w): v = ((v ^ w) * P1) & M; return v ^ (v >> 29)
 *   def mix(x): x ^= x >> 33; x = (x * P2) & M; return x ^ (x >> 33)
 *   def df_hash64(data):
 *       lanes = [(SEED * (j + 1)) & M for j in range(4)]
 *       padded = data + bytes(-len(data) % 8)
 *       for k in range(len(padded) // 8):
 *           lanes[k % 4] = step(lanes[k % 4], int.from_bytes(padded[8*k:8*k+8], "little"))
 *       h = (len(data) * P2) & M
 *       for v in lanes: h = step(h, mix(v))
 *       return h
 * over the bytes (37 * i + 11) mod 256, i = 0..n-1. */
/* df_checksum: streaming equals one shot, and known answers printed by
 * `xxhsum -H3` (xxHash 0.8.1) for the bytes (37 * i + 11) mod 256,
 * i = 0..n-1 (n = 0 gives XXH3-64's published empty-input value). */
static void test_checksum_is_xxh3(void **state) {
    static const struct {
        size_t n;
        uint64_t hash;
    } known[] = {
        {0, 0x2d06800538d394c2ULL},   {1, 0x4a4139caf4136257ULL},   {3, 0x505118c313121c0eULL},
        {16, 0x2e4359e2a04a5e32ULL},  {17, 0xf60c53684bbc489dULL},  {128, 0x5c6ab7b5b2360539ULL},
        {129, 0x45fabbd183de7649ULL}, {240, 0xc0796428068cd12eULL}, {241, 0x859dc8ab6dd85c7cULL},
        {1000, 0x35b90186550dbb50ULL},
    };
    unsigned char data[1000];
    for (int i = 0; i < 1000; i++) data[i] = (unsigned char)(i * 37 + 11);
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
        uint64_t h = df_checksum(data, known[k].n);
        if (h != known[k].hash)
            fail_msg("df_checksum of %zu bytes: %016llx, xxhsum -H3 %016llx", known[k].n, (unsigned long long)h,
                     (unsigned long long)known[k].hash);
    }
    for (size_t piece = 1; piece < 300; piece += 37) {
        DfChecksum *c = df_checksum_new();
        for (size_t at = 0; at < sizeof data; at += piece)
            df_checksum_update(c, data + at, at + piece <= sizeof data ? piece : sizeof data - at);
        assert_true(df_checksum_final(c) == known[9].hash);
        df_checksum_free(c);
    }
}

static void test_hash_known_answers(void **state) {
    static const struct {
        size_t n;
        uint64_t hash;
    } known[] = {
        {0, 0x0949C66232806C86ULL},  {1, 0x05284C7FCB44A4E2ULL},  {7, 0x921941370D788A0BULL},
        {8, 0x232753760C988B1DULL},  {31, 0xFF6279A78149B0ACULL}, {32, 0xC0CECD2D962BA5F5ULL},
        {33, 0x7302DB7DAAF92ADFULL}, {100, 0xDAD92BCC42C6B1D8ULL}, {1000, 0xEB18561438C355BEULL},
    };
    unsigned char data[1000];
    for (int i = 0; i < 1000; i++) data[i] = (unsigned char)(i * 37 + 11);
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
        uint64_t h = df_hash64(data, known[k].n);
        if (h != known[k].hash)
            fail_msg("df_hash64 of %zu bytes: %016llx, reference %016llx", known[k].n, (unsigned long long)h,
                     (unsigned long long)known[k].hash);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_random_access),
        cmocka_unit_test(test_empty_store),
        cmocka_unit_test(test_flipped_payload_byte_fails_checksum),
        cmocka_unit_test(test_truncated_file),
        cmocka_unit_test(test_bad_magic),
        cmocka_unit_test(test_wrong_version),
        cmocka_unit_test(test_payload_checksum_is_xxh3_of_file_tail),
        cmocka_unit_test(test_version_1_store_still_read),
        cmocka_unit_test(test_header_checksum),
        cmocka_unit_test(test_section_past_end),
        cmocka_unit_test(test_section_sizes_and_order),
        cmocka_unit_test(test_offsets_table),
        cmocka_unit_test(test_writer_rejects_bad_samples),
        cmocka_unit_test(test_aborted_writer_leaves_nothing),
        cmocka_unit_test(test_failed_commit_leaves_nothing),
        cmocka_unit_test(test_hash_streaming_and_sensitivity),
        cmocka_unit_test(test_hash_known_answers),
        cmocka_unit_test(test_checksum_is_xxh3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
