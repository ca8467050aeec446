/* The Arrow IPC reader against files written by pyarrow (tests/ref/arrow_ref.py):
 * every column shape, stream and file format, uncompressed / LZ4 / ZSTD,
 * several batches, nulls, a `datasets` folder; and the corrupt-file catalogue
 * (tests/malformed/arrow/), truncations and byte flips: each an error naming
 * the file, never a crash (run under AddressSanitizer to check the reads). */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mapped_file.h"
#include "formats/arrow.h"
#include "formats/arrow_dataset.h"

/* Cell i of a against the expected JSON value; where is for failure messages. */
static void check_cell(const DfArrowArray *a, int64_t i, const cJSON *want, const char *where) {
    if (cJSON_IsNull(want)) {
        if (!df_arrow_is_null(a, i)) fail_msg("%s: row %lld should be null", where, (long long)i);
        return;
    }
    if (df_arrow_is_null(a, i)) fail_msg("%s: row %lld is null", where, (long long)i);
    switch (a->field->kind) {
    case DF_ARROW_INT:
        assert_true(cJSON_IsNumber(want));
        if ((double)df_arrow_int(a, i) != want->valuedouble)
            fail_msg("%s: row %lld is %lld, want %.0f", where, (long long)i, (long long)df_arrow_int(a, i), want->valuedouble);
        break;
    case DF_ARROW_STRING: {
        size_t len;
        const char *s = df_arrow_string(a, i, &len);
        assert_true(cJSON_IsString(want));
        if (len != strlen(want->valuestring) || memcmp(s, want->valuestring, len) != 0)
            fail_msg("%s: row %lld is \"%.*s\", want \"%s\"", where, (long long)i, (int)len, s, want->valuestring);
        break;
    }
    case DF_ARROW_LIST: {
        int64_t start, end;
        df_arrow_list_range(a, i, &start, &end);
        assert_true(cJSON_IsArray(want));
        assert_int_equal(end - start, cJSON_GetArraySize(want));
        int64_t k = start;
        for (const cJSON *e = want->child; e; e = e->next, k++) check_cell(&a->children[0], k, e, where);
        break;
    }
    case DF_ARROW_STRUCT: {
        assert_true(cJSON_IsObject(want));
        assert_int_equal(a->field->n_children, cJSON_GetArraySize(want));
        for (const cJSON *e = want->child; e; e = e->next) {
            int c = df_arrow_field_find_child(a->field, e->string);
            assert_true(c >= 0);
            check_cell(&a->children[c], i, e, where);
        }
        break;
    }
    default:
        fail_msg("%s: unexpected column kind", where);
    }
}

/* Reads every batch of path and compares the columns with want ("columns":
 * {name: {"type", "values"}} or {name: values}); returns the batch count. */
static int check_file(const char *path, const cJSON *columns, const cJSON *batch_rows, const char *compression) {
    DfError err = {{0}};
    DfArrowDataset *ds = df_arrow_dataset_open(path, &err);
    if (!ds) fail_msg("%s", err.msg);
    const DfArrowSchema *schema = df_arrow_dataset_schema(ds);
    assert_int_equal(schema->n_fields, cJSON_GetArraySize(columns));
    for (const cJSON *c = columns->child; c; c = c->next) {
        int k = df_arrow_schema_find(schema, c->string);
        if (k < 0) fail_msg("%s: no column %s", path, c->string);
        const cJSON *type = cJSON_GetObjectItem(c, "type");
        if (type) {
            char buf[256];
            df_arrow_type_string(&schema->fields[k], buf, sizeof buf);
            assert_string_equal(buf, type->valuestring);
        }
    }
    const DfArrowBatch *b;
    const DfArrowReader *shard;
    int64_t row0 = 0;
    int n_batches = 0, rc;
    while ((rc = df_arrow_dataset_next_batch(ds, &b, &shard, &err)) == 1) {
        if (batch_rows) assert_int_equal(b->length, cJSON_GetArrayItem(batch_rows, n_batches)->valueint);
        if (compression) assert_string_equal(df_arrow_compression(shard), compression);
        for (const cJSON *c = columns->child; c; c = c->next) {
            const cJSON *values = cJSON_GetObjectItem(c, "values") ? cJSON_GetObjectItem(c, "values") : c;
            const DfArrowArray *a = &b->columns[df_arrow_schema_find(schema, c->string)];
            char where[512];
            snprintf(where, sizeof where, "%s column %s batch %d", path, c->string, n_batches);
            for (int64_t i = 0; i < b->length; i++) check_cell(a, i, cJSON_GetArrayItem(values, (int)(row0 + i)), where);
        }
        row0 += b->length;
        n_batches++;
    }
    if (rc < 0) fail_msg("%s", err.msg);
    const cJSON *first = columns->child;
    const cJSON *values = cJSON_GetObjectItem(first, "values") ? cJSON_GetObjectItem(first, "values") : first;
    assert_int_equal(row0, cJSON_GetArraySize(values));
    df_arrow_dataset_close(ds);
    return n_batches;
}

