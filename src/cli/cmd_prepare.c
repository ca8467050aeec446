/* dflash prepare: JSONL records or Arrow datasets -> token store.
 *
 * Input lines are read in chunks; each chunk is parsed and tokenized in
 * parallel (the tokenizer is immutable and thread-safe) and then written in
 * input order, so the store's sample order is the order of the input lines,
 * file after file. Bad records are classified, counted and either skipped or
 * fatal (--on-bad-record). Arrow inputs (an .arrow file or a `datasets`
 * folder) are read batch by batch the same way, a row standing for a line.
 * Chat records (messages / ShareGPT conversations) are rendered with the
 * tokenizer's chat template (src/text/chat_template.h). */
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
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/prepare_record.h"
#include "formats/arrow_dataset.h"
#include "formats/jsonl.h"
#include "formats/records.h"
#include "formats/token_store.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

enum { RECORDS_PER_THREAD = 256, EXAMPLES_PER_KIND = 3 };

typedef struct PrepareOptions {
    const char *tokenizer, *output, *on_bad_record;
    const char *chat_date; /* the template's date_string (Llama 3.1's "Today Date") */
    const char *chat_template, *chat_kwargs; /* --chat-template FILE, --chat-template-kwargs JSON */
    DfStringList inputs;
    int max_length, threads;
    int fail_on_bad; /* from on_bad_record */
    int quiet;       /* --quiet: no progress line and no speed line */
} PrepareOptions;

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
    const DfChatTemplate *chat; /* NULL when the tokenizer has none we render */
    char chat_error[DF_ERROR_MAX];
    DfRecordRules rules;        /* what the record parser needs of the above */
    DfTokenStoreWriter *writer;
    PrepareStats stats;
    BadLog *bad;
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
                return df_fail(err, "%s:%s%lld: %s (stopping: --on-bad-record fail)", file, ctx->arrow ? "row " : "",
                               (long long)line_no, r->msg);
            char where[DF_RECORD_MSG_MAX + 256];
            snprintf(where, sizeof where, "%s:%s%lld: %s", file, ctx->arrow ? "row " : "", (long long)line_no, r->msg);
            record_bad(ctx->bad, r->bad, where);
            continue;
        }
        if (df_token_store_writer_append(ctx->writer, r->ids.data, (const uint8_t *)r->mask.data, r->ids.len, err) != 0)
            return df_context(err, "%s:%s%lld", file, ctx->arrow ? "row " : "", (long long)line_no);
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
        show_progress(ctx, ctx->stats.bytes_done + df_jsonl_bytes_read(&in));
        if ((rc = check_stop(ctx, file, c->records[n - 1].line_no, err)) != 0) break;
    }
    if (n < 0) rc = -1;
    ctx->stats.bytes_done += df_jsonl_bytes_read(&in);
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
        show_progress(ctx, ctx->stats.bytes_done);
    }
    ctx->arrow = 0;
    for (int i = 0; i < df_arrow_dataset_num_files(ds); i++) {
        struct stat st;
        if (stat(df_arrow_dataset_file(ds, i), &st) == 0) ctx->stats.bytes_done += (uint64_t)st.st_size;
    }
    df_arrow_dataset_close(ds);
    return rc < 0 ? -1 : 0;
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
    if (ctx->opt->quiet) return;
    printf("prepare: %lld records, %.2f MB in %.2f s: %.0f records/s, %.2f MB/s\n", (long long)s->records,
           1e-6 * (double)s->bytes_done, seconds, seconds > 0 ? (double)s->records / seconds : 0.0,
           seconds > 0 ? 1e-6 * (double)s->bytes_done / seconds : 0.0);
}

/* Every input opens (a regular file, readable) before the output's
 * temporary is created: a bad input leaves nothing behind. */
