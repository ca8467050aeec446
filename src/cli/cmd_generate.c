/* dflash generate: the target's own responses to prompts (the recipe's
 * regenerated training data); the job is infer/generate_job.h, its options
 * cli/generate_options.def. */
#include <limits.h>
#include <stdio.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/generate_options.h"
#include "infer/generate_job.h"
#include "infer/generate_plan.h"

int df_cmd_generate(int argc, char **argv) {
    DfGenerateJobOptions a, defaults;
    df_generate_options_default(&a);
    df_generate_options_default(&defaults);
    const DfOption options[] = {
#define DF_OPTION(name, kind, field, value, metavar, help, ...) \
    DF_OPTION_ENTRY(a.field, defaults.field, name, kind, metavar, help, __VA_ARGS__),
#include "cli/generate_options.def"
#undef DF_OPTION
    };
    const DfCommandSpec spec = {
        "generate", "the target's responses to prompts and conversations (regenerated training data)", NULL,
        "Each response stops at an EOS id (generation_config.json's eos_token_id, else config.json's; the EOS is\n"
        "not written) or after --max-new-tokens. Records are written in input order, each flushed as soon as it\n"
        "and those before it are done; running the same command again after an interruption continues after\n"
        "the last complete record.\n"
        "Conversations are rendered with the target's Jinja chat template (chat_template.jinja or\n"
        "tokenizer_config.json's, or --chat-template; as transformers' apply_chat_template(...,\n"
        "add_generation_prompt=True) renders them), and the token the template writes after an assistant\n"
        "turn (<|im_end|>, <|eot_id|>, ...) ends a response too. Every assistant turn\n"
        "after the first user turn is regenerated in order, each from the conversation before it with the\n"
        "earlier turns already regenerated; a conversation that ends with a user turn gets one more. System and\n"
        "user turns are written back as given. The output is ready for `dflash prepare`.\n"
        "Sampling draws depend only on (seed, record index), so --batch does not change the output.",
        options, DF_COUNT(options)};
    DfParsedArgs args;
    DfError err;
    int exit_code;
    if (df_parse_command_line(&spec, argc, argv, &args, &exit_code)) return exit_code;
    a.quiet = args.quiet;
    int rc = df_generate_job(&a, &err);
    if (rc == 0) return 0;
    fprintf(stderr, "dflash generate: %s\n", err.msg);
    return rc == DF_GENERATE_BAD_OPTIONS ? 2 : 1;
}