static void test_every_format_and_codec(void **state) {
    (void)state;
    cJSON *want = df_test_load_json("tests/fixtures/arrow/all_types.json");
    const cJSON *batches = cJSON_GetObjectItem(want, "batches");
    const char *formats[] = {"stream", "file"}, *codecs[] = {"none", "lz4", "zstd"};
    for (int f = 0; f < 2; f++)
        for (int c = 0; c < 3; c++) {
            char rel[128];
            snprintf(rel, sizeof rel, "tests/fixtures/arrow/all_%s_%s.arrow", formats[f], codecs[c]);
            int n = check_file(df_test_path(rel), cJSON_GetObjectItem(want, "columns"), batches, codecs[c]);
            assert_int_equal(n, cJSON_GetArraySize(batches));
            DfError err = {{0}};
            DfArrowReader *r = df_arrow_open(df_test_path(rel), &err);
            assert_non_null(r);
            assert_int_equal(df_arrow_is_file_format(r), f == 1);
            df_arrow_close(r);
        }
    cJSON_Delete(want);
}

static void test_empty_stream(void **state) {
    (void)state;
    DfError err = {{0}};
    DfArrowReader *r = df_arrow_open(df_test_path("tests/fixtures/arrow/empty_stream.arrow"), &err);
    assert_non_null(r);
    assert_int_equal(df_arrow_schema(r)->n_fields, 10);
    const DfArrowBatch *b;
    assert_int_equal(df_arrow_next_batch(r, &b, &err), 0);
    df_arrow_close(r);
}

static void test_datasets_folder(void **state) {
    (void)state;
    cJSON *want = df_test_load_json("tests/fixtures/arrow/dataset.json");
    DfError err = {{0}};
    const char *dir = df_test_path("tests/fixtures/arrow/dataset");
    DfArrowDataset *ds = df_arrow_dataset_open(dir, &err);
    assert_non_null(ds);
    assert_int_equal(df_arrow_dataset_num_files(ds), 2);
    assert_true(df_arrow_dataset_has_info(ds));
    df_arrow_dataset_close(ds);
    assert_int_equal(check_file(dir, cJSON_GetObjectItem(want, "columns"), NULL, NULL), 2);
    cJSON_Delete(want);
}

static void expect_failure(const char *path) {
    DfError err = {{0}};
    DfArrowReader *r = df_arrow_open(path, &err);
    int rc = r ? 0 : -1;
    const DfArrowBatch *b;
    while (rc == 0 && (rc = df_arrow_next_batch(r, &b, &err)) == 1) rc = 0;
    df_arrow_close(r);
    if (rc >= 0) fail_msg("%s was read without an error", path);
    if (!strstr(err.msg, path)) fail_msg("the error does not name the file: %s", err.msg);
}

static void test_malformed_catalogue(void **state) {
    (void)state;
    const char *dir = df_test_path("tests/malformed/arrow");
    char base[1024];
    snprintf(base, sizeof base, "%s", dir);
    DIR *d = opendir(base);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", base, e->d_name);
        expect_failure(path);
        n++;
    }
    closedir(d);
    assert_true(n >= 10);
}

