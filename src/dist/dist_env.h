/* The process-group environment: a process's place (rank, world size,
 * local rank) as its launcher sets it, and where rank 0 listens
 * (MASTER_ADDR, MASTER_PORT, which every launcher passes through).
 * Launchers, in order of precedence:
 *   torchrun (and the Slurm or MPI wrappers that set its variables):
 *     RANK, WORLD_SIZE, LOCAL_RANK;
 *   Open MPI's mpirun: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK;
 *   MPICH or Intel MPI (Hydra): PMI_RANK, PMI_SIZE, MPI_LOCALRANKID;
 *   Slurm's srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID.
 * So `mpirun -np 8 -x MASTER_ADDR=node0 -x MASTER_PORT=29500 dflash train
 * ...` starts a group without linking MPI: the ranks still join through
 * the TCP rendezvous (dist/rendezvous.h). */
#ifndef DF_DIST_DIST_ENV_H
#define DF_DIST_DIST_ENV_H

#include "base/error.h"
#include "dist/job_token.h"

#define DF_DIST_MAX_WORLD 4096

typedef struct DfDistEnv {
    const char *launcher; /* "torchrun", "Open MPI", "MPICH/Hydra" or "Slurm" (static) */
    int rank;             /* RANK: 0 .. world_size-1 */
    int world_size;       /* WORLD_SIZE: 1 .. DF_DIST_MAX_WORLD */
    int local_rank;       /* LOCAL_RANK: the GPU index on this host */
    char master_addr[256]; /* MASTER_ADDR: host name, IPv4 or IPv6 address of rank 0 */
    int master_port;      /* MASTER_PORT: 1 .. 65535 */
    DfJobToken token;     /* DFLASH_JOB_TOKEN, or the launcher's job id with MASTER_PORT (dist/job_token.h) */
} DfDistEnv;

/* 1 when the process was started as part of a group: WORLD_SIZE is set
 * (any value), or another launcher's world size is above 1 (one MPI or
 * Slurm task alone is not a group). */
int df_dist_env_present(void);

/* Reads and checks the launcher's three variables and MASTER_ADDR and
 * MASTER_PORT, and the job token; a missing or malformed one fails with a message naming it
 * and its value. Without any launcher's world size it asks for torchrun's. */
int df_dist_env_read(DfDistEnv *env, DfError *err);

#endif
