/* Backend selection by name (select.h): the one place outside the backends
 * that names them. */
#include "backend/select.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DF_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

const char *df_backends_built_in(void) {
#ifdef DF_HAVE_CUDA
    return "cpu cuda";
#else
    return "cpu";
#endif
}

void df_print_devices(FILE *fp) {
#ifdef DF_HAVE_CUDA
    df_cuda_print_devices(fp);
#else
    fprintf(fp, "cuda: not built in (no nvcc at build time)\n");
#endif
}

int df_device_is_cuda(const char *device) {
    return device && strncmp(device, "cuda", 4) == 0 && (device[4] == '\0' || device[4] == ':');
}

DfDeviceKind df_device_kind(const char *device) {
    if (!device || strcmp(device, "cpu") == 0) return DF_DEVICE_HOST;
    return df_device_is_cuda(device) ? DF_DEVICE_ACCELERATOR : DF_DEVICE_UNKNOWN;
}

/* "cuda" -> 0, "cuda:N" -> N; -1 when N is not a small non-negative integer. */
static int cuda_index(const char *device) {
    if (device[4] == '\0') return 0;
    const char *p = device + 5;
    char *end;
    errno = 0;
    long n = strtol(p, &end, 10);
    if (end == p || *end || errno || n < 0 || n > 1024) return -1;
    return (int)n;
}

static DfBackend *create_named(const char *device, DfError *err) {
    if (df_device_kind(device) == DF_DEVICE_HOST) return df_backend_cpu_create(err);
    if (!df_device_is_cuda(device)) {
        df_fail(err, "unknown device '%s' (expected cpu, cuda or cuda:N)", device);
        return NULL;
    }
    int index = cuda_index(device);
    if (index < 0) {
        df_fail(err, "device '%s': expected cuda:N with N a GPU number", device);
        return NULL;
    }
#ifdef DF_HAVE_CUDA
    return df_backend_cuda_create(index, err);
#else
    df_fail(err, "device '%s': this dflash was built without CUDA (no nvcc at build time)", device);
    return NULL;
#endif
}

DfBackend *df_backend_create(const char *device, DfError *err) {
    DfBackend *be = create_named(device, err);
    if (!be) return NULL;
    const char *missing = df_backend_missing_op(be);
    if (missing) {
        df_fail(err, "device '%s': the %s backend lacks the '%s' op (src/backend/backend_ops.def)",
                device ? device : "cpu", be->ops->name, missing);
        df_backend_destroy(be);
        return NULL;
    }
    return be;
}

void df_device_for_local_rank(const char *device, int local_rank, char *out, size_t cap) {
    if (device && strcmp(device, "cuda") == 0)
        snprintf(out, cap, "cuda:%d", local_rank);
    else
        snprintf(out, cap, "%s", device ? device : "cpu");
}

int df_device_check_drafter_head_dim(const char *device, int hd, DfError *err) {
    /* the CUDA block attention (forward and backward) is built for these head
     * sizes only (cuda_block_attention.cu) */
    if (df_device_is_cuda(device) && hd != 64 && hd != 128 && hd != 256)
        return df_fail(err, "--draft-head-dim %d: the CUDA kernels take a drafter head_dim of 64, 128 or 256 (train "
                            "on --device cpu for others)", hd);
    return 0;
}
