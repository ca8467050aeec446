#define _GNU_SOURCE
#include "backend/cpu/cpu_address_space.h"

#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Set in the second run; its value is the user's OPENBLAS_NUM_THREADS ("" when it was unset). */
static const char RERUN_MARK[] = "DFLASH_BLAS_SINGLE_THREADED";

/* What the command itself needs at the least beyond the threads (its tensors come on top). */
static const size_t MIN_WORK_BYTES = (size_t)64 << 20;

static const size_t MIB = (size_t)1 << 20;

size_t df_address_space_limit(void) {
    size_t lim = SIZE_MAX;
    int which[2] = {RLIMIT_AS, RLIMIT_DATA};
    for (int i = 0; i < 2; i++) {
        struct rlimit rl;
        if (getrlimit(which[i], &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (size_t)rl.rlim_cur < lim)
            lim = (size_t)rl.rlim_cur;
    }
    return lim;
}

size_t df_address_space_mapped(void) {
    FILE *fp = fopen("/proc/self/statm", "r");
    unsigned long long pages = 0;
    if (fp) {
        if (fscanf(fp, "%llu", &pages) != 1) pages = 0;
        fclose(fp);
    }
    return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* A new thread's stack: the default pthread attributes (RLIMIT_STACK, or
 * OMP_STACKSIZE for OpenMP's threads when set; the default is the larger
 * figure in practice). */
static size_t thread_stack_bytes(void) {
    pthread_attr_t attr;
    size_t bytes = 8 * MIB;
    if (pthread_getattr_default_np(&attr) == 0) {
        if (pthread_attr_getstacksize(&attr, &bytes) != 0) bytes = 8 * MIB;
        pthread_attr_destroy(&attr);
    }
    return bytes;
}

size_t df_address_space_blas_reserve(void) {
    if (df_address_space_limit() == SIZE_MAX) return 0;
    return (size_t)omp_get_max_threads() * DF_BLAS_BUFFER_BYTES;
}

static int run_again(char **argv, DfError *err) {
    const char *user = getenv("OPENBLAS_NUM_THREADS");
    if (setenv(RERUN_MARK, user ? user : "", 1) != 0 || setenv("OPENBLAS_NUM_THREADS", "1", 1) != 0)
        return df_fail_errno(err, "cannot set OPENBLAS_NUM_THREADS for a run under an address-space limit");
    execv("/proc/self/exe", argv);
    return df_fail_errno(err, "under an address-space limit (ulimit -v), cannot run again with OpenBLAS "
                              "single-threaded (/proc/self/exe)");
}

/* --version and --help (of dflash or of a command) make no BLAS call: no buffer to fit. */
static int calls_blas(char **argv) {
    if (!argv[0] || !argv[1] || strcmp(argv[1], "help") == 0) return 0;
    for (int i = 1; argv[i]; i++)
        if (strcmp(argv[i], "--version") == 0 || strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 0;
    return 1;
}

/* The second run: the user's OPENBLAS_NUM_THREADS back for the processes it starts, then the team fitted. */
static int fit_threads(const char *mark, size_t lim, int blas, DfError *err) {
    char user_blas_threads[64];
    snprintf(user_blas_threads, sizeof user_blas_threads, "%s", mark);
    if (*user_blas_threads) setenv("OPENBLAS_NUM_THREADS", user_blas_threads, 1);
    else unsetenv("OPENBLAS_NUM_THREADS");
    unsetenv(RERUN_MARK);
    if (!blas) return 0;
    size_t mapped = df_address_space_mapped(), stack = thread_stack_bytes();
    size_t left = lim > mapped ? lim - mapped : 0;
    size_t need = DF_BLAS_BUFFER_BYTES + MIN_WORK_BYTES;
    if (left < need)
        return df_fail(err,
                       "the address-space limit (ulimit -v) of %zu MiB leaves %zu MiB beyond the %zu MiB the program "
                       "maps at start; OpenBLAS needs a %zu MiB buffer and the command at least %zu MiB more: raise "
                       "the limit to at least %zu MiB",
                       lim / MIB, left / MIB, mapped / MIB, DF_BLAS_BUFFER_BYTES / MIB, MIN_WORK_BYTES / MIB,
                       (mapped + need + MIB - 1) / MIB);
    int want = omp_get_max_threads();
    /* the main thread's buffer, then a buffer and a stack per further thread, within half of what is left */
    size_t budget = left / 2 > DF_BLAS_BUFFER_BYTES ? left / 2 - DF_BLAS_BUFFER_BYTES : 0;
    size_t fit = 1 + budget / (DF_BLAS_BUFFER_BYTES + stack);
    if (fit >= (size_t)want) return 0;
    fprintf(stderr,
            "dflash: the address-space limit (ulimit -v) of %zu MiB, %zu MiB of it mapped at start, fits %zu of %d "
            "threads (each maps a %zu MiB OpenBLAS buffer and a %zu MiB stack); running with %zu\n",
            lim / MIB, mapped / MIB, fit, want, DF_BLAS_BUFFER_BYTES / MIB, stack / MIB, fit);
    omp_set_num_threads((int)fit);
    return 0;
}

int df_address_space_fit(char **argv, DfError *err) {
    size_t lim = df_address_space_limit();
    if (lim == SIZE_MAX) return 0;
    const char *mark = getenv(RERUN_MARK);
    if (!mark) return run_again(argv, err);
    return fit_threads(mark, lim, calls_blas(argv), err);
}
