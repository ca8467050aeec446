/* train's progress line: on a terminal (a pseudo-terminal 60 columns wide)
 * each step's line is redrawn in place (a carriage return before it, no
 * newline) and fits in the width; in a log (a pipe) each is a whole line of
 * its own with the stage times. */
#include "test_util.h"

#include <pty.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define COLUMNS 60

/* Runs `dflash ARGS` in dir on a pseudo-terminal COLUMNS wide; its output
 * (as the terminal got it) in out, its exit status returned. */
static int run_on_terminal(const char *dir, const char *args, char *out, size_t cap) {
    struct winsize ws = {.ws_row = 40, .ws_col = COLUMNS};
    int master;
    pid_t pid = forkpty(&master, NULL, NULL, &ws);
    assert_true(pid >= 0);
    if (pid == 0) {
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "cd '%s' && OMP_NUM_THREADS=2 exec '%s' %s", dir, df_test_path("dflash"), args);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    size_t n = 0;
    for (ssize_t got; (got = read(master, out + n, cap - 1 - n)) > 0 && n < cap - 1;) n += (size_t)got;
    out[n] = '\0';
    close(master);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void test_progress_in_place_on_a_terminal(void **state) {
    DfTestRunDir *r;
    df_test_run_dir_setup((void **)&r, "progress");
    char args[4096];
    snprintf(args, sizeof args,
             "train --target '%s' --data '%s' --output tty " DF_TEST_TINY_TRAIN_OPTIONS " --steps 3 --log-every 1",
             df_test_path("assets/coder-tiny"), r->data);
    static char out[1 << 18];
    int rc = run_on_terminal(r->dir, args, out, sizeof out);
    if (rc != 0) fail_msg("exit %d:\n%s", rc, out);
    int drawn = 0;
    for (int step = 1; step <= 3; step++) {
        char want[32];
        snprintf(want, sizeof want, "\rstep %d/3 ", step);
        const char *at = strstr(out, want);
        if (!at) fail_msg("no \"\\rstep %d/3\" in:\n%s", step, out);
        size_t len = strcspn(at + 1, "\r\n"); /* up to the next redraw or newline */
        const char *clear = strstr(at + 1, "\033[K");
        if (clear && (size_t)(clear - at - 1) < len) len = (size_t)(clear - at - 1); /* the erase is not text */
        if (len > COLUMNS - 1) fail_msg("step %d: %zu columns on a %d-column terminal", step, len, COLUMNS);
        if (at[1 + len] == '\n' && step < 3) fail_msg("step %d's line ends with a newline", step);
        drawn++;
    }
    assert_int_equal(drawn, 3);
    assert_null(strstr(out, "| ms:")); /* the short form */

    /* in a log: whole lines */
    snprintf(args, sizeof args,
             "train --target '%s' --data '%s' --output log " DF_TEST_TINY_TRAIN_OPTIONS " --steps 3 --log-every 1",
             df_test_path("assets/coder-tiny"), r->data);
    if (df_test_dflash_in(r, 2, args) != 0) fail_msg("%s", r->out);
    for (int step = 1; step <= 3; step++) {
        char want[32];
        snprintf(want, sizeof want, "\nstep %d/3 ", step);
        const char *at = strstr(r->out, want);
        if (!at) fail_msg("no line \"step %d/3\" in:\n%s", step, r->out);
        size_t len = strcspn(at + 1, "\n");
        assert_null(memchr(at + 1, '\r', len));
        assert_non_null(strstr(at, "| ms:"));
    }
    assert_null(strchr(r->out, '\r'));
    df_test_run_dir_teardown((void **)&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_progress_in_place_on_a_terminal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
