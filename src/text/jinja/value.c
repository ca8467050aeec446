/* Values of the Jinja interpreter: arena, containers, Python's truth,
 * equality, ordering, str() and repr(). */
#include "text/jinja/value.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct JArenaBlock {
    struct JArenaBlock *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} JArenaBlock;

void *jv_alloc(JArena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    JArenaBlock *b = a->head;
    if (!b || b->used + n > b->cap) {
        /* blocks grow from 4 KiB to 256 KiB: a short rendering touches little fresh memory */
        size_t want = b ? (b->cap * 2 < (size_t)262144 ? b->cap * 2 : (size_t)262144) : 4096 - sizeof *b;
        size_t cap = n > want ? n : want;
        b = df_xmalloc(sizeof *b + cap, "template arena");
        b->used = 0;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    a->used += n;
    if (a->max_bytes && a->used > a->max_bytes) a->over = 1;
    return p;
}

void jv_arena_free(JArena *a) {
    while (a->head) {
        JArenaBlock *next = a->head->next;
        free(a->head);
        a->head = next;
    }
    a->used = 0;
    a->over = 0;
}

JVal jv_str_copy(JArena *a, const char *p, size_t n) {
    char *q = jv_alloc(a, n + 1);
    if (n) memcpy(q, p, n);
    q[n] = '\0';
    return jv_str(q, n, -1);
}

JVal jv_cstr(const char *s) { return jv_str(s, strlen(s), -1); }

JVal jv_list(JArena *a) {
    JList *l = jv_alloc(a, sizeof *l);
    memset(l, 0, sizeof *l);
    return (JVal){.type = JV_LIST, .tag = -1, .u.l = l};
}

JVal jv_tuple(JArena *a) {
    JVal t = jv_list(a);
    t.u.l->tuple = 1;
    return t;
}

JVal jv_dict(JArena *a) {
    JDict *d = jv_alloc(a, sizeof *d);
    memset(d, 0, sizeof *d);
    return (JVal){.type = JV_DICT, .tag = -1, .u.d = d};
}

void jv_list_push(JArena *a, JList *l, JVal v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        JVal *nv = jv_alloc(a, cap * sizeof *nv);
        if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

const JVal *jv_dict_get(const JDict *d, JVal k) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->k[i], k)) return &d->v[i];
    return NULL;
}

const JVal *jv_dict_getn(const JDict *d, const char *key, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].type == JV_STR && d->k[i].u.s.n == n && memcmp(d->k[i].u.s.p, key, n) == 0) return &d->v[i];
    return NULL;
}

void jv_dict_set(JArena *a, JDict *d, JVal k, JVal v) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->k[i], k)) {
            d->v[i] = v;
            return;
        }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        JVal *nk = jv_alloc(a, cap * sizeof *nk), *nv = jv_alloc(a, cap * sizeof *nv);
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof *nk);
            memcpy(nv, d->v, d->n * sizeof *nv);
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
}

int jv_is_str(JVal v, const char *s) {
    size_t n = strlen(s);
    return v.type == JV_STR && v.u.s.n == n && memcmp(v.u.s.p, s, n) == 0;
}

int jv_truthy(JVal v) {
    switch (v.type) {
    case JV_UNDEF:
    case JV_NONE: return 0;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s.n != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT:
    case JV_NS: return v.u.d->n != 0;
    default: return 1;
    }
}

static int is_num(JVal v) { return v.type == JV_INT || v.type == JV_FLOAT || v.type == JV_BOOL; }
static double num(JVal v) { return v.type == JV_FLOAT ? v.u.f : v.type == JV_INT ? (double)v.u.i : (double)v.u.b; }

