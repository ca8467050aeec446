/* Decoding: ids -> token strings -> bytes (the ByteLevel decoder) -> UTF-8,
 * invalid sequences replaced by U+FFFD as Rust's from_utf8_lossy does. */
#include <string.h>

#include "text/tokenizer_internal.h"
#include "text/utf8.h"

/* The ByteLevel decoder's view of one token: the bytes its characters stand
 * for, or the token's own UTF-8 when any character is outside the byte map. */
static void append_token_bytes(const DfByteLevel *bl, const char *token, size_t len, DfByteBuf *out) {
    size_t mark = out->len;
    for (size_t i = 0; i < len;) {
        size_t n;
        uint32_t cp = df_utf8_decode((const unsigned char *)token + i, len - i, &n);
        int b = df_byte_level_byte(bl, cp);
        if (b < 0) {
            out->len = mark;
            df_bytebuf_append(out, token, len);
            return;
        }
        char c = (char)b;
        df_bytebuf_append(out, &c, 1);
        i += n;
    }
}

static void set_entry(DfTokenizer *tok, DfByteBuf *table, int32_t id, const char *token, size_t len) {
    tok->decoded_off[id] = (uint32_t)table->len;
    append_token_bytes(&tok->bpe.byte_level, token, len, table);
    tok->decoded_len[id] = (uint32_t)(table->len - tok->decoded_off[id]);
}

void df_tokenizer_build_decode_table(DfTokenizer *tok) {
    size_t n = (size_t)tok->n_ids;
    tok->decoded_off = df_xmalloc(n * sizeof *tok->decoded_off, "decode table");
    tok->decoded_len = df_xcalloc(n, sizeof *tok->decoded_len, "decode table");
    memset(tok->decoded_off, 0xFF, n * sizeof *tok->decoded_off);
    DfByteBuf table = {0};
    const DfStrMap *vocab = &tok->bpe.vocab;
    for (size_t i = 0; i <= vocab->mask; i++) {
        const DfStrMapSlot *s = &vocab->slots[i];
        if (s->used) set_entry(tok, &table, s->value, vocab->keys + s->key_off, s->key_len);
    }
    /* an added token's id decodes to the added token (HF looks there first) */
    for (size_t i = 0; i < tok->added.n; i++) {
        const DfAddedToken *a = &tok->added.tokens[i];
        set_entry(tok, &table, a->id, a->pattern, a->pattern_len);
    }
    tok->decoded = table.data;
}

int df_tokenizer_has_id(const DfTokenizer *tok, int32_t id) {
    return id >= 0 && id < tok->n_ids && tok->decoded_off[id] != UINT32_MAX;
}

int df_tokenizer_decode(const DfTokenizer *tok, const int32_t *ids, size_t n, DfByteBuf *out, DfError *err) {
    DfByteBuf bytes = {0};
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (!df_tokenizer_has_id(tok, id)) {
            df_bytebuf_free(&bytes);
            return df_fail(err, "decode: id %d at position %zu is not in the vocabulary of %s (%d ids)", (int)id, i,
                           tok->path, (int)tok->n_ids);
        }
        df_bytebuf_append(&bytes, tok->decoded + tok->decoded_off[id], tok->decoded_len[id]);
    }
    df_utf8_append_lossy(out, (const unsigned char *)bytes.data, bytes.len);
    if (!out->data) df_bytebuf_append(out, "", 0);
    df_bytebuf_free(&bytes);
    return 0;
}
