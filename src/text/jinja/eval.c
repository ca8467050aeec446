/* Expressions: literals, names, containers, attribute/item access, slices,
 * calls, filters, tests, boolean logic and the conditional expression. */
#include <string.h>

#include "text/jinja/interp.h"

const JVal *jx_arg(const JArgs *a, size_t pos, const char *name) {
    if (name) {
        size_t n = strlen(name);
        for (size_t k = 0; k < a->nkw; k++)
            if (a->kwl[k] == n && memcmp(a->kwn[k], name, n) == 0) return &a->kwv[k];
    }
    return pos < a->npos ? &a->pos[pos] : NULL;
}

int jx_eval_args(JCtx *c, const JNodeList *args, JArgs *out) {
    out->npos = out->nkw = 0;
    for (size_t i = 0; i < args->n; i++) {
        const JNode *a = args->v[i];
        if (a->kind == JN_KWARG) {
            if (out->nkw == 16) return jx_fail(c, a, "more than 16 keyword arguments");
            out->kwn[out->nkw] = a->s;
            out->kwl[out->nkw] = a->n;
            if (jx_eval(c, a->a, &out->kwv[out->nkw++])) return -1;
        } else {
            if (out->npos == 16) return jx_fail(c, a, "more than 16 arguments");
            if (jx_eval(c, a, &out->pos[out->npos++])) return -1;
        }
    }
    return 0;
}

int jx_iterate(JCtx *c, const JNode *at, JVal v, JVal *list) {
    switch (v.type) {
    case JV_LIST: *list = v; return 0;
    case JV_UNDEF: *list = jv_list(c->a); return 0;
    case JV_DICT:
    case JV_NS: {
        *list = jv_list(c->a);
        for (size_t i = 0; i < v.u.d->n; i++) jv_list_push(c->a, list->u.l, v.u.d->k[i]);
        return 0;
    }
    case JV_STR: {
        *list = jv_list(c->a);
        for (size_t i = 0; i < v.u.s.n;) {
            size_t j = i + 1;
            while (j < v.u.s.n && ((unsigned char)v.u.s.p[j] & 0xC0) == 0x80) j++;
            jv_list_push(c->a, list->u.l, jx_substr(c, v, i, j));
            i = j;
        }
        return 0;
    }
    default: return jx_fail(c, at, "'%s' object is not iterable", jv_type_name(v));
    }
}

static int loop_attr(JCtx *c, const JNode *at, const JLoop *l, const char *name, size_t n, JVal *out) {
    size_t len = l->items->n, i = l->index;
#define IS(s) (n == sizeof(s) - 1 && memcmp(name, s, n) == 0)
    if (IS("index")) *out = jv_int((int64_t)i + 1);
    else if (IS("index0")) *out = jv_int((int64_t)i);
    else if (IS("revindex")) *out = jv_int((int64_t)(len - i));
    else if (IS("revindex0")) *out = jv_int((int64_t)(len - i - 1));
    else if (IS("first")) *out = jv_bool(i == 0);
    else if (IS("last")) *out = jv_bool(i + 1 == len);
    else if (IS("length")) *out = jv_int((int64_t)len);
    else if (IS("depth")) *out = jv_int(1);
    else if (IS("depth0")) *out = jv_int(0);
    else if (IS("previtem")) *out = i > 0 ? l->items->v[i - 1] : jv_undef();
    else if (IS("nextitem")) *out = i + 1 < len ? l->items->v[i + 1] : jv_undef();
    else if (IS("cycle")) {
        JMethod *m = jv_alloc(c->a, sizeof *m);
        *m = (JMethod){{.type = JV_LOOP, .tag = -1, .u.loop = (JLoop *)l}, "cycle", 5};
        *out = (JVal){.type = JV_METHOD, .tag = -1, .u.m = m};
    } else return jx_fail(c, at, "loop has no attribute '%.*s'", (int)n, name);
#undef IS
    return 0;
}

