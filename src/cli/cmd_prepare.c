/* dflash prepare: JSONL records or Arrow datasets -> token store
 * (the pipeline is data/prepare.h, the options cli/prepare_options.def). */
#include <stdio.h>
#include <string.h>

#include "base/signals.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "data/prepare.h"

/* The command line as the option table fills it. */
typedef struct PrepareArgs {
    const char *tokenizer, *output, *on_bad_record;
    const char *chat_date, *chat_template, *chat_kwargs;
    DfStringList inputs;
    int max_length, threads;
} PrepareArgs;

/* Each field has the C type of its option's kind (what the parser writes). */
#define DF_OPTION(name, kind, field, ...) DF_OPTION_TYPE_CHECK(((PrepareArgs *)0)->field, kind, name);
#include "cli/prepare_options.def"
#undef DF_OPTION

static void prepare_args_default(PrepareArgs *a) {
    memset(a, 0, sizeof *a);
#define DF_OPTION(name, kind, field, value, ...) a->field = (value);
#include "cli/prepare_options.def"
#undef DF_OPTION
}

int df_cmd_prepare(int argc, char **argv) {
    PrepareArgs opt, defaults;
    prepare_args_default(&opt);
    prepare_args_default(&defaults);
    const DfOption options[] = {
#define DF_OPTION(name, kind, field, value, metavar, help, ...) \
    DF_OPTION_ENTRY(opt.field, defaults.field, name, kind, metavar, help, __VA_ARGS__),
#include "cli/prepare_options.def"
#undef DF_OPTION
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
    DfPrepareOptions o = {.tokenizer = opt.tokenizer, .inputs = opt.inputs.items, .n_inputs = opt.inputs.count,
                          .output = opt.output, .max_length = opt.max_length, .threads = opt.threads,
                          .chat_date = opt.chat_date, .chat_template = opt.chat_template,
                          .chat_kwargs = opt.chat_kwargs, .quiet = parsed.quiet};
    o.fail_on_bad = strcmp(opt.on_bad_record, "fail") == 0;
    if (!o.fail_on_bad && strcmp(opt.on_bad_record, "skip") != 0) {
        fprintf(stderr, "dflash prepare: --on-bad-record must be skip or fail, not '%s'\n", opt.on_bad_record);
        return 2;
    }
    /* SIGINT/SIGTERM: stop after the current chunk and drop the temporary store */
    if (df_stop_signals_install(&err) != 0) {
        fprintf(stderr, "dflash prepare: %s\n", err.msg);
        return 1;
    }
    DfPrepareSummary summary;
    int rc = df_prepare(&o, &summary, &err);
    if (rc == 0) {
        df_prepare_summary_print(&o, &summary);
        return 0;
    }
    fprintf(stderr, "dflash prepare: %s\n", err.msg);
    if (rc == DF_PREPARE_BAD_OPTIONS) return 2;
    int sig = df_stop_requested();
    return sig ? 128 + sig : 1; /* the shell's convention for death by a signal */
}
