/* Added (special and non-special) tokens: found in the text before the model
 * sees it, leftmost-longest as `tokenizers`' Aho-Corasick matcher does, with
 * their lstrip / rstrip / single_word flags. Tokens with normalized=false are
 * matched in the raw text, those with normalized=true in the normalized text. */
#ifndef DF_TEXT_ADDED_TOKENS_H
#define DF_TEXT_ADDED_TOKENS_H

#include <stddef.h>
#include <stdint.h>

typedef struct DfAddedToken {
    char *content;       /* as written in tokenizer.json */
    size_t content_len;
    char *pattern;       /* what is matched (and decoded): content, normalized when `normalized` */
    size_t pattern_len;
    int32_t id;
    uint8_t lstrip, rstrip, single_word, normalized, special;
} DfAddedToken;

typedef struct DfTrieNode {
    int32_t first_child, next_sibling;
    int32_t token;       /* index into tokens of a pattern ending here, or -1 */
    unsigned char byte;
} DfTrieNode;

typedef struct DfAddedTrie {
    DfTrieNode *nodes;   /* node 0 is the root */
    size_t n_nodes, cap;
    uint8_t starts[256]; /* a pattern starts with this byte */
} DfAddedTrie;

typedef struct DfAddedTokens {
    DfAddedToken *tokens;
    size_t n, cap;
    DfAddedTrie raw, normalized;
} DfAddedTokens;

/* A piece of text: [start, end) and the added token it is, or -1 for text. */
typedef struct DfSegment {
    size_t start, end;
    int32_t id;
} DfSegment;

typedef struct DfSegmentVec {
    DfSegment *data;
    size_t len, cap;
} DfSegmentVec;

/* Takes ownership of content and pattern (heap strings). */
void df_added_tokens_add(DfAddedTokens *a, DfAddedToken token);
/* Builds the two tries once every token is in. */
void df_added_tokens_build(DfAddedTokens *a);
void df_added_tokens_free(DfAddedTokens *a);

/* Index of the token with this content, or -1. */
int32_t df_added_tokens_find(const DfAddedTokens *a, const char *content, size_t len);

/* Splits s[0..n) into text and added-token segments (appended to out), with
 * the tokens whose `normalized` flag equals `normalized_set`. */
void df_added_tokens_split(const DfAddedTokens *a, int normalized_set, const char *s, size_t n, DfSegmentVec *out);

void df_segment_push(DfSegmentVec *v, size_t start, size_t end, int32_t id);

#endif
