#define _GNU_SOURCE
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *df_test_path(const char *relative) {
    static char bufs[8][4096];
    static int next;
    char *b = bufs[next++ % 8];
    const char *root = getenv("DFLASH_SOURCE_DIR"); /* a tree moved elsewhere (e.g. the GPU machine) */
    snprintf(b, sizeof bufs[0], "%s/%s", root && *root ? root : DF_SOURCE_DIR, relative);
    return b;
}

char *df_test_tmpdir(const char *tag) {
    char tmpl[256];
    snprintf(tmpl, sizeof tmpl, "/tmp/dflash-test-%s-XXXXXX", tag);
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    return strdup(d);
}

void df_test_rmtree(const char *dir) {
    char cmd[4352];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
}

int df_test_run(const char *cmd, char *out, size_t cap) {
    char full[8192];
    snprintf(full, sizeof full, "(%s) 2>&1", cmd);
    FILE *p = popen(full, "r");
    assert_non_null(p);
    size_t n = 0;
    char tmp[4096];
    size_t got;
    while ((got = fread(tmp, 1, sizeof tmp, p)) > 0) {
        if (out && n + 1 < cap) {
            size_t take = got < cap - 1 - n ? got : cap - 1 - n;
            memcpy(out + n, tmp, take);
            n += take;
        }
    }
    if (out && cap) out[n] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

double df_rel_error(const float *a, const float *b, size_t n) {
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d != d) return INFINITY; /* NaN never passes */
        if (d > max_diff) max_diff = d;
        if (fabs((double)b[i]) > max_ref) max_ref = fabs((double)b[i]);
    }
    return max_ref > 0 ? max_diff / max_ref : max_diff;
}

void df_test_fill_random(float *x, size_t n, uint64_t seed, float scale) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = scale * (float)(((double)(s >> 11) / 9007199254740992.0) * 2.0 - 1.0);
    }
}

void df_test_write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

int df_test_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}
