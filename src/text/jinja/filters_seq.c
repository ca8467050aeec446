/* Jinja filters on sequences and mappings: length, join, first, last,
 * default, items, select/reject(attr), map, unique, sort, dictsort, batch,
 * reverse, sum, min, max, list, attr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja/filters.h"
#include "text/jinja/methods.h"

/* item.a.b (a dotted attribute path, integer parts index). */
static int attr_path(JCtx *c, const JNode *at, JVal item, JVal path, JVal *out) {
    if (path.type == JV_INT) return jx_getitem(c, at, item, path, out);
    if (path.type != JV_STR) return jx_fail(c, at, "attribute must be a string");
    size_t i = 0;
    *out = item;
    while (i <= path.u.s.n) {
        size_t j = i;
        while (j < path.u.s.n && path.u.s.p[j] != '.') j++;
        JVal key = jv_str(path.u.s.p + i, j - i, -1);
        int digits = j > i;
        for (size_t k = i; k < j; k++) digits &= path.u.s.p[k] >= '0' && path.u.s.p[k] <= '9';
        if (digits) key = jv_int(strtoll(path.u.s.p + i, NULL, 10));
        if (out->type == JV_UNDEF) return 0;
        if (jx_getitem(c, at, *out, key, out)) return -1;
        i = j + 1;
    }
    return 0;
}

static int length(JCtx *c, const JNode *at, JVal v, JVal *out) {
    switch (v.type) {
    case JV_STR: *out = jv_int((int64_t)jv_utf8_len(v.u.s.p, v.u.s.n)); return 0;
    case JV_LIST: *out = jv_int((int64_t)v.u.l->n); return 0;
    case JV_DICT:
    case JV_NS: *out = jv_int((int64_t)v.u.d->n); return 0;
    case JV_UNDEF: *out = jv_int(0); return 0;
    default: return jx_fail(c, at, "object of type '%s' has no len()", jv_type_name(v));
    }
}

/* select / reject / selectattr / rejectattr */
static int select_items(JCtx *c, const JNode *at, JVal seq, JArgs *args, int by_attr, int keep, JVal *out) {
    JVal list;
    if (jx_iterate(c, at, seq, &list)) return -1;
    size_t t = by_attr ? 1 : 0;
    const JVal *attr = by_attr ? jx_arg(args, 0, NULL) : NULL, *test = jx_arg(args, t, NULL);
    if (by_attr && !attr) return jx_fail(c, at, "selectattr/rejectattr needs an attribute");
    JArgs rest = {0};
    for (size_t i = t + 1; i < args->npos; i++) rest.pos[rest.npos++] = args->pos[i];
    *out = jv_list(c->a);
    for (size_t i = 0; i < list.u.l->n; i++) {
        JVal x = list.u.l->v[i];
        if (attr && attr_path(c, at, x, *attr, &x)) return -1;
        int r;
        if (!test) r = jv_truthy(x);
        else if (test->type != JV_STR) return jx_fail(c, at, "a test name must be a string");
        else if (jx_test(c, at, test->u.s.p, test->u.s.n, x, &rest, &r)) return -1;
        if (r == keep) jv_list_push(c->a, out->u.l, list.u.l->v[i]);
    }
    return 0;
}

static int map_items(JCtx *c, const JNode *at, JVal seq, JArgs *args, JVal *out) {
    JVal list;
    if (jx_iterate(c, at, seq, &list)) return -1;
    const JVal *attr = jx_arg(args, 99, "attribute"), *dflt = jx_arg(args, 99, "default");
    const JVal *fname = attr ? NULL : jx_arg(args, 0, NULL);
    if (!attr && (!fname || fname->type != JV_STR)) return jx_fail(c, at, "map needs attribute= or a filter name");
    JArgs rest = {0};
    for (size_t i = 1; i < args->npos; i++) rest.pos[rest.npos++] = args->pos[i];
    *out = jv_list(c->a);
    for (size_t i = 0; i < list.u.l->n; i++) {
        JVal x = list.u.l->v[i];
        if (attr) {
            if (attr_path(c, at, x, *attr, &x)) return -1;
            if (x.type == JV_UNDEF && dflt) x = *dflt;
        } else if (jx_filter(c, at, fname->u.s.p, fname->u.s.n, x, &rest, &x)) {
            return -1;
        }
        jv_list_push(c->a, out->u.l, x);
    }
    return 0;
}

static JVal sort_key(JCtx *c, JVal v, int case_sensitive) {
    return !case_sensitive && v.type == JV_STR ? jx_case(c, v, 0) : v;
}

