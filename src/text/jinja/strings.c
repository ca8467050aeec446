/* Tagged strings: substrings and concatenations keep the ranges that came
 * from tagged data, so the rendering can report where they landed. */
#include <stdlib.h>
#include <string.h>

#include "text/jinja/interp.h"

/* Empty spans are kept: they mark where an empty tagged string landed. */
static void span_push(JArena *a, JSpanList *l, JSpan s) {
    if (s.e < s.s) return;
    if (l->n && l->v[l->n - 1].tag == s.tag && l->v[l->n - 1].e == s.s) {
        l->v[l->n - 1].e = s.e;
        return;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        JSpan *v = a ? jv_alloc(a, cap * sizeof *v) : df_xrealloc(l->v, cap * sizeof *v, "template spans");
        if (a && l->n) memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = s;
}

/* The spans of s (tag >= 0: one span over all of it). */
static const JSpan *spans_of(const JCtx *c, JVal s, JSpan *one, size_t *n) {
    if (s.type != JV_STR || s.tag == -1) {
        *n = 0;
        return NULL;
    }
    if (s.tag >= 0) {
        *one = (JSpan){s.tag, 0, s.u.s.n};
        *n = 1;
        return one;
    }
    const JSpanList *l = &c->composites[-2 - s.tag];
    *n = l->n;
    return l->v;
}

/* Tags a new string with spans: no tag, a single tag, or a new composite. */
static JVal tagged(JCtx *c, const char *p, size_t n, JSpanList *spans) {
    if (spans->n == 0) return jv_str(p, n, -1);
    if (spans->n == 1 && spans->v[0].s == 0 && spans->v[0].e == n) return jv_str(p, n, spans->v[0].tag);
    if (c->ncomposites == c->capcomposites) {
        size_t cap = c->capcomposites ? c->capcomposites * 2 : 16;
        JSpanList *v = jv_alloc(c->a, cap * sizeof *v);
        if (c->ncomposites) memcpy(v, c->composites, c->ncomposites * sizeof *v);
        c->composites = v;
        c->capcomposites = cap;
    }
    c->composites[c->ncomposites] = *spans;
    return jv_str(p, n, -2 - (int32_t)c->ncomposites++);
}

JVal jx_substr(JCtx *c, JVal s, size_t start, size_t end) {
    if (end < start) end = start;
    JVal r = jv_str(s.u.s.p + start, end - start, -1);
    if (s.tag == -1) return r;
    if (s.tag >= 0) {
        r.tag = s.tag;
        return r;
    }
    JSpan one;
    size_t n;
    const JSpan *sp = spans_of(c, s, &one, &n);
    JSpanList out = {0};
    for (size_t i = 0; i < n; i++) {
        size_t a = sp[i].s > start ? sp[i].s : start, b = sp[i].e < end ? sp[i].e : end;
        if (b > a) span_push(c->a, &out, (JSpan){sp[i].tag, a - start, b - start});
    }
    return tagged(c, r.u.s.p, r.u.s.n, &out);
}

JVal jx_concat(JCtx *c, JVal x, JVal y) {
    if (x.u.s.n == 0 && x.tag == -1) return y;
    if (y.u.s.n == 0 && y.tag == -1) return x;
    char *p = jv_alloc(c->a, x.u.s.n + y.u.s.n + 1);
    memcpy(p, x.u.s.p, x.u.s.n);
    memcpy(p + x.u.s.n, y.u.s.p, y.u.s.n);
    p[x.u.s.n + y.u.s.n] = '\0';
    if (x.tag == -1 && y.tag == -1) return jv_str(p, x.u.s.n + y.u.s.n, -1);
    JSpan one;
    size_t n;
    JSpanList out = {0};
    const JSpan *sp = spans_of(c, x, &one, &n);
    for (size_t i = 0; i < n; i++) span_push(c->a, &out, sp[i]);
    sp = spans_of(c, y, &one, &n);
    for (size_t i = 0; i < n; i++)
        span_push(c->a, &out, (JSpan){sp[i].tag, sp[i].s + x.u.s.n, sp[i].e + x.u.s.n});
    return tagged(c, p, x.u.s.n + y.u.s.n, &out);
}

void jx_emit(JCtx *c, JVal v) {
    if (v.type == JV_UNDEF) return;
    if (v.type != JV_STR) v = jv_stringify(c->a, v);
    size_t base = c->out->buf.n;
    jb_add(&c->out->buf, v.u.s.p, v.u.s.n);
    JSpan one;
    size_t n;
    const JSpan *sp = spans_of(c, v, &one, &n);
    for (size_t i = 0; i < n; i++)
        span_push(NULL, &c->out->spans, (JSpan){sp[i].tag, sp[i].s + base, sp[i].e + base});
}

JVal jx_capture_value(JCtx *c, JOut *o) {
    char *p = jv_alloc(c->a, o->buf.n + 1);
    if (o->buf.n) memcpy(p, o->buf.p, o->buf.n);
    p[o->buf.n] = '\0';
    JSpanList spans = {0};
    for (size_t i = 0; i < o->spans.n; i++) span_push(c->a, &spans, o->spans.v[i]);
    return tagged(c, p, o->buf.n, &spans);
}

void jx_out_free(JOut *o) {
    free(o->buf.p);
    free(o->spans.v);
    memset(o, 0, sizeof *o);
}

void jx_span_push(JSpanList *l, JSpan s) { span_push(NULL, l, s); }
