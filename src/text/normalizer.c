#include "text/normalizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <utf8proc.h>

static int is_ascii(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) return 0;
    return 1;
}

char *df_normalize(DfNormalizerKind kind, const char *s, size_t n, size_t *out_len, DfError *err) {
    *out_len = 0;
    if (kind == DF_NORMALIZER_NONE || is_ascii(s, n)) return NULL;
    utf8proc_uint8_t *dst = NULL;
    /* no NULLTERM flag: an embedded NUL is an ordinary character */
    utf8proc_ssize_t len =
        utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (len < 0) {
        *out_len = SIZE_MAX;
        df_fail(err, "NFC normalization failed: %s", utf8proc_errmsg(len));
        return NULL;
    }
    *out_len = (size_t)len;
    return (char *)dst;
}
