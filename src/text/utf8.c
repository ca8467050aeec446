#include "text/utf8.h"

/* Valid second-byte range for a lead byte (Unicode table 3-7); the remaining
 * continuation bytes are always 0x80..0xBF. */
static int second_byte_ok(unsigned char lead, unsigned char b) {
    switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
    }
}

size_t df_utf8_sequence_len(const unsigned char *s, size_t n, size_t *bad_len) {
    unsigned char c = s[0];
    size_t need;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) need = 3;
    else if (c >= 0xF0 && c <= 0xF4) need = 4;
    else {
        *bad_len = 1;
        return 0;
    }
    /* The maximal subpart: the lead byte plus every continuation byte that
     * could still have led to a valid sequence. */
    size_t i = 1;
    for (; i < need; i++) {
        if (i >= n) break;
        int ok = i == 1 ? second_byte_ok(c, s[1]) : (s[i] >= 0x80 && s[i] <= 0xBF);
        if (!ok) break;
    }
    if (i == need) return need;
    *bad_len = i;
    return 0;
}

size_t df_utf8_first_invalid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t bad = 0, len = df_utf8_sequence_len(s + i, n - i, &bad);
        if (!len) return i;
        i += len;
    }
    return n;
}

void df_utf8_append_lossy(DfByteBuf *out, const unsigned char *s, size_t n) {
    static const char replacement[] = "\xEF\xBF\xBD";
    size_t i = 0, run = 0; /* run: start of the pending valid bytes */
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t bad = 0, len = df_utf8_sequence_len(s + i, n - i, &bad);
        if (len) {
            i += len;
            continue;
        }
        df_bytebuf_append(out, (const char *)s + run, i - run);
        df_bytebuf_append(out, replacement, 3);
        i += bad;
        run = i;
    }
    if (n > run) df_bytebuf_append(out, (const char *)s + run, n - run);
}

uint32_t df_utf8_decode(const unsigned char *s, size_t n, size_t *len) {
    size_t bad = 0, l = df_utf8_sequence_len(s, n, &bad);
    if (!l) {
        *len = bad;
        return 0xFFFD;
    }
    *len = l;
    switch (l) {
    case 1: return s[0];
    case 2: return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default:
        return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) |
               (s[3] & 0x3F);
    }
}

size_t df_utf8_encode(uint32_t cp, char *buf) {
    unsigned char *b = (unsigned char *)buf;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | (cp >> 6));
        b[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | (cp >> 12));
        b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    b[0] = (unsigned char)(0xF0 | (cp >> 18));
    b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    b[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}
