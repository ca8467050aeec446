/* Reading a checkpoint's tensors into a target's buffers (target/target_weights.h). */
#include "target/target_weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t shape_count(int ndim, const int64_t *shape) {
    size_t count = 1;
    for (int d = 0; d < ndim; d++) count *= (size_t)shape[d];
    return count;
}

/* Reads `name` as fp32 (shape checked), adds `add`, uploads into dst. */
static int upload_weight(const DfTargetModel *m, const DfSafetensors *st, const char *name, int ndim,
                         const int64_t *shape, float add, DfBuffer dst, DfError *err) {
    size_t count = shape_count(ndim, shape);
    if (dst.count != count)
        return df_fail(err, "%s: %zu values do not fill a buffer of %zu", name, count, dst.count);
    float *host = df_safetensors_load_f32(st, name, ndim, shape, err);
    if (!host) return -1;
    if (add != 0.0f)
        for (size_t i = 0; i < count; i++) host[i] += add;
    int rc = m->be->ops->upload_f32(m->be, dst, host, err);
    free(host);
    if (rc) df_context(err, "uploading %s", name);
    return rc;
}

int df_target_check_weight_shape(const DfSafetensors *st, const char *name, int ndim, const int64_t *shape,
                                 DfError *err) {
    const DfTensorInfo *t = df_safetensors_find(st, name);
    if (!t) return df_fail(err, "tensor %s is missing from the safetensors", name);
    int same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (same) return 0;
    char want[64] = "", have[64] = "";
    for (int d = 0; d < ndim; d++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "", (long long)shape[d]);
    for (int d = 0; d < t->ndim; d++)
        snprintf(have + strlen(have), sizeof have - strlen(have), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    return df_fail(err, "tensor %s is [%s] in %s, config.json implies [%s]", name, have, t->file, want);
}

int df_target_load_weight(DfTargetModel *m, const DfSafetensors *st, const char *name, int ndim, const int64_t *shape,
                          DfBufKind kind, float add, DfBuffer *out, DfError *err) {
    if (df_target_check_weight_shape(st, name, ndim, shape, err)) return -1;
    if (df_buffer_alloc(m->be, out, kind, shape_count(ndim, shape), err)) return df_context(err, "uploading %s", name);
    return upload_weight(m, st, name, ndim, shape, add, *out, err);
}

int df_target_load_weight_into(const DfTargetModel *m, const DfSafetensors *st, const char *name, int ndim,
                               const int64_t *shape, DfBuffer dst, DfError *err) {
    return upload_weight(m, st, name, ndim, shape, 0.0f, dst, err);
}

const char *df_target_weight_prefix(const DfModelConfig *c) {
    return c->weight_prefix[0] ? c->weight_prefix : "model.";
}
