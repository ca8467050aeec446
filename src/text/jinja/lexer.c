/* The Jinja lexer: text and tags, then the tokens inside tags. */
#include "text/jinja/lexer.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

typedef struct Lx {
    const char *src;
    size_t len, pos;
    JLexed *out;
    DfError *err;
    size_t at_pos; /* where() resumes from the last position it counted */
    int at_line, at_col;
} Lx;

static void where(Lx *lx, size_t pos, int *line, int *col) {
    if (pos < lx->at_pos) {
        lx->at_pos = 0;
        lx->at_line = lx->at_col = 1;
    }
    int l = lx->at_line, c = lx->at_col;
    for (size_t i = lx->at_pos; i < pos && i < lx->len; i++) {
        if (lx->src[i] == '\n') {
            l++;
            c = 1;
        } else c++;
    }
    lx->at_pos = pos;
    lx->at_line = l;
    lx->at_col = c;
    *line = l;
    *col = c;
}

static int lx_fail(Lx *lx, size_t pos, const char *what) {
    int line, col;
    where(lx, pos, &line, &col);
    return df_fail(lx->err, "template line %d column %d: %s", line, col, what);
}

static JTok *push(Lx *lx, JTokType type, size_t pos, const char *p, size_t n) {
    JLexed *o = lx->out;
    if (o->n == o->cap) {
        o->cap = o->cap ? o->cap * 2 : 256;
        o->t = df_xrealloc(o->t, o->cap * sizeof *o->t, "template tokens");
    }
    JTok *t = &o->t[o->n++];
    memset(t, 0, sizeof *t);
    t->type = type;
    where(lx, pos, &t->line, &t->col);
    t->p = p;
    t->n = n;
    return t;
}

static int decode_string(Lx *lx, size_t start) {
    char q = lx->src[lx->pos++];
    char *buf = df_xmalloc(lx->len - lx->pos + 1, "template string");
    size_t n = 0;
    while (lx->pos < lx->len && lx->src[lx->pos] != q) {
        char c = lx->src[lx->pos++];
        if (c == '\\' && lx->pos < lx->len) {
            char e = lx->src[lx->pos++];
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case '\\': c = '\\'; break;
            case '\'': c = '\''; break;
            case '"': c = '"'; break;
            case '0': c = '\0'; break;
            case '\n': continue;
            default: buf[n++] = '\\'; c = e; break;
            }
        }
        buf[n++] = c;
    }
    if (lx->pos >= lx->len) {
        free(buf);
        return lx_fail(lx, start, "unterminated string");
    }
    lx->pos++;
    buf[n] = '\0';
    JLexed *o = lx->out;
    o->strings = df_xrealloc(o->strings, (o->nstrings + 1) * sizeof *o->strings, "template strings");
    o->strings[o->nstrings++] = buf;
    push(lx, JT_STRING, start, buf, n);
    return 0;
}

static int lex_number(Lx *lx) {
    size_t s = lx->pos;
    while (lx->pos < lx->len && (isdigit((unsigned char)lx->src[lx->pos]) || lx->src[lx->pos] == '_')) lx->pos++;
    int is_float = 0;
    if (lx->pos + 1 < lx->len && lx->src[lx->pos] == '.' && isdigit((unsigned char)lx->src[lx->pos + 1])) {
        is_float = 1;
        lx->pos++;
        while (lx->pos < lx->len && isdigit((unsigned char)lx->src[lx->pos])) lx->pos++;
    }
    if (lx->pos < lx->len && (lx->src[lx->pos] == 'e' || lx->src[lx->pos] == 'E')) {
        size_t e = lx->pos + 1;
        if (e < lx->len && (lx->src[e] == '+' || lx->src[e] == '-')) e++;
        if (e < lx->len && isdigit((unsigned char)lx->src[e])) {
            is_float = 1;
            lx->pos = e;
            while (lx->pos < lx->len && isdigit((unsigned char)lx->src[lx->pos])) lx->pos++;
        }
    }
    char num[64];
    size_t k = 0;
    for (size_t i = s; i < lx->pos && k < sizeof num - 1; i++)
        if (lx->src[i] != '_') num[k++] = lx->src[i];
    num[k] = '\0';
    JTok *t = push(lx, is_float ? JT_FLOAT : JT_INT, s, lx->src + s, lx->pos - s);
    if (is_float) t->fval = strtod(num, NULL);
    else t->ival = strtoll(num, NULL, 10);
    return 0;
}

