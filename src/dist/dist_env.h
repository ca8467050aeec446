/* The process-group environment as torchrun and Slurm wrappers set it:
 * RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. */
#ifndef DF_DIST_DIST_ENV_H
#define DF_DIST_DIST_ENV_H

#include "base/error.h"

#define DF_DIST_MAX_WORLD 4096

typedef struct DfDistEnv {
    int rank;             /* RANK: 0 .. world_size-1 */
    int world_size;       /* WORLD_SIZE: 1 .. DF_DIST_MAX_WORLD */
    int local_rank;       /* LOCAL_RANK: the GPU index on this host */
    char master_addr[256]; /* MASTER_ADDR: host name, IPv4 or IPv6 address of rank 0 */
    int master_port;      /* MASTER_PORT: 1 .. 65535 */
} DfDistEnv;

/* 1 when WORLD_SIZE is set (the process was started as part of a group). */
int df_dist_env_present(void);

/* Reads and checks all five variables; a missing or malformed one fails
 * with a message naming it and its value. */
int df_dist_env_read(DfDistEnv *env, DfError *err);

#endif
