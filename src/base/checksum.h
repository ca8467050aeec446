/* df_checksum: XXH3-64 with seed 0 (libxxhash), the checksum of the token
 * store and of the training checkpoints. It is a standard hash so that a file
 * can be checked with common tools: `xxhsum -H3` prints the same value for the
 * same bytes. Not cryptographic: it detects corruption, not tampering. */
#ifndef DF_BASE_CHECKSUM_H
#define DF_BASE_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

/* A streaming checksum: the result equals df_checksum of all updates' bytes
 * concatenated. */
typedef struct DfChecksum DfChecksum;

DfChecksum *df_checksum_new(void);
void df_checksum_update(DfChecksum *c, const void *data, size_t n);
uint64_t df_checksum_final(const DfChecksum *c);
void df_checksum_free(DfChecksum *c); /* NULL is allowed */

uint64_t df_checksum(const void *data, size_t n);

#endif
