/* The job token: what ties a joining process to this job's rendezvous.
 * Rank 0 listens on MASTER_PORT (on every interface where MASTER_ADDR
 * resolves so); a process of another job, or anyone on the network, could
 * otherwise join, stall or feed the group. Every rank sends its token in the
 * hello (dist/wire.h), and rank 0 compares it in constant time with its own,
 * refusing (and logging) a process whose token differs.
 *
 * The token is DFLASH_JOB_TOKEN when set (1..64 bytes: a secret the
 * launcher passes to every rank), else derived from the launcher's identity
 * of the job with MASTER_PORT: TORCHELASTIC_RUN_ID (torchrun), else
 * SLURM_JOB_ID (Slurm); without any, it is empty (all ranks of one job
 * agree on that too, but nothing then tells jobs apart). */
#ifndef DF_DIST_JOB_TOKEN_H
#define DF_DIST_JOB_TOKEN_H

#include <stdint.h>

#include "base/error.h"

#define DF_JOB_TOKEN_BYTES 64

typedef struct DfJobToken {
    uint8_t bytes[DF_JOB_TOKEN_BYTES]; /* the token, zero-padded */
    const char *source;                /* "DFLASH_JOB_TOKEN", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID" or "none" */
} DfJobToken;

/* The token from the environment (above) for a rendezvous on master_port;
 * fails naming DFLASH_JOB_TOKEN when it is empty or longer than 64 bytes. */
int df_job_token_read(DfJobToken *t, int master_port, DfError *err);

/* The token made from a string (a derived one longer than 64 bytes keeps
 * its first 48 bytes and a hash of the whole). */
void df_job_token_from_string(DfJobToken *t, const char *s, const char *source);

/* 1 when equal; the time taken does not depend on where they differ. */
int df_job_token_equal(const uint8_t a[DF_JOB_TOKEN_BYTES], const uint8_t b[DF_JOB_TOKEN_BYTES]);

#endif