static const char *const OPS[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                  "=",  "(",  ")",  "[",  "]",  "{",  "}", ",", ".", ":", "|", ";", NULL};

/* Tokens of one tag up to its closing delimiter `close`; returns the
 * position just after the closing delimiter's leading '-' or '+' if any. */
static int lex_tag(Lx *lx, const char *close, int *strip_after, int *keep_after) {
    size_t cl = strlen(close);
    int depth = 0;
    for (;;) {
        while (lx->pos < lx->len && isspace((unsigned char)lx->src[lx->pos])) lx->pos++;
        if (lx->pos >= lx->len) return lx_fail(lx, lx->pos, "unterminated tag");
        const char *s = lx->src + lx->pos;
        size_t rest = lx->len - lx->pos;
        if (depth == 0) {
            if ((s[0] == '-' || s[0] == '+') && rest > cl && memcmp(s + 1, close, cl) == 0) {
                *strip_after = s[0] == '-';
                *keep_after = s[0] == '+';
                lx->pos += cl + 1;
                return 0;
            }
            if (rest >= cl && memcmp(s, close, cl) == 0) {
                lx->pos += cl;
                return 0;
            }
        }
        if (isalpha((unsigned char)s[0]) || s[0] == '_') {
            size_t n = 1;
            while (n < rest && (isalnum((unsigned char)s[n]) || s[n] == '_')) n++;
            push(lx, JT_NAME, lx->pos, s, n);
            lx->pos += n;
        } else if (isdigit((unsigned char)s[0])) {
            lex_number(lx);
        } else if (s[0] == '\'' || s[0] == '"') {
            if (decode_string(lx, lx->pos)) return -1;
        } else {
            int k = 0;
            for (; OPS[k]; k++) {
                size_t n = strlen(OPS[k]);
                if (rest >= n && memcmp(s, OPS[k], n) == 0) break;
            }
            if (!OPS[k]) return lx_fail(lx, lx->pos, "unexpected character in tag");
            size_t n = strlen(OPS[k]);
            if (strchr("([{", s[0]) && n == 1) depth++;
            if (strchr(")]}", s[0]) && n == 1 && depth > 0) depth--;
            push(lx, JT_OP, lx->pos, s, n);
            lx->pos += n;
        }
    }
}

/* Whether the tag at `tag` starts a line (only spaces/tabs before it since the last newline). */
static size_t line_start(const Lx *lx, size_t text_start, size_t tag) {
    size_t i = tag;
    while (i > text_start && (lx->src[i - 1] == ' ' || lx->src[i - 1] == '\t')) i--;
    if (i == 0 || lx->src[i - 1] == '\n') return i;
    return tag;
}

static void emit_text(Lx *lx, size_t s, size_t e) {
    if (e > s) push(lx, JT_TEXT, s, lx->src + s, e - s);
}

/* A {% raw %} body: the text up to {% endraw %}. */
static int lex_raw(Lx *lx, size_t *text_start) {
    const char *p = lx->src + lx->pos;
    for (;;) {
        const char *o = strstr(p, "{%");
        if (!o || (size_t)(o - lx->src) >= lx->len) return lx_fail(lx, lx->pos, "raw without endraw");
        const char *q = o + 2;
        if (*q == '-' || *q == '+') q++;
        while (*q == ' ' || *q == '\t' || *q == '\n') q++;
        if (strncmp(q, "endraw", 6) == 0) {
            size_t tag = (size_t)(o - lx->src), end = tag;
            if (o[2] == '-') while (end > lx->pos && isspace((unsigned char)lx->src[end - 1])) end--;
            emit_text(lx, lx->pos, end);
            q += 6;
            while (*q == ' ' || *q == '\t' || *q == '\n') q++;
            int strip = *q == '-';
            if (*q == '-' || *q == '+') q++;
            if (strncmp(q, "%}", 2) != 0) return lx_fail(lx, tag, "endraw tag not closed");
            lx->pos = (size_t)(q + 2 - lx->src);
            if (strip) while (lx->pos < lx->len && isspace((unsigned char)lx->src[lx->pos])) lx->pos++;
            else if (lx->pos < lx->len && lx->src[lx->pos] == '\n') lx->pos++;
            *text_start = lx->pos;
            return 0;
        }
        p = o + 2;
    }
}

