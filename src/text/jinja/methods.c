/* Python methods of strings, dicts and lists that templates call
 * (s.strip(), s.split(), d.get(), d.items(), ...), and the string helpers
 * the filters share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "text/jinja/interp.h"
#include "text/jinja/methods.h"

static int in_chars(const char *p, size_t n, size_t *w, JVal chars) {
    size_t k = 1;
    while (k < n && ((unsigned char)p[k] & 0xC0) == 0x80) k++;
    *w = k;
    for (size_t i = 0; i + k <= chars.u.s.n; i++)
        if (memcmp(chars.u.s.p + i, p, k) == 0) return 1;
    return 0;
}

/* str.strip / lstrip / rstrip: chars none -> whitespace. */
JVal jx_strip(JCtx *c, JVal s, const JVal *chars, int left, int right) {
    const char *p = s.u.s.p;
    size_t a = 0, b = s.u.s.n, w;
    int ws = !chars || chars->type != JV_STR;
    if (left)
        while (a < b && (ws ? jv_is_space_at(p + a, b - a, &w) : in_chars(p + a, b - a, &w, *chars))) a += w;
    if (right)
        while (b > a) {
            size_t k = b - 1;
            while (k > a && ((unsigned char)p[k] & 0xC0) == 0x80) k--;
            if (!(ws ? jv_is_space_at(p + k, b - k, &w) : in_chars(p + k, b - k, &w, *chars))) break;
            b = k;
        }
    return jx_substr(c, s, a, b);
}

/* mode 0 lower, 1 upper, 2 Python's title, 3 capitalize. */
JVal jx_case(JCtx *c, JVal s, int mode) {
    char *out = jv_alloc(c->a, s.u.s.n * 4 + 1);
    size_t o = 0;
    int prev_cased = 0, first = 1;
    for (size_t i = 0; i < s.u.s.n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s.u.s.p + i, (utf8proc_ssize_t)(s.u.s.n - i), &cp);
        if (k <= 0) {
            out[o++] = s.u.s.p[i++];
            continue;
        }
        int up = mode == 1 || (mode == 2 && !prev_cased) || (mode == 3 && first);
        utf8proc_int32_t m = up ? utf8proc_toupper(cp) : utf8proc_tolower(cp);
        o += (size_t)utf8proc_encode_char(m, (utf8proc_uint8_t *)out + o);
        const utf8proc_property_t *pr = utf8proc_get_property(cp);
        prev_cased = pr->category == UTF8PROC_CATEGORY_LU || pr->category == UTF8PROC_CATEGORY_LL ||
                     pr->category == UTF8PROC_CATEGORY_LT;
        first = 0;
        i += (size_t)k;
    }
    out[o] = '\0';
    return jv_str(out, o, -1);
}

JVal jx_replace(JCtx *c, JVal s, JVal old, JVal new_, int64_t count) {
    JBuf b = {0};
    size_t i = 0;
    int64_t done = 0;
    if (old.u.s.n == 0) {
        for (size_t k = 0; k <= s.u.s.n && (count < 0 || done < count); done++) {
            jb_add(&b, new_.u.s.p, new_.u.s.n);
            if (k == s.u.s.n) {
                k++;
                break;
            }
            size_t e = k + 1;
            while (e < s.u.s.n && ((unsigned char)s.u.s.p[e] & 0xC0) == 0x80) e++;
            jb_add(&b, s.u.s.p + k, e - k);
            k = e;
            i = k;
        }
    } else {
        long f;
        while ((count < 0 || done < count) && (f = jv_find(s.u.s.p, s.u.s.n, old.u.s.p, old.u.s.n, i)) >= 0) {
            jb_add(&b, s.u.s.p + i, (size_t)f - i);
            jb_add(&b, new_.u.s.p, new_.u.s.n);
            i = (size_t)f + old.u.s.n;
            done++;
        }
    }
    if (i < s.u.s.n) jb_add(&b, s.u.s.p + i, s.u.s.n - i);
    if (done == 0) {
        free(b.p);
        return s;
    }
    JVal r = jv_str_copy(c->a, b.p ? b.p : "", b.n);
    free(b.p);
    return r;
}

