#include "base/checksum.h"

#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

#include "base/error.h"

struct DfChecksum {
    XXH3_state_t *state;
};

DfChecksum *df_checksum_new(void) {
    DfChecksum *c = df_xcalloc(1, sizeof *c, "checksum");
    c->state = XXH3_createState();
    if (!c->state) {
        fprintf(stderr, "dflash: out of memory allocating the checksum state\n");
        abort();
    }
    XXH3_64bits_reset(c->state);
    return c;
}

void df_checksum_update(DfChecksum *c, const void *data, size_t n) {
    if (n > 0) XXH3_64bits_update(c->state, data, n);
}

uint64_t df_checksum_final(const DfChecksum *c) { return XXH3_64bits_digest(c->state); }

void df_checksum_free(DfChecksum *c) {
    if (!c) return;
    XXH3_freeState(c->state);
    free(c);
}

uint64_t df_checksum(const void *data, size_t n) { return XXH3_64bits(data, n); }
