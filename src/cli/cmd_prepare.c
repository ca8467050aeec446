/* dflash prepare: JSONL records -> token store.
 *
 * Input lines are read in chunks; each chunk is parsed and tokenized in
 * parallel (the tokenizer is immutable and thread-safe) and then written in
 * input order, so the store's sample order is the order of the input lines,
 * file after file. Bad records are classified, counted and either skipped or
 * fatal (--on-bad-record). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/buffer.h"
#include "base/clock.h"
#include "base/progress.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "formats/jsonl.h"
#include "formats/token_store.h"
#include "text/tokenizer.h"

enum { RECORDS_PER_THREAD = 256, EXAMPLES_PER_KIND = 3, RECORD_MSG_MAX = 320 };

typedef enum {
    BAD_NONE = -1,
    BAD_JSON,
    BAD_MISSING_FIELD,
    BAD_WRONG_TYPE,
    BAD_ID_RANGE,
    BAD_MASK,
    BAD_EMPTY,
    BAD_NO_LOSS,
    BAD_TOO_LONG,
    BAD_TOKENIZE,
    BAD_KIND_COUNT
} BadKind;

static const char *const BAD_KIND_NAMES[BAD_KIND_COUNT] = {
    "invalid JSON", "missing field",  "wrong type", "id out of range", "bad loss mask",
    "empty sample", "no loss tokens", "too long",   "tokenizer error",
};

typedef struct PrepareOptions {
    const char *tokenizer, *output, *on_bad_record;
    DfStringList inputs;
    int max_length, threads;
    int fail_on_bad; /* from on_bad_record */
} PrepareOptions;

typedef struct ByteVec {
    uint8_t *data;
    size_t len, cap;
} ByteVec;

/* One input line and what became of it. */
typedef struct Record {
    size_t text_at, text_len; /* in the chunk's text arena */
    int64_t line_no;
    DfI32Vec ids;
    ByteVec mask;
    BadKind bad;
    char msg[RECORD_MSG_MAX];
} Record;

typedef struct Chunk {
    DfByteBuf text; /* the lines, each NUL-terminated, one after another */
    Record *records;
    int n, cap;
} Chunk;

typedef struct BadLog {
    int64_t count[BAD_KIND_COUNT];
    char example[BAD_KIND_COUNT][EXAMPLES_PER_KIND][RECORD_MSG_MAX + 256];
} BadLog;

typedef struct PrepareStats {
    int64_t records, samples, tokens, loss_tokens;
    uint64_t bytes_done, bytes_total;
} PrepareStats;

typedef struct PrepareContext {
    const PrepareOptions *opt;
    const DfTokenizer *tok;
    int vocab_size;
    DfTokenStoreWriter *writer;
    PrepareStats stats;
    BadLog *bad;
    DfProgress progress;
    double start_s;
} PrepareContext;

/* ---- one record --------------------------------------------------------- */

static void bytevec_push(ByteVec *v, uint8_t x, size_t count) {
    if (v->len + count > v->cap) {
        size_t cap = v->cap ? v->cap : 64;
        while (cap < v->len + count) cap *= 2;
        v->data = df_xrealloc(v->data, cap, "loss mask");
        v->cap = cap;
    }
    memset(v->data + v->len, x, count);
    v->len += count;
}

__attribute__((format(printf, 3, 4))) static void mark_bad(Record *r, BadKind kind, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
    r->bad = kind;
}

