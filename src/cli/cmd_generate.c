/* dflash generate: the target's own responses to prompts (the recipe's
 * regenerated training data); the job is infer/generate_job.h. */
#include <limits.h>
#include <stdio.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "infer/generate_job.h"

int df_cmd_generate(int argc, char **argv) {
    DfGenerateJobOptions a;
    df_generate_job_options_default(&a);
    const DfOption options[] = {
        {"target", DF_OPT_STRING, &a.target, "DIR", "Hugging Face model directory (config, weights, tokenizer.json)", 1},
        {"input", DF_OPT_STRING, &a.input, "FILE",
         "JSONL prompts {\"id\"?, \"prompt\"} and/or conversations {\"id\"?, \"messages\"|\"conversations\"}", 1},
        {"output", DF_OPT_STRING, &a.output, "FILE",
         "JSONL {\"id\", \"prompt\", \"response\"} / {\"id\", \"messages\"|\"conversations\"}; appended to when resuming",
         1},
        {"max-new-tokens", DF_OPT_INT, &a.max_new_tokens, "N",
         "tokens to generate at most per prompt or assistant turn (default 256)", 0, DF_RANGE(1, 1 << 20)},
        {"temperature", DF_OPT_DOUBLE, &a.temperature, "T", "sampling temperature; 0 = greedy (default)", 0, DF_RANGE(0, 100)},
        {"top-p", DF_OPT_DOUBLE, &a.top_p, "P", "nucleus sampling mass in (0, 1] (default 1: off)", 0, DF_RANGE_POSITIVE(1)},
        {"seed", DF_OPT_INT, &a.seed, "S", "sampling seed (default 0); with the record index it keys each draw", 0, DF_RANGE(0, INT_MAX)},
        {"batch", DF_OPT_INT, &a.batch, "N", "sequences decoded together (default 8); a finished one's slot takes the next prompt", 0, DF_RANGE(1, 4096)},
        {"chat-date", DF_OPT_STRING, &a.chat.date, "DATE",
         "the chat template's date_string (Llama 3.1's \"Today Date\", e.g. \"26 Jul 2024\"; default: the "
         "template's, today's where it asks for the current date, as transformers renders it)", 0},
        {"chat-template", DF_OPT_STRING, &a.chat.template_file, "FILE",
         "a Jinja chat template for conversations instead of the target's", 0},
        {"chat-template-kwargs", DF_OPT_STRING, &a.chat.kwargs, "JSON",
         "extra chat-template variables, as the serving stacks' chat_template_kwargs (e.g. '{\"enable_thinking\": false}')", 0},
        {"device", DF_OPT_STRING, &a.device, "DEV", "cpu (default), cuda or cuda:N", 0},
        {"no-graphs", DF_OPT_FLAG, &a.no_graphs, NULL,
         "GPU: queue every op of every decode step instead of replaying each step shape's recording (CUDA "
         "graph); the same output, slower", 0},
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