static int is_raw_tag(const Lx *lx) {
    JLexed *o = lx->out;
    return o->n >= 2 && o->t[o->n - 1].type == JT_NAME && o->t[o->n - 1].n == 3 &&
           memcmp(o->t[o->n - 1].p, "raw", 3) == 0 && o->t[o->n - 2].type == JT_BLOCK_BEGIN;
}

static void skip_after(Lx *lx, int strip, int keep, int trim) {
    if (strip) {
        while (lx->pos < lx->len && isspace((unsigned char)lx->src[lx->pos])) lx->pos++;
    } else if (trim && !keep && lx->pos < lx->len && lx->src[lx->pos] == '\n') {
        lx->pos++;
    }
}

static int lex_one_tag(Lx *lx, size_t *text_start, size_t o) {
    char kind = lx->src[o + 1];
    char mod = o + 2 < lx->len ? lx->src[o + 2] : 0;
    size_t end = o;
    if (mod == '-') {
        while (end > *text_start && isspace((unsigned char)lx->src[end - 1])) end--;
    } else if (mod != '+' && kind != '{') {
        end = line_start(lx, *text_start, o);
    }
    emit_text(lx, *text_start, end);
    lx->pos = o + 2 + (mod == '-' || mod == '+');
    int strip = 0, keep = 0;
    if (kind == '#') {
        const char *c = strstr(lx->src + lx->pos, "#}");
        if (!c) return lx_fail(lx, o, "unterminated comment");
        size_t ce = (size_t)(c - lx->src);
        strip = ce > lx->pos && lx->src[ce - 1] == '-';
        keep = ce > lx->pos && lx->src[ce - 1] == '+';
        lx->pos = ce + 2;
        skip_after(lx, strip, keep, 1);
        *text_start = lx->pos;
        return 0;
    }
    push(lx, kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, o, lx->src + o, 2);
    if (lex_tag(lx, kind == '{' ? "}}" : "%}", &strip, &keep)) return -1;
    int raw = kind == '%' && is_raw_tag(lx);
    if (raw) {
        lx->out->n -= 2;
        skip_after(lx, strip, keep, 1);
        return lex_raw(lx, text_start);
    }
    push(lx, kind == '{' ? JT_VAR_END : JT_BLOCK_END, lx->pos, lx->src + lx->pos, 0);
    skip_after(lx, strip, keep, kind == '%');
    *text_start = lx->pos;
    return 0;
}

int jinja_lex(const char *src, size_t len, JLexed *out, DfError *err) {
    memset(out, 0, sizeof *out);
    Lx lx = {src, len, 0, out, err, 0, 1, 1};
    size_t text_start = 0;
    while (lx.pos < len) {
        const char *o = memchr(src + lx.pos, '{', len - lx.pos);
        if (!o) break;
        size_t at = (size_t)(o - src);
        if (at + 1 < len && (o[1] == '{' || o[1] == '%' || o[1] == '#')) {
            if (lex_one_tag(&lx, &text_start, at)) {
                jinja_lexed_free(out);
                return -1;
            }
        } else {
            lx.pos = at + 1;
        }
    }
    emit_text(&lx, text_start, len);
    push(&lx, JT_EOF, len, src + len, 0);
    return 0;
}

void jinja_lexed_free(JLexed *l) {
    for (size_t i = 0; i < l->nstrings; i++) free(l->strings[i]);
    free(l->strings);
    free(l->t);
    memset(l, 0, sizeof *l);
}
