/* The public tokenizer API: loading, and encoding as `tokenizers` does it:
 * added tokens in the raw text, then NFC, added tokens in the normalized
 * text, the pre-tokenizer, and BPE on each pre-token. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/mapped_file.h"
#include "text/tokenizer_internal.h"
#include "text/utf8.h"

/* Working memory of one encode call: nothing is shared between calls. */
typedef struct EncodeScratch {
    DfSegmentVec raw_segments, norm_segments;
    DfPreTokScratch pretok;
    DfBpeScratch bpe;
} EncodeScratch;

static void scratch_free(EncodeScratch *s) {
    free(s->raw_segments.data);
    free(s->norm_segments.data);
    df_pretok_scratch_free(&s->pretok);
    df_bpe_scratch_free(&s->bpe);
}

static char *resolve_path(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        size_t n = strlen(path);
        char *p = df_xmalloc(n + 16, "path");
        snprintf(p, n + 16, "%s%stokenizer.json", path, n && path[n - 1] == '/' ? "" : "/");
        return p;
    }
    return df_xstrdup(path);
}

DfTokenizer *df_tokenizer_load(const char *path, DfError *err) {
    DfTokenizer *tok = df_xcalloc(1, sizeof *tok, "tokenizer");
    tok->path = resolve_path(path);
    size_t size = 0;
    char *json = df_read_text_file(tok->path, &size, err);
    if (!json || df_tokenizer_parse_json(tok, json, size, tok->path, err) < 0) {
        free(json);
        df_tokenizer_free(tok);
        return NULL;
    }
    free(json);
    df_tokenizer_build_decode_table(tok);
    return tok;
}

void df_tokenizer_free(DfTokenizer *tok) {
    if (!tok) return;
    df_bpe_free(&tok->bpe);
    df_added_tokens_free(&tok->added);
    df_pretokenizer_free(&tok->pre);
    free(tok->decoded_off);
    free(tok->decoded_len);
    free(tok->decoded);
    free(tok->path);
    free(tok);
}

/* Normalized text -> normalized added tokens -> pre-tokens -> BPE. */
static int encode_text(const DfTokenizer *tok, const char *s, size_t n, EncodeScratch *sc, DfI32Vec *out,
                       DfError *err) {
    size_t norm_len = 0;
    char *norm = df_normalize(tok->normalizer, s, n, &norm_len, err);
    if (!norm && norm_len == SIZE_MAX) return -1;
    if (norm) {
        s = norm;
        n = norm_len;
    }
    sc->norm_segments.len = 0;
    df_added_tokens_split(&tok->added, 1, s, n, &sc->norm_segments);
    int rc = 0;
    for (size_t i = 0; i < sc->norm_segments.len && rc == 0; i++) {
        DfSegment seg = sc->norm_segments.data[i];
        if (seg.id >= 0) {
            df_i32vec_push(out, seg.id);
            continue;
        }
        if (seg.end == seg.start) continue;
        rc = df_pretokenize(&tok->pre, s + seg.start, seg.end - seg.start, &sc->pretok, err);
        if (rc < 0) df_context(err, "%s", tok->path);
        for (size_t k = 0; rc == 0 && k < sc->pretok.spans.len; k++) {
            DfSpan p = sc->pretok.spans.data[k];
            df_bpe_encode_word(&tok->bpe, (const unsigned char *)s + seg.start + p.start, p.end - p.start, &sc->bpe,
                               out);
        }
    }
    free(norm);
    return rc;
}

int df_tokenizer_encode(const DfTokenizer *tok, const char *text, size_t len, DfI32Vec *out, DfError *err) {
    size_t bad = df_utf8_first_invalid((const unsigned char *)text, len);
    if (bad < len) return df_fail(err, "encode: the text is not valid UTF-8 (byte offset %zu)", bad);
    EncodeScratch sc = {0};
    df_pretok_budget(&sc.pretok, len);
    df_added_tokens_split(&tok->added, 0, text, len, &sc.raw_segments);
    int rc = 0;
    for (size_t i = 0; i < sc.raw_segments.len && rc == 0; i++) {
        DfSegment seg = sc.raw_segments.data[i];
        if (seg.id >= 0) df_i32vec_push(out, seg.id);
        else if (seg.end > seg.start) rc = encode_text(tok, text + seg.start, seg.end - seg.start, &sc, out, err);
    }
    scratch_free(&sc);
    return rc;
}

int df_tokenizer_vocab_size(const DfTokenizer *tok) {
    return tok->n_ids;
}

int32_t df_tokenizer_token_to_id(const DfTokenizer *tok, const char *token) {
    size_t len = strlen(token);
    int32_t k = df_added_tokens_find(&tok->added, token, len);
    if (k >= 0) return tok->added.tokens[k].id;
    return df_str_map_get(&tok->bpe.vocab, token, len);
}

uint64_t df_tokenizer_fingerprint(const DfTokenizer *tok) {
    return tok->fingerprint;
}

int df_tokenizer_is_added(const DfTokenizer *tok, int32_t id) {
    for (size_t i = 0; i < tok->added.n; i++)
        if (tok->added.tokens[i].id == id) return 1;
    return 0;
}