static void encode_prompt_response(const PrepareContext *ctx, Record *r, const cJSON *prompt, const cJSON *response) {
    if (!prompt || !response) {
        mark_bad(r, BAD_MISSING_FIELD, "missing field \"%s\"", prompt ? "response" : "prompt");
        return;
    }
    if (!cJSON_IsString(prompt) || !cJSON_IsString(response)) {
        mark_bad(r, BAD_WRONG_TYPE, "field \"%s\" is not a string", cJSON_IsString(prompt) ? "response" : "prompt");
        return;
    }
    DfError err = {{0}};
    const char *texts[2] = {prompt->valuestring, response->valuestring};
    for (int part = 0; part < 2; part++) { /* encoded separately: the boundary is exact */
        size_t before = r->ids.len;
        if (df_tokenizer_encode(ctx->tok, texts[part], strlen(texts[part]), &r->ids, &err) != 0) {
            mark_bad(r, BAD_TOKENIZE, "cannot tokenize the %s: %s", part ? "response" : "prompt", err.msg);
            return;
        }
        bytevec_push(&r->mask, (uint8_t)part, r->ids.len - before);
    }
}

/* An element of input_ids / loss_mask as an integer, or -1 with *ok = 0. */
static double json_integer(const cJSON *item, int *ok) {
    if (cJSON_IsBool(item)) return *ok = 1, cJSON_IsTrue(item) ? 1.0 : 0.0;
    *ok = cJSON_IsNumber(item) && item->valuedouble == floor(item->valuedouble);
    return *ok ? item->valuedouble : -1;
}

static void read_pretokenized(const PrepareContext *ctx, Record *r, const cJSON *ids, const cJSON *mask) {
    if (!ids || !mask) {
        mark_bad(r, BAD_MISSING_FIELD, "missing field \"%s\"", ids ? "loss_mask" : "input_ids");
        return;
    }
    if (!cJSON_IsArray(ids) || !cJSON_IsArray(mask)) {
        mark_bad(r, BAD_WRONG_TYPE, "field \"%s\" is not an array", cJSON_IsArray(ids) ? "loss_mask" : "input_ids");
        return;
    }
    int n_ids = cJSON_GetArraySize(ids), n_mask = cJSON_GetArraySize(mask);
    if (n_ids != n_mask) {
        mark_bad(r, BAD_MASK, "loss_mask has %d entries but input_ids has %d", n_mask, n_ids);
        return;
    }
    int k = 0, ok;
    for (const cJSON *it = ids->child; it; it = it->next, k++) {
        double v = json_integer(it, &ok);
        if (!ok || cJSON_IsBool(it)) {
            mark_bad(r, BAD_WRONG_TYPE, "input_ids[%d] is not an integer", k);
            return;
        }
        if (v < 0 || v >= ctx->vocab_size) {
            mark_bad(r, BAD_ID_RANGE, "input_ids[%d] = %.0f is out of range (vocabulary size %d)", k, v,
                     ctx->vocab_size);
            return;
        }
        df_i32vec_push(&r->ids, (int32_t)v);
    }
    k = 0;
    for (const cJSON *it = mask->child; it; it = it->next, k++) {
        double v = json_integer(it, &ok);
        if (!ok || (v != 0 && v != 1)) {
            mark_bad(r, BAD_MASK, "loss_mask[%d] is not 0 or 1", k);
            return;
        }
        bytevec_push(&r->mask, (uint8_t)v, 1);
    }
}

static void check_lengths(const PrepareContext *ctx, Record *r) {
    if (r->ids.len == 0) {
        mark_bad(r, BAD_EMPTY, "empty sample (no tokens)");
        return;
    }
    size_t loss = 0;
    for (size_t i = 0; i < r->mask.len; i++) loss += r->mask.data[i];
    if (loss == 0) {
        mark_bad(r, BAD_NO_LOSS, "no loss tokens (empty response or all-zero loss_mask)");
        return;
    }
    if (r->ids.len > (size_t)ctx->opt->max_length)
        mark_bad(r, BAD_TOO_LONG, "too long: %zu tokens, more than --max-length %d", r->ids.len, ctx->opt->max_length);
}

