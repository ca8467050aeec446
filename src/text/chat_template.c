/* Chat templates rendered by the Jinja engine (see chat_template.h). */
#include "text/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/mapped_file.h"
#include "json/json_fields.h"
#include "text/chat_template_vars.h"
#include "text/jinja/from_json.h"
#include "text/jinja/jinja.h"
#include "text/tokenizer_offsets.h"
#include "text/utf8.h"
#include "json/json_parse.h"

struct DfChatTemplate {
    DfJinja *jinja;
    char *source;   /* where the template came from */
    char *text;     /* the template's text (end-of-turn tokens are looked up in it) */
    char *special[4]; /* bos, eos, unk, pad token strings, NULL when absent */
    cJSON *kwargs;  /* NULL or an object */
    char date[32];
};

static const char *const SPECIAL_NAMES[4] = {"bos_token", "eos_token", "unk_token", "pad_token"};

/* ---- loading -------------------------------------------------------------- */

static char *dir_of(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return df_xstrdup(path);
    const char *slash = strrchr(path, '/');
    if (!slash) return df_xstrdup(".");
    char *d = df_xmalloc((size_t)(slash - path) + 1, "path");
    memcpy(d, path, (size_t)(slash - path));
    d[slash - path] = '\0';
    return d;
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = df_xmalloc(n, "path");
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* chat_template: a string, or a list of {"name", "template"} (the "default"). */
static const char *config_template(const cJSON *cfg) {
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

static void read_specials(DfChatTemplate *t, const cJSON *cfg) {
    for (int i = 0; i < 4; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, SPECIAL_NAMES[i]);
        if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (cJSON_IsString(v)) t->special[i] = df_xstrdup(v->valuestring);
    }
}

/* The template's text and source: the explicit file, chat_template.jinja, or the config's. */
static int find_template(DfChatTemplate *t, const char *dir, const char *template_file, const cJSON *cfg,
                         const char *cfg_path, DfError *err) {
    size_t size;
    char *beside = join(dir, "chat_template.jinja");
    const char *file = template_file ? template_file : beside;
    struct stat st;
    if (template_file || stat(beside, &st) == 0) {
        t->text = df_read_text_file(file, &size, err);
        t->source = df_xstrdup(file);
        free(beside);
        return t->text ? 0 : -1;
    }
    free(beside);
    const char *tmpl = cfg ? config_template(cfg) : NULL;
    if (!tmpl) return df_fail(err, "%s: no chat_template (and no chat_template.jinja beside it)", cfg_path);
    t->text = df_xstrdup(tmpl);
    size_t n = strlen(cfg_path) + 32;
    t->source = df_xmalloc(n, "path");
    snprintf(t->source, n, "%s (chat_template)", cfg_path);
    return 0;
}

static int parse_kwargs(DfChatTemplate *t, const char *kwargs_json, DfError *err) {
    if (!kwargs_json) return 0;
    DfError why = {{0}};
    if (df_json_parse(kwargs_json, strlen(kwargs_json), NULL, 0, &t->kwargs, &why) == DF_JSON_NUL)
        return df_fail(err, "--chat-template-kwargs: %s", why.msg);
    if (!cJSON_IsObject(t->kwargs))
        return df_fail(err, "--chat-template-kwargs: expected a JSON object such as {\"enable_thinking\": false}, got '%.80s'",
                       kwargs_json);
    return 0;
}

DfChatTemplate *df_chat_template_open(const char *path, const char *template_file, const char *kwargs_json,
                                      DfError *err) {
    DfChatTemplate *t = df_xcalloc(1, sizeof *t, "chat template");
    char *dir = dir_of(path), *cfg_path = join(dir, "tokenizer_config.json");
    size_t size;
    DfError why = {{0}};
    char *text = df_read_text_file(cfg_path, &size, &why);
    cJSON *cfg = NULL;
    DfError parse_err = {{0}};
    int parsed = text ? df_json_parse(text, size, cfg_path, 0, &cfg, &parse_err) : DF_JSON_OK;
    free(text);
    int rc = 0;
    if (parsed != DF_JSON_OK) rc = df_fail(err, "%s", parse_err.msg); /* invalid, or a NUL in a string */
    else if (!cfg && !template_file) rc = df_fail(err, "%s", why.msg);
    if (rc == 0) rc = find_template(t, dir, template_file, cfg, cfg_path, err);
    if (rc == 0 && cfg) read_specials(t, cfg);
    if (rc == 0) rc = parse_kwargs(t, kwargs_json, err);
    if (rc == 0 && !(t->jinja = df_jinja_compile(t->text, strlen(t->text), err))) rc = df_context(err, "%s", t->source);
    cJSON_Delete(cfg);
    free(cfg_path);
    free(dir);
    if (rc) {
        df_chat_template_free(t);
        return NULL;
    }
    return t;
}

DfChatTemplate *df_chat_template_load(const char *path, DfError *err) { return df_chat_template_open(path, NULL, NULL, err); }

void df_chat_template_free(DfChatTemplate *t) {
    if (!t) return;
    df_jinja_free(t->jinja);
    for (int i = 0; i < 4; i++) free(t->special[i]);
    cJSON_Delete(t->kwargs);
    free(t->source);
    free(t->text);
    free(t);
}

const char *df_chat_template_source(const DfChatTemplate *t) { return t->source; }

int df_chat_template_set_date(DfChatTemplate *t, const char *date, DfError *err) {
    if (!date[0] || strlen(date) >= sizeof t->date || strpbrk(date, "\n<|"))
        return df_fail(err, "chat date '%s': expected a short one-line date such as \"26 Jul 2024\"", date);
    snprintf(t->date, sizeof t->date, "%s", date);
    return 0;
}

const char *df_chat_template_date(const DfChatTemplate *t) { return t->date[0] ? t->date : NULL; }

int df_chat_role_parse(const char *name, size_t len) {
    static const struct { const char *name; DfChatRole role; } ROLES[] = {
        {"system", DF_ROLE_SYSTEM}, {"user", DF_ROLE_USER}, {"human", DF_ROLE_USER},
        {"assistant", DF_ROLE_ASSISTANT}, {"gpt", DF_ROLE_ASSISTANT}, {"tool", DF_ROLE_TOOL},
    };
    for (size_t i = 0; i < sizeof ROLES / sizeof ROLES[0]; i++)
        if (strlen(ROLES[i].name) == len && memcmp(ROLES[i].name, name, len) == 0) return (int)ROLES[i].role;
    return -1;
}

void df_chat_spans_free(DfChatSpans *s) {
    free(s->range);
    memset(s, 0, sizeof *s);
}

static void add_span(DfChatSpans *s, size_t start, size_t end) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 8;
        s->range = df_xrealloc(s->range, s->cap * sizeof *s->range, "chat spans");
    }
    s->range[s->n][0] = start;
    s->range[s->n][1] = end;
    s->n++;
}