/* str.split(sep, maxsplit) / rsplit: sep none -> runs of whitespace. */
JVal jx_split(JCtx *c, JVal s, const JVal *sep, int64_t maxsplit, int from_right) {
    JVal list = jv_list(c->a);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, w;
    if (!sep || sep->type != JV_STR) {
        /* whitespace split, left to right (rsplit without maxsplit is the same) */
        size_t i = 0;
        int64_t done = 0;
        while (i < n) {
            while (i < n && jv_is_space_at(p + i, n - i, &w)) i += w;
            if (i >= n) break;
            size_t j = i;
            if (maxsplit >= 0 && done >= maxsplit && !from_right) {
                size_t e = n;
                while (e > i && jv_is_space_at(p + e - 1, 1, &w)) e--;
                jv_list_push(c->a, list.u.l, jx_substr(c, s, i, e));
                break;
            }
            while (j < n && !jv_is_space_at(p + j, n - j, &w)) j++;
            jv_list_push(c->a, list.u.l, jx_substr(c, s, i, j));
            done++;
            i = j;
        }
        return list;
    }
    size_t sn = sep->u.s.n;
    if (!from_right || maxsplit < 0) {
        size_t i = 0;
        long f;
        int64_t done = 0;
        while ((maxsplit < 0 || done < maxsplit) && (f = jv_find(p, n, sep->u.s.p, sn, i)) >= 0) {
            jv_list_push(c->a, list.u.l, jx_substr(c, s, i, (size_t)f));
            i = (size_t)f + sn;
            done++;
        }
        jv_list_push(c->a, list.u.l, jx_substr(c, s, i, n));
        return list;
    }
    /* rsplit with maxsplit: split from the right, then reverse */
    JVal rev = jv_list(c->a);
    size_t e = n;
    int64_t done = 0;
    while (done < maxsplit && e >= sn) {
        long f = -1;
        for (size_t k = e - sn + 1; k-- > 0;)
            if (memcmp(p + k, sep->u.s.p, sn) == 0) {
                f = (long)k;
                break;
            }
        if (f < 0) break;
        jv_list_push(c->a, rev.u.l, jx_substr(c, s, (size_t)f + sn, e));
        e = (size_t)f;
        done++;
    }
    jv_list_push(c->a, rev.u.l, jx_substr(c, s, 0, e));
    for (size_t k = rev.u.l->n; k-- > 0;) jv_list_push(c->a, list.u.l, rev.u.l->v[k]);
    return list;
}

static int starts_ends(JCtx *c, const JNode *at, JVal s, const JVal *arg, int ends, JVal *out) {
    if (!arg) return jx_fail(c, at, "%s needs an argument", ends ? "endswith" : "startswith");
    if (arg->type == JV_LIST) {
        for (size_t i = 0; i < arg->u.l->n; i++) {
            if (starts_ends(c, at, s, &arg->u.l->v[i], ends, out)) return -1;
            if (out->u.b) return 0;
        }
        *out = jv_bool(0);
        return 0;
    }
    if (arg->type != JV_STR) return jx_fail(c, at, "%s needs a string", ends ? "endswith" : "startswith");
    size_t k = arg->u.s.n;
    *out = jv_bool(k <= s.u.s.n && memcmp(s.u.s.p + (ends ? s.u.s.n - k : 0), arg->u.s.p, k) == 0);
    return 0;
}

static const char *const STR_METHODS[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith",
                                          "upper", "lower", "title", "capitalize", "replace", "find", "count",
                                          "splitlines", "isdigit", "isalpha", "isspace", "join", "format", NULL};
static const char *const DICT_METHODS[] = {"get", "items", "keys", "values", NULL};

static int listed(const char *const *names, const char *name, size_t n) {
    for (int i = 0; names[i]; i++)
        if (strlen(names[i]) == n && memcmp(names[i], name, n) == 0) return 1;
    return 0;
}

int jx_has_method(JVal self, const char *name, size_t n) {
    if (self.type == JV_STR) return listed(STR_METHODS, name, n);
    if (self.type == JV_DICT) return listed(DICT_METHODS, name, n);
    return 0;
}

static int64_t int_arg(const JVal *v, int64_t dflt) { return v && v->type == JV_INT ? v->u.i : dflt; }

static int dict_method(JCtx *c, const JNode *at, JVal d, const char *name, JArgs *args, JVal *out) {
    if (strcmp(name, "get") == 0) {
        const JVal *k = jx_arg(args, 0, NULL), *dflt = jx_arg(args, 1, NULL);
        if (!k) return jx_fail(c, at, "get needs a key");
        const JVal *v = jv_dict_get(d.u.d, *k);
        *out = v ? *v : dflt ? *dflt : jv_none();
        return 0;
    }
    *out = jv_list(c->a);
    for (size_t i = 0; i < d.u.d->n; i++) {
        JVal item = d.u.d->v[i];
        if (strcmp(name, "keys") == 0) item = d.u.d->k[i];
        else if (strcmp(name, "items") == 0) {
            item = jv_tuple(c->a);
            jv_list_push(c->a, item.u.l, d.u.d->k[i]);
            jv_list_push(c->a, item.u.l, d.u.d->v[i]);
        }
        jv_list_push(c->a, out->u.l, item);
    }
    return 0;
}

static int str_predicate(JVal s, int (*pred)(int)) {
    if (s.u.s.n == 0) return 0;
    for (size_t i = 0; i < s.u.s.n; i++)
        if (!pred((unsigned char)s.u.s.p[i])) return 0;
    return 1;
}
static int is_digit(int ch) { return ch >= '0' && ch <= '9'; }
static int is_alpha(int ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch >= 0x80; }
static int is_space(int ch) { return ch == ' ' || (ch >= 9 && ch <= 13); }

