/* dflash prepare: JSONL records -> token store.
 *
 * Input lines are read in chunks; each chunk is parsed and tokenized in
 * parallel (the tokenizer is immutable and thread-safe) and then written in
 * input order, so the store's sample order is the order of the input lines,
 * file after file. Bad records are classified, counted and either skipped or
 * fatal (--on-bad-record). */
#include <cjson/cJSON.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/buffer.h"
#include "base/clock.h"
#include "base/progress.h"
#include "base/signals.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/prepare_record.h"
#include "formats/jsonl.h"
#include "formats/token_store.h"
#include "text/tokenizer.h"

enum { RECORDS_PER_THREAD = 256, EXAMPLES_PER_KIND = 3 };

typedef struct PrepareOptions {
    const char *tokenizer, *output, *on_bad_record;
    DfStringList inputs;
    int max_length, threads;
    int fail_on_bad; /* from on_bad_record */
} PrepareOptions;

/* One input line and what became of it. */
typedef struct Record {
    size_t text_at, text_len; /* in the chunk's text arena */
    int64_t line_no;
    DfPreparedRecord out;
} Record;

typedef struct Chunk {
    DfByteBuf text; /* the lines, each NUL-terminated, one after another */
    Record *records;
    int n, cap;
} Chunk;

typedef struct BadLog {
    int64_t count[DF_BAD_KIND_COUNT];
    char example[DF_BAD_KIND_COUNT][EXAMPLES_PER_KIND][DF_RECORD_MSG_MAX + 256];
} BadLog;

typedef struct PrepareStats {
    int64_t records, samples, tokens, loss_tokens;
    uint64_t bytes_done, bytes_total;
} PrepareStats;

typedef struct PrepareContext {
    const PrepareOptions *opt;
    const DfTokenizer *tok;
    int vocab_size;
    DfRecordRules rules;
    DfTokenStoreWriter *writer;
    PrepareStats stats;
    BadLog *bad;
    DfProgress progress;
    double start_s;
} PrepareContext;

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

static void record_bad(BadLog *log, DfBadRecord kind, const char *where) {
    int64_t seen = log->count[kind]++;
    if (seen < EXAMPLES_PER_KIND) snprintf(log->example[kind][seen], sizeof log->example[kind][seen], "%s", where);
}

/* Writes the chunk's good records in order; handles the bad ones. */
static int write_chunk(PrepareContext *ctx, const char *file, const Chunk *c, DfError *err) {
    for (int i = 0; i < c->n; i++) {
        const DfPreparedRecord *r = &c->records[i].out;
        int64_t line_no = c->records[i].line_no;
        ctx->stats.records++;
        if (r->bad != DF_RECORD_OK) {
            if (ctx->opt->fail_on_bad)
                return df_fail(err, "%s:%lld: %s (stopping: --on-bad-record fail)", file, (long long)line_no, r->msg);
            char where[DF_RECORD_MSG_MAX + 256];
            snprintf(where, sizeof where, "%s:%lld: %s", file, (long long)line_no, r->msg);
            record_bad(ctx->bad, r->bad, where);
            continue;
        }
        if (df_token_store_writer_append(ctx->writer, r->ids.data, r->mask, r->ids.len, err) != 0)
            return df_context(err, "%s:%lld", file, (long long)line_no);
        ctx->stats.samples++;
        ctx->stats.tokens += (int64_t)r->ids.len;
        for (size_t k = 0; k < r->mask_len; k++) ctx->stats.loss_tokens += r->mask[k];
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
            df_prepare_record(&ctx->rules, text + c->records[i].text_at, c->records[i].text_len, &c->records[i].out);
        if ((rc = write_chunk(ctx, file, c, err)) != 0) break;
        show_progress(ctx, ctx->stats.bytes_done + df_jsonl_bytes_read(&in));
        int sig = df_stop_requested();
        if (sig) {
            rc = df_fail(err, "interrupted by %s at %s:%lld; nothing written", df_signal_name(sig), file,
                         (long long)c->records[n - 1].line_no);
            break;
        }
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
    for (int k = 0; k < DF_BAD_KIND_COUNT; k++) skipped += ctx->bad->count[k];
    printf("prepare: wrote %lld samples, %lld tokens (%lld loss tokens) to %s\n", (long long)s->samples,
           (long long)s->tokens, (long long)s->loss_tokens, ctx->opt->output);
    if (skipped > 0) {
        printf("prepare: skipped %lld of %lld records:\n", (long long)skipped, (long long)s->records);
        for (int k = 0; k < DF_BAD_KIND_COUNT; k++) {
            if (!ctx->bad->count[k]) continue;
            printf("  %s: %lld\n", df_bad_record_name((DfBadRecord)k), (long long)ctx->bad->count[k]);
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
    for (int i = 0; i < c.cap; i++) df_prepared_record_free(&c.records[i].out);
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

    /* SIGINT/SIGTERM: stop after the current chunk and drop the temporary store */
    if (df_stop_signals_install(&err) != 0) {
        fprintf(stderr, "dflash prepare: %s\n", err.msg);
        return 1;
    }
    PrepareContext ctx = {.opt = &opt, .bad = df_xcalloc(1, sizeof(BadLog), "bad-record log")};
    int rc = check_inputs(&opt, &ctx.stats.bytes_total, &err);
    DfTokenizer *tok = rc == 0 ? df_tokenizer_load(opt.tokenizer, &err) : NULL;
    if (tok) {
        ctx.tok = tok;
        ctx.vocab_size = df_tokenizer_vocab_size(tok);
        ctx.rules = (DfRecordRules){.tok = tok, .vocab_size = ctx.vocab_size, .max_length = opt.max_length};
        ctx.start_s = df_now_seconds();
        rc = run_prepare(&ctx, &err);
        if (rc == 0) print_summary(&ctx, df_now_seconds() - ctx.start_s);
    } else {
        rc = -1;
    }
    if (rc != 0) fprintf(stderr, "dflash prepare: %s\n", err.msg);
    if (tok) df_tokenizer_free(tok);
    free(ctx.bad);
    int sig = df_stop_requested();
    if (rc != 0 && sig) return 128 + sig; /* the shell convention for death by signal */
    return rc == 0 ? 0 : 1;
}