/* ---- rendering -------------------------------------------------------------- */

/* Each assistant message's span: its first to its last tagged byte; or the
 * {% generation %} blocks where the template has them. limits[i]: how far
 * span i may be carried on to its end of turn (mask_tokens): up to the first
 * byte another message's strings landed at after it (a generation block is
 * not carried on). */
static void collect_spans(const DfJinjaOutput *out, const DfChatMessage *msgs, int n, DfChatSpans *spans,
                          size_t **limits) {
    if (out->generation.n) {
        for (size_t i = 0; i < out->generation.n; i++) add_span(spans, out->generation.v[i].s, out->generation.v[i].e);
        *limits = df_xrealloc(*limits, (spans->n ? spans->n : 1) * sizeof **limits, "chat span limits");
        for (size_t i = spans->n - out->generation.n; i < spans->n; i++) (*limits)[i] = spans->range[i][1];
        return;
    }
    for (int m = 0; m < n; m++) {
        if (msgs[m].role != DF_ROLE_ASSISTANT) continue;
        size_t s = (size_t)-1, e = 0, limit = (size_t)-1;
        int found = 0;
        for (size_t i = 0; i < out->tagged.n; i++)
            if (out->tagged.v[i].tag == m) {
                found = 1;
                if (out->tagged.v[i].s < s) s = out->tagged.v[i].s;
                if (out->tagged.v[i].e > e) e = out->tagged.v[i].e;
            }
        if (!found) continue;
        for (size_t i = 0; i < out->tagged.n; i++) {
            const JSpan *o = &out->tagged.v[i];
            if (o->tag != m && o->s >= e && o->s < limit) limit = o->s;
        }
        add_span(spans, s, e); /* empty when the content rendered empty: its end of turn still counts */
        *limits = df_xrealloc(*limits, spans->n * sizeof **limits, "chat span limits");
        (*limits)[spans->n - 1] = limit;
    }
}

