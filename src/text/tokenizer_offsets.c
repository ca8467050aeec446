/* Token byte offsets. For byte-level BPE every token stands for a fixed byte
 * string (its decoded bytes; an added token, its content), and the tokens of
 * a text spell the normalized text in order, so each token's start is the sum
 * of the lengths before it. */
#include <stdint.h>
#include <stdlib.h>

#include "text/tokenizer_internal.h"
#include "text/tokenizer_offsets.h"

int df_tokenizer_encode_offsets(const DfTokenizer *tok, const char *text, size_t len, DfI32Vec *ids,
                                DfI32Vec *starts, DfError *err) {
    if (len > INT32_MAX) return df_fail(err, "encode: %zu bytes is too long for token offsets", len);
    size_t first = ids->len;
    if (df_tokenizer_encode(tok, text, len, ids, err) != 0) return -1;
    size_t at = 0;
    for (size_t k = first; k < ids->len; k++) {
        df_i32vec_push(starts, (int32_t)(at < INT32_MAX ? at : INT32_MAX));
        at += tok->decoded_len[ids->data[k]];
    }
    return 0;
}

int df_tokenizer_normalize(const DfTokenizer *tok, const char *text, size_t len, DfByteBuf *out, DfError *err) {
    size_t out_len = 0;
    char *norm = df_normalize(tok->normalizer, text, len, &out_len, err);
    if (!norm && out_len == SIZE_MAX) return -1;
    df_bytebuf_append(out, norm ? norm : text, norm ? out_len : len);
    free(norm);
    return 0;
}
