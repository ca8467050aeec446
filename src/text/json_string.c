#include "text/json_string.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "text/utf8.h"

static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    return i;
}

static int hex4(const char *s, size_t n, size_t i, uint32_t *out) {
    if (i + 4 > n) return -1;
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        char ch = s[i + (size_t)k];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return 0;
}

/* Decodes the string literal at s[i] == '"' (into out when non-NULL);
 * returns the index after its closing quote, or 0 when malformed. */
static size_t read_string(const char *s, size_t n, size_t i, DfByteBuf *out) {
    i++;
    while (i < n && s[i] != '"') {
        size_t run = i;
        while (i < n && s[i] != '"' && s[i] != '\\') i++;
        if (out) df_bytebuf_append(out, s + run, i - run);
        if (i >= n || s[i] == '"') break;
        if (++i >= n) return 0;
        char esc = s[i++], c;
        uint32_t cp;
        switch (esc) {
        case '"': case '\\': case '/': c = esc; break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'n': c = '\n'; break;
        case 'r': c = '\r'; break;
        case 't': c = '\t'; break;
        case 'u':
            if (hex4(s, n, i, &cp) < 0) return 0;
            i += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) { /* a surrogate pair */
                uint32_t lo;
                if (i + 6 > n || s[i] != '\\' || s[i + 1] != 'u' || hex4(s, n, i + 2, &lo) < 0 || lo < 0xDC00 ||
                    lo > 0xDFFF)
                    return 0;
                i += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return 0; /* a lone low surrogate is no character */
            }
            if (out) {
                char buf[4];
                df_bytebuf_append(out, buf, df_utf8_encode(cp, buf));
            }
            continue;
        default: return 0;
        }
        if (out) df_bytebuf_append(out, &c, 1);
    }
    return i < n ? i + 1 : 0;
}

/* Skips the value at s[i] (already validated by cJSON); returns the index after it. */
static size_t skip_value(const char *s, size_t n, size_t i) {
    if (s[i] == '"') return read_string(s, n, i, NULL);
    if (s[i] != '{' && s[i] != '[') {
        while (i < n && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' && s[i] != '\n' && s[i] != '\t' &&
               s[i] != '\r')
            i++;
        return i;
    }
    int depth = 0;
    while (i < n) {
        if (s[i] == '"') {
            i = read_string(s, n, i, NULL);
            if (!i) return 0;
            continue;
        }
        if (s[i] == '{' || s[i] == '[') depth++;
        else if (s[i] == '}' || s[i] == ']') depth--;
        i++;
        if (depth == 0) return i;
    }
    return 0;
}

int df_json_get_string(const char *json, size_t len, const char *key, DfByteBuf *out, DfError *err) {
    /* cJSON validates the whole value; the scan below then only has to walk it */
    cJSON *root = cJSON_ParseWithLength(json, len);
    int is_object = cJSON_IsObject(root);
    cJSON_Delete(root);
    if (!root) return df_fail(err, "invalid JSON");
    if (!is_object) return df_fail(err, "expected a JSON object");
    size_t key_len = strlen(key), i = skip_ws(json, len, 0) + 1;
    DfByteBuf name = {0};
    size_t start = out->len;
    int rc = 1;
    for (;;) {
        i = skip_ws(json, len, i);
        if (i >= len || json[i] != '"') break; /* '}' */
        name.len = 0;
        i = read_string(json, len, i, &name);
        if (!i) { rc = df_fail(err, "malformed string in a member name"); break; }
        i = skip_ws(json, len, i) + 1; /* ':' */
        i = skip_ws(json, len, i);
        if (name.len == key_len && memcmp(name.data, key, key_len) == 0) {
            /* a duplicate key: the last one wins (json/json_fields.h), so the scan goes on */
            out->len = start;
            if (json[i] != '"') { rc = df_fail(err, "\"%s\" is not a string", key); break; }
            if (!read_string(json, len, i, out)) {
                out->len = start;
                rc = df_fail(err, "\"%s\": malformed string (a lone surrogate?)", key);
                break;
            }
            rc = 0;
        }
        i = skip_value(json, len, i);
        if (!i) { rc = df_fail(err, "malformed value"); break; }
        i = skip_ws(json, len, i);
        if (i < len && json[i] == ',') i++;
    }
    df_bytebuf_free(&name);
    return rc;
}

void df_json_append_string(DfByteBuf *out, const char *s, size_t n) {
    df_bytebuf_append(out, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        df_bytebuf_append(out, s + run, i - run);
        run = i + 1;
        char esc[8];
        switch (c) {
        case '"': df_bytebuf_append(out, "\\\"", 2); break;
        case '\\': df_bytebuf_append(out, "\\\\", 2); break;
        case '\n': df_bytebuf_append(out, "\\n", 2); break;
        case '\r': df_bytebuf_append(out, "\\r", 2); break;
        case '\t': df_bytebuf_append(out, "\\t", 2); break;
        default:
            snprintf(esc, sizeof esc, "\\u%04x", c);
            df_bytebuf_append(out, esc, 6);
        }
    }
    df_bytebuf_append(out, s + run, n - run);
    df_bytebuf_append(out, "\"", 1);
}
