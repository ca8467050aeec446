/* OpenBLAS and OpenMP under an address-space limit (ulimit -v: RLIMIT_AS, or
 * RLIMIT_DATA).
 *
 * OpenBLAS (Debian's pthread build) starts its worker threads when the
 * library loads, before main, and each worker maps a 128 MiB buffer at once;
 * a worker whose mapping fails retries for ever, so under a low limit even
 * `dflash --version` never exits. The CPU backend runs OpenBLAS
 * single-threaded under OpenMP (cpu_matmul.c), so the workers are never used,
 * but every OpenMP thread that calls BLAS maps a buffer of its own.
 *
 * df_address_space_fit(), first thing in main: under a limit the process runs
 * itself again (/proc/self/exe) with OPENBLAS_NUM_THREADS=1, so that no worker
 * starts (the library reads it as it loads: setting it later is too late);
 * the second run sizes the OpenMP team to what the limit leaves (per thread a
 * BLAS buffer and a stack, using at most half of it, the rest for the
 * command), and refuses with the figures when not even one thread fits
 * (--version and --help, which make no BLAS call, always run). Without a
 * limit it does nothing. */
#ifndef DF_BACKEND_CPU_ADDRESS_SPACE_H
#define DF_BACKEND_CPU_ADDRESS_SPACE_H

#include <stddef.h>

#include "base/error.h"

/* OpenBLAS's per-thread buffer (BUFFER_SIZE on x86-64, 32 << 22 bytes). */
#define DF_BLAS_BUFFER_BYTES ((size_t)128 << 20)

/* The tighter of RLIMIT_AS and RLIMIT_DATA in bytes, SIZE_MAX when neither is set. */
size_t df_address_space_limit(void);

/* The process's mapped (virtual) size, from /proc/self/statm (0 when unknown). */
size_t df_address_space_mapped(void);

/* Bytes the OpenMP team's BLAS buffers take (0 without a limit): what a
 * memory plan leaves beyond the mapped size. Counted whole, as a plan is made
 * before the first BLAS call. */
size_t df_address_space_blas_reserve(void);

/* Under a limit: runs the program again with OpenBLAS single-threaded (does
 * not return when it does), or, in that second run, fits the OpenMP thread
 * count (saying so on stderr when it lowers it). Returns -1 with the limit,
 * the mapped size and the size needed when not even one thread fits. */
int df_address_space_fit(char **argv, DfError *err);

#endif
