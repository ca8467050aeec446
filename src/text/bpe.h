/* The BPE model on byte-level words: merge ranks looked up in a hash map
 * keyed by the pair of ids, and the merge loop of Hugging Face `tokenizers`
 * (a min-heap on (rank, position): O(n log n) per word). */
#ifndef DF_TEXT_BPE_H
#define DF_TEXT_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "base/buffer.h"
#include "text/byte_level.h"
#include "text/str_map.h"

typedef struct DfMergeSlot {
    uint64_t pair; /* left id << 32 | right id; UINT64_MAX when empty */
    uint32_t rank, new_id;
} DfMergeSlot;

typedef struct DfBpe {
    DfStrMap vocab;           /* byte-level token string -> id */
    DfMergeSlot *merges;
    size_t merges_mask, n_merges;
    int32_t byte_id[256];     /* id of each single byte's token, or -1 */
    int32_t unk_id;           /* -1 when the model has no unk token */
    int fuse_unk;
    int ignore_merges;        /* a word that is itself in the vocabulary is one token */
    DfByteLevel byte_level;
} DfBpe;

/* Per-call working memory (one per encoding thread). */
typedef struct DfBpeSymbol {
    int32_t id;
    int32_t prev, next;
    int32_t removed;
} DfBpeSymbol;

typedef struct DfBpeMerge {
    uint32_t rank, pos, new_id;
} DfBpeMerge;

typedef struct DfBpeScratch {
    DfBpeSymbol *symbols;
    DfBpeMerge *heap;
    size_t cap, heap_len;
    DfByteBuf mapped; /* the word as a byte-level string (for ignore_merges) */
} DfBpeScratch;

void df_bpe_init(DfBpe *bpe, size_t n_vocab, size_t n_merges);
void df_bpe_free(DfBpe *bpe);

/* Adds a merge (left, right) -> new_id of the given rank; a later duplicate
 * pair replaces the earlier one, as in `tokenizers`. */
void df_bpe_add_merge(DfBpe *bpe, int32_t left, int32_t right, int32_t new_id, uint32_t rank);

/* Finishes setup once the vocabulary is in: the single-byte token ids. */
void df_bpe_finish(DfBpe *bpe);

/* Appends the ids of one pre-token (raw bytes, before the byte-level map). */
void df_bpe_encode_word(const DfBpe *bpe, const unsigned char *word, size_t n, DfBpeScratch *s, DfI32Vec *out);

void df_bpe_scratch_free(DfBpeScratch *s);

#endif
