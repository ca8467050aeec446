#include "text/added_tokens.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/error.h"
#include "text/utf8.h"

void df_segment_push(DfSegmentVec *v, size_t start, size_t end, int32_t id) {
    if (v->len == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 16;
        v->data = df_xrealloc(v->data, v->cap * sizeof *v->data, "text segments");
    }
    v->data[v->len++] = (DfSegment){start, end, id};
}

void df_added_tokens_add(DfAddedTokens *a, DfAddedToken token) {
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 16;
        a->tokens = df_xrealloc(a->tokens, a->cap * sizeof *a->tokens, "added tokens");
    }
    a->tokens[a->n++] = token;
}

int32_t df_added_tokens_find(const DfAddedTokens *a, const char *content, size_t len) {
    for (size_t i = 0; i < a->n; i++)
        if (a->tokens[i].content_len == len && memcmp(a->tokens[i].content, content, len) == 0) return (int32_t)i;
    return -1;
}

/* ---- the byte trie ---- */

static int32_t trie_new_node(DfAddedTrie *t, unsigned char byte) {
    if (t->n_nodes == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 64;
        t->nodes = df_xrealloc(t->nodes, t->cap * sizeof *t->nodes, "added-token trie");
    }
    t->nodes[t->n_nodes] = (DfTrieNode){-1, -1, -1, byte};
    return (int32_t)t->n_nodes++;
}

static int32_t trie_child(const DfAddedTrie *t, int32_t node, unsigned char byte) {
    for (int32_t c = t->nodes[node].first_child; c >= 0; c = t->nodes[c].next_sibling)
        if (t->nodes[c].byte == byte) return c;
    return -1;
}

static void trie_insert(DfAddedTrie *t, const char *pattern, size_t len, int32_t token) {
    int32_t node = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)pattern[i];
        int32_t c = trie_child(t, node, b);
        if (c < 0) {
            c = trie_new_node(t, b);
            t->nodes[c].next_sibling = t->nodes[node].first_child;
            t->nodes[node].first_child = c;
        }
        node = c;
    }
    /* the first of several tokens with the same pattern wins */
    if (t->nodes[node].token < 0) t->nodes[node].token = token;
    t->starts[(unsigned char)pattern[0]] = 1;
}

void df_added_tokens_build(DfAddedTokens *a) {
    trie_new_node(&a->raw, 0);
    trie_new_node(&a->normalized, 0);
    for (size_t i = 0; i < a->n; i++) {
        DfAddedToken *t = &a->tokens[i];
        if (t->pattern_len == 0) continue;
        trie_insert(t->normalized ? &a->normalized : &a->raw, t->pattern, t->pattern_len, (int32_t)i);
    }
}

void df_added_tokens_free(DfAddedTokens *a) {
    for (size_t i = 0; i < a->n; i++) {
        if (a->tokens[i].pattern != a->tokens[i].content) free(a->tokens[i].pattern);
        free(a->tokens[i].content);
    }
    free(a->tokens);
    free(a->raw.nodes);
    free(a->normalized.nodes);
    memset(a, 0, sizeof *a);
}

/* The longest pattern starting at s[0..n): its token index (or -1), *len set. */
static int32_t longest_at(const DfAddedTrie *t, const char *s, size_t n, size_t *len) {
    int32_t node = 0, best = -1;
    for (size_t i = 0; i < n; i++) {
        node = trie_child(t, node, (unsigned char)s[i]);
        if (node < 0) break;
        if (t->nodes[node].token >= 0) {
            best = t->nodes[node].token;
            *len = i + 1;
        }
    }
    return best;
}

/* ---- Unicode classes used by the flags (Rust regex's \s and \w) ---- */

static int is_white_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static int is_word_char(uint32_t c) {
    if (c == '_' || c == 0x200C || c == 0x200D) return 1;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
        return 1;
    default:
        return 0;
    }
}

/* The code point that ends s[0..n) (valid UTF-8, n > 0). */
static uint32_t last_char(const char *s, size_t n) {
    size_t i = n - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    size_t len;
    return df_utf8_decode((const unsigned char *)s + i, n - i, &len);
}

static uint32_t first_char(const char *s, size_t n, size_t *len) {
    return df_utf8_decode((const unsigned char *)s, n, len);
}

/* Start of the whitespace run that ends s[0..n). */
static size_t trailing_space_start(const char *s, size_t n) {
    while (n > 0) {
        size_t i = n - 1;
        while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
        if (!is_white_space(last_char(s, n))) break;
        n = i;
    }
    return n;
}

/* Length of the whitespace run that starts s[0..n). */
static size_t leading_space_len(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t len;
        if (!is_white_space(first_char(s + i, n - i, &len))) break;
        i += len;
    }
    return i;
}

void df_added_tokens_split(const DfAddedTokens *a, int normalized_set, const char *s, size_t n, DfSegmentVec *out) {
    const DfAddedTrie *t = normalized_set ? &a->normalized : &a->raw;
    size_t done = 0; /* text before this offset is already in segments */
    size_t pos = 0;  /* where the matcher resumes (after the last match) */
    while (t->n_nodes > 1 && pos < n) {
        if (!t->starts[(unsigned char)s[pos]]) {
            pos++;
            continue;
        }
        size_t len = 0;
        int32_t k = longest_at(t, s + pos, n - pos, &len);
        if (k < 0) {
            pos++;
            continue;
        }
        const DfAddedToken *tok = &a->tokens[k];
        size_t start = pos, stop = pos + len;
        pos = stop;
        if (tok->single_word) {
            int word_before = start > 0 && is_word_char(last_char(s, start));
            size_t l;
            int word_after = stop < n && is_word_char(first_char(s + stop, n - stop, &l));
            if (word_before || word_after) continue;
        }
        if (tok->lstrip) {
            size_t new_start = trailing_space_start(s, start);
            start = new_start > done ? new_start : done;
        }
        if (tok->rstrip) stop += leading_space_len(s + stop, n - stop);
        if (done < start) df_segment_push(out, done, start, -1);
        df_segment_push(out, start, stop, tok->id);
        done = stop;
    }
    if (done < n || n == 0) df_segment_push(out, done, n, -1);
}