/* Stable insertion sort of list by keys (templates sort short lists). */
static int sort_list(JCtx *c, const JNode *at, JVal *items, JVal *keys, size_t n, int reverse) {
    for (size_t i = 1; i < n; i++) {
        JVal it = items[i], k = keys[i];
        size_t j = i;
        for (; j > 0; j--) {
            int r = jv_compare(keys[j - 1], k);
            if (r == -2) return jx_fail(c, at, "cannot sort '%s' with '%s'", jv_type_name(keys[j - 1]), jv_type_name(k));
            if (reverse ? r >= 0 : r <= 0) break;
            items[j] = items[j - 1];
            keys[j] = keys[j - 1];
        }
        items[j] = it;
        keys[j] = k;
    }
    return 0;
}

static int sort_filter(JCtx *c, const JNode *at, JVal seq, JArgs *args, int dict, JVal *out) {
    JVal list;
    const JVal *rev = jx_arg(args, dict ? 2 : 0, "reverse"), *cs = jx_arg(args, dict ? 0 : 1, "case_sensitive");
    const JVal *attr = dict ? NULL : jx_arg(args, 2, "attribute"), *by = dict ? jx_arg(args, 1, "by") : NULL;
    if (dict) {
        if (seq.type != JV_DICT) return jx_fail(c, at, "dictsort needs a dict");
        list = jv_list(c->a);
        for (size_t i = 0; i < seq.u.d->n; i++) {
            JVal pair = jv_tuple(c->a);
            jv_list_push(c->a, pair.u.l, seq.u.d->k[i]);
            jv_list_push(c->a, pair.u.l, seq.u.d->v[i]);
            jv_list_push(c->a, list.u.l, pair);
        }
    } else if (jx_iterate(c, at, seq, &list)) {
        return -1;
    }
    size_t n = list.u.l->n;
    JVal *items = jv_alloc(c->a, (n + 1) * sizeof *items), *keys = jv_alloc(c->a, (n + 1) * sizeof *keys);
    for (size_t i = 0; i < n; i++) {
        items[i] = list.u.l->v[i];
        JVal k = items[i];
        if (dict) k = items[i].u.l->v[by && jv_is_str(*by, "value") ? 1 : 0];
        else if (attr && attr_path(c, at, k, *attr, &k)) return -1;
        keys[i] = sort_key(c, k, cs && jv_truthy(*cs));
    }
    if (sort_list(c, at, items, keys, n, rev && jv_truthy(*rev))) return -1;
    *out = jv_list(c->a);
    for (size_t i = 0; i < n; i++) jv_list_push(c->a, out->u.l, items[i]);
    return 0;
}

static int unique(JCtx *c, const JNode *at, JVal seq, JArgs *args, JVal *out) {
    JVal list;
    if (jx_iterate(c, at, seq, &list)) return -1;
    const JVal *cs = jx_arg(args, 0, "case_sensitive"), *attr = jx_arg(args, 1, "attribute");
    JVal seen = jv_list(c->a);
    *out = jv_list(c->a);
    for (size_t i = 0; i < list.u.l->n; i++) {
        JVal k = list.u.l->v[i];
        if (attr && attr_path(c, at, k, *attr, &k)) return -1;
        k = sort_key(c, k, cs && jv_truthy(*cs));
        int dup = 0;
        for (size_t j = 0; j < seen.u.l->n && !dup; j++) dup = jv_equal(seen.u.l->v[j], k);
        if (dup) continue;
        jv_list_push(c->a, seen.u.l, k);
        jv_list_push(c->a, out->u.l, list.u.l->v[i]);
    }
    return 0;
}

static int join(JCtx *c, const JNode *at, JVal seq, JArgs *args, JVal *out) {
    JVal list, sep = jv_str("", 0, -1), r = sep;
    const JVal *d = jx_arg(args, 0, "d"), *attr = jx_arg(args, 1, "attribute");
    if (d) sep = jv_stringify(c->a, *d);
    if (jx_iterate(c, at, seq, &list)) return -1;
    for (size_t i = 0; i < list.u.l->n; i++) {
        JVal x = list.u.l->v[i];
        if (attr && attr_path(c, at, x, *attr, &x)) return -1;
        if (i) r = jx_concat(c, r, sep);
        r = jx_concat(c, r, jv_stringify(c->a, x));
    }
    *out = r;
    return 0;
}

static int batch(JCtx *c, const JNode *at, JVal seq, JArgs *args, JVal *out) {
    JVal list;
    const JVal *k = jx_arg(args, 0, "linecount"), *fill = jx_arg(args, 1, "fill_with");
    if (!k || k->type != JV_INT || k->u.i <= 0) return jx_fail(c, at, "batch needs a positive count");
    if (jx_iterate(c, at, seq, &list)) return -1;
    *out = jv_list(c->a);
    JVal cur = jv_list(c->a);
    for (size_t i = 0; i < list.u.l->n; i++) {
        jv_list_push(c->a, cur.u.l, list.u.l->v[i]);
        if ((int64_t)cur.u.l->n == k->u.i) {
            jv_list_push(c->a, out->u.l, cur);
            cur = jv_list(c->a);
        }
    }
    if (cur.u.l->n) {
        while (fill && (int64_t)cur.u.l->n < k->u.i) jv_list_push(c->a, cur.u.l, *fill);
        jv_list_push(c->a, out->u.l, cur);
    }
    return 0;
}