/* Parses and tokenizes one line; runs on any thread. */
static void tokenize_record(const PrepareContext *ctx, const char *text, size_t len, Record *r) {
    r->ids.len = r->mask.len = 0;
    r->bad = BAD_NONE;
    const char *end = NULL;
    cJSON *root = memchr(text, '\0', len) ? NULL : cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
    if (!root) {
        size_t column = end && end >= text ? (size_t)(end - text) + 1 : 1;
        mark_bad(r, BAD_JSON, "invalid JSON (parse error at column %zu)", column);
        return;
    }
    if (!cJSON_IsObject(root)) {
        mark_bad(r, BAD_WRONG_TYPE, "the record is not a JSON object");
    } else {
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(root, "input_ids");
        const cJSON *mask = cJSON_GetObjectItemCaseSensitive(root, "loss_mask");
        const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
        const cJSON *response = cJSON_GetObjectItemCaseSensitive(root, "response");
        if (ids || mask) read_pretokenized(ctx, r, ids, mask);
        else if (prompt || response) encode_prompt_response(ctx, r, prompt, response);
        else mark_bad(r, BAD_MISSING_FIELD, "missing fields: neither \"prompt\"/\"response\" nor \"input_ids\"/\"loss_mask\"");
        if (r->bad == BAD_NONE) check_lengths(ctx, r);
    }
    cJSON_Delete(root);
}

/* ---- chunks ------------------------------------------------------------- */

/* Reads up to chunk->cap lines. Returns the number read, or -1. */
static int read_chunk(DfJsonlReader *in, Chunk *c, DfError *err) {
    c->n = 0;
    c->text.len = 0;
    while (c->n < c->cap) {
        const char *line;
        size_t len;
        int64_t line_no;
        int rc = df_jsonl_next(in, &line, &len, &line_no, err);
        if (rc < 0) return -1;
        if (rc == 0) break;
        Record *r = &c->records[c->n++];
        r->text_at = c->text.len;
        r->text_len = len;
        r->line_no = line_no;
        df_bytebuf_append(&c->text, line, len + 1); /* with its NUL */
    }
    return c->n;
}

static void record_bad(BadLog *log, BadKind kind, const char *where) {
    int64_t seen = log->count[kind]++;
    if (seen < EXAMPLES_PER_KIND) snprintf(log->example[kind][seen], sizeof log->example[kind][seen], "%s", where);
}

/* Writes the chunk's good records in order; handles the bad ones. */
static int write_chunk(PrepareContext *ctx, const char *file, const Chunk *c, DfError *err) {
    for (int i = 0; i < c->n; i++) {
        const Record *r = &c->records[i];
        ctx->stats.records++;
        if (r->bad != BAD_NONE) {
            if (ctx->opt->fail_on_bad)
                return df_fail(err, "%s:%lld: %s (stopping: --on-bad-record fail)", file, (long long)r->line_no, r->msg);
            char where[RECORD_MSG_MAX + 256];
            snprintf(where, sizeof where, "%s:%lld: %s", file, (long long)r->line_no, r->msg);
            record_bad(ctx->bad, r->bad, where);
            continue;
        }
        if (df_token_store_writer_append(ctx->writer, r->ids.data, r->mask.data, r->ids.len, err) != 0)
            return df_context(err, "%s:%lld", file, (long long)r->line_no);
        ctx->stats.samples++;
        ctx->stats.tokens += (int64_t)r->ids.len;
        for (size_t k = 0; k < r->mask.len; k++) ctx->stats.loss_tokens += r->mask.data[k];
    }
    return 0;
}

static void show_progress(PrepareContext *ctx, uint64_t bytes_done) {
    double elapsed = df_now_seconds() - ctx->start_s;
    char extra[128];
    snprintf(extra, sizeof extra, "%lld records, %.0f records/s, %.2f MB/s", (long long)ctx->stats.records,
             elapsed > 0 ? (double)ctx->stats.records / elapsed : 0.0, elapsed > 0 ? 1e-6 * (double)bytes_done / elapsed : 0.0);
    df_progress_update(&ctx->progress, (int64_t)(bytes_done / 1000), extra);
}

