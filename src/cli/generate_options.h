/* The defaults of the generate job's options (infer/generate_job.h), from
 * their one declaration, cli/generate_options.def: those of `dflash
 * generate` and of train --prompts. */
#ifndef DF_CLI_GENERATE_OPTIONS_H
#define DF_CLI_GENERATE_OPTIONS_H

#include "infer/generate_job.h"

/* cpu, 256 new tokens, the batch sized by memory (0), greedy, top-p 1, seed 0; no paths. */
void df_generate_options_default(DfGenerateJobOptions *o);

#endif
