/* Binary operators with Python's semantics: int/float arithmetic (/ always
 * floats, // and % floor), string and list + and *, ~ (string concatenation
 * of str() of both), comparisons and `in`. */
#include <math.h>
#include <string.h>

#include "text/jinja/interp.h"

static int is_num(JVal v) { return v.type == JV_INT || v.type == JV_FLOAT || v.type == JV_BOOL; }
static int is_intlike(JVal v) { return v.type == JV_INT || v.type == JV_BOOL; }
static int64_t ival(JVal v) { return v.type == JV_INT ? v.u.i : v.u.b; }
static double fval(JVal v) { return v.type == JV_FLOAT ? v.u.f : (double)ival(v); }

static int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

static int arith(JCtx *c, const JNode *at, int op, JVal a, JVal b, JVal *out) {
    if (is_intlike(a) && is_intlike(b) && op != JOP_DIV) {
        int64_t x = ival(a), y = ival(b);
        if ((op == JOP_FLOORDIV || op == JOP_MOD) && y == 0) return jx_fail(c, at, "integer division by zero");
        switch (op) {
        case JOP_ADD: *out = jv_int(x + y); return 0;
        case JOP_SUB: *out = jv_int(x - y); return 0;
        case JOP_MUL: *out = jv_int(x * y); return 0;
        case JOP_FLOORDIV: *out = jv_int(floordiv(x, y)); return 0;
        case JOP_MOD: *out = jv_int(x - floordiv(x, y) * y); return 0;
        case JOP_POW:
            if (y >= 0) {
                int64_t r = 1;
                for (int64_t i = 0; i < y && i < 64; i++) r *= x;
                *out = jv_int(r);
                return 0;
            }
            *out = jv_float(pow((double)x, (double)y));
            return 0;
        }
    }
    double x = fval(a), y = fval(b);
    if ((op == JOP_DIV || op == JOP_FLOORDIV || op == JOP_MOD) && y == 0) return jx_fail(c, at, "division by zero");
    switch (op) {
    case JOP_ADD: *out = jv_float(x + y); return 0;
    case JOP_SUB: *out = jv_float(x - y); return 0;
    case JOP_MUL: *out = jv_float(x * y); return 0;
    case JOP_DIV: *out = jv_float(x / y); return 0;
    case JOP_FLOORDIV: *out = jv_float(floor(x / y)); return 0;
    case JOP_MOD: {
        double m = fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        *out = jv_float(m);
        return 0;
    }
    case JOP_POW: *out = jv_float(pow(x, y)); return 0;
    }
    return jx_fail(c, at, "bad operator");
}

static int repeat(JCtx *c, JVal s, int64_t k, JVal *out) {
    if (s.type == JV_STR) {
        JVal r = jv_str("", 0, -1);
        for (int64_t i = 0; i < k; i++) r = jx_concat(c, r, s);
        *out = r;
    } else {
        *out = jv_list(c->a);
        for (int64_t i = 0; i < k; i++)
            for (size_t j = 0; j < s.u.l->n; j++) jv_list_push(c->a, out->u.l, s.u.l->v[j]);
    }
    return 0;
}

static int contains(JCtx *c, const JNode *at, JVal item, JVal in, int *out) {
    if (in.type == JV_STR) {
        if (item.type != JV_STR)
            return jx_fail(c, at, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
        *out = item.u.s.n == 0 || (item.u.s.n <= in.u.s.n &&
                                   jv_find(in.u.s.p, in.u.s.n, item.u.s.p, item.u.s.n, 0) >= 0);
        return 0;
    }
    if (in.type == JV_LIST) {
        *out = 0;
        for (size_t i = 0; i < in.u.l->n && !*out; i++) *out = jv_equal(in.u.l->v[i], item);
        return 0;
    }
    if (in.type == JV_DICT || in.type == JV_NS) {
        *out = jv_dict_get(in.u.d, item) != NULL;
        return 0;
    }
    if (in.type == JV_UNDEF) {
        *out = 0;
        return 0;
    }
    return jx_fail(c, at, "argument of type '%s' is not iterable", jv_type_name(in));
}

static int compare(JCtx *c, const JNode *at, int op, JVal a, JVal b, JVal *out) {
    if (op == JOP_EQ || op == JOP_NE) {
        int eq = jv_equal(a, b);
        *out = jv_bool(op == JOP_EQ ? eq : !eq);
        return 0;
    }
    if (op == JOP_IN || op == JOP_NOTIN) {
        int r = 0;
        if (contains(c, at, a, b, &r)) return -1;
        *out = jv_bool(op == JOP_IN ? r : !r);
        return 0;
    }
    int r = jv_compare(a, b);
    if (r == -2)
        return jx_fail(c, at, "'%s' not supported between '%s' and '%s'",
                       op == JOP_LT ? "<" : op == JOP_LE ? "<=" : op == JOP_GT ? ">" : ">=", jv_type_name(a),
                       jv_type_name(b));
    *out = jv_bool(op == JOP_LT ? r < 0 : op == JOP_LE ? r <= 0 : op == JOP_GT ? r > 0 : r >= 0);
    return 0;
}

int jx_binop(JCtx *c, const JNode *at, int op, JVal a, JVal b, JVal *out) {
    if (op >= JOP_EQ) return compare(c, at, op, a, b, out);
    if (op == JOP_CONCAT) {
        *out = jx_concat(c, jv_stringify(c->a, a), jv_stringify(c->a, b));
        return 0;
    }
    if (is_num(a) && is_num(b)) return arith(c, at, op, a, b, out);
    if (op == JOP_ADD && a.type == JV_STR && b.type == JV_STR) {
        *out = jx_concat(c, a, b);
        return 0;
    }
    if (op == JOP_ADD && a.type == JV_LIST && b.type == JV_LIST) {
        *out = jv_list(c->a);
        for (size_t i = 0; i < a.u.l->n; i++) jv_list_push(c->a, out->u.l, a.u.l->v[i]);
        for (size_t i = 0; i < b.u.l->n; i++) jv_list_push(c->a, out->u.l, b.u.l->v[i]);
        return 0;
    }
    if (op == JOP_MUL && (a.type == JV_STR || a.type == JV_LIST) && is_intlike(b)) return repeat(c, a, ival(b), out);
    if (op == JOP_MUL && (b.type == JV_STR || b.type == JV_LIST) && is_intlike(a)) return repeat(c, b, ival(a), out);
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
    if (a.type == JV_UNDEF || b.type == JV_UNDEF)
        return jx_fail(c, at, "'%s' of an undefined value", names[op]);
    return jx_fail(c, at, "unsupported operand types for %s: '%s' and '%s'", names[op], jv_type_name(a),
                   jv_type_name(b));
}
