#include "base/mapping_guard.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define GUARD_SLOTS 256
#define GUARD_PATH_MAX 1024

enum { SLOT_FREE, SLOT_FILLING, SLOT_LIVE };

typedef struct GuardSlot {
    atomic_int state;
    uintptr_t start;
    size_t size;
    char path[GUARD_PATH_MAX];
} GuardSlot;

/* The mapped files (see mapping_guard.h for why this is process-wide). */
static GuardSlot g_slots[GUARD_SLOTS];
static atomic_flag g_installed = ATOMIC_FLAG_INIT;

static void say(const char *s) {
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, s, n);
        if (w <= 0) return;
        s += w, n -= (size_t)w;
    }
}

/* Only async-signal-safe calls here: write, _exit, sigaction. */
static void on_sigbus(int sig, siginfo_t *info, void *uctx) {
    (void)uctx;
    uintptr_t addr = (uintptr_t)info->si_addr;
    for (int i = 0; i < GUARD_SLOTS; i++) {
        GuardSlot *s = &g_slots[i];
        if (atomic_load(&s->state) != SLOT_LIVE || addr < s->start || addr - s->start >= s->size) continue;
        say("dflash: ");
        say(s->path);
        say(" changed or truncated while in use (read past its end through the memory map)\n");
        _exit(1);
    }
    /* not a guarded file: the default action when the access faults again */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
}

static void install_once(void) {
    if (atomic_flag_test_and_set(&g_installed)) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}

int df_mapping_guard_add(const void *start, size_t size, const char *path) {
    if (!start || size == 0) return 0;
    install_once();
    for (int i = 0; i < GUARD_SLOTS; i++) {
        int expected = SLOT_FREE;
        GuardSlot *s = &g_slots[i];
        if (!atomic_compare_exchange_strong(&s->state, &expected, SLOT_FILLING)) continue;
        s->start = (uintptr_t)start;
        s->size = size;
        size_t n = strlen(path);
        if (n >= GUARD_PATH_MAX) n = GUARD_PATH_MAX - 1;
        memcpy(s->path, path, n);
        s->path[n] = '\0';
        atomic_store(&s->state, SLOT_LIVE);
        return i + 1;
    }
    return 0;
}

void df_mapping_guard_remove(int handle) {
    if (handle <= 0 || handle > GUARD_SLOTS) return;
    atomic_store(&g_slots[handle - 1].state, SLOT_FREE);
}