static int str_method2(JCtx *c, const JNode *at, JVal s, const char *name, JArgs *args, JVal *out) {
    const JVal *a0 = jx_arg(args, 0, NULL);
    if (strcmp(name, "find") == 0 || strcmp(name, "count") == 0) {
        if (!a0 || a0->type != JV_STR) return jx_fail(c, at, "%s needs a string", name);
        long f = jv_find(s.u.s.p, s.u.s.n, a0->u.s.p, a0->u.s.n, 0);
        if (name[0] == 'f') {
            *out = jv_int(f < 0 ? -1 : (int64_t)jv_utf8_len(s.u.s.p, (size_t)f));
            return 0;
        }
        int64_t k = 0;
        while (f >= 0 && a0->u.s.n) {
            k++;
            f = jv_find(s.u.s.p, s.u.s.n, a0->u.s.p, a0->u.s.n, (size_t)f + a0->u.s.n);
        }
        *out = jv_int(a0->u.s.n ? k : (int64_t)jv_utf8_len(s.u.s.p, s.u.s.n) + 1);
        return 0;
    }
    if (strcmp(name, "splitlines") == 0) {
        JVal nl = jv_cstr("\n");
        JVal t = s.u.s.n && s.u.s.p[s.u.s.n - 1] == '\n' ? jx_substr(c, s, 0, s.u.s.n - 1) : s;
        *out = t.u.s.n ? jx_split(c, t, &nl, -1, 0) : jv_list(c->a);
        return 0;
    }
    if (strcmp(name, "isdigit") == 0) *out = jv_bool(str_predicate(s, is_digit));
    else if (strcmp(name, "isalpha") == 0) *out = jv_bool(str_predicate(s, is_alpha));
    else if (strcmp(name, "isspace") == 0) *out = jv_bool(str_predicate(s, is_space));
    else if (strcmp(name, "join") == 0) {
        JVal list, r = jv_str("", 0, -1);
        if (!a0 || jx_iterate(c, at, *a0, &list)) return jx_fail(c, at, "join needs an iterable");
        for (size_t i = 0; i < list.u.l->n; i++) {
            if (i) r = jx_concat(c, r, s);
            r = jx_concat(c, r, jv_stringify(c->a, list.u.l->v[i]));
        }
        *out = r;
    } else return jx_fail(c, at, "str.%s is not supported", name);
    return 0;
}

static int str_method(JCtx *c, const JNode *at, JVal s, const char *name, JArgs *args, JVal *out) {
    const JVal *a0 = jx_arg(args, 0, NULL), *a1 = jx_arg(args, 1, NULL);
    if (strcmp(name, "strip") == 0) *out = jx_strip(c, s, a0, 1, 1);
    else if (strcmp(name, "lstrip") == 0) *out = jx_strip(c, s, a0, 1, 0);
    else if (strcmp(name, "rstrip") == 0) *out = jx_strip(c, s, a0, 0, 1);
    else if (strcmp(name, "split") == 0 || strcmp(name, "rsplit") == 0)
        *out = jx_split(c, s, jx_arg(args, 0, "sep"), int_arg(jx_arg(args, 1, "maxsplit"), -1), name[0] == 'r');
    else if (strcmp(name, "startswith") == 0) return starts_ends(c, at, s, a0, 0, out);
    else if (strcmp(name, "endswith") == 0) return starts_ends(c, at, s, a0, 1, out);
    else if (strcmp(name, "upper") == 0) *out = jx_case(c, s, 1);
    else if (strcmp(name, "lower") == 0) *out = jx_case(c, s, 0);
    else if (strcmp(name, "title") == 0) *out = jx_case(c, s, 2);
    else if (strcmp(name, "capitalize") == 0) *out = jx_case(c, s, 3);
    else if (strcmp(name, "replace") == 0) {
        if (!a0 || !a1 || a0->type != JV_STR || a1->type != JV_STR) return jx_fail(c, at, "replace needs two strings");
        *out = jx_replace(c, s, *a0, *a1, int_arg(jx_arg(args, 2, "count"), -1));
    } else return str_method2(c, at, s, name, args, out);
    return 0;
}

static int loop_cycle(JCtx *c, const JNode *at, const JLoop *l, JArgs *args, JVal *out) {
    if (args->npos == 0) return jx_fail(c, at, "loop.cycle needs arguments");
    *out = args->pos[l->index % args->npos];
    return 0;
}

int jx_method(JCtx *c, const JNode *at, JVal self, const char *name, size_t n, JArgs *args, JVal *out) {
    char nm[32];
    snprintf(nm, sizeof nm, "%.*s", (int)(n < 31 ? n : 31), name);
    if (self.type == JV_STR) return str_method(c, at, self, nm, args, out);
    if (self.type == JV_DICT) return dict_method(c, at, self, nm, args, out);
    if (self.type == JV_LOOP) return loop_cycle(c, at, self.u.loop, args, out);
    return jx_fail(c, at, "'%s' object has no method '%s'", jv_type_name(self), nm);
}
