/* Chat templates of the Qwen3, Llama-3 and Llama-3.1 families, rendered
 * natively (see chat_template.h); the rules follow the Jinja templates line
 * by line. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/mapped_file.h"
#include "formats/json_fields.h"
#include "text/chat_template.h"
#include "text/tokenizer_offsets.h"
#include "text/utf8.h"
#include "formats/json_parse.h"

struct DfChatTemplate {
    DfChatFamily family;
    char *bos;       /* Llama-3 and 3.1: bos_token */
    char date[32];   /* Llama-3.1: the "Today Date: " of the system header */
};

typedef struct Str {
    const char *s;
    size_t n;
} Str;

/* ---- loading -------------------------------------------------------------- */

static char *config_path(const char *path) {
    struct stat st;
    size_t n = strlen(path);
    char *p = df_xmalloc(n + 32, "path");
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(p, n + 32, "%s/tokenizer_config.json", path);
    } else {
        const char *slash = strrchr(path, '/');
        int dir_len = slash ? (int)(slash - path) : 1;
        snprintf(p, n + 32, "%.*s/tokenizer_config.json", dir_len, slash ? path : ".");
    }
    return p;
}

/* chat_template: a string, or a list of {"name", "template"} (the "default"). */
static const char *template_text(const cJSON *cfg) {
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (cJSON_IsString(ct)) return ct->valuestring;
    const cJSON *item;
    cJSON_ArrayForEach(item, ct) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(item, "name");
        const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(item, "template");
        if (cJSON_IsString(name) && strcmp(name->valuestring, "default") == 0 && cJSON_IsString(tmpl))
            return tmpl->valuestring;
    }
    return NULL;
}

static int detect_family(const char *tmpl, DfChatFamily *family) {
    if (strstr(tmpl, "<|im_start|>") && strstr(tmpl, "</think>") && strstr(tmpl, "last_query_index")) {
        *family = DF_CHAT_QWEN3;
        return 0;
    }
    if (strstr(tmpl, "<|start_header_id|>") && strstr(tmpl, "<|eot_id|>") && strstr(tmpl, "| trim") &&
        strstr(tmpl, "bos_token")) {
        int dated = strstr(tmpl, "Cutting Knowledge Date: December 2023") && strstr(tmpl, "date_string");
        if (strstr(tmpl, "Cutting Knowledge Date") && !dated) return -1; /* a variant we do not know */
        *family = dated ? DF_CHAT_LLAMA31 : DF_CHAT_LLAMA3;
        return 0;
    }
    return -1;
}

/* The date a Llama-3.1 template puts in its system header when the caller
 * gives none: today's (as transformers' strftime_now("%d %b %Y") gives it)
 * where the template asks for strftime_now, else the template's literal
 * default (`set date_string = "26 Jul 2024"` in Llama 3.1's). */
static void default_date(const char *tmpl, char *date, size_t size) {
    if (strstr(tmpl, "strftime_now")) {
        time_t now = time(NULL);
        struct tm local;
        if (localtime_r(&now, &local) && strftime(date, size, "%d %b %Y", &local) > 0) return;
    }
    const char *key = "set date_string = \"";
    const char *at = strstr(tmpl, key);
    const char *end = at ? strchr(at + strlen(key), '"') : NULL;
    if (at && end && (size_t)(end - at - strlen(key)) < size)
        snprintf(date, size, "%.*s", (int)(end - at - strlen(key)), at + strlen(key));
    else
        snprintf(date, size, "26 Jul 2024");
}

