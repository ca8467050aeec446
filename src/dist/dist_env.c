#include "dist/dist_env.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where each launcher puts a process's place (dist_env.h). */
typedef struct Launcher {
    const char *name, *rank, *size, *local;
} Launcher;

static const Launcher LAUNCHERS[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"MPICH/Hydra", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};
#define N_LAUNCHERS (sizeof LAUNCHERS / sizeof LAUNCHERS[0])

/* The launcher that started this process: torchrun when WORLD_SIZE is set,
 * else the first whose world size is a number above 1; NULL: none. */
static const Launcher *find_launcher(void) {
    if (getenv("WORLD_SIZE")) return &LAUNCHERS[0];
    for (size_t i = 1; i < N_LAUNCHERS; i++) {
        const char *v = getenv(LAUNCHERS[i].size);
        if (v && strtol(v, NULL, 10) > 1) return &LAUNCHERS[i];
    }
    return NULL;
}

int df_dist_env_present(void) { return find_launcher() != NULL; }

static const char *required(const Launcher *l, const char *name, DfError *err) {
    const char *v = getenv(name);
    if (!v || !*v) {
        df_fail(err, "environment variable %s is not set (a distributed run started by %s needs %s, %s, %s, "
                     "MASTER_ADDR and MASTER_PORT)",
                name, l->name, l->rank, l->size, l->local);
        return NULL;
    }
    return v;
}

/* A decimal integer in [lo, hi], the whole string. */
static int int_var(const Launcher *l, const char *name, long lo, long hi, int *out, DfError *err) {
    const char *v = required(l, name, err);
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
    const Launcher *l = find_launcher();
    if (!l) l = &LAUNCHERS[0];
    env->launcher = l->name;
    if (int_var(l, l->size, 1, DF_DIST_MAX_WORLD, &env->world_size, err)) return -1;
    if (int_var(l, l->rank, 0, env->world_size - 1, &env->rank, err)) {
        if (getenv(l->rank) && *getenv(l->rank)) df_context(err, "%s=%d", l->size, env->world_size);
        return -1;
    }
    if (int_var(l, l->local, 0, 1023, &env->local_rank, err)) return -1;
    const char *addr = required(l, "MASTER_ADDR", err);
    if (!addr) return -1;
    if (strlen(addr) >= sizeof env->master_addr)
        return df_fail(err, "environment variable MASTER_ADDR is too long (%zu bytes)", strlen(addr));
    snprintf(env->master_addr, sizeof env->master_addr, "%s", addr);
    if (int_var(l, "MASTER_PORT", 1, 65535, &env->master_port, err)) return -1;
    return df_job_token_read(&env->token, env->master_port, err);
}