int jv_equal(JVal a, JVal b) {
    if (is_num(a) && is_num(b)) {
        if (a.type != JV_FLOAT && b.type != JV_FLOAT) return (a.type == JV_INT ? a.u.i : a.u.b) ==
                                                              (b.type == JV_INT ? b.u.i : b.u.b);
        return num(a) == num(b);
    }
    if (a.type != b.type) return 0;
    switch (a.type) {
    case JV_UNDEF:
    case JV_NONE: return 1;
    case JV_STR: return a.u.s.n == b.u.s.n && memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
    case JV_LIST:
        if (a.u.l->n != b.u.l->n) return 0;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_equal(a.u.l->v[i], b.u.l->v[i])) return 0;
        return 1;
    case JV_DICT:
    case JV_NS:
        if (a.u.d->n != b.u.d->n) return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            const JVal *o = jv_dict_get(b.u.d, a.u.d->k[i]);
            if (!o || !jv_equal(a.u.d->v[i], *o)) return 0;
        }
        return 1;
    case JV_MACRO: return a.u.macro == b.u.macro;
    case JV_BUILTIN: return a.u.builtin == b.u.builtin;
    default: return 0;
    }
}

int jv_compare(JVal a, JVal b) {
    if (is_num(a) && is_num(b)) {
        double x = num(a), y = num(b);
        if (a.type == JV_INT && b.type == JV_INT) return (a.u.i > b.u.i) - (a.u.i < b.u.i);
        return (x > y) - (x < y);
    }
    if (a.type == JV_STR && b.type == JV_STR) {
        size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int c = memcmp(a.u.s.p, b.u.s.p, n); /* UTF-8 byte order is code point order */
        if (c) return c < 0 ? -1 : 1;
        return (a.u.s.n > b.u.s.n) - (a.u.s.n < b.u.s.n);
    }
    if (a.type == JV_LIST && b.type == JV_LIST) {
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            if (jv_equal(a.u.l->v[i], b.u.l->v[i])) continue;
            return jv_compare(a.u.l->v[i], b.u.l->v[i]);
        }
        return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
    }
    return -2;
}

const char *jv_type_name(JVal v) {
    static const char *const names[] = {"Undefined", "NoneType", "bool",      "int",      "float",
                                        "str",       "list",     "dict",      "Namespace", "Macro",
                                        "LoopContext", "method", "builtin_function"};
    return names[v.type];
}

void jb_add(JBuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        b->p = df_xrealloc(b->p, cap, "template output");
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void jv_float_repr(JBuf *b, double f) {
    char s[40];
    if (isnan(f)) {
        jb_adds(b, "nan");
        return;
    }
    if (isinf(f)) {
        jb_adds(b, f < 0 ? "-inf" : "inf");
        return;
    }
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(s, sizeof s, "%.*g", prec, f);
        if (strtod(s, NULL) == f) break;
    }
    /* Python writes exponents from 1e16 up and below 1e-4, as at least two digits, and keeps ".0" */
    int exp10 = f == 0 ? 0 : (int)floor(log10(fabs(f)));
    if (exp10 >= 16 || exp10 < -4) {
        char *e = strchr(s, 'e');
        if (!e) {
            snprintf(s, sizeof s, "%.*e", prec - 1, f);
            e = strchr(s, 'e');
        }
        int ex = atoi(e + 1);
        *e = '\0';
        jb_adds(b, s);
        snprintf(s, sizeof s, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
        jb_adds(b, s);
        return;
    }
    snprintf(s, sizeof s, "%.*f", prec - 1 - exp10 > 0 ? prec - 1 - exp10 : 0, f);
    jb_adds(b, s);
    if (!strchr(s, '.')) jb_adds(b, ".0");
}

static void repr_str(JBuf *b, const char *p, size_t n) {
    int has_sq = memchr(p, '\'', n) != NULL, has_dq = memchr(p, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jb_add(b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        char esc[8];
        if (c == (unsigned char)q || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            jb_add(b, esc, 2);
        } else if (c == '\n') jb_adds(b, "\\n");
        else if (c == '\r') jb_adds(b, "\\r");
        else if (c == '\t') jb_adds(b, "\\t");
        else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof esc, "\\x%02x", c);
            jb_adds(b, esc);
        } else jb_add(b, (const char *)&p[i], 1);
    }
    jb_add(b, &q, 1);
}