DfChatTemplate *df_chat_template_load(const char *path, DfError *err) {
    char *cfg_path = config_path(path);
    size_t size;
    char *text = df_read_text_file(cfg_path, &size, err);
    cJSON *cfg = NULL;
    DfError why;
    int parsed = text ? df_json_parse(text, size, cfg_path, 0, &cfg, &why) : DF_JSON_OK;
    free(text);
    DfChatTemplate *t = NULL;
    const char *tmpl = cfg ? template_text(cfg) : NULL;
    DfChatFamily family;
    if (!text && !cfg) {
        /* err already says why the file could not be read */
    } else if (parsed == DF_JSON_NUL) {
        df_fail(err, "%s", why.msg);
    } else if (!cfg) {
        df_fail(err, "%s: invalid JSON", cfg_path);
    } else if (!tmpl) {
        df_fail(err, "%s: no chat_template", cfg_path);
    } else if (detect_family(tmpl, &family) < 0) {
        df_fail(err, "%s: unsupported chat template (only the Qwen3, Llama-3 and Llama-3.1 templates are rendered)",
                cfg_path);
    } else {
        t = df_xcalloc(1, sizeof *t, "chat template");
        t->family = family;
        const cJSON *bos = cJSON_GetObjectItemCaseSensitive(cfg, "bos_token");
        if (cJSON_IsObject(bos)) bos = cJSON_GetObjectItemCaseSensitive(bos, "content");
        t->bos = df_xstrdup(cJSON_IsString(bos) ? bos->valuestring : "");
        if (family == DF_CHAT_LLAMA31) default_date(tmpl, t->date, sizeof t->date);
        if (family != DF_CHAT_QWEN3 && !t->bos[0]) {
            df_fail(err, "%s: the %s template needs a bos_token", cfg_path, df_chat_family_name(family));
            df_chat_template_free(t);
            t = NULL;
        }
    }
    cJSON_Delete(cfg);
    free(cfg_path);
    return t;
}

void df_chat_template_free(DfChatTemplate *t) {
    if (!t) return;
    free(t->bos);
    free(t);
}

DfChatFamily df_chat_template_family(const DfChatTemplate *t) { return t->family; }

const char *df_chat_family_name(DfChatFamily family) {
    switch (family) {
    case DF_CHAT_QWEN3: return "qwen3";
    case DF_CHAT_LLAMA3: return "llama3";
    case DF_CHAT_LLAMA31: return "llama3.1";
    }
    return "?";
}

int df_chat_template_set_date(DfChatTemplate *t, const char *date, DfError *err) {
    if (t->family != DF_CHAT_LLAMA31)
        return df_fail(err, "a date is only used by the llama3.1 chat template, not by %s", df_chat_family_name(t->family));
    if (!date[0] || strlen(date) >= sizeof t->date || strpbrk(date, "\n<|"))
        return df_fail(err, "chat date '%s': expected a short one-line date such as \"26 Jul 2024\"", date);
    snprintf(t->date, sizeof t->date, "%s", date);
    return 0;
}

const char *df_chat_template_date(const DfChatTemplate *t) { return t->family == DF_CHAT_LLAMA31 ? t->date : NULL; }

int df_chat_role_parse(const char *name, size_t len) {
    static const struct { const char *name; DfChatRole role; } ROLES[] = {
        {"system", DF_ROLE_SYSTEM}, {"user", DF_ROLE_USER}, {"human", DF_ROLE_USER},
        {"assistant", DF_ROLE_ASSISTANT}, {"gpt", DF_ROLE_ASSISTANT},
    };
    for (size_t i = 0; i < sizeof ROLES / sizeof ROLES[0]; i++)
        if (strlen(ROLES[i].name) == len && memcmp(ROLES[i].name, name, len) == 0) return (int)ROLES[i].role;
    return -1;
}

static const char *role_name(DfChatRole r) {
    return r == DF_ROLE_SYSTEM ? "system" : r == DF_ROLE_USER ? "user" : "assistant";
}

void df_chat_spans_free(DfChatSpans *s) {
    free(s->range);
    memset(s, 0, sizeof *s);
}

static void add_span(DfChatSpans *s, size_t start, size_t end) {
    if (!s) return;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 8;
        s->range = df_xrealloc(s->range, s->cap * sizeof *s->range, "chat spans");
    }
    s->range[s->n][0] = start;
    s->range[s->n][1] = end;
    s->n++;
}

/* ---- string helpers (Python's str methods) ------------------------------- */

static void put(DfByteBuf *b, const char *s) { df_bytebuf_append(b, s, strlen(s)); }
static void put_str(DfByteBuf *b, Str s) { df_bytebuf_append(b, s.s, s.n); }

static Str lstrip_nl(Str s) {
    while (s.n && s.s[0] == '\n') s.s++, s.n--;
    return s;
}
static Str rstrip_nl(Str s) {
    while (s.n && s.s[s.n - 1] == '\n') s.n--;
    return s;
}

/* Offset of the first (or last) occurrence of needle in s, or -1. */
static long find(Str s, const char *needle, int last) {
    size_t m = strlen(needle);
    long found = -1;
    for (size_t i = 0; i + m <= s.n; i++)
        if (memcmp(s.s + i, needle, m) == 0) {
            found = (long)i;
            if (!last) break;
        }
    return found;
}

