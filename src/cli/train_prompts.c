#include "cli/train_prompts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/atomic_file.h"
#include "base/mapped_file.h"
#include "cli/generate_options.h"
#include "infer/generate_job.h"
#include "infer/prompt_cuts.h"

/* Whether two files hold the same bytes (a missing one holds none). */
static int same_content(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    DfError ignored;
    char *x = df_read_text_file(a, &na, &ignored), *y = df_read_text_file(b, &nb, &ignored);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static int has_records(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && st.st_size > 0;
}

/* OUTPUT/prompts.cut.jsonl from the prompts. A rerun makes the same file;
 * one that would not (another --prompt-cuts, a changed --prompts file) while
 * the regenerated file holds records made from the earlier cuts is refused:
 * generate's resume matches records by id, and the cuts' ids would match. */
static int write_cuts(const DfTrainPrompts *p, const char *cut, const char *regenerated, int quiet, DfError *err) {
    char next[4300];
    snprintf(next, sizeof next, "%s.next", cut);
    int n = 0;
    if (df_prompt_cuts_write(p->path, p->cuts, next, &n, err)) return df_context(err, "--prompt-cuts");
    struct stat st;
    if (stat(cut, &st) == 0 && has_records(regenerated) && !same_content(cut, next)) {
        remove(next);
        return df_fail(err,
                       "--prompt-cuts %d: the prompts cut from %s are not those in %s, which %s was generated from "
                       "(another --prompt-cuts, or a changed --prompts file): give the earlier ones, or another "
                       "--output",
                       p->cuts, p->path, cut, regenerated);
    }
    if (rename(next, cut) != 0) return df_fail_errno(err, "cannot rename %s to %s", next, cut);
    if (df_fsync_parent_dir(cut, err)) return -1;
    if (!quiet) fprintf(stderr, "train: %d prompts cut from %s (--prompt-cuts %d) in %s\n", n, p->path, p->cuts, cut);
    return 0;
}

void df_train_prompts_default(DfTrainPrompts *p) {
    DfGenerateJobOptions g;
    df_generate_options_default(&g);
    *p = (DfTrainPrompts){.max_new_tokens = g.max_new_tokens, .temperature = g.temperature, .top_p = g.top_p,
                          .batch = g.batch, .no_graphs = g.no_graphs};
}

int df_train_regenerate(const DfTrainPrompts *p, const DfTrainOptions *o, int quiet, char *data, size_t cap,
                        DfError *err) {
    char input[4200];
    snprintf(input, sizeof input, "%s", p->path);
    snprintf(data, cap, "%s/regenerated.jsonl", o->output_dir);
    if (p->cuts > 0) {
        snprintf(input, sizeof input, "%s/prompts.cut.jsonl", o->output_dir);
        if (write_cuts(p, input, data, quiet, err)) return -1;
    }
    if (!quiet) fprintf(stderr, "train: the target's responses to %s into %s (dflash generate)\n", input, data);
    DfGenerateJobOptions g;
    df_generate_options_default(&g);
    g.target = o->target_dir, g.input = input, g.output = data;
    if (o->device) g.device = o->device;
    g.chat = (DfChatOptions){.template_file = o->chat_template, .kwargs = o->chat_kwargs};
    g.max_new_tokens = p->max_new_tokens, g.batch = p->batch, g.temperature = p->temperature, g.top_p = p->top_p;
    g.seed = (int)o->seed, g.no_graphs = p->no_graphs, g.quiet = quiet;
    g.random_target_weights = o->random_target_weights; /* the target trained against: the same weights */
    if (df_generate_job(&g, err) != 0) return df_context(err, "--prompts %s", p->path);
    return 0;
}