/* obj.name: Python attributes (methods) first, then items, as Jinja's getattr. */
int jx_getattr(JCtx *c, const JNode *at, JVal obj, const char *name, size_t n, JVal *out) {
    if (obj.type == JV_LOOP) return loop_attr(c, at, obj.u.loop, name, n, out);
    if (obj.type == JV_UNDEF)
        return jx_fail(c, at, "'%.*s' of an undefined value", (int)n, name);
    if (jx_has_method(obj, name, n)) {
        JMethod *m = jv_alloc(c->a, sizeof *m);
        *m = (JMethod){obj, name, n};
        *out = (JVal){.type = JV_METHOD, .tag = -1, .u.m = m};
        return 0;
    }
    if (obj.type == JV_DICT || obj.type == JV_NS) {
        const JVal *v = jv_dict_getn(obj.u.d, name, n);
        *out = v ? *v : jv_undef();
        return 0;
    }
    *out = jv_undef();
    return 0;
}

static int index_of(JCtx *c, const JNode *at, int64_t i, size_t len, size_t *out) {
    if (i < 0) i += (int64_t)len;
    if (i < 0 || (size_t)i >= len) return 1;
    *out = (size_t)i;
    return 0;
}

/* obj[key]: items first, then attributes. */
int jx_getitem(JCtx *c, const JNode *at, JVal obj, JVal key, JVal *out) {
    size_t i;
    if (obj.type == JV_UNDEF) return jx_fail(c, at, "item of an undefined value");
    if ((obj.type == JV_DICT || obj.type == JV_NS)) {
        const JVal *v = jv_dict_get(obj.u.d, key);
        if (v) {
            *out = *v;
            return 0;
        }
    } else if (obj.type == JV_LIST && (key.type == JV_INT || key.type == JV_BOOL)) {
        *out = index_of(c, at, key.type == JV_INT ? key.u.i : key.u.b, obj.u.l->n, &i) ? jv_undef() : obj.u.l->v[i];
        return 0;
    } else if (obj.type == JV_STR && key.type == JV_INT) {
        size_t len = jv_utf8_len(obj.u.s.p, obj.u.s.n);
        if (index_of(c, at, key.u.i, len, &i)) {
            *out = jv_undef();
            return 0;
        }
        size_t s = jv_utf8_offset(obj.u.s.p, obj.u.s.n, i), e = jv_utf8_offset(obj.u.s.p, obj.u.s.n, i + 1);
        *out = jx_substr(c, obj, s, e);
        return 0;
    }
    if (key.type == JV_STR) return jx_getattr(c, at, obj, key.u.s.p, key.u.s.n, out);
    *out = jv_undef();
    return 0;
}

static int slice_bound(const JVal *v, int64_t len, int64_t step, int is_start, int64_t *out) {
    if (!v || v->type == JV_NONE || v->type == JV_UNDEF) {
        *out = step > 0 ? (is_start ? 0 : len) : (is_start ? len - 1 : -1);
        return 0;
    }
    if (v->type != JV_INT) return -1;
    int64_t i = v->u.i;
    if (i < 0) i += len;
    if (step > 0) *out = i < 0 ? 0 : i > len ? len : i;
    else *out = i < -1 ? -1 : i > len - 1 ? len - 1 : i;
    return 0;
}

static int eval_slice(JCtx *c, const JNode *n, JVal *out) {
    JVal obj, b[3];
    const JVal *p[3] = {NULL, NULL, NULL};
    if (jx_eval(c, n->a, &obj)) return -1;
    for (int k = 0; k < 3; k++)
        if (n->args.v[k]) {
            if (jx_eval(c, n->args.v[k], &b[k])) return -1;
            p[k] = &b[k];
        }
    int64_t step = p[2] && p[2]->type == JV_INT ? p[2]->u.i : 1;
    if (step == 0) return jx_fail(c, n, "slice step cannot be zero");
    int is_str = obj.type == JV_STR;
    if (!is_str && obj.type != JV_LIST) return jx_fail(c, n, "cannot slice a '%s'", jv_type_name(obj));
    int64_t len = is_str ? (int64_t)jv_utf8_len(obj.u.s.p, obj.u.s.n) : (int64_t)obj.u.l->n;
    int64_t s, e;
    if (slice_bound(p[0], len, step, 1, &s) || slice_bound(p[1], len, step, 0, &e))
        return jx_fail(c, n, "slice indices must be integers");
    if (is_str && step == 1) {
        size_t bs = jv_utf8_offset(obj.u.s.p, obj.u.s.n, (size_t)s);
        size_t be = e > s ? jv_utf8_offset(obj.u.s.p, obj.u.s.n, (size_t)e) : bs;
        *out = jx_substr(c, obj, bs, be);
        return 0;
    }
    JVal items = obj, list = jv_list(c->a);
    if (is_str && jx_iterate(c, n, obj, &items)) return -1;
    for (int64_t i = s; step > 0 ? i < e : i > e; i += step) jv_list_push(c->a, list.u.l, items.u.l->v[i]);
    if (!is_str) {
        *out = list;
        return 0;
    }
    JVal r = jv_str("", 0, -1);
    for (size_t i = 0; i < list.u.l->n; i++) r = jx_concat(c, r, list.u.l->v[i]);
    *out = r;
    return 0;
}

