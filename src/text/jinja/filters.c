/* Jinja filters on strings and numbers (trim, upper, replace, int, round,
 * indent, ...); the ones on sequences are in filters_seq.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja/filters.h"
#include "text/jinja/methods.h"

static JVal need_str(JCtx *c, JVal v) { return jv_stringify(c->a, v); }

/* Jinja's title: the first letter after -, whitespace or an opening bracket upper, the rest lower. */
static JVal jinja_title(JCtx *c, JVal s) {
    JVal low = jx_case(c, s, 0), up = jx_case(c, s, 1);
    JBuf b = {0};
    int start = 1;
    size_t i = 0, j = 0;
    while (i < low.u.s.n) {
        size_t k = 1, ku = 1;
        while (i + k < low.u.s.n && ((unsigned char)low.u.s.p[i + k] & 0xC0) == 0x80) k++;
        while (j + ku < up.u.s.n && ((unsigned char)up.u.s.p[j + ku] & 0xC0) == 0x80) ku++;
        char ch = low.u.s.p[i];
        int sep = ch == '-' || ch == '(' || ch == '{' || ch == '[' || ch == '<' || ch == ' ' || (ch >= 9 && ch <= 13);
        if (start && !sep) jb_add(&b, up.u.s.p + j, ku);
        else jb_add(&b, low.u.s.p + i, k);
        start = sep;
        i += k;
        j += ku;
    }
    JVal r = jv_str_copy(c->a, b.p ? b.p : "", b.n);
    free(b.p);
    return r;
}

static JVal indent(JCtx *c, JVal s, const JVal *width, int first, int blank) {
    JVal ind = width && width->type == JV_STR ? *width : jv_cstr("    ");
    if (width && width->type == JV_INT) {
        char *p = jv_alloc(c->a, (size_t)(width->u.i > 0 ? width->u.i : 0) + 1);
        int64_t k = 0;
        for (; k < width->u.i; k++) p[k] = ' ';
        ind = jv_str(p, (size_t)k, -1);
    }
    JVal nl = jv_cstr("\n");
    JVal text = s.u.s.n && s.u.s.p[s.u.s.n - 1] == '\n' ? jx_substr(c, s, 0, s.u.s.n - 1) : s;
    JVal lines = jx_split(c, text, &nl, -1, 0);
    JVal r = lines.u.l->v[0];
    if (s.u.s.n == 0) r = s;
    for (size_t i = 1; i < lines.u.l->n; i++) {
        JVal line = lines.u.l->v[i];
        r = jx_concat(c, r, nl);
        if (blank || line.u.s.n) r = jx_concat(c, r, ind);
        r = jx_concat(c, r, line);
    }
    return first ? jx_concat(c, ind, r) : r;
}

static int to_int(JCtx *c, JVal v, const JVal *dflt, JVal *out) {
    *out = dflt ? *dflt : jv_int(0);
    if (v.type == JV_INT) *out = v;
    else if (v.type == JV_BOOL) *out = jv_int(v.u.b);
    else if (v.type == JV_FLOAT) *out = jv_int((int64_t)v.u.f);
    else if (v.type == JV_STR) {
        char buf[64], *end;
        snprintf(buf, sizeof buf, "%.*s", (int)(v.u.s.n < 63 ? v.u.s.n : 63), v.u.s.p);
        long long i = strtoll(buf, &end, 10);
        while (*end == ' ' || *end == '\n' || *end == '\t') end++;
        if (end != buf && !*end) *out = jv_int(i);
        else {
            double f = strtod(buf, &end);
            if (end != buf && !*end) *out = jv_int((int64_t)f);
        }
    }
    return 0;
}

static int to_float(JCtx *c, JVal v, const JVal *dflt, JVal *out) {
    *out = dflt ? *dflt : jv_float(0.0);
    if (v.type == JV_INT) *out = jv_float((double)v.u.i);
    else if (v.type == JV_BOOL) *out = jv_float(v.u.b);
    else if (v.type == JV_FLOAT) *out = v;
    else if (v.type == JV_STR) {
        char buf[64], *end;
        snprintf(buf, sizeof buf, "%.*s", (int)(v.u.s.n < 63 ? v.u.s.n : 63), v.u.s.p);
        double f = strtod(buf, &end);
        if (end != buf && !*end) *out = jv_float(f);
    }
    return 0;
}

