#include "base/signals.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

/* The stop flag: the signal number of the first SIGINT/SIGTERM, 0 before.
 * See signals.h for why this is the one global. */
static volatile sig_atomic_t g_stop_signal = 0;

static void say(const char *msg) {
    ssize_t ignored = write(STDERR_FILENO, msg, strlen(msg));
    (void)ignored;
}

/* Only async-signal-safe calls here: write, _exit. */
static void on_stop_signal(int sig) {
    if (g_stop_signal != 0) {
        say("dflash: second signal: exiting now\n");
        _exit(128 + sig);
    }
    g_stop_signal = sig;
    say(sig == SIGINT ? "\ndflash: SIGINT: stopping cleanly (send it again to exit at once)\n"
                      : "\ndflash: SIGTERM: stopping cleanly (send it again to exit at once)\n");
}

int df_stop_signals_install(DfError *err) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* reads and writes in progress continue */
    if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0)
        return df_fail_errno(err, "cannot install the SIGINT/SIGTERM handler");
    return 0;
}

void df_stop_signals_restore(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    g_stop_signal = 0;
}

int df_stop_requested(void) { return (int)g_stop_signal; }

const char *df_signal_name(int sig) {
    switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
    }
}