static int eval_container(JCtx *c, const JNode *n, JVal *out) {
    if (n->kind == JN_LIST) {
        *out = n->op ? jv_tuple(c->a) : jv_list(c->a);
        for (size_t i = 0; i < n->args.n; i++) {
            JVal v;
            if (jx_eval(c, n->args.v[i], &v)) return -1;
            jv_list_push(c->a, out->u.l, v);
        }
        return 0;
    }
    *out = jv_dict(c->a);
    for (size_t i = 0; i + 1 < n->args.n; i += 2) {
        JVal k, v;
        if (jx_eval(c, n->args.v[i], &k) || jx_eval(c, n->args.v[i + 1], &v)) return -1;
        jv_dict_set(c->a, out->u.d, k, v);
    }
    return 0;
}

static int eval_filter_test(JCtx *c, const JNode *n, JVal *out) {
    JVal v;
    JArgs args;
    if (jx_eval(c, n->a, &v) || jx_eval_args(c, &n->args, &args)) return -1;
    if (n->kind == JN_FILTER) return jx_filter(c, n, n->s, n->n, v, &args, out);
    int r;
    if (jx_test(c, n, n->s, n->n, v, &args, &r)) return -1;
    *out = jv_bool(n->op ? !r : r);
    return 0;
}

static int eval_name(JCtx *c, const JNode *n, JVal *out) {
    *out = jx_lookup(c, c->scope, n->s, n->n);
    return 0;
}

int jx_eval(JCtx *c, const JNode *n, JVal *out) {
    JVal a, b;
    if (jx_step(c, n)) return -1;
    switch (n->kind) {
    case JN_LIT: *out = n->lit; return 0;
    case JN_NAME: return eval_name(c, n, out);
    case JN_LIST:
    case JN_DICT: return eval_container(c, n, out);
    case JN_ATTR: return jx_eval(c, n->a, &a) ? -1 : jx_getattr(c, n, a, n->s, n->n, out);
    case JN_ITEM: return jx_eval(c, n->a, &a) || jx_eval(c, n->b, &b) ? -1 : jx_getitem(c, n, a, b, out);
    case JN_SLICE: return eval_slice(c, n, out);
    case JN_CALL: {
        JArgs args;
        if (jx_eval(c, n->a, &a) || jx_eval_args(c, &n->args, &args)) return -1;
        return jx_call(c, n, a, &args, out);
    }
    case JN_FILTER:
    case JN_TEST: return eval_filter_test(c, n, out);
    case JN_NEG:
        if (jx_eval(c, n->a, &a)) return -1;
        if (n->op == '+') return jx_binop(c, n, JOP_ADD, jv_int(0), a, out);
        return jx_binop(c, n, JOP_SUB, jv_int(0), a, out);
    case JN_NOT:
        if (jx_eval(c, n->a, &a)) return -1;
        *out = jv_bool(!jv_truthy(a));
        return 0;
    case JN_AND:
        if (jx_eval(c, n->a, &a)) return -1;
        if (!jv_truthy(a)) {
            *out = a;
            return 0;
        }
        return jx_eval(c, n->b, out);
    case JN_OR:
        if (jx_eval(c, n->a, &a)) return -1;
        if (jv_truthy(a)) {
            *out = a;
            return 0;
        }
        return jx_eval(c, n->b, out);
    case JN_BINOP:
        if (jx_eval(c, n->a, &a) || jx_eval(c, n->b, &b)) return -1;
        return jx_binop(c, n, n->op, a, b, out);
    case JN_COND:
        if (jx_eval(c, n->a, &a)) return -1;
        if (jv_truthy(a)) return jx_eval(c, n->b, out);
        if (!n->c) {
            *out = jv_undef();
            return 0;
        }
        return jx_eval(c, n->c, out);
    default: return jx_fail(c, n, "not an expression");
    }
}
