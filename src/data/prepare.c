/* The prepare pipeline (see prepare.h). */
#include "data/prepare.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "base/buffer.h"
#include "base/clock.h"
#include "base/input_file.h"
#include "base/paths_apart.h"
#include "base/progress.h"
#include "base/signals.h"
#include "data/records.h"
#include "formats/arrow_dataset.h"
#include "formats/jsonl.h"
#include "formats/token_store.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

enum { RECORDS_PER_THREAD = 256, EXAMPLES_PER_KIND = DF_PREPARE_EXAMPLES_PER_KIND };

/* One input line (or Arrow row) and what became of it. */
typedef struct Record {
    size_t text_at, text_len; /* in the chunk's text arena */
    int64_t line_no;          /* Arrow: the row number in its file, from 0 */
    DfPreparedRecord out;
} Record;

typedef struct Chunk {
    DfByteBuf text; /* the lines, each NUL-terminated, one after another */
    Record *records;
    int n, cap;
} Chunk;

typedef struct PrepareContext {
    const DfPrepareOptions *opt;
    const DfTokenizer *tok;
    int vocab_size;
    const DfChatTemplate *chat; /* NULL when the tokenizer has none we render */
    char chat_error[DF_ERROR_MAX];
    DfRecordRules rules;        /* what the record parser needs of the above */
    DfTokenStoreWriter *writer;
    DfPrepareSummary *stats;    /* the figures and the bad-record log */
    int arrow; /* the file being read is Arrow: records are rows */
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

static void record_bad(DfPrepareSummary *log, DfBadRecord kind, const char *where) {
    int64_t seen = log->bad_count[kind]++;
    if (seen < EXAMPLES_PER_KIND)
        snprintf(log->bad_example[kind][seen], sizeof log->bad_example[kind][seen], "%s", where);
}

/* Writes the chunk's good records in order; handles the bad ones. */
static int write_chunk(PrepareContext *ctx, const char *file, const Chunk *c, DfError *err) {
    for (int i = 0; i < c->n; i++) {
        const DfPreparedRecord *r = &c->records[i].out;
        int64_t line_no = c->records[i].line_no;
        ctx->stats->records++;
        if (r->bad != DF_RECORD_OK) {
            if (ctx->opt->fail_on_bad)
                return df_fail(err, "%s:%s%lld: %s (stopping: --on-bad-record fail)", file, ctx->arrow ? "row " : "",
                               (long long)line_no, r->msg);
            char where[DF_RECORD_MSG_MAX + 256];
            snprintf(where, sizeof where, "%s:%s%lld: %s", file, ctx->arrow ? "row " : "", (long long)line_no, r->msg);
            record_bad(ctx->stats, r->bad, where);
            continue;
        }
        if (df_token_store_writer_append(ctx->writer, r->ids.data, (const uint8_t *)r->mask.data, r->ids.len, err) != 0)
            return df_context(err, "%s:%s%lld", file, ctx->arrow ? "row " : "", (long long)line_no);
        ctx->stats->samples++;
        ctx->stats->tokens += (int64_t)r->ids.len;
        for (size_t k = 0; k < r->mask.len; k++) ctx->stats->loss_tokens += r->mask.data[k];
    }
    return 0;
}

static void show_progress(PrepareContext *ctx, uint64_t bytes_done) {
    double elapsed = df_now_seconds() - ctx->start_s;
    char extra[128];
    snprintf(extra, sizeof extra, "%lld records, %.0f records/s, %.2f MB/s", (long long)ctx->stats->records,
             elapsed > 0 ? (double)ctx->stats->records / elapsed : 0.0, elapsed > 0 ? 1e-6 * (double)bytes_done / elapsed : 0.0);
    df_progress_update(&ctx->progress, (int64_t)(bytes_done / 1000), extra);
}

/* After a chunk: a SIGINT/SIGTERM (base/signals.h) stops the run; the
 * caller then drops the temporary store, so nothing partial is left. */
static int check_stop(const PrepareContext *ctx, const char *file, int64_t line_no, DfError *err) {
    int sig = df_stop_requested();
    if (!sig) return 0;
    return df_fail(err, "interrupted by %s after %s:%s%lld; nothing written", df_signal_name(sig), file,
                   ctx->arrow ? "row " : "", (long long)line_no);
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
        show_progress(ctx, ctx->stats->bytes_done + df_jsonl_bytes_read(&in));
        if ((rc = check_stop(ctx, file, c->records[n - 1].line_no, err)) != 0) break;
    }
    if (n < 0) rc = -1;
    ctx->stats->bytes_done += df_jsonl_bytes_read(&in);
    df_jsonl_close(&in);
    return rc;
}