static int process_file(PrepareContext *ctx, const char *file, Chunk *c, DfError *err) {
    DfJsonlReader in;
    if (df_jsonl_open(&in, file, err) != 0) return -1;
    int threads = ctx->opt->threads > 0 ? ctx->opt->threads : omp_get_max_threads();
    int rc = 0, n;
    while ((n = read_chunk(&in, c, err)) > 0) {
        const char *text = c->text.data;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
        for (int i = 0; i < n; i++)
            tokenize_record(ctx, text + c->records[i].text_at, c->records[i].text_len, &c->records[i]);
        if ((rc = write_chunk(ctx, file, c, err)) != 0) break;
        show_progress(ctx, ctx->stats.bytes_done + df_jsonl_bytes_read(&in));
    }
    if (n < 0) rc = -1;
    ctx->stats.bytes_done += df_jsonl_bytes_read(&in);
    df_jsonl_close(&in);
    return rc;
}

/* ---- the command -------------------------------------------------------- */

static void print_summary(const PrepareContext *ctx, double seconds) {
    const PrepareStats *s = &ctx->stats;
    int64_t skipped = 0;
    for (int k = 0; k < BAD_KIND_COUNT; k++) skipped += ctx->bad->count[k];
    printf("prepare: wrote %lld samples, %lld tokens (%lld loss tokens) to %s\n", (long long)s->samples,
           (long long)s->tokens, (long long)s->loss_tokens, ctx->opt->output);
    if (skipped > 0) {
        printf("prepare: skipped %lld of %lld records:\n", (long long)skipped, (long long)s->records);
        for (int k = 0; k < BAD_KIND_COUNT; k++) {
            if (!ctx->bad->count[k]) continue;
            printf("  %s: %lld\n", BAD_KIND_NAMES[k], (long long)ctx->bad->count[k]);
            for (int e = 0; e < EXAMPLES_PER_KIND && e < ctx->bad->count[k]; e++) printf("    %s\n", ctx->bad->example[k][e]);
        }
    }
    printf("prepare: %lld records, %.2f MB in %.2f s: %.0f records/s, %.2f MB/s\n", (long long)s->records,
           1e-6 * (double)s->bytes_done, seconds, seconds > 0 ? (double)s->records / seconds : 0.0,
           seconds > 0 ? 1e-6 * (double)s->bytes_done / seconds : 0.0);
}

static int check_inputs(const PrepareOptions *opt, uint64_t *total_bytes, DfError *err) {
    *total_bytes = 0;
    for (int i = 0; i < opt->inputs.count; i++) {
        struct stat st;
        if (stat(opt->inputs.items[i], &st) != 0) return df_fail_errno(err, "%s: cannot read input", opt->inputs.items[i]);
        *total_bytes += (uint64_t)st.st_size;
    }
    return 0;
}

static int run_prepare(PrepareContext *ctx, DfError *err) {
    const PrepareOptions *opt = ctx->opt;
    int threads = opt->threads > 0 ? opt->threads : omp_get_max_threads();
    Chunk c = {.cap = RECORDS_PER_THREAD * threads};
    c.records = df_xcalloc((size_t)c.cap, sizeof *c.records, "record chunk");
    ctx->writer = df_token_store_writer_open(opt->output, ctx->vocab_size, df_tokenizer_fingerprint(ctx->tok), err);
    int rc = ctx->writer ? 0 : -1;
    df_progress_start(&ctx->progress, "prepare", "kB", (int64_t)(ctx->stats.bytes_total / 1000));
    for (int i = 0; rc == 0 && i < opt->inputs.count; i++) rc = process_file(ctx, opt->inputs.items[i], &c, err);
    if (rc == 0 && ctx->stats.samples == 0)
        rc = df_fail(err, "no usable records in the input (%lld read); nothing written", (long long)ctx->stats.records);
    if (rc == 0) {
        char extra[64];
        snprintf(extra, sizeof extra, "%lld records", (long long)ctx->stats.records);
        df_progress_finish(&ctx->progress, (int64_t)(ctx->stats.bytes_done / 1000), extra);
        rc = df_token_store_writer_commit(ctx->writer, err);
    } else {
        df_token_store_writer_abort(ctx->writer);
    }
    for (int i = 0; i < c.cap; i++) df_i32vec_free(&c.records[i].ids), free(c.records[i].mask.data);
    free(c.records);
    df_bytebuf_free(&c.text);
    return rc;
}

