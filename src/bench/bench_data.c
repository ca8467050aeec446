#include "bench/bench_data.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "formats/jsonl.h"
#include "formats/token_store.h"
#include "json/json_parse.h"

static void add_text(DfBenchTexts *t, const char *s, size_t *cap) {
    if (t->count == *cap) {
        *cap = *cap ? *cap * 2 : 256;
        t->text = df_xrealloc(t->text, *cap * sizeof *t->text, "bench texts");
        t->len = df_xrealloc(t->len, *cap * sizeof *t->len, "bench texts");
    }
    t->text[t->count] = df_xstrdup(s);
    t->len[t->count] = strlen(s);
    t->bytes += t->len[t->count];
    t->count++;
}

int df_bench_texts_load(DfBenchTexts *t, const char *path, DfError *err) {
    memset(t, 0, sizeof *t);
    DfJsonlReader r;
    if (df_jsonl_open(&r, path, err) != 0) return -1;
    size_t cap = 0;
    const char *line;
    size_t len;
    int64_t line_no;
    int rc;
    while ((rc = df_jsonl_next(&r, &line, &len, &line_no, err)) == 1) {
        cJSON *rec = NULL;
        if (df_json_parse(line, len, path, (long)line_no, &rec, err) == DF_JSON_NUL) {
            rc = -1;
            break;
        }
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(rec, "prompt");
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(rec, "response");
        if (!cJSON_IsString(p) || !cJSON_IsString(q)) {
            cJSON_Delete(rec);
            rc = df_fail(err, "%s:%lld: expected a {\"prompt\", \"response\"} record", path, (long long)line_no);
            break;
        }
        add_text(t, p->valuestring, &cap);
        add_text(t, q->valuestring, &cap);
        cJSON_Delete(rec);
    }
    df_jsonl_close(&r);
    if (rc == 0 && t->count == 0) rc = df_fail(err, "%s: no records", path);
    if (rc != 0) df_bench_texts_free(t);
    return rc < 0 ? -1 : 0;
}

void df_bench_texts_free(DfBenchTexts *t) {
    for (size_t i = 0; i < t->count; i++) free(t->text[i]);
    free(t->text);
    free(t->len);
    memset(t, 0, sizeof *t);
}

static int write_store(const char *path, const DfTokenizer *tok, const DfBenchTexts *t, DfError *err) {
    DfTokenStoreWriter *w =
        df_token_store_writer_open(path, df_tokenizer_vocab_size(tok), df_tokenizer_fingerprint(tok), err);
    if (!w) return -1;
    DfI32Vec ids = {0};
    uint8_t *mask = NULL;
    for (size_t i = 0; i < t->count; i++) {
        ids.len = 0;
        if (df_tokenizer_encode(tok, t->text[i], t->len[i], &ids, err) != 0) goto fail;
        if (ids.len == 0) continue;
        mask = df_xrealloc(mask, ids.len, "bench mask");
        memset(mask, 1, ids.len);
        if (df_token_store_writer_append(w, ids.data, mask, ids.len, err) != 0) goto fail;
    }
    df_i32vec_free(&ids);
    free(mask);
    return df_token_store_writer_commit(w, err);
fail:
    df_i32vec_free(&ids);
    free(mask);
    df_token_store_writer_abort(w);
    return -1;
}

int df_bench_store_access(const DfTokenizer *tok, const DfBenchTexts *t, double *ns_per_access, DfError *err) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/dflash-bench-%ld.store", (long)getpid());
    if (write_store(path, tok, t, err) != 0) return -1;
    DfTokenStore *s = df_token_store_open(path, 1, err);
    unlink(path); /* the mapping stays valid */
    if (!s) return -1;
    const int64_t n = df_token_store_num_samples(s), lookups = 1000000;
    uint64_t x = 0x9E3779B97F4A7C15ull, sum = 0;
    double t0 = df_now_seconds();
    for (int64_t i = 0; i < lookups; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        const int32_t *ids;
        const uint8_t *mask;
        int64_t len;
        if (df_token_store_sample(s, (int64_t)(x % (uint64_t)n), &ids, &mask, &len, err) != 0) {
            df_token_store_close(s);
            return -1;
        }
        sum += (uint64_t)ids[0] + mask[len - 1];
    }
    double elapsed = df_now_seconds() - t0;
    df_token_store_close(s);
    *ns_per_access = elapsed / (double)lookups * 1e9;
    return sum == 0 ? df_fail(err, "token store benchmark read only zeros") : 0;
}
