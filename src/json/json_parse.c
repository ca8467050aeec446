#include "json/json_parse.h"

#include <stdio.h>
#include <string.h>

#include "json/json_fields.h"

#define MAX_DEPTH 32
#define KEY_CAP 64

typedef struct Frame {
    int is_object;
    long index;         /* an array's element */
    char key[KEY_CAP];  /* an object's current key (cut at KEY_CAP - 1 bytes) */
} Frame;

typedef struct Scan {
    Frame stack[MAX_DEPTH];
    int depth;          /* frames in use; deeper levels are counted but not named */
    int overflow;
    int expect_key;
} Scan;

/* The string starting at text[i] (its opening quote): the index of its closing quote; *nul when it holds a
 * NUL. The text is valid JSON, so the string is closed. */
static size_t scan_string(const char *text, size_t len, size_t i, int *nul) {
    for (i++; i < len && text[i] != '"'; i++) {
        if (text[i] == '\0') *nul = 1;
        if (text[i] != '\\') continue;
        i++;
        if (i + 4 < len && text[i] == 'u' && memcmp(text + i + 1, "0000", 4) == 0) *nul = 1;
    }
    return i;
}

static void append(char *out, size_t cap, size_t *at, const char *fmt, const char *s, long n) {
    if (*at >= cap) return;
    int w = s ? snprintf(out + *at, cap - *at, fmt, s) : snprintf(out + *at, cap - *at, fmt, n);
    if (w > 0) *at += (size_t)w;
}

static void field_path(const Scan *s, int with_top_key, char *out, size_t cap) {
    size_t at = 0;
    out[0] = '\0';
    int n = s->depth < MAX_DEPTH ? s->depth : MAX_DEPTH;
    for (int k = 0; k < n; k++) {
        const Frame *f = &s->stack[k];
        if (!f->is_object) append(out, cap, &at, "[%ld]", NULL, f->index);
        else if (k < n - 1 || with_top_key) append(out, cap, &at, at ? ".%s" : "%s", f->key, 0);
    }
    if (s->overflow) append(out, cap, &at, "%s", "...", 0);
}

/* A key's text for messages: the raw bytes up to the closing quote, cut at KEY_CAP - 1 or a NUL. */
static void copy_key(char *dst, const char *text, size_t from, size_t to) {
    size_t n = to - from < KEY_CAP - 1 ? to - from : KEY_CAP - 1;
    memcpy(dst, text + from, n);
    dst[n] = '\0';
}

static void open_container(Scan *s, int is_object) {
    if (s->depth < MAX_DEPTH) s->stack[s->depth] = (Frame){is_object, 0, {0}};
    else s->overflow = 1;
    s->depth++;
    s->expect_key = is_object;
}

int df_json_find_nul(const char *text, size_t len, char *field, size_t cap, int *is_key, long *line) {
    Scan s = {.depth = 0};
    long at_line = 1;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        Frame *top = s.depth > 0 && s.depth <= MAX_DEPTH ? &s.stack[s.depth - 1] : NULL;
        if (c == '\n') at_line++;
        else if (c == '{' || c == '[') open_container(&s, c == '{');
        else if (c == '}' || c == ']') s.depth--;
        else if (c == ',' && top) {
            if (top->is_object) s.expect_key = 1;
            else top->index++;
        } else if (c == '"') {
            int nul = 0, key = top && top->is_object && s.expect_key;
            size_t end = scan_string(text, len, i, &nul);
            if (key) copy_key(top->key, text, i + 1, end);
            if (key) s.expect_key = 0;
            if (nul) {
                field_path(&s, 1, field, cap);
                *is_key = key;
                *line = at_line;
                return 1;
            }
            i = end;
        }
    }
    return 0;
}

static int only_space(const char *p, const char *end) {
    for (; p < end; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') return 0;
    return 1;
}

int df_json_parse(const char *text, size_t len, const char *path, long line, cJSON **out, DfError *err) {
    char where[4200] = "";
    const char *end = NULL;
    *out = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root || !end || end < text || !only_space(end, text + len)) {
        size_t at = end && end >= text ? (size_t)(end - text) : 0;
        cJSON_Delete(root);
        if (!path) df_fail(err, "invalid JSON (parse error at column %zu)", at + 1);
        else if (line > 0) df_fail(err, "%s:%ld: not valid JSON (error near byte %zu)", path, line, at);
        else df_fail(err, "%s: not valid JSON (error near byte %zu)", path, at);
        return DF_JSON_INVALID;
    }
    char field[256];
    int is_key = 0;
    long nul_line = 0;
    if (df_json_find_nul(text, len, field, sizeof field, &is_key, &nul_line)) {
        cJSON_Delete(root);
        long at_line = line > 0 ? line + nul_line - 1 : nul_line;
        if (path) snprintf(where, sizeof where, "%s:%ld: ", path, at_line);
        if (is_key)
            df_fail(err, "%sthe key '%s' holds a NUL character (\\u0000), which no text may contain", where, field);
        else df_fail(err, "%sfield '%s' holds a NUL character (\\u0000), which no text may contain", where, field);
        return DF_JSON_NUL;
    }
    df_json_keep_last(root);
    *out = root;
    return DF_JSON_OK;
}
