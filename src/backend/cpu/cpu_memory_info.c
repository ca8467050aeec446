/* The CPU backend's memory_info: the host's memory as this process sees it
 * (MemAvailable and MemTotal of /proc/meminfo, within RLIMIT_AS and
 * RLIMIT_DATA less the BLAS buffers still to be mapped), and the bytes the backend's buffers hold, now and at most
 * (cpu_memory.h: counted as the CUDA backend counts its device memory). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "backend/cpu/cpu_address_space.h"
#include "backend/cpu/cpu_memory.h"
#include "backend/cpu/cpu_ops.h"

/* A /proc/meminfo field in bytes (0 when it cannot be read). */
static size_t meminfo_bytes(const char *field) {
    FILE *fp = fopen("/proc/meminfo", "r");
    if (!fp) return 0;
    char line[256], name[64];
    unsigned long long kb, found = 0;
    while (fgets(line, sizeof line, fp))
        if (sscanf(line, "%63[^:]: %llu kB", name, &kb) == 2 && strcmp(name, field) == 0) found = kb;
    fclose(fp);
    return (size_t)found * 1024;
}

void df_cpu_memory_info(DfBackend *be, DfMemoryInfo *info) {
    size_t lim = df_address_space_limit(), mapped = df_address_space_mapped();
    *info = (DfMemoryInfo){.available = meminfo_bytes("MemAvailable"), .total = meminfo_bytes("MemTotal"),
                           .in_use = df_cpu_bytes_in_use(be), .peak = df_cpu_peak_bytes(be), .host = 1};
    if (info->available == 0) info->available = SIZE_MAX; /* no /proc: nothing known */
    if (lim != SIZE_MAX) {
        /* the limits count mapped memory: what they leave beyond what is mapped already */
        size_t left = lim > mapped ? lim - mapped : 0;
        /* and the OpenMP threads' BLAS buffers, mapped at the first BLAS call (cpu_address_space.h) */
        size_t blas = df_address_space_blas_reserve();
        left = left > blas ? left - blas : 0;
        if (left < info->available) info->available = left;
        if (lim < info->total || info->total == 0) info->total = lim;
    }
}