/* ---- Arrow inputs ---------------------------------------------------------- */

typedef struct ArrowRows {
    const DfRecordLayout *layout;
    const DfArrowBatch *batch;
    int64_t first; /* batch row of records[0] */
} ArrowRows;

/* Converts and tokenizes one row; runs on any thread. */
static void tokenize_row(const PrepareContext *ctx, const ArrowRows *rows, int64_t row, DfPreparedRecord *r) {
    df_prepared_record_reset(r);
    DfError err = {{0}};
    const DfRecordLayout *l = rows->layout;
    switch (l->kind) {
    case DF_LAYOUT_PRETOKENIZED:
    case DF_LAYOUT_LABELS:
        if (df_records_arrow_ids(l, rows->batch, row, ctx->vocab_size, &r->ids, &r->mask, &err) != 0)
            df_prepared_record_bad(r, strstr(err.msg, "out of range") ? DF_BAD_ID_RANGE : DF_BAD_MASK, "%s", err.msg);
        break;
    case DF_LAYOUT_MESSAGES:
    case DF_LAYOUT_CONVERSATIONS:
        if (df_records_arrow_messages(l, rows->batch, row, &r->messages, &err) != 0)
            df_prepared_record_bad(r, DF_BAD_WRONG_TYPE, "%s", err.msg);
        else df_prepare_record_chat(&ctx->rules, r);
        break;
    case DF_LAYOUT_PROMPT_RESPONSE: {
        const char *texts[2];
        size_t lens[2];
        if (df_records_arrow_strings(l, rows->batch, row, texts, lens, &err) != 0)
            df_prepared_record_bad(r, DF_BAD_MISSING_FIELD, "%s", err.msg);
        else df_prepare_record_texts(&ctx->rules, r, texts, lens);
        break;
    }
    }
    if (r->bad == DF_RECORD_OK) df_prepare_record_check(&ctx->rules, r);
}

/* A batch's rows, a chunk at a time, tokenized in parallel and written in order. */
static int process_batch(PrepareContext *ctx, const char *file, const ArrowRows *batch_rows, int64_t *row_no,
                         Chunk *c, DfError *err) {
    int threads = ctx->opt->threads > 0 ? ctx->opt->threads : omp_get_max_threads();
    for (int64_t at = 0; at < batch_rows->batch->length; at += c->cap) {
        int n = (int)(batch_rows->batch->length - at < c->cap ? batch_rows->batch->length - at : c->cap);
        c->n = n;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
        for (int i = 0; i < n; i++) tokenize_row(ctx, batch_rows, at + i, &c->records[i].out);
        for (int i = 0; i < n; i++) c->records[i].line_no = *row_no + i;
        if (write_chunk(ctx, file, c, err) != 0) return -1;
        *row_no += n;
        if (check_stop(ctx, file, *row_no - 1, err) != 0) return -1;
    }
    return 0;
}

