/* dflash export: a training checkpoint (or a drafter directory) written as
 * the drafter directory serving stacks load (spec section 7). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/paths_apart.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "model/drafter_io.h"
#include "model/export_dir.h"
#include "train/drafter_source.h"

static int export_drafter(const char *source, const char *output, DfError *err) {
    DfDrafterConfig cfg;
    DfDrafterLayout layout;
    float *params = NULL;
    int64_t step = -1;
    if (df_drafter_source_load(source, &cfg, &layout, &params, &step, err)) return -1;
    int rc = 0;
    if (cfg.mask_token_id < 0)
        rc = df_fail(err, "%s: config.json gives no dflash_config.mask_token_id; export a checkpoint, or a drafter "
                          "directory that names it", source);
    if (rc == 0) rc = df_drafter_export(output, &cfg, &layout, params, err);
    if (rc == 0) {
        if (step >= 0) printf("export: the drafter of step %" PRId64 " (%s) written to %s\n", step, source, output);
        else printf("export: the drafter %s written to %s\n", source, output);
    }
    free(params);
    df_drafter_layout_free(&layout);
    return rc;
}

int df_cmd_export(int argc, char **argv) {
    const char *output = NULL;
    const DfOption options[] = {
        {"output", DF_OPT_STRING, &output, "DIR", "the drafter directory to write (new, empty, or a previous export, which is replaced whole)", 1},
    };
    const DfCommandSpec spec = {
        "export", "a training checkpoint as a drafter directory (config.json, bf16 model.safetensors, dflash.py)",
        "CHECKPOINT",
        "CHECKPOINT: OUTPUT/checkpoints/step-N.safetensors of a train run (or a drafter directory).\n"
        "Writes what final/ holds at the end of a run: the format of spec section 7 that vLLM, SGLang\n"
        "and transformers load. The export of a run's last checkpoint equals its final/ to the bit.",
        options, DF_COUNT(options)};
    DfParsedArgs args;
    DfError err = {{0}};
    int exit_code;
    if (df_parse_command_line(&spec, argc, argv, &args, &exit_code)) return exit_code;
    if (args.n_positional != 1) {
        fprintf(stderr, "dflash export: give one CHECKPOINT (see 'dflash export --help')\n");
        return 2;
    }
    const DfPathArg ins[] = {{"CHECKPOINT", args.positional[0]}};
    const DfPathArg outs[] = {{"--output", output, DF_OUTPUT_WHOLE_DIR}};
    if ((exit_code = df_paths_apart_or_usage("export", ins, 1, outs, 1)) != 0) return exit_code;
    if (df_export_dir_check(output, &err)) {
        fprintf(stderr, "dflash export: --output %s\n", err.msg);
        return 2;
    }
    if (export_drafter(args.positional[0], output, &err)) {
        fprintf(stderr, "dflash export: %s\n", err.msg);
        return 1;
    }
    return 0;
}