static int min_max_sum(JCtx *c, const JNode *at, const char *name, JVal seq, JArgs *args, JVal *out) {
    JVal list;
    if (jx_iterate(c, at, seq, &list)) return -1;
    const JVal *attr = jx_arg(args, name[1] == 'u' ? 0 : 1, "attribute");
    if (name[1] == 'u') {
        const JVal *start = jx_arg(args, 1, "start");
        *out = start ? *start : jv_int(0);
        for (size_t i = 0; i < list.u.l->n; i++) {
            JVal x = list.u.l->v[i];
            if ((attr && attr_path(c, at, x, *attr, &x)) || jx_binop(c, at, JOP_ADD, *out, x, out)) return -1;
        }
        return 0;
    }
    *out = jv_undef();
    JVal best = jv_undef();
    for (size_t i = 0; i < list.u.l->n; i++) {
        JVal k = list.u.l->v[i];
        if (attr && attr_path(c, at, k, *attr, &k)) return -1;
        int r = best.type == JV_UNDEF ? 0 : jv_compare(k, best);
        if (r == -2) return jx_fail(c, at, "cannot compare '%s' with '%s'", jv_type_name(k), jv_type_name(best));
        if (best.type == JV_UNDEF || (name[1] == 'i' ? r < 0 : r > 0)) {
            best = k;
            *out = list.u.l->v[i];
        }
    }
    return 0;
}

static int seq_simple(JCtx *c, const JNode *at, const char *name, JVal v, JArgs *args, JVal *out) {
    JVal list;
    if (!strcmp(name, "list") || !strcmp(name, "reverse")) {
        if (jx_iterate(c, at, v, &list)) return -1;
        if (name[0] == 'l' && v.type != JV_LIST) {
            *out = list;
            return 0;
        }
        *out = jv_list(c->a);
        for (size_t i = 0; i < list.u.l->n; i++)
            jv_list_push(c->a, out->u.l, list.u.l->v[name[0] == 'r' ? list.u.l->n - 1 - i : i]);
        if (name[0] == 'r' && v.type == JV_STR) return join(c, at, *out, &(JArgs){0}, out);
        return 0;
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        if (jx_iterate(c, at, v, &list)) return -1;
        *out = list.u.l->n == 0 ? jv_undef() : list.u.l->v[name[0] == 'f' ? 0 : list.u.l->n - 1];
        return 0;
    }
    if (!strcmp(name, "items")) {
        if (v.type == JV_UNDEF) {
            *out = jv_list(c->a);
            return 0;
        }
        if (v.type != JV_DICT) return jx_fail(c, at, "items needs a mapping, not %s", jv_type_name(v));
        return jx_method(c, at, v, "items", 5, args, out);
    }
    if (!strcmp(name, "attr")) {
        const JVal *a = jx_arg(args, 0, NULL);
        if (!a || a->type != JV_STR) return jx_fail(c, at, "attr needs a name");
        return jx_getattr(c, at, v, a->u.s.p, a->u.s.n, out);
    }
    return 1;
}

int jx_filter_seq(JCtx *c, const JNode *at, const char *name, JVal v, JArgs *args, JVal *out) {
    if (!strcmp(name, "length") || !strcmp(name, "count")) return length(c, at, v, out);
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        const JVal *d = jx_arg(args, 0, "default_value"), *b = jx_arg(args, 1, "boolean");
        int use = v.type == JV_UNDEF || (b && jv_truthy(*b) && !jv_truthy(v));
        *out = use ? (d ? *d : jv_str("", 0, -1)) : v;
        return 0;
    }
    if (!strcmp(name, "join")) return join(c, at, v, args, out);
    if (!strcmp(name, "select") || !strcmp(name, "reject")) return select_items(c, at, v, args, 0, name[0] == 's', out);
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
        return select_items(c, at, v, args, 1, name[0] == 's', out);
    if (!strcmp(name, "map")) return map_items(c, at, v, args, out);
    if (!strcmp(name, "sort")) return sort_filter(c, at, v, args, 0, out);
    if (!strcmp(name, "dictsort")) return sort_filter(c, at, v, args, 1, out);
    if (!strcmp(name, "unique")) return unique(c, at, v, args, out);
    if (!strcmp(name, "batch")) return batch(c, at, v, args, out);
    if (!strcmp(name, "min") || !strcmp(name, "max") || !strcmp(name, "sum"))
        return min_max_sum(c, at, name, v, args, out);
    return seq_simple(c, at, name, v, args, out);
}
