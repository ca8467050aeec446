/* What the CPU backend's buffers hold, counted as the CUDA backend counts
 * its device memory (the memory_info in_use of the op table): count * elem_size per live
 * buffer from alloc, so that a memory plan can be checked on the CPU. The
 * 64-byte rounding of each allocation (cpu_backend.c) is not included.
 * Only for a backend made by df_backend_cpu_create. */
#ifndef DF_BACKEND_CPU_CPU_MEMORY_H
#define DF_BACKEND_CPU_CPU_MEMORY_H

#include <stddef.h>

#include "backend/backend.h"

size_t df_cpu_bytes_in_use(DfBackend *be);
/* The most bytes_in_use has been since creation or the last reset. */
size_t df_cpu_peak_bytes(DfBackend *be);
void df_cpu_reset_peak(DfBackend *be);

#endif