static int check_inputs(const PrepareOptions *opt, uint64_t *total_bytes, DfError *err) {
    *total_bytes = 0;
    for (int i = 0; i < opt->inputs.count; i++) {
        struct stat st;
        const char *in = opt->inputs.items[i];
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
    char why[768] = "";
    for (int k = 0; k < DF_BAD_KIND_COUNT; k++) {
        if (!ctx->bad->count[k]) continue;
        size_t used = strlen(why);
        snprintf(why + used, sizeof why - used, "%s%lld %s (%s)", used ? "; " : ": ", (long long)ctx->bad->count[k],
                 df_bad_record_name((DfBadRecord)k), ctx->bad->example[k][0]);
    }
    df_fail(err, "no usable records in the input (%lld read%s); nothing written", (long long)ctx->stats.records, why);
}

static int run_prepare(PrepareContext *ctx, DfError *err) {
    const PrepareOptions *opt = ctx->opt;
    int threads = opt->threads > 0 ? opt->threads : omp_get_max_threads();
    Chunk c = {.cap = RECORDS_PER_THREAD * threads};
    c.records = df_xcalloc((size_t)c.cap, sizeof *c.records, "record chunk");
    ctx->writer = df_token_store_writer_open(opt->output, ctx->vocab_size, df_tokenizer_fingerprint(ctx->tok), err);
    int rc = ctx->writer ? 0 : -1;
    df_progress_start(&ctx->progress, "prepare", "kB", (int64_t)(ctx->stats.bytes_total / 1000));
    ctx->progress.quiet = opt->quiet;
    for (int i = 0; rc == 0 && i < opt->inputs.count; i++) {
        const char *in = opt->inputs.items[i];
        rc = df_arrow_is_arrow_path(in) ? process_arrow(ctx, in, &c, err) : process_file(ctx, in, &c, err);
    }
    if (rc == 0 && ctx->stats.samples == 0) no_usable_records(ctx, err), rc = -1;
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
        {"target", DF_OPT_STRING, &opt.tokenizer, "DIR", "the target's directory (its tokenizer.json and tokenizer_config.json), or a tokenizer.json", 1, .alias = "tokenizer"},
        {"input", DF_OPT_STRING_LIST, &opt.inputs, "PATH", "JSONL records, an .arrow file or a datasets folder; repeat for several, read in order", 1},
        {"output", DF_OPT_STRING, &opt.output, "STORE", "token store to write (atomically)", 1},
        {"max-length", DF_OPT_INT, &opt.max_length, "N", "longest sample in tokens; longer records are bad (default 3072)", 0, DF_RANGE(1, 1 << 30)},
        {"on-bad-record", DF_OPT_STRING, &opt.on_bad_record, "skip|fail", "skip bad records and count them, or stop at the first (default skip)", 0},
        {"threads", DF_OPT_INT, &opt.threads, "N", "tokenizer threads (default: all cores)", 0, DF_RANGE(1, 1024)},
        {"chat-date", DF_OPT_STRING, &opt.chat_date, "DATE",
         "Llama-3.1 chat template: the system header's \"Today Date\" (e.g. \"26 Jul 2024\"; default: the "
         "template's, today's where it asks for the current date, as transformers renders it)", 0},
        {"chat-template", DF_OPT_STRING, &opt.chat_template, "FILE",
         "a Jinja chat template to render conversations with instead of the tokenizer's", 0},
        {"chat-template-kwargs", DF_OPT_STRING, &opt.chat_kwargs, "JSON",
         "extra chat-template variables, as the serving stacks' chat_template_kwargs (e.g. '{\"enable_thinking\": false}')", 0},
    };
    const DfCommandSpec spec = {
        "prepare", "tokenize JSONL records or Arrow datasets into a token store for training", NULL,
        "Records: {\"prompt\": str, \"response\": str} (loss on the response tokens only), or\n"
        "{\"input_ids\": [int, ...], \"loss_mask\": [0|1, ...]} (already tokenized, same length), or\n"
        "{\"messages\": [{\"role\", \"content\"}, ...]} / ShareGPT {\"conversations\": [{\"from\", \"value\"}, ...]}\n"
        "(rendered with the tokenizer's Jinja chat template, from chat_template.jinja or tokenizer_config.json,\n"
        "or --chat-template, as transformers' apply_chat_template renders it; loss on the assistant turns),\n"
        "or {\"text\": str} (plain text, loss on every token). Arrow inputs (an .arrow file, stream or file format, or a\n"
        "Hugging Face datasets folder) hold the same shapes as columns: input_ids with loss_mask or\n"
        "labels (-100 = no loss), messages, conversations, or prompt and response.\n"
        "Bad records (invalid JSON, missing or mistyped fields, ids outside the vocabulary, mask\n"
        "mismatches, empty samples, no loss tokens, longer than --max-length) are reported by file:line.",
        options, DF_COUNT(options)};
    DfParsedArgs parsed;
    DfError err = {{0}};
    int exit_code;
    if (df_parse_command_line(&spec, argc, argv, &parsed, &exit_code)) return exit_code;
    opt.quiet = parsed.quiet;
    opt.fail_on_bad = strcmp(opt.on_bad_record, "fail") == 0;
    if (!opt.fail_on_bad && strcmp(opt.on_bad_record, "skip") != 0) {
        fprintf(stderr, "dflash prepare: --on-bad-record must be skip or fail, not '%s'\n", opt.on_bad_record);
        return 2;
    }
    DfPathArg ins[65] = {{"--target", opt.tokenizer}};
    for (int i = 0; i < opt.inputs.count && i < 64; i++) ins[1 + i] = (DfPathArg){"--input", opt.inputs.items[i]};
    const DfPathArg outs[] = {{"--output", opt.output}};
    if ((exit_code = df_paths_apart_or_usage("prepare", ins, 1 + opt.inputs.count, outs, 1)) != 0) return exit_code;

    /* SIGINT/SIGTERM: stop after the current chunk and drop the temporary store */
    if (df_stop_signals_install(&err) != 0) {
        fprintf(stderr, "dflash prepare: %s\n", err.msg);
        return 1;
    }
    PrepareContext ctx = {.opt = &opt, .bad = df_xcalloc(1, sizeof(BadLog), "bad-record log")};
    int rc = check_inputs(&opt, &ctx.stats.bytes_total, &err);
    DfTokenizer *tok = rc == 0 ? df_tokenizer_load(opt.tokenizer, &err) : NULL;
    DfChatTemplate *chat = NULL;
    if (tok) {
        ctx.tok = tok;
        ctx.vocab_size = df_tokenizer_vocab_size(tok);
        DfError chat_err = {{0}};
        /* needed only by chat records, unless a chat option asks for it */
        chat = df_chat_template_open(opt.tokenizer, opt.chat_template, opt.chat_kwargs, &chat_err);
        ctx.chat = chat;
        if (!chat) snprintf(ctx.chat_error, sizeof ctx.chat_error, "%s", chat_err.msg);
        int asked = opt.chat_date || opt.chat_template || opt.chat_kwargs;
        if (asked && (!chat || (opt.chat_date && df_chat_template_set_date(chat, opt.chat_date, &chat_err) != 0))) {
            fprintf(stderr, "dflash prepare: %s\n", chat_err.msg);
            df_chat_template_free(chat);
            df_tokenizer_free(tok);
            free(ctx.bad);
            return 2;
        }
        ctx.rules = (DfRecordRules){.tok = tok, .vocab_size = ctx.vocab_size, .max_length = opt.max_length,
                                    .chat = chat, .chat_error = ctx.chat_error};
        ctx.start_s = df_now_seconds();
        rc = run_prepare(&ctx, &err);
        if (rc == 0) print_summary(&ctx, df_now_seconds() - ctx.start_s);
    } else {
        rc = -1;
    }
    if (rc != 0) fprintf(stderr, "dflash prepare: %s\n", err.msg);
    if (tok) df_tokenizer_free(tok);
    df_chat_template_free(chat);
    free(ctx.bad);
    int sig = df_stop_requested();
    if (rc != 0 && sig) return 128 + sig; /* the shell's convention for death by a signal */
    return rc == 0 ? 0 : 1;
}
