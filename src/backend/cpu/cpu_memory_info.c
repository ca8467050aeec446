/* The CPU backend's memory_info: the host's memory as this process sees it
 * (MemAvailable and MemTotal of /proc/meminfo, within RLIMIT_AS and
 * RLIMIT_DATA) and the process's resident set (now, and its peak). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

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

/* The tighter of the address-space and data limits (SIZE_MAX: none). */
static size_t rlimit_bytes(void) {
    size_t lim = SIZE_MAX;
    int which[2] = {RLIMIT_AS, RLIMIT_DATA};
    for (int i = 0; i < 2; i++) {
        struct rlimit rl;
        if (getrlimit(which[i], &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (size_t)rl.rlim_cur < lim)
            lim = (size_t)rl.rlim_cur;
    }
    return lim;
}

/* The process's mapped (virtual) and resident sizes, from /proc/self/statm. */
static void process_bytes(size_t *mapped, size_t *resident) {
    FILE *fp = fopen("/proc/self/statm", "r");
    unsigned long long pages = 0, res = 0;
    if (fp) {
        if (fscanf(fp, "%llu %llu", &pages, &res) != 2) pages = res = 0;
        fclose(fp);
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    *mapped = (size_t)pages * page;
    *resident = (size_t)res * page;
}

void df_cpu_memory_info(DfBackend *be, DfMemoryInfo *info) {
    (void)be;
    size_t lim = rlimit_bytes(), mapped, resident;
    process_bytes(&mapped, &resident);
    struct rusage ru;
    *info = (DfMemoryInfo){.available = meminfo_bytes("MemAvailable"), .total = meminfo_bytes("MemTotal"),
                           .in_use = resident, .host = 1};
    if (info->available == 0) info->available = SIZE_MAX; /* no /proc: nothing known */
    if (lim != SIZE_MAX) {
        /* the limits count mapped memory: what they leave beyond what is mapped already */
        size_t left = lim > mapped ? lim - mapped : 0;
        if (left < info->available) info->available = left;
        if (lim < info->total || info->total == 0) info->total = lim;
    }
    if (getrusage(RUSAGE_SELF, &ru) == 0) info->peak = (size_t)ru.ru_maxrss * 1024;
}
