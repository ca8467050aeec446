#include "dist/dist_env.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int df_dist_env_present(void) { return getenv("WORLD_SIZE") != NULL; }

static const char *required(const char *name, DfError *err) {
    const char *v = getenv(name);
    if (!v || !*v) {
        df_fail(err, "environment variable %s is not set (a distributed run needs RANK, WORLD_SIZE, LOCAL_RANK, "
                     "MASTER_ADDR and MASTER_PORT, as torchrun sets them)",
                name);
        return NULL;
    }
    return v;
}

/* A decimal integer in [lo, hi], the whole string. */
static int int_var(const char *name, long lo, long hi, int *out, DfError *err) {
    const char *v = required(name, err);
    if (!v) return -1;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (end == v || *end || errno || n < lo || n > hi)
        return df_fail(err, "environment variable %s='%s' is not an integer in [%ld, %ld]", name, v, lo, hi);
    *out = (int)n;
    return 0;
}

int df_dist_env_read(DfDistEnv *env, DfError *err) {
    memset(env, 0, sizeof *env);
    if (int_var("WORLD_SIZE", 1, DF_DIST_MAX_WORLD, &env->world_size, err)) return -1;
    if (int_var("RANK", 0, env->world_size - 1, &env->rank, err)) {
        if (getenv("RANK") && *getenv("RANK")) df_context(err, "WORLD_SIZE=%d", env->world_size);
        return -1;
    }
    if (int_var("LOCAL_RANK", 0, 1023, &env->local_rank, err)) return -1;
    const char *addr = required("MASTER_ADDR", err);
    if (!addr) return -1;
    if (strlen(addr) >= sizeof env->master_addr)
        return df_fail(err, "environment variable MASTER_ADDR is too long (%zu bytes)", strlen(addr));
    snprintf(env->master_addr, sizeof env->master_addr, "%s", addr);
    return int_var("MASTER_PORT", 1, 65535, &env->master_port, err);
}
