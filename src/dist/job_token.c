#include "dist/job_token.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash64.h"

void df_job_token_from_string(DfJobToken *t, const char *s, const char *source) {
    memset(t->bytes, 0, sizeof t->bytes);
    t->source = source;
    size_t n = strlen(s);
    if (n <= DF_JOB_TOKEN_BYTES) {
        memcpy(t->bytes, s, n);
        return;
    }
    memcpy(t->bytes, s, 48);
    char tail[17];
    snprintf(tail, sizeof tail, "%016llx", (unsigned long long)df_hash64(s, n));
    memcpy(t->bytes + 48, tail, 16);
}

int df_job_token_read(DfJobToken *t, int master_port, DfError *err) {
    const char *secret = getenv("DFLASH_JOB_TOKEN");
    if (secret) {
        size_t n = strlen(secret);
        if (n == 0 || n > DF_JOB_TOKEN_BYTES)
            return df_fail(err, "environment variable DFLASH_JOB_TOKEN is %zu bytes; it must be 1 to %d", n,
                           DF_JOB_TOKEN_BYTES);
        df_job_token_from_string(t, secret, "DFLASH_JOB_TOKEN");
        return 0;
    }
    static const char *const ids[] = {"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        const char *id = getenv(ids[i]);
        if (!id || !*id) continue;
        char derived[512];
        snprintf(derived, sizeof derived, "%s=%s:%d", ids[i], id, master_port);
        df_job_token_from_string(t, derived, ids[i]);
        return 0;
    }
    df_job_token_from_string(t, "", "none");
    return 0;
}

int df_job_token_equal(const uint8_t a[DF_JOB_TOKEN_BYTES], const uint8_t b[DF_JOB_TOKEN_BYTES]) {
    volatile uint8_t diff = 0;
    for (int i = 0; i < DF_JOB_TOKEN_BYTES; i++) diff |= (uint8_t)(a[i] ^ b[i]);
    return diff == 0;
}
