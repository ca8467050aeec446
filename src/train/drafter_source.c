/* A drafter directory or a checkpoint file, told apart by what the path is. */
#include "train/drafter_source.h"

#include <errno.h>
#include <sys/stat.h>

#include "model/drafter_io.h"
#include "train/checkpoint.h"

int df_drafter_source_load(const char *path, DfDrafterConfig *cfg, DfDrafterLayout *layout, float **params,
                           int64_t *step, DfError *err) {
    struct stat sb;
    if (stat(path, &sb) != 0) return df_fail_errno(err, "%s: cannot open the drafter", path);
    if (step) *step = -1;
    if (S_ISREG(sb.st_mode) && df_checkpoint_read_drafter(path, cfg, layout, params, step, err))
        return df_context(err, "not a training checkpoint (a drafter is a directory, or a train run's "
                               "checkpoints/step-N.safetensors)");
    if (S_ISREG(sb.st_mode)) return 0;
    if (!S_ISDIR(sb.st_mode))
        return df_fail(err, "%s: neither a drafter directory nor a checkpoint file", path);
    return df_drafter_load(path, cfg, layout, params, err);
}