static int process_arrow(PrepareContext *ctx, const char *path, Chunk *c, DfError *err) {
    DfArrowDataset *ds = df_arrow_dataset_open(path, err);
    if (!ds) return -1;
    DfRecordLayout layout;
    if (df_records_arrow_layout(df_arrow_dataset_schema(ds), &layout, err) != 0) {
        df_context(err, "%s", path);
        df_arrow_dataset_close(ds);
        return -1;
    }
    ctx->arrow = 1;
    const DfArrowBatch *batch;
    const DfArrowReader *shard, *last = NULL;
    int64_t row_no = 0;
    int rc;
    while ((rc = df_arrow_dataset_next_batch(ds, &batch, &shard, err)) == 1) {
        if (shard != last) row_no = 0, last = shard;
        ArrowRows rows = {&layout, batch, 0};
        if ((rc = process_batch(ctx, df_arrow_path(shard), &rows, &row_no, c, err)) != 0) break;
        show_progress(ctx, ctx->stats->bytes_done);
    }
    ctx->arrow = 0;
    for (int i = 0; i < df_arrow_dataset_num_files(ds); i++) {
        struct stat st;
        if (stat(df_arrow_dataset_file(ds, i), &st) == 0) ctx->stats->bytes_done += (uint64_t)st.st_size;
    }
    df_arrow_dataset_close(ds);
    return rc < 0 ? -1 : 0;
}

/* ---- the run ------------------------------------------------------------ */

void df_prepare_summary_print(const DfPrepareOptions *o, const DfPrepareSummary *s) {
    int64_t skipped = 0;
    for (int k = 0; k < DF_BAD_KIND_COUNT; k++) skipped += s->bad_count[k];
    printf("prepare: wrote %lld samples, %lld tokens (%lld loss tokens) to %s\n", (long long)s->samples,
           (long long)s->tokens, (long long)s->loss_tokens, o->output);
    if (skipped > 0) {
        printf("prepare: skipped %lld of %lld records:\n", (long long)skipped, (long long)s->records);
        for (int k = 0; k < DF_BAD_KIND_COUNT; k++) {
            if (!s->bad_count[k]) continue;
            printf("  %s: %lld\n", df_bad_record_name((DfBadRecord)k), (long long)s->bad_count[k]);
            for (int e = 0; e < EXAMPLES_PER_KIND && e < s->bad_count[k]; e++) printf("    %s\n", s->bad_example[k][e]);
        }
    }
    if (o->quiet) return;
    double seconds = s->seconds;
    printf("prepare: %lld records, %.2f MB in %.2f s: %.0f records/s, %.2f MB/s\n", (long long)s->records,
           1e-6 * (double)s->bytes_done, seconds, seconds > 0 ? (double)s->records / seconds : 0.0,
           seconds > 0 ? 1e-6 * (double)s->bytes_done / seconds : 0.0);
}

/* The output may be none of the inputs (nor a file inside the target's
 * directory): writing it would destroy what is read. */
static int check_apart(const DfPrepareOptions *o, DfError *err) {
    DfPathArg ins[65] = {{"--target", o->tokenizer}};
    int n = 1;
    for (int i = 0; i < o->n_inputs && i < 64; i++) ins[n++] = (DfPathArg){"--input", o->inputs[i]};
    const DfPathArg outs[] = {{"--output", o->output}};
    return df_paths_apart(ins, n, outs, 1, err);
}

/* Every input opens (a regular file, readable) before the output's
 * temporary is created: a bad input leaves nothing behind. */
static int check_inputs(const DfPrepareOptions *opt, uint64_t *total_bytes, DfError *err) {
    *total_bytes = 0;
    for (int i = 0; i < opt->n_inputs; i++) {
        struct stat st;
        const char *in = opt->inputs[i];
        if (stat(in, &st) == 0 && S_ISDIR(st.st_mode)) continue; /* a saved Arrow dataset: its files open later */
        int fd = df_open_regular(in, &st, err);
        if (fd < 0) return df_context(err, "input");
        close(fd);
        *total_bytes += (uint64_t)st.st_size;
    }
    return 0;
}

/* Every record was bad (or there were none): the error says why, with the
 * first example of each kind, as the summary would have. */
static void no_usable_records(const PrepareContext *ctx, DfError *err) {
    const DfPrepareSummary *s = ctx->stats;
    char why[768] = "";
    for (int k = 0; k < DF_BAD_KIND_COUNT; k++) {
        if (!s->bad_count[k]) continue;
        size_t used = strlen(why);
        snprintf(why + used, sizeof why - used, "%s%lld %s (%s)", used ? "; " : ": ", (long long)s->bad_count[k],
                 df_bad_record_name((DfBadRecord)k), s->bad_example[k][0]);
    }
    df_fail(err, "no usable records in the input (%lld read%s); nothing written", (long long)s->records, why);
}

