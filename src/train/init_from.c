/* The weights of an existing drafter as a run's starting point. */
#include "train/init_from.h"

#include <stdlib.h>
#include <string.h>

#include "model/drafter_io.h"
#include "train/checkpoint.h"
#include "train/drafter_source.h"

static int check_same_drafter(const char *source, DfDrafterConfig *cfg, const DfDrafterConfig *run, DfError *err) {
    cfg->gamma = run->gamma; /* a training choice, not part of the weights */
    if (cfg->mask_token_id < 0) cfg->mask_token_id = run->mask_token_id;
    char what[512];
    if (!df_drafter_config_differs(cfg, run, what, sizeof what)) return 0;
    const char *option = df_train_option_of_field(what);
    return df_fail(err, "--init-from %s: its drafter differs from this run's: %s (%s vs this run%s%s)", source, what,
                   source, *option ? "; set by " : ": it comes from the target", option);
}

int df_init_from_drafter(const char *source, const DfDrafterConfig *run, const DfDrafterLayout *layout, float *params,
                         DfError *err) {
    DfDrafterConfig cfg;
    DfDrafterLayout loaded;
    float *weights = NULL;
    if (df_drafter_source_load(source, &cfg, &loaded, &weights, NULL, err)) return df_context(err, "--init-from");
    int rc = check_same_drafter(source, &cfg, run, err);
    if (rc == 0 && loaded.total != layout->total)
        rc = df_fail(err, "--init-from %s: %zu parameters, this run's drafter has %zu", source, loaded.total,
                     layout->total);
    if (rc == 0) memcpy(params, weights, layout->total * sizeof *params);
    free(weights);
    df_drafter_layout_free(&loaded);
    return rc;
}