/* Python's str.isspace for one code point. */
static int py_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Jinja's trim filter: Python's str.strip() (Unicode whitespace). s is valid UTF-8. */
static Str py_strip(Str s) {
    size_t len;
    while (s.n && py_isspace(df_utf8_decode((const unsigned char *)s.s, s.n, &len))) s.s += len, s.n -= len;
    while (s.n) {
        size_t at = s.n - 1;
        while (at > 0 && ((unsigned char)s.s[at] & 0xC0) == 0x80) at--;
        if (!py_isspace(df_utf8_decode((const unsigned char *)s.s + at, s.n - at, &len))) break;
        s.n = at;
    }
    return s;
}

/* ---- rendering -------------------------------------------------------------- */

static int is_tool_response(Str s) {
    const char *open = "<tool_response>", *close = "</tool_response>";
    return s.n >= strlen(open) && memcmp(s.s, open, strlen(open)) == 0 && s.n >= strlen(close) &&
           memcmp(s.s + s.n - strlen(close), close, strlen(close)) == 0;
}

/* An assistant message of the Qwen3 template: content and reasoning. */
static void qwen3_split_reasoning(Str content, Str *answer, Str *reasoning) {
    *answer = content;
    *reasoning = (Str){"", 0};
    long close_last = find(content, "</think>", 1);
    if (close_last < 0) return;
    size_t after = (size_t)close_last + strlen("</think>");
    *answer = lstrip_nl((Str){content.s + after, content.n - after});
    Str before = rstrip_nl((Str){content.s, (size_t)find(content, "</think>", 0)});
    long open = find(before, "<think>", 1);
    if (open >= 0) before = (Str){before.s + open + strlen("<think>"), before.n - (size_t)open - strlen("<think>")};
    *reasoning = lstrip_nl(before);
}

static void render_qwen3(const Str *content, const DfChatMessage *msgs, int n, DfByteBuf *b, DfChatSpans *spans) {
    if (n > 0 && msgs[0].role == DF_ROLE_SYSTEM) {
        put(b, "<|im_start|>system\n"), put_str(b, content[0]), put(b, "<|im_end|>\n");
    }
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--)
        if (msgs[i].role == DF_ROLE_USER && !is_tool_response(content[i])) {
            last_query = i;
            break;
        }
    for (int i = 0; i < n; i++) {
        if (msgs[i].role == DF_ROLE_USER || (msgs[i].role == DF_ROLE_SYSTEM && i > 0)) {
            put(b, "<|im_start|>"), put(b, role_name(msgs[i].role)), put(b, "\n");
            put_str(b, content[i]), put(b, "<|im_end|>\n");
        } else if (msgs[i].role == DF_ROLE_ASSISTANT) {
            Str answer, reasoning;
            qwen3_split_reasoning(content[i], &answer, &reasoning);
            put(b, "<|im_start|>assistant\n");
            size_t start = b->len;
            if (i > last_query && (i == n - 1 || reasoning.n > 0)) {
                put(b, "<think>\n"), put_str(b, lstrip_nl(rstrip_nl(reasoning))), put(b, "\n</think>\n\n");
                put_str(b, lstrip_nl(answer));
            } else {
                put_str(b, answer);
            }
            put(b, "<|im_end|>");
            add_span(spans, start, b->len);
            put(b, "\n");
        }
    }
}

static void render_llama3(const DfChatTemplate *t, const Str *content, const DfChatMessage *msgs, int n, DfByteBuf *b,
                          DfChatSpans *spans) {
    for (int i = 0; i < n; i++) {
        if (i == 0) put(b, t->bos);
        put(b, "<|start_header_id|>"), put(b, role_name(msgs[i].role)), put(b, "<|end_header_id|>\n\n");
        size_t start = b->len;
        put_str(b, py_strip(content[i])), put(b, "<|eot_id|>");
        if (msgs[i].role == DF_ROLE_ASSISTANT) add_span(spans, start, b->len);
    }
}

/* Llama 3.1's template: a system header always comes first, with the
 * knowledge cutoff, the date and the first message's content when that
 * message is a system one; then every other message as in Llama-3. */