static int run_prepare(PrepareContext *ctx, DfError *err) {
    const DfPrepareOptions *opt = ctx->opt;
    int threads = opt->threads > 0 ? opt->threads : omp_get_max_threads();
    Chunk c = {.cap = RECORDS_PER_THREAD * threads};
    c.records = df_xcalloc((size_t)c.cap, sizeof *c.records, "record chunk");
    ctx->writer = df_token_store_writer_open(opt->output, ctx->vocab_size, df_tokenizer_fingerprint(ctx->tok), err);
    int rc = ctx->writer ? 0 : -1;
    df_progress_start(&ctx->progress, "prepare", "kB", (int64_t)(ctx->stats->bytes_total / 1000));
    ctx->progress.quiet = opt->quiet;
    for (int i = 0; rc == 0 && i < opt->n_inputs; i++) {
        const char *in = opt->inputs[i];
        rc = df_arrow_is_arrow_path(in) ? process_arrow(ctx, in, &c, err) : process_file(ctx, in, &c, err);
    }
    if (rc == 0 && ctx->stats->samples == 0) no_usable_records(ctx, err), rc = -1;
    if (rc == 0) {
        char extra[64];
        snprintf(extra, sizeof extra, "%lld records", (long long)ctx->stats->records);
        df_progress_finish(&ctx->progress, (int64_t)(ctx->stats->bytes_done / 1000), extra);
        rc = df_token_store_writer_commit(ctx->writer, err);
    } else {
        df_token_store_writer_abort(ctx->writer);
    }
    for (int i = 0; i < c.cap; i++) df_prepared_record_free(&c.records[i].out);
    free(c.records);
    df_bytebuf_free(&c.text);
    return rc;
}

/* The chat template, needed only by chat records unless a chat option asks
 * for it; then it must open (and take the date). A template that does not
 * open otherwise makes chat records bad, saying why. Returns 0, or
 * DF_PREPARE_BAD_OPTIONS. */
static int open_chat(PrepareContext *ctx, DfChatTemplate **chat, DfError *err) {
    const DfPrepareOptions *o = ctx->opt;
    DfError chat_err = {{0}};
    *chat = df_chat_template_open(o->tokenizer, o->chat_template, o->chat_kwargs, &chat_err);
    if (!*chat) snprintf(ctx->chat_error, sizeof ctx->chat_error, "%s", chat_err.msg);
    int asked = o->chat_date || o->chat_template || o->chat_kwargs;
    if (asked && (!*chat || (o->chat_date && df_chat_template_set_date(*chat, o->chat_date, &chat_err) != 0))) {
        df_fail(err, "%s", chat_err.msg);
        return DF_PREPARE_BAD_OPTIONS;
    }
    ctx->chat = *chat;
    return 0;
}

int df_prepare(const DfPrepareOptions *o, DfPrepareSummary *out, DfError *err) {
    memset(out, 0, sizeof *out);
    if (check_apart(o, err)) return DF_PREPARE_BAD_OPTIONS;
    PrepareContext ctx = {.opt = o, .stats = out};
    if (check_inputs(o, &out->bytes_total, err)) return -1;
    DfTokenizer *tok = df_tokenizer_load(o->tokenizer, err);
    if (!tok) return -1;
    ctx.tok = tok;
    ctx.vocab_size = df_tokenizer_vocab_size(tok);
    DfChatTemplate *chat = NULL;
    int rc = open_chat(&ctx, &chat, err);
    if (rc == 0) {
        ctx.rules = (DfRecordRules){.tok = tok, .vocab_size = ctx.vocab_size, .max_length = o->max_length,
                                    .chat = chat, .chat_error = ctx.chat_error};
        ctx.start_s = df_now_seconds();
        rc = run_prepare(&ctx, err);
        out->seconds = df_now_seconds() - ctx.start_s;
    }
    df_chat_template_free(chat);
    df_tokenizer_free(tok);
    return rc;
}
