/* Backend selection by name. */
#include "backend/select.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#ifdef DF_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

int df_device_is_cuda(const char *device) {
    return device && strncmp(device, "cuda", 4) == 0 && (device[4] == '\0' || device[4] == ':');
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

DfBackend *df_backend_create(const char *device, DfError *err) {
    if (!device || strcmp(device, "cpu") == 0) return df_backend_cpu_create(err);
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