/* limits: NULL, or where the spans may be carried on to (see collect_spans);
 * both in bytes of text. */
static int render(const DfChatTemplate *t, const DfTokenizer *normalize_with, const DfChatMessage *msgs, int n,
                  int generation_prompt, DfByteBuf *text, DfChatSpans *spans, size_t **limits, DfError *err) {
    if (n <= 0) return df_fail(err, "empty conversation");
    JArena arena = {0};
    DfJinjaOutput out = {0};
    DfChatVarsIn in = {msgs, n, generation_prompt, normalize_with, (const char *const *)t->special, SPECIAL_NAMES,
                       t->date[0] ? t->date : NULL, t->kwargs};
    JDict *vars = NULL;
    int rc = df_chat_vars(&arena, &in, &vars, err);
    if (rc == 0) {
        rc = df_jinja_render(t->jinja, &arena, vars, NULL, &out, err);
        if (rc == DF_JINJA_RAISED) df_context(err, "the chat template rejected the conversation");
        else if (rc) df_context(err, "%s", t->source);
    }
    if (rc == 0) {
        size_t base = text->len;
        df_bytebuf_append(text, out.text.p, out.text.n);
        if (spans) {
            size_t first = spans->n, *lim = limits ? *limits : NULL;
            collect_spans(&out, msgs, n, spans, &lim);
            for (size_t i = first; i < spans->n; i++) {
                spans->range[i][0] += base, spans->range[i][1] += base;
                if (lim[i] != (size_t)-1) lim[i] += base;
            }
            if (limits) *limits = lim;
            else free(lim);
        }
    }
    df_jinja_output_free(&out);
    jv_arena_free(&arena);
    return rc ? -1 : 0;
}

int df_chat_render(const DfChatTemplate *t, const DfChatMessage *msgs, int n, DfByteBuf *text, DfChatSpans *spans,
                   DfError *err) {
    return render(t, NULL, msgs, n, 0, text, spans, NULL, err);
}

int df_chat_render_prompt(const DfChatTemplate *t, const DfChatMessage *msgs, int n, DfByteBuf *text, DfError *err) {
    return render(t, NULL, msgs, n, 1, text, NULL, NULL, err);
}

/* Whether token k (text[starts[k]..next)) is an added token the template
 * writes literally (its end of turn), or the eos token. */
static int is_template_token(const DfChatTemplate *t, const DfTokenizer *tok, const char *text, size_t s, size_t e,
                             int32_t id) {
    if (e <= s || e - s > 64) return 0;
    char tokstr[65];
    memcpy(tokstr, text + s, e - s);
    tokstr[e - s] = '\0';
    if (!df_tokenizer_is_added(tok, id) || df_tokenizer_token_to_id(tok, tokstr) != id) return 0;
    return strstr(t->text, tokstr) != NULL || (t->special[1] && strcmp(t->special[1], tokstr) == 0);
}

/* A span that the token right after it does not end (an assistant turn that
 * closes with template text after its last string, as Qwen3.5's
 * </parameter></function></tool_call> after a tool call's last argument, or
 * one whose last argument is a number) is carried on through the first
 * end-of-turn token after it, unless another message's strings or another
 * span come first. The mask's last starts->len bytes are the tokens'. */
static void carry_to_end_of_turn(const DfChatTemplate *t, const DfTokenizer *tok, const DfChatSpans *spans,
                                 const size_t *limits, const DfI32Vec *ids, const DfI32Vec *starts, size_t first,
                                 DfByteBuf *mask) {
    size_t ntok = starts->len, base = mask->len - ntok, k = 0;
    int32_t eot = -2; /* looked up when a span first needs it */
    for (size_t j = 0; j < spans->n; j++) {
        while (k < ntok && (size_t)starts->data[k] < spans->range[j][1]) k++;
        if (k >= ntok || mask->data[base + k] || (size_t)starts->data[k] >= limits[j]) continue;
        if (eot == -2) {
            DfError ignored = {{0}}; /* no end-of-turn token: nothing to carry on to */
            if (df_chat_template_end_of_turn(t, tok, &eot, &ignored) != 0) eot = -1;
        }
        if (eot < 0) return;
        size_t e = k;
        while (e < ntok && (size_t)starts->data[e] < limits[j] && !mask->data[base + e] && ids->data[first + e] != eot)
            e++;
        if (e < ntok && (size_t)starts->data[e] < limits[j] && !mask->data[base + e]) /* e: the end of turn */
            memset(mask->data + base + k, 1, e - k + 1);
    }
}

