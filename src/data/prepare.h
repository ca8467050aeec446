/* The prepare pipeline: JSONL records or Arrow datasets -> a token store.
 *
 * Input lines are read in chunks; each chunk is parsed and tokenized in
 * parallel (the tokenizer is immutable and thread-safe) and then written in
 * input order, so the store's sample order is the order of the input lines,
 * file after file. Bad records (data/prepare_record.h) are classified,
 * counted and either skipped or fatal. Arrow inputs (an .arrow file or a
 * `datasets` folder) are read batch by batch the same way, a row standing
 * for a line. Chat records (messages / ShareGPT conversations) are rendered
 * with the tokenizer's chat template (text/chat_template.h).
 *
 * A SIGINT/SIGTERM seen through base/signals.h (where the caller installed
 * the handler) stops the run after the current chunk; the temporary store
 * is dropped, so nothing partial is left. */
#ifndef DF_DATA_PREPARE_H
#define DF_DATA_PREPARE_H

#include <stdint.h>

#include "base/error.h"
#include "data/prepare_record.h"

enum { DF_PREPARE_EXAMPLES_PER_KIND = 3 };

/* The command line's defaults are cli/prepare_options.def's. */
typedef struct DfPrepareOptions {
    const char *tokenizer;     /* the target's directory, or a tokenizer.json */
    const char *const *inputs; /* JSONL files, .arrow files or datasets folders, read in order */
    int n_inputs;
    const char *output;        /* the token store, written atomically */
    int max_length;            /* longer samples are bad records */
    int fail_on_bad;           /* stop at the first bad record instead of skipping it */
    int threads;               /* tokenizer threads; 0: all cores */
    const char *chat_date;     /* the template's date_string (Llama 3.1's "Today Date"); NULL: the template's */
    const char *chat_template; /* a Jinja template file instead of the tokenizer's; NULL: the tokenizer's */
    const char *chat_kwargs;   /* extra template variables as a JSON object; NULL: none */
    int quiet;                 /* no progress line (and no speed line in the report) */
} DfPrepareOptions;

/* What a run read and wrote: the prepare report's figures. */
typedef struct DfPrepareSummary {
    int64_t records, samples, tokens, loss_tokens;
    uint64_t bytes_done, bytes_total;
    double seconds;
    int64_t bad_count[DF_BAD_KIND_COUNT];
    /* the first few bad records of each kind, "FILE:LINE: why" (Arrow: "FILE:row N: why") */
    char bad_example[DF_BAD_KIND_COUNT][DF_PREPARE_EXAMPLES_PER_KIND][DF_RECORD_MSG_MAX + 256];
} DfPrepareSummary;

/* Prepares o->inputs into o->output. Returns 0 with *out filled, or -1 with
 * err saying what and where (a bad record under fail_on_bad: "FILE:LINE:
 * why"; no usable record: the first example of each kind), or
 * DF_PREPARE_BAD_OPTIONS when the options themselves cannot be used (the
 * output is an input, or the chat options asked for give no template): a
 * command reports that as a bad command line. Every input is checked before
 * the output's temporary is created: a bad input leaves nothing behind. */
enum { DF_PREPARE_BAD_OPTIONS = -2 };
int df_prepare(const DfPrepareOptions *o, DfPrepareSummary *out, DfError *err);

/* The report on stdout: samples, tokens and the store; the skipped records
 * by kind with examples; unless o->quiet, the speed. */
void df_prepare_summary_print(const DfPrepareOptions *o, const DfPrepareSummary *s);

#endif