void jv_repr(JBuf *b, JVal v) {
    if (v.type == JV_STR) {
        repr_str(b, v.u.s.p, v.u.s.n);
    } else if (v.type == JV_LIST) {
        jb_adds(b, v.u.l->tuple ? "(" : "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jb_adds(b, ", ");
            jv_repr(b, v.u.l->v[i]);
        }
        jb_adds(b, v.u.l->tuple ? (v.u.l->n == 1 ? ",)" : ")") : "]");
    } else if (v.type == JV_DICT) {
        jb_adds(b, "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) jb_adds(b, ", ");
            jv_repr(b, v.u.d->k[i]);
            jb_adds(b, ": ");
            jv_repr(b, v.u.d->v[i]);
        }
        jb_adds(b, "}");
    } else {
        jv_to_str(b, v);
    }
}

void jv_to_str(JBuf *b, JVal v) {
    char s[32];
    switch (v.type) {
    case JV_UNDEF: return;
    case JV_NONE: jb_adds(b, "None"); return;
    case JV_BOOL: jb_adds(b, v.u.b ? "True" : "False"); return;
    case JV_INT:
        snprintf(s, sizeof s, "%lld", (long long)v.u.i);
        jb_adds(b, s);
        return;
    case JV_FLOAT: jv_float_repr(b, v.u.f); return;
    case JV_STR: jb_add(b, v.u.s.p, v.u.s.n); return;
    case JV_LIST:
    case JV_DICT: jv_repr(b, v); return;
    case JV_NS: jb_adds(b, "<Namespace>"); return;
    case JV_MACRO: jb_adds(b, "<Macro>"); return;
    case JV_LOOP: jb_adds(b, "<LoopContext>"); return;
    default: jb_adds(b, "<function>"); return;
    }
}

JVal jv_stringify(JArena *a, JVal v) {
    if (v.type == JV_STR) return v;
    JBuf b = {0};
    jv_to_str(&b, v);
    JVal r = jv_str_copy(a, b.p ? b.p : "", b.n);
    free(b.p);
    return r;
}

size_t jv_utf8_len(const char *p, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)p[i] & 0xC0) != 0x80;
    return k;
}

size_t jv_utf8_offset(const char *p, size_t n, size_t cp) {
    size_t k = 0, i = 0;
    for (; i < n; i++) {
        if (((unsigned char)p[i] & 0xC0) != 0x80) {
            if (k == cp) return i;
            k++;
        }
    }
    return n;
}

static uint32_t decode_at(const char *p, size_t n, size_t *w) {
    const unsigned char *s = (const unsigned char *)p;
    if (s[0] < 0x80 || n < 2) {
        *w = 1;
        return s[0];
    }
    if ((s[0] & 0xE0) == 0xC0) {
        *w = 2;
        return ((s[0] & 0x1Fu) << 6) | (s[1] & 0x3Fu);
    }
    if ((s[0] & 0xF0) == 0xE0 && n >= 3) {
        *w = 3;
        return ((s[0] & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
    }
    if (n >= 4) {
        *w = 4;
        return ((s[0] & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
    }
    *w = 1;
    return s[0];
}

int jv_is_space_at(const char *p, size_t n, size_t *width) {
    uint32_t c = decode_at(p, n, width);
    if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) return 1;
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

long jv_find(const char *hay, size_t hn, const char *needle, size_t nn, size_t from) {
    if (nn == 0) return from <= hn ? (long)from : -1;
    for (size_t i = from; i + nn <= hn; i++) {
        const char *q = memchr(hay + i, needle[0], hn - nn + 1 - i);
        if (!q) return -1;
        i = (size_t)(q - hay);
        if (memcmp(q, needle, nn) == 0) return (long)i;
    }
    return -1;
}
