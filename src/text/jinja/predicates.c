/* Jinja tests: `x is defined`, `x is string`, `x is divisibleby 3`, ... */
#include <stdio.h>
#include <string.h>

#include "text/jinja/interp.h"

static int is_num(JVal v) { return v.type == JV_INT || v.type == JV_FLOAT; }

static int cmp_test(JCtx *c, const JNode *at, const char *name, JVal v, const JVal *arg, int *out) {
    static const char *const names[][3] = {{"eq", "equalto", "=="}, {"ne", "!=", ""}, {"lt", "lessthan", "<"},
                                           {"gt", "greaterthan", ">"}, {"le", "<=", ""}, {"ge", ">=", ""},
                                           {"in", "", ""}, {"sameas", "", ""}};
    static const int ops[] = {JOP_EQ, JOP_NE, JOP_LT, JOP_GT, JOP_LE, JOP_GE, JOP_IN, JOP_EQ};
    for (int i = 0; i < 8; i++)
        for (int k = 0; k < 3; k++)
            if (names[i][k][0] && strcmp(names[i][k], name) == 0) {
                if (!arg) return jx_fail(c, at, "test '%s' needs an argument", name);
                JVal r;
                if (i == 7 && v.type != arg->type) {
                    *out = 0;
                    return 0;
                }
                if (jx_binop(c, at, ops[i], v, *arg, &r)) return -1;
                *out = r.u.b;
                return 0;
            }
    return 1;
}

static int case_test(JVal v, int upper) {
    if (v.type != JV_STR) return 0;
    int cased = 0;
    for (size_t i = 0; i < v.u.s.n; i++) {
        char ch = v.u.s.p[i];
        if (ch >= 'a' && ch <= 'z') {
            if (upper) return 0;
            cased = 1;
        } else if (ch >= 'A' && ch <= 'Z') {
            if (!upper) return 0;
            cased = 1;
        }
    }
    return cased;
}

int jx_test(JCtx *c, const JNode *at, const char *name_p, size_t n, JVal v, JArgs *args, int *out) {
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)(n < 31 ? n : 31), name_p);
    const JVal *arg = jx_arg(args, 0, NULL);
    int t = v.type;
    if (!strcmp(name, "defined")) *out = t != JV_UNDEF;
    else if (!strcmp(name, "undefined")) *out = t == JV_UNDEF;
    else if (!strcmp(name, "none")) *out = t == JV_NONE;
    else if (!strcmp(name, "string")) *out = t == JV_STR;
    else if (!strcmp(name, "number")) *out = is_num(v) || t == JV_BOOL;
    else if (!strcmp(name, "integer")) *out = t == JV_INT;
    else if (!strcmp(name, "float")) *out = t == JV_FLOAT;
    else if (!strcmp(name, "boolean")) *out = t == JV_BOOL;
    else if (!strcmp(name, "true")) *out = t == JV_BOOL && v.u.b;
    else if (!strcmp(name, "false")) *out = t == JV_BOOL && !v.u.b;
    else if (!strcmp(name, "mapping")) *out = t == JV_DICT;
    else if (!strcmp(name, "iterable")) *out = t == JV_STR || t == JV_LIST || t == JV_DICT || t == JV_UNDEF;
    else if (!strcmp(name, "sequence")) *out = t == JV_STR || t == JV_LIST || t == JV_DICT;
    else if (!strcmp(name, "callable")) *out = t == JV_MACRO || t == JV_METHOD || t == JV_BUILTIN;
    else if (!strcmp(name, "lower")) *out = case_test(v, 0);
    else if (!strcmp(name, "upper")) *out = case_test(v, 1);
    else if (!strcmp(name, "escaped")) *out = 0;
    else if (!strcmp(name, "odd") || !strcmp(name, "even")) {
        if (t != JV_INT) return jx_fail(c, at, "test '%s' needs an integer, not %s", name, jv_type_name(v));
        *out = (v.u.i % 2 != 0) == (name[0] == 'o');
    } else if (!strcmp(name, "divisibleby")) {
        if (t != JV_INT || !arg || arg->type != JV_INT || arg->u.i == 0)
            return jx_fail(c, at, "test 'divisibleby' needs integers");
        *out = v.u.i % arg->u.i == 0;
    } else {
        int r = cmp_test(c, at, name, v, arg, out);
        if (r <= 0) return r;
        return jx_fail(c, at, "the test '%s' is not supported", name);
    }
    return 0;
}
