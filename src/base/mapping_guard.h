/* A memory-mapped input (base/mapped_file.h) that another process truncates
 * while it is mapped raises SIGBUS at the next read of a page past the new
 * end; by default the process dies with no word (exit 135). The guard's
 * SIGBUS handler looks the faulting address up among the mapped files and
 * says "dflash: FILE changed or truncated while in use" and exits 1 (an
 * address outside them takes the default action, as before).
 *
 * A signal handler can reach only process-wide state, so the mapped ranges
 * are a fixed table in mapping_guard.c (beside signals.c's stop flag, the
 * only process-wide mutable state of the project): slots taken and freed
 * with atomics, so that mapping from any thread is safe; the handler only
 * reads them and calls write(2) and _exit. A mapping that finds the table
 * full is simply not guarded. */
#ifndef DF_BASE_MAPPING_GUARD_H
#define DF_BASE_MAPPING_GUARD_H

#include <stddef.h>

/* Guards [start, start + size) as the file at path (installing the SIGBUS
 * handler on first use). Returns a handle > 0, or 0 when not guarded. */
int df_mapping_guard_add(const void *start, size_t size, const char *path);

/* Drops a guard (handle 0: nothing), before the range is unmapped. */
void df_mapping_guard_remove(int handle);

#endif
