/* The token store: tokenized training samples (token ids and a loss mask per
 * token) in one binary file that is memory-mapped for reading, with O(1)
 * access to any sample and no parsing or allocation per sample.
 *
 * File format, version 2. All integers little-endian.
 *
 *   Header, 128 bytes:
 *     offset size  field
 *       0     8    magic "DFLSTORE"
 *       8     4    u32 format version (2)
 *      12     4    u32 header size in bytes (128)
 *      16     4    u32 vocabulary size V: every id is in [0, V)
 *      20     4    u32 reserved, 0
 *      24     8    u64 tokenizer fingerprint (df_tokenizer_fingerprint)
 *      32     8    u64 sample count N
 *      40     8    u64 token count T (all samples together)
 *      48     8    u64 loss token count (tokens whose mask is 1)
 *      56     8    u64 ids section: byte offset
 *      64     8    u64 ids section: byte size (4*T)
 *      72     8    u64 mask section: byte offset
 *      80     8    u64 mask section: byte size (T)
 *      88     8    u64 offsets section: byte offset
 *      96     8    u64 offsets section: byte size (8*(N+1))
 *     104     8    u64 payload checksum: XXH3-64 of bytes [128, end of file)
 *     112     8    u64 reserved, 0
 *     120     8    u64 header checksum: XXH3-64 of header bytes [0, 120)
 *
 *   Sections, in this order, each starting at a multiple of 64 bytes (the
 *   gaps are zero bytes; the file ends where the offsets section ends):
 *     ids      int32[T]   token ids of all samples, one after another
 *     mask     uint8[T]   loss mask, 1 where the token is trained on, else 0
 *     offsets  int64[N+1] sample i is tokens [offsets[i], offsets[i+1]);
 *                         offsets[0] = 0, non-decreasing, offsets[N] = T
 *
 * Checksum: XXH3-64 with seed 0 (df_checksum, src/base/checksum.h) of the
 * bytes named above; `tail -c +129 FILE | xxhsum -H3` prints the payload's.
 * Version 1 files, identical but checksummed with df_hash64
 * (src/base/hash64.h), are still read.
 *
 * Writing streams samples: ids go straight into a temporary file next to the
 * output, masks into a second (already unlinked) temporary file, offsets stay
 * in memory (8 bytes a sample). Commit appends the masks and offsets, writes
 * the header, fsyncs and renames the file into place, so a store is either
 * complete at its path or absent. */
#ifndef DF_FORMATS_TOKEN_STORE_H
#define DF_FORMATS_TOKEN_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define DF_TOKEN_STORE_MAGIC "DFLSTORE"
#define DF_TOKEN_STORE_VERSION 2u
#define DF_TOKEN_STORE_VERSION_LEGACY 1u /* df_hash64 checksums */
#define DF_TOKEN_STORE_HEADER_SIZE 128u
#define DF_TOKEN_STORE_ALIGN 64u

/* ---- writer ------------------------------------------------------------ */

typedef struct DfTokenStoreWriter DfTokenStoreWriter;

/* Starts a store at `path` for ids in [0, vocab_size). Nothing appears at
 * `path` until commit. */
DfTokenStoreWriter *df_token_store_writer_open(const char *path, int vocab_size, uint64_t tokenizer_fingerprint,
                                               DfError *err);
/* Appends one sample of n tokens. ids must be in [0, vocab_size) and mask
 * values 0 or 1; otherwise nothing is appended and -1 is returned (the writer
 * stays usable). */
int df_token_store_writer_append(DfTokenStoreWriter *w, const int32_t *ids, const uint8_t *mask, size_t n,
                                 DfError *err);
int64_t df_token_store_writer_num_samples(const DfTokenStoreWriter *w);
/* Finishes the file and renames it into place; frees the writer (also on
 * failure, in which case nothing is left at the path). */
int df_token_store_writer_commit(DfTokenStoreWriter *w, DfError *err);
/* Drops everything written; frees the writer. NULL is allowed. */
void df_token_store_writer_abort(DfTokenStoreWriter *w);

/* ---- reader ------------------------------------------------------------ */

typedef struct DfTokenStore DfTokenStore;

/* Maps and validates a store: magic, version, header checksum, section
 * bounds and sizes, offsets table. With verify_payload, also
 * df_token_store_verify (reads the whole file). Errors name the file. */
DfTokenStore *df_token_store_open(const char *path, int verify_payload, DfError *err);
void df_token_store_close(DfTokenStore *s);

/* Checks the payload checksum, that every id is below the vocabulary size
 * and every mask value is 0 or 1, and the loss-token count. */
int df_token_store_verify(const DfTokenStore *s, DfError *err);

int64_t df_token_store_num_samples(const DfTokenStore *s);
int64_t df_token_store_num_tokens(const DfTokenStore *s);
int64_t df_token_store_num_loss_tokens(const DfTokenStore *s);
int df_token_store_vocab_size(const DfTokenStore *s);
uint64_t df_token_store_fingerprint(const DfTokenStore *s);
const char *df_token_store_path(const DfTokenStore *s);

/* Sample i in O(1): pointers into the mapping (valid until close) and its
 * length in tokens. -1 when i is out of range. */
int df_token_store_sample(const DfTokenStore *s, int64_t i, const int32_t **ids, const uint8_t **mask, int64_t *len,
                          DfError *err);
/* Length of sample i, 0 when out of range. */
int64_t df_token_store_sample_length(const DfTokenStore *s, int64_t i);

#endif