static void render_llama31(const DfChatTemplate *t, const Str *content, const DfChatMessage *msgs, int n, DfByteBuf *b,
                           DfChatSpans *spans) {
    put(b, t->bos);
    put(b, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ");
    put(b, t->date), put(b, "\n\n");
    int first = 0;
    if (msgs[0].role == DF_ROLE_SYSTEM) put_str(b, py_strip(content[0])), first = 1;
    put(b, "<|eot_id|>");
    for (int i = first; i < n; i++) {
        put(b, "<|start_header_id|>"), put(b, role_name(msgs[i].role)), put(b, "<|end_header_id|>\n\n");
        size_t start = b->len;
        put_str(b, py_strip(content[i])), put(b, "<|eot_id|>");
        if (msgs[i].role == DF_ROLE_ASSISTANT) add_span(spans, start, b->len);
    }
}

/* Renders with each content passed through tok's normalizer when tok is set. */
static int render(const DfChatTemplate *t, const DfTokenizer *normalize_with, const DfChatMessage *msgs, int n,
                  DfByteBuf *text, DfChatSpans *spans, DfError *err) {
    if (n <= 0) return df_fail(err, "empty conversation");
    Str *content = df_xcalloc((size_t)n, sizeof *content, "chat contents");
    DfByteBuf norm = {0};
    size_t *norm_at = normalize_with ? df_xcalloc((size_t)n, sizeof *norm_at, "chat contents") : NULL;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        size_t bad = df_utf8_first_invalid((const unsigned char *)msgs[i].content, msgs[i].content_len);
        if (bad < msgs[i].content_len)
            rc = df_fail(err, "message %d: the content is not valid UTF-8 (byte %zu)", i, bad);
        else if (normalize_with) {
            norm_at[i] = norm.len;
            rc = df_tokenizer_normalize(normalize_with, msgs[i].content, msgs[i].content_len, &norm, err);
        }
    }
    for (int i = 0; i < n && rc == 0; i++)
        content[i] = normalize_with ? (Str){norm.data + norm_at[i], (i + 1 < n ? norm_at[i + 1] : norm.len) - norm_at[i]}
                                    : (Str){msgs[i].content, msgs[i].content_len};
    if (rc == 0) {
        if (t->family == DF_CHAT_QWEN3) render_qwen3(content, msgs, n, text, spans);
        else if (t->family == DF_CHAT_LLAMA31) render_llama31(t, content, msgs, n, text, spans);
        else render_llama3(t, content, msgs, n, text, spans);
    }
    free(norm_at);
    df_bytebuf_free(&norm);
    free(content);
    return rc;
}

int df_chat_render(const DfChatTemplate *t, const DfChatMessage *msgs, int n, DfByteBuf *text, DfChatSpans *spans,
                   DfError *err) {
    return render(t, NULL, msgs, n, text, spans, err);
}

int df_chat_render_prompt(const DfChatTemplate *t, const DfChatMessage *msgs, int n, DfByteBuf *text, DfError *err) {
    if (render(t, NULL, msgs, n, text, NULL, err)) return -1;
    put(text, t->family == DF_CHAT_QWEN3 ? "<|im_start|>assistant\n" : "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return 0;
}

int df_chat_tokenize(const DfChatTemplate *t, const DfTokenizer *tok, const DfChatMessage *msgs, int n,
                     DfI32Vec *ids, DfByteBuf *mask, DfError *err) {
    DfByteBuf text = {0};
    DfChatSpans spans = {0};
    DfI32Vec starts = {0};
    size_t first = ids->len;
    /* Contents are normalized before rendering so that the tokenizer's own
     * normalization changes nothing and token offsets index `text`. */
    int rc = render(t, tok, msgs, n, &text, &spans, err);
    if (rc == 0) rc = df_tokenizer_encode_offsets(tok, text.data, text.len, ids, &starts, err);
    size_t span = 0;
    for (size_t k = 0; rc == 0 && k < starts.len; k++) {
        size_t at = (size_t)starts.data[k];
        while (span < spans.n && spans.range[span][1] <= at) span++;
        char bit = span < spans.n && spans.range[span][0] <= at;
        df_bytebuf_append(mask, &bit, 1);
    }
    if (rc != 0) ids->len = first;
    df_i32vec_free(&starts);
    df_chat_spans_free(&spans);
    df_bytebuf_free(&text);
    return rc;
}