int df_cmd_prepare(int argc, char **argv) {
    PrepareOptions opt = {.max_length = 3072, .on_bad_record = "skip"};
    const DfOption options[] = {
        {"tokenizer", DF_OPT_STRING, &opt.tokenizer, "DIR", "tokenizer.json, or the model directory holding it", 1},
        {"input", DF_OPT_STRING_LIST, &opt.inputs, "FILE", "JSONL records; repeat for several files, read in order", 1},
        {"output", DF_OPT_STRING, &opt.output, "STORE", "token store to write (atomically)", 1},
        {"max-length", DF_OPT_INT, &opt.max_length, "N", "longest sample in tokens; longer records are bad (default 3072)", 0},
        {"on-bad-record", DF_OPT_STRING, &opt.on_bad_record, "skip|fail", "skip bad records and count them, or stop at the first (default skip)", 0},
        {"threads", DF_OPT_INT, &opt.threads, "N", "tokenizer threads (default: all cores)", 0},
    };
    const DfCommandSpec spec = {
        "prepare", "tokenize JSONL records into a token store for training", NULL,
        "Records: {\"prompt\": str, \"response\": str} (loss on the response tokens only), or\n"
        "{\"input_ids\": [int, ...], \"loss_mask\": [0|1, ...]} (already tokenized, same length).\n"
        "Bad records (invalid JSON, missing or mistyped fields, ids outside the vocabulary, mask\n"
        "mismatches, empty samples, no loss tokens, longer than --max-length) are reported by file:line.",
        options, DF_COUNT(options)};
    DfParsedArgs parsed;
    DfError err = {{0}};
    if (df_parse_args(&spec, argc, argv, &parsed, &err) != 0) {
        fprintf(stderr, "dflash %s\n", err.msg);
        return 2;
    }
    if (parsed.help_shown) return 0;
    opt.fail_on_bad = strcmp(opt.on_bad_record, "fail") == 0;
    if (!opt.fail_on_bad && strcmp(opt.on_bad_record, "skip") != 0) {
        fprintf(stderr, "dflash prepare: --on-bad-record must be skip or fail, not '%s'\n", opt.on_bad_record);
        return 2;
    }
    if (opt.max_length <= 0 || opt.threads < 0) {
        fprintf(stderr, "dflash prepare: --max-length must be positive and --threads non-negative\n");
        return 2;
    }

    PrepareContext ctx = {.opt = &opt, .bad = df_xcalloc(1, sizeof(BadLog), "bad-record log")};
    int rc = check_inputs(&opt, &ctx.stats.bytes_total, &err);
    DfTokenizer *tok = rc == 0 ? df_tokenizer_load(opt.tokenizer, &err) : NULL;
    if (tok) {
        ctx.tok = tok;
        ctx.vocab_size = df_tokenizer_vocab_size(tok);
        ctx.start_s = df_now_seconds();
        rc = run_prepare(&ctx, &err);
        if (rc == 0) print_summary(&ctx, df_now_seconds() - ctx.start_s);
    } else {
        rc = -1;
    }
    if (rc != 0) fprintf(stderr, "dflash prepare: %s\n", err.msg);
    if (tok) df_tokenizer_free(tok);
    free(ctx.bad);
    return rc == 0 ? 0 : 1;
}
