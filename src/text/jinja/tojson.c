/* tojson as transformers defines it for chat templates: Python's
 * json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
 * sort_keys=sort_keys), not Jinja's HTML-safe one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "text/jinja/interp.h"

typedef struct JsonFmt {
    JVal indent; /* none, or the string of one level */
    JVal item_sep, key_sep;
    int ascii, sort;
} JsonFmt;

static void json_str(JBuf *b, const char *p, size_t n, int ascii) {
    jb_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        char esc[16];
        if (ch == '"') jb_adds(b, "\\\"");
        else if (ch == '\\') jb_adds(b, "\\\\");
        else if (ch == '\n') jb_adds(b, "\\n");
        else if (ch == '\r') jb_adds(b, "\\r");
        else if (ch == '\t') jb_adds(b, "\\t");
        else if (ch == '\b') jb_adds(b, "\\b");
        else if (ch == '\f') jb_adds(b, "\\f");
        else if (ch < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", ch);
            jb_adds(b, esc);
        } else if (ch >= 0x80 && ascii) {
            utf8proc_int32_t cp;
            utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)p + i, (utf8proc_ssize_t)(n - i), &cp);
            if (k <= 0) {
                cp = 0xFFFD;
                k = 1;
            }
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", cp);
            }
            jb_adds(b, esc);
            i += (size_t)k - 1;
        } else {
            jb_add(b, (const char *)&p[i], 1);
        }
    }
    jb_add(b, "\"", 1);
}

static void newline(JBuf *b, const JsonFmt *f, int level) {
    if (f->indent.type != JV_STR) return;
    jb_add(b, "\n", 1);
    for (int i = 0; i < level; i++) jb_add(b, f->indent.u.s.p, f->indent.u.s.n);
}

static int dump(JCtx *c, const JNode *at, JBuf *b, JVal v, const JsonFmt *f, int level);

static int dump_key(JCtx *c, const JNode *at, JBuf *b, JVal k, const JsonFmt *f) {
    if (k.type == JV_STR) json_str(b, k.u.s.p, k.u.s.n, f->ascii);
    else if (k.type == JV_INT || k.type == JV_FLOAT) {
        JBuf t = {0};
        jv_to_str(&t, k);
        json_str(b, t.p, t.n, 0);
        free(t.p);
    } else if (k.type == JV_BOOL) jb_adds(b, k.u.b ? "\"true\"" : "\"false\"");
    else if (k.type == JV_NONE) jb_adds(b, "\"null\"");
    else return jx_fail(c, at, "tojson: keys must be str, int, float, bool or None, not %s", jv_type_name(k));
    return 0;
}

static int dump_dict(JCtx *c, const JNode *at, JBuf *b, const JDict *d, const JsonFmt *f, int level) {
    if (d->n == 0) {
        jb_adds(b, "{}");
        return 0;
    }
    size_t *order = jv_alloc(c->a, d->n * sizeof *order);
    for (size_t i = 0; i < d->n; i++) order[i] = i;
    if (f->sort)
        for (size_t i = 1; i < d->n; i++)
            for (size_t j = i; j > 0 && jv_compare(d->k[order[j - 1]], d->k[order[j]]) > 0; j--) {
                size_t t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
    jb_add(b, "{", 1);
    for (size_t i = 0; i < d->n; i++) {
        if (i) jb_add(b, f->item_sep.u.s.p, f->item_sep.u.s.n);
        newline(b, f, level + 1);
        if (dump_key(c, at, b, d->k[order[i]], f)) return -1;
        jb_add(b, f->key_sep.u.s.p, f->key_sep.u.s.n);
        if (dump(c, at, b, d->v[order[i]], f, level + 1)) return -1;
    }
    newline(b, f, level);
    jb_add(b, "}", 1);
    return 0;
}

static int dump(JCtx *c, const JNode *at, JBuf *b, JVal v, const JsonFmt *f, int level) {
    if (level > 200) return jx_fail(c, at, "tojson: nested deeper than 200 levels");
    switch (v.type) {
    case JV_NONE: jb_adds(b, "null"); return 0;
    case JV_BOOL: jb_adds(b, v.u.b ? "true" : "false"); return 0;
    case JV_INT: jv_to_str(b, v); return 0;
    case JV_FLOAT:
        if (v.u.f != v.u.f) jb_adds(b, "NaN");
        else if (v.u.f > 1e308 || v.u.f < -1e308) jb_adds(b, v.u.f > 0 ? "Infinity" : "-Infinity");
        else jv_float_repr(b, v.u.f);
        return 0;
    case JV_STR: json_str(b, v.u.s.p, v.u.s.n, f->ascii); return 0;
    case JV_LIST:
        if (v.u.l->n == 0) {
            jb_adds(b, "[]");
            return 0;
        }
        jb_add(b, "[", 1);
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jb_add(b, f->item_sep.u.s.p, f->item_sep.u.s.n);
            newline(b, f, level + 1);
            if (dump(c, at, b, v.u.l->v[i], f, level + 1)) return -1;
        }
        newline(b, f, level);
        jb_add(b, "]", 1);
        return 0;
    case JV_DICT: return dump_dict(c, at, b, v.u.d, f, level);
    default: return jx_fail(c, at, "tojson: Object of type %s is not JSON serializable", jv_type_name(v));
    }
}

static int json_format(JCtx *c, const JNode *at, JArgs *args, JsonFmt *f) {
    const JVal *ascii = jx_arg(args, 99, "ensure_ascii"), *ind = jx_arg(args, 0, "indent");
    const JVal *seps = jx_arg(args, 99, "separators"), *sort = jx_arg(args, 99, "sort_keys");
    f->ascii = ascii && jv_truthy(*ascii);
    f->sort = sort && jv_truthy(*sort);
    f->indent = jv_none();
    if (ind && ind->type == JV_INT) {
        char *p = jv_alloc(c->a, (size_t)(ind->u.i > 0 ? ind->u.i : 0) + 1);
        int64_t k = 0;
        for (; k < ind->u.i; k++) p[k] = ' ';
        f->indent = jv_str(p, (size_t)k, -1);
    } else if (ind && ind->type == JV_STR) {
        f->indent = *ind;
    }
    f->item_sep = jv_cstr(f->indent.type == JV_STR ? "," : ", ");
    f->key_sep = jv_cstr(": ");
    if (seps && seps->type == JV_LIST) {
        if (seps->u.l->n != 2 || seps->u.l->v[0].type != JV_STR || seps->u.l->v[1].type != JV_STR)
            return jx_fail(c, at, "tojson: separators must be two strings");
        f->item_sep = seps->u.l->v[0];
        f->key_sep = seps->u.l->v[1];
    }
    return 0;
}

int jx_tojson(JCtx *c, const JNode *at, JVal v, JArgs *args, JVal *out) {
    JsonFmt f;
    if (json_format(c, at, args, &f)) return -1;
    JBuf b = {0};
    int rc = dump(c, at, &b, v, &f, 0);
    if (rc == 0) *out = jv_str_copy(c->a, b.p ? b.p : "", b.n);
    free(b.p);
    return rc;
}
