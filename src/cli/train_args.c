/* dflash train's command line: the option table generated from
 * train/train_options.def, the bundled default, the checks across options. */
#include "cli/train_args.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "target/model_config.h"
#include "infer/generate_plan.h"
#include "model/drafter_config.h"
#include "text/chat_template.h"

/* ---- the option table, from the list ------------------------------------- */

/* Each field has the C type of its option's kind (what the parser writes). */
#define DF_TRAIN_OPTION(name, kind, home, field, ...) \
    DF_OPTION_TYPE_CHECK(DF_TRAIN_ARG((DfTrainArgs *)0, home, field), kind, name);
#include "train/train_options.def"
#undef DF_TRAIN_OPTION

static void train_args_default(DfTrainArgs *a) {
    memset(a, 0, sizeof *a);
    df_train_options_default(&a->run);
    df_train_prompts_default(&a->prompts);
}

/* The options into out[DF_MAX_OPTIONS], parsed into a, defaults shown from d. */
static int option_table(DfTrainArgs *a, const DfTrainArgs *d, DfOption *out) {
    const DfOption options[] = {
#define DF_TRAIN_OPTION(name, kind, home, field, value, args, identity, metavar, help, ...) \
    DF_OPTION_ENTRY(DF_TRAIN_ARG(a, home, field), DF_TRAIN_ARG(d, home, field), name, kind, metavar, help, __VA_ARGS__),
#include "train/train_options.def"
#undef DF_TRAIN_OPTION
    };
    _Static_assert(DF_COUNT(options) <= DF_MAX_OPTIONS, "train: too many options");
    memcpy(out, options, sizeof options);
    return DF_COUNT(options);
}

/* ---- the bundled default ------------------------------------------------- */

/* A small drafter for assets/coder-tiny that trains in a few minutes on two
 * cores: applied to the options not given when --target, --data (or
 * --prompts) and --output are all missing; an entry with `unless` only when
 * that option is not given either. */
static const struct {
    const char *option, *value, *unless;
} BUNDLED[] = {
    {"target", DF_TRAIN_DEFAULT_TARGET}, {"data", DF_TRAIN_DEFAULT_DATA}, {"output", DF_TRAIN_DEFAULT_OUTPUT},
    {"draft-layers", "2"},  {"intermediate-size", "512"}, {"block-size", "16"},  {"num-taps", "3"},
    {"num-anchors", "32"},  {"token-budget", "2048"},     {"steps", "500", "epochs"}, {"lr", "1.5e-3"},
    {"save-every", "100"},
};

static int apply_bundled_default(const DfCommandSpec *spec, const DfParsedArgs *parsed, DfError *err) {
    for (int i = 0; i < DF_COUNT(BUNDLED); i++) {
        if (df_option_given(spec, parsed, BUNDLED[i].option)) continue;
        if (BUNDLED[i].unless && df_option_given(spec, parsed, BUNDLED[i].unless)) continue;
        if (df_option_set(spec, BUNDLED[i].option, BUNDLED[i].value, err)) return -1;
    }
    return 0;
}

/* --help's paragraph, with the bundled default's options from the table. */
static void help_details(char *out, size_t cap) {
    size_t n = (size_t)snprintf(out, cap, "%s",
        "Without --target, --data (or --prompts) and --output (e.g. no arguments at all), runs the bundled\n"
        "default, with paths relative to the current directory (other options still apply), on the\n"
        "target's own responses to the prompts of assets/data/code-train.jsonl (make demo-data):\n ");
    int column = 1;
    for (int i = 0; i < DF_COUNT(BUNDLED) && n < cap; i++) {
        int width = (int)(strlen(BUNDLED[i].option) + strlen(BUNDLED[i].value) + 4);
        int wrap = i == 3 || (i > 3 && column + width > 100); /* the paths on the first line */
        n += (size_t)snprintf(out + n, cap - n, "%s --%s %s", wrap ? "\n " : "", BUNDLED[i].option, BUNDLED[i].value);
        column = (wrap ? 1 : column) + width;
    }
    if (n < cap)
        snprintf(out + n, cap - n, "%s",
            "   (a few minutes on two CPU cores).\n"
            "--prompts FILE instead of --data: the target's responses to FILE's records are regenerated first\n"
            "(dflash generate, with --max-new-tokens, --temperature, --top-p, --batch, --seed) into\n"
            "OUTPUT/regenerated.jsonl, resumably, then trained on as --data would be.\n"
            "Resume is bit-exact on the CPU for the same OMP_NUM_THREADS; options that define the run\n"
            "(target, data, seed, lr, steps, sizes, ...) must match the checkpoint's.\n"
            "SIGINT/SIGTERM: the step under way finishes, a checkpoint is written, exit 75 (stopped,\n"
            "resumable with --resume); a second signal exits at once (130/143), leaving the previous\n"
            "checkpoint intact.\n"
            "Data parallel: one process per device, started as torchrun, mpirun or srun start them, with\n"
            "the same options; --device cuda means cuda:LOCAL_RANK. The layouts, launchers and NCCL are\n"
            "described in docs/distributed.md; every option in docs/usage.md.");
}

