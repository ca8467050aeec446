/* Graceful stop of long commands (dflash train, dflash prepare) on SIGINT and
 * SIGTERM.
 *
 * df_stop_signals_install() sets a handler that records the signal in a
 * flag (and says so on stderr); the command polls df_stop_requested() at safe points (between
 * training steps, between chunks of records) and winds down cleanly: the
 * trainer finishes the step and writes a checkpoint, prepare drops its
 * temporary store. A second signal while the first is pending ends the
 * process at once with _exit(128 + signal) (130 for SIGINT, 143 for SIGTERM):
 * every output file is written atomically (base/atomic_file.h), so what was
 * committed before is intact and at worst a temporary file is left behind.
 *
 * The flag is the one piece of process-wide mutable state of the project (a
 * signal handler can reach nothing else): a volatile sig_atomic_t in
 * signals.c, written only by the handler and by install/restore. */
#ifndef DF_BASE_SIGNALS_H
#define DF_BASE_SIGNALS_H

#include "base/error.h"

/* Installs the handler for SIGINT and SIGTERM. The flag is left as it is, so
 * that a command run inside another (train preparing its data) keeps a
 * signal that came before. */
int df_stop_signals_install(DfError *err);

/* Puts back the default dispositions and clears the flag. */
void df_stop_signals_restore(void);

/* The signal number received since install (SIGINT or SIGTERM), 0 if none. */
int df_stop_requested(void);

/* "SIGINT", "SIGTERM", or "a signal" for others (a static string). */
const char *df_signal_name(int sig);

#endif