static void mask_tokens(const DfChatTemplate *t, const DfTokenizer *tok, const DfByteBuf *text, const DfChatSpans *spans,
                        const size_t *limits, const DfI32Vec *ids, const DfI32Vec *starts, size_t first,
                        DfByteBuf *mask) {
    size_t span = 0, ntok = starts->len;
    int extend = 0; /* the token right after a span is its end of turn */
    for (size_t k = 0; k < ntok; k++) {
        size_t at = (size_t)starts->data[k], next = k + 1 < ntok ? (size_t)starts->data[k + 1] : text->len;
        while (span < spans->n && spans->range[span][1] <= at) {
            extend = spans->range[span][1] == at;
            span++;
        }
        char bit = span < spans->n && spans->range[span][0] <= at;
        if (!bit && extend && is_template_token(t, tok, text->data, at, next, ids->data[first + k])) bit = 1;
        extend = 0;
        df_bytebuf_append(mask, &bit, 1);
    }
    carry_to_end_of_turn(t, tok, spans, limits, ids, starts, first, mask);
}

int df_chat_tokenize(const DfChatTemplate *t, const DfTokenizer *tok, const DfChatMessage *msgs, int n,
                     DfI32Vec *ids, DfByteBuf *mask, DfError *err) {
    DfByteBuf text = {0};
    DfChatSpans spans = {0};
    DfI32Vec starts = {0};
    size_t first = ids->len, *limits = NULL;
    /* Contents are normalized before rendering so that the tokenizer's own
     * normalization changes nothing and token offsets index `text`. */
    int rc = render(t, tok, msgs, n, 0, &text, &spans, &limits, err);
    if (rc == 0) rc = df_tokenizer_encode_offsets(tok, text.data, text.len, ids, &starts, err);
    if (rc == 0) mask_tokens(t, tok, &text, &spans, limits, ids, &starts, first, mask);
    free(limits);
    if (rc != 0) ids->len = first;
    df_i32vec_free(&starts);
    df_chat_spans_free(&spans);
    df_bytebuf_free(&text);
    return rc;
}

int df_chat_template_end_of_turn(const DfChatTemplate *t, const DfTokenizer *tok, int32_t *id, DfError *err) {
    DfChatMessage probe[2] = {{DF_ROLE_USER, "Hi", 2, NULL}, {DF_ROLE_ASSISTANT, "Hello", 5, NULL}};
    DfByteBuf text = {0};
    DfChatSpans spans = {0};
    DfI32Vec ids = {0}, starts = {0};
    *id = -1;
    int rc = render(t, tok, probe, 2, 0, &text, &spans, NULL, err);
    if (rc == 0 && spans.n == 0) rc = df_fail(err, "%s: an assistant message's content does not appear in the rendering", t->source);
    if (rc == 0) rc = df_tokenizer_encode_offsets(tok, text.data, text.len, &ids, &starts, err);
    size_t end = rc == 0 ? spans.range[spans.n - 1][1] : 0;
    for (size_t k = 0; rc == 0 && k < starts.len; k++) {
        size_t at = (size_t)starts.data[k], next = k + 1 < starts.len ? (size_t)starts.data[k + 1] : text.len;
        if (at == end && is_template_token(t, tok, text.data, at, next, ids.data[k])) *id = ids.data[k];
    }
    if (rc == 0 && *id < 0) /* name what the template writes after the content */
        rc = df_fail(err, "%s: the tokenizer has no special token for what the template writes after an "
                     "assistant message ('%.24s'), so nothing ends a turn", t->source, text.data + end);
    df_i32vec_free(&ids);
    df_i32vec_free(&starts);
    df_chat_spans_free(&spans);
    df_bytebuf_free(&text);
    return rc;
}