static void test_bad_datasets_folders(void **state) {
    (void)state;
    char *dir = df_test_tmpdir("arrow_ds");
    char path[1024];
    DfError err = {{0}};
    assert_null(df_arrow_dataset_open(dir, &err)); /* no state.json */
    assert_non_null(strstr(err.msg, dir));
    snprintf(path, sizeof path, "%s/state.json", dir);
    df_test_write_file(path, "{\"_data_files\": [{\"filename\": \"../escape.arrow\"}]}");
    assert_null(df_arrow_dataset_open(dir, &err));
    assert_non_null(strstr(err.msg, "state.json"));
    df_test_write_file(path, "{\"_data_files\": [{\"filename\": \"missing.arrow\"}]}");
    assert_null(df_arrow_dataset_open(dir, &err));
    assert_non_null(strstr(err.msg, "missing.arrow"));
    df_test_rmtree(dir);
    free(dir);
}

/* Reads path to the end; returns the rows read, or -1 after an error that names it. */
static int64_t read_rows(const char *path) {
    DfError err = {{0}};
    DfArrowReader *r = df_arrow_open(path, &err);
    if (!r) {
        if (!strstr(err.msg, path)) fail_msg("the error does not name the file: %s", err.msg);
        return -1;
    }
    const DfArrowBatch *b;
    int64_t rows = 0;
    int rc;
    while ((rc = df_arrow_next_batch(r, &b, &err)) == 1) {
        rows += b->length;
        for (int c = 0; c < b->n_columns; c++) { /* touch every cell */
            const DfArrowArray *a = &b->columns[c];
            for (int64_t i = 0; i < a->length; i++) {
                if (df_arrow_is_null(a, i)) continue;
                if (a->field->kind == DF_ARROW_INT) rows += df_arrow_int(a, i) == 42;
                else if (a->field->kind == DF_ARROW_STRING) { size_t len; rows += df_arrow_string(a, i, &len)[0] == 1 && len; }
            }
        }
    }
    df_arrow_close(r);
    if (rc < 0 && !strstr(err.msg, path)) fail_msg("the error does not name the file: %s", err.msg);
    return rc < 0 ? -1 : rows;
}

/* Every prefix of a file, and every single-byte change of its metadata: an
 * error or a readable table, never a crash or an out-of-bounds read. */
static void test_truncations_and_flips(void **state) {
    (void)state;
    const char *sources[] = {"tests/fixtures/arrow/all_stream_zstd.arrow", "tests/fixtures/arrow/all_file_lz4.arrow",
                             "tests/fixtures/arrow/messages_stream_lz4.arrow"};
    char *dir = df_test_tmpdir("arrow_fuzz");
    char path[1024];
    snprintf(path, sizeof path, "%s/x.arrow", dir);
    for (int s = 0; s < 3; s++) {
        DfError err = {{0}};
        DfMappedFile f;
        assert_int_equal(df_mapped_file_open(&f, df_test_path(sources[s]), &err), 0);
        int failures = 0;
        for (size_t n = 0; n < f.size; n += 11) {
            FILE *out = fopen(path, "wb");
            fwrite(f.data, 1, n, out);
            fclose(out);
            failures += read_rows(path) < 0;
        }
        assert_true(failures > 0);
        unsigned char *copy = malloc(f.size);
        for (size_t at = 0; at < f.size; at += 5) {
            memcpy(copy, f.data, f.size);
            copy[at] ^= (unsigned char)(0x5A + at);
            FILE *out = fopen(path, "wb");
            fwrite(copy, 1, f.size, out);
            fclose(out);
            read_rows(path);
        }
        free(copy);
        df_mapped_file_close(&f);
    }
    df_test_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_format_and_codec), cmocka_unit_test(test_empty_stream),
        cmocka_unit_test(test_datasets_folder),        cmocka_unit_test(test_malformed_catalogue),
        cmocka_unit_test(test_bad_datasets_folders),   cmocka_unit_test(test_truncations_and_flips),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