static JVal round_filter(JVal v, const JVal *prec, const JVal *method) {
    double x = v.type == JV_FLOAT ? v.u.f : v.type == JV_INT ? (double)v.u.i : 0.0;
    double k = pow(10.0, prec && prec->type == JV_INT ? (double)prec->u.i : 0.0);
    double y = x * k;
    if (method && jv_is_str(*method, "floor")) y = floor(y);
    else if (method && jv_is_str(*method, "ceil")) y = ceil(y);
    else {
        double r = round(y); /* Python rounds half to even */
        if (fabs(y - trunc(y)) == 0.5) r = 2.0 * round(y / 2.0);
        y = r;
    }
    return jv_float(y / k);
}

static int wordcount(JVal s) {
    int n = 0, in = 0;
    for (size_t i = 0; i < s.u.s.n; i++) {
        unsigned char ch = (unsigned char)s.u.s.p[i];
        int w = ch >= 0x80 || ch == '_' || (ch >= '0' && ch <= '9') || ((ch | 32) >= 'a' && (ch | 32) <= 'z');
        if (w && !in) n++;
        in = w;
    }
    return n;
}

static JVal escape_html(JCtx *c, JVal s) {
    JBuf b = {0};
    for (size_t i = 0; i < s.u.s.n; i++) {
        char ch = s.u.s.p[i];
        if (ch == '&') jb_adds(&b, "&amp;");
        else if (ch == '<') jb_adds(&b, "&lt;");
        else if (ch == '>') jb_adds(&b, "&gt;");
        else if (ch == '"') jb_adds(&b, "&#34;");
        else if (ch == '\'') jb_adds(&b, "&#39;");
        else jb_add(&b, &ch, 1);
    }
    JVal r = jv_str_copy(c->a, b.p ? b.p : "", b.n);
    free(b.p);
    return r;
}

int jx_filter_scalar(JCtx *c, const JNode *at, const char *name, JVal v, JArgs *args, JVal *out) {
    const JVal *a0 = jx_arg(args, 0, NULL);
    if (!strcmp(name, "trim")) *out = jx_strip(c, need_str(c, v), jx_arg(args, 0, "chars"), 1, 1);
    else if (!strcmp(name, "upper")) *out = jx_case(c, need_str(c, v), 1);
    else if (!strcmp(name, "lower")) *out = jx_case(c, need_str(c, v), 0);
    else if (!strcmp(name, "capitalize")) *out = jx_case(c, need_str(c, v), 3);
    else if (!strcmp(name, "title")) *out = jinja_title(c, need_str(c, v));
    else if (!strcmp(name, "string")) *out = need_str(c, v);
    else if (!strcmp(name, "safe")) *out = v;
    else if (!strcmp(name, "e") || !strcmp(name, "escape")) *out = escape_html(c, need_str(c, v));
    else if (!strcmp(name, "replace")) {
        const JVal *a1 = jx_arg(args, 1, NULL);
        if (!a0 || !a1) return jx_fail(c, at, "replace needs two arguments");
        *out = jx_replace(c, need_str(c, v), need_str(c, *a0), need_str(c, *a1),
                          jx_arg(args, 2, "count") && jx_arg(args, 2, "count")->type == JV_INT
                              ? jx_arg(args, 2, "count")->u.i : -1);
    } else if (!strcmp(name, "int")) return to_int(c, v, jx_arg(args, 0, "default"), out);
    else if (!strcmp(name, "float")) return to_float(c, v, jx_arg(args, 0, "default"), out);
    else if (!strcmp(name, "round")) *out = round_filter(v, jx_arg(args, 0, "precision"), jx_arg(args, 1, "method"));
    else if (!strcmp(name, "abs")) {
        if (v.type == JV_INT) *out = jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
        else if (v.type == JV_FLOAT) *out = jv_float(fabs(v.u.f));
        else return jx_fail(c, at, "bad operand type for abs(): '%s'", jv_type_name(v));
    } else if (!strcmp(name, "indent")) {
        const JVal *f = jx_arg(args, 1, "first"), *b = jx_arg(args, 2, "blank");
        *out = indent(c, need_str(c, v), jx_arg(args, 0, "width"), f && jv_truthy(*f), b && jv_truthy(*b));
    } else if (!strcmp(name, "wordcount")) *out = jv_int(wordcount(need_str(c, v)));
    else if (!strcmp(name, "tojson")) return jx_tojson(c, at, v, args, out);
    else return 1;
    return 0;
}

int jx_filter(JCtx *c, const JNode *at, const char *name_p, size_t n, JVal v, JArgs *args, JVal *out) {
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)(n < 31 ? n : 31), name_p);
    if (jx_step(c, at)) return -1;
    int r = jx_filter_scalar(c, at, name, v, args, out);
    if (r <= 0) return r;
    r = jx_filter_seq(c, at, name, v, args, out);
    if (r <= 0) return r;
    return jx_fail(c, at, "the filter '%s' is not supported", name);
}