/* ---- checks across options ----------------------------------------------- */

static int has_prompts(const DfTrainArgs *a) { return a->prompts.path != NULL; }
static int split_layout(const DfTrainArgs *a) { return a->run.layout == DF_LAYOUT_SPLIT; }
static int not_quiet(const DfTrainArgs *a) { return !a->run.quiet; }
static int has_eval_data(const DfTrainArgs *a) { return a->run.eval_data != NULL; }

/* An option that goes with another: when given, `holds` must (else
 * `message`, %s the option). */
static const struct {
    const char *option;
    int (*holds)(const DfTrainArgs *a);
    const char *message;
} GOES_WITH[] = {
#define REGENERATION "--%s goes with --prompts (the responses train regenerates)"
    {"prompt-cuts", has_prompts, REGENERATION}, {"max-new-tokens", has_prompts, REGENERATION},
    {"temperature", has_prompts, REGENERATION}, {"top-p", has_prompts, REGENERATION},
    {"batch", has_prompts, REGENERATION},       {"no-graphs", has_prompts, REGENERATION},
#undef REGENERATION
    {"target-ranks", split_layout, "--%s goes with --layout split"},
    {"log-every", not_quiet, "--%s asks for progress lines, --quiet for none: give one of them"},
#define EVAL "--eval-every, --eval-prompts and --eval-max-new-tokens go with --eval-data"
    {"eval-every", has_eval_data, EVAL}, {"eval-prompts", has_eval_data, EVAL},
    {"eval-max-new-tokens", has_eval_data, EVAL},
#undef EVAL
};

static int check_goes_with(const DfTrainArgs *a, const DfCommandSpec *spec, const DfParsedArgs *parsed, DfError *err) {
    for (int i = 0; i < DF_COUNT(GOES_WITH); i++)
        if (df_option_given(spec, parsed, GOES_WITH[i].option) && !GOES_WITH[i].holds(a))
            return df_fail(err, GOES_WITH[i].message, GOES_WITH[i].option);
    return 0;
}

/* --target, --data (or --prompts) and --output: all, or none (the bundled default). */
static int check_run_inputs(DfTrainArgs *a, const DfCommandSpec *spec, const DfParsedArgs *parsed, DfError *err) {
    const DfTrainOptions *o = &a->run;
    if (o->data_source && a->prompts.path) return df_fail(err, "give --data or --prompts, not both");
    if (!o->target_dir && !o->data_source && !a->prompts.path && !o->output_dir) {
        if (apply_bundled_default(spec, parsed, err)) return -1;
        if (!o->quiet) fprintf(stderr, "train: no --target/--data/--output: the bundled default (see 'dflash train --help')\n");
        return 0;
    }
    if (!o->target_dir || !(o->data_source || a->prompts.path) || !o->output_dir)
        return df_fail(err, "--target, --data (or --prompts) and --output go together (none of them: the bundled "
                            "default)");
    return 0;
}

/* An explicit --num-taps beyond what the target offers is a bad command
 * line (exit 2); a config that cannot be read is left to the run, which
 * names what is wrong with it. */
static int check_num_taps(const DfTrainOptions *o, DfError *err) {
    DfModelConfig cfg;
    DfError ignored;
    if (!o->target_dir || df_model_config_load(&cfg, o->target_dir, &ignored)) return 0;
    return df_drafter_check_num_taps(&cfg, o->num_taps, err) != 0 ? -1 : 0;
}

/* A --chat-template that does not parse, --chat-template-kwargs that are
 * not a JSON object, or either with no template to apply to, are a bad
 * command line (exit 2, as for prepare), found before any data is prepared. */
static int check_chat_options(const DfTrainOptions *o, DfError *err) {
    if (!o->chat_template && !o->chat_kwargs) return 0;
    DfChatTemplate *t = df_chat_template_open(o->target_dir, o->chat_template, o->chat_kwargs, err);
    df_chat_template_free(t);
    return t ? 0 : -1;
}

/* The held-out eval: --select-by tau needs it, --eval-data needs its period. */
static int check_eval(const DfTrainOptions *o, const DfCommandSpec *spec, const DfParsedArgs *parsed, DfError *err) {
    if (o->select_by == DF_SELECT_TAU && !o->eval_data)
        return df_fail(err, "--select-by tau needs held-out data: give --eval-data and --eval-every");
    if (o->eval_data && !df_option_given(spec, parsed, "eval-every"))
        return df_fail(err, "--eval-data needs --eval-every N (an eval every N steps)");
    return 0;
}

static int check_options(DfTrainArgs *a, const DfCommandSpec *spec, const DfParsedArgs *parsed, DfError *err) {
    if (check_run_inputs(a, spec, parsed, err)) return -1;
    if (df_option_given(spec, parsed, "steps") && df_option_given(spec, parsed, "epochs"))
        return df_fail(err, "give --steps or --epochs, not both");
    if (check_goes_with(a, spec, parsed, err)) return -1;
    if (df_kernel_variants_parse(&a->variants, a->kernel_variant.items, a->kernel_variant.count, "--kernel-variant",
                                 err))
        return -1;
    if (a->variants.count > 0) a->run.kernel_variants = &a->variants;
    if (df_option_given(spec, parsed, "num-taps") && check_num_taps(&a->run, err)) return -1;
    if (check_chat_options(&a->run, err)) return -1;
    return check_eval(&a->run, spec, parsed, err);
}

/* ---- the command line ---------------------------------------------------- */

/* Hugging Face Trainer options whose meaning differs here: what to give instead. */
static const char *const HF_OPTIONS_ADVICE[] = {
    "per_device_train_batch_size", "a batch is counted in context tokens here: give --token-budget N",
    "gradient_accumulation_steps", "a batch larger than the device holds is split into micro-batches by itself "
                                   "(--max-drafter-tokens); give the whole batch as --token-budget N",
    "resume_from_checkpoint", "give --resume: it continues from the newest checkpoint in OUTPUT/checkpoints",
    "logging_steps", "metrics.jsonl gets every step; --log-every N sets how often a progress line is printed",
    NULL};

/* Keys of a run record (OUTPUT/args.json) that --config reads past. */
static const char *const RECORD_ONLY_KEYS[] = {"dflash_version", "backends", "device_description", NULL};

int df_train_args_parse(int argc, char **argv, DfTrainArgs *a, DfConfigArgs *config, int *exit_code) {
    DfTrainArgs defaults; /* what --help shows as each option's default */
    train_args_default(&defaults);
    train_args_default(a);
    DfOption options[DF_MAX_OPTIONS];
    int n_options = option_table(a, &defaults, options);
    char details[4096];
    help_details(details, sizeof details);
    const DfCommandSpec spec = {"train", "train a DFlash drafter for a target", NULL, details, options, n_options,
                                HF_OPTIONS_ADVICE};
    DfParsedArgs parsed;
    DfError err = {{0}};
    *exit_code = 2;
    if (df_config_args_expand(&spec, argc, argv, RECORD_ONLY_KEYS, config, &err)) {
        fprintf(stderr, "dflash train: %s\n", err.msg);
        return 1;
    }
    if (df_parse_command_line(&spec, config->argc, config->argv, &parsed, exit_code)) return 1;
    a->run.quiet = parsed.quiet;
    if (check_options(a, &spec, &parsed, &err)) {
        fprintf(stderr, "dflash train: %s\n", err.msg);
        *exit_code = 2;
        return 1;
    }
    return 0;
}
