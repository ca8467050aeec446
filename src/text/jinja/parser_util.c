/* Parser helpers: nodes, lists, errors. */
#include <stdio.h>

#include "text/jinja/parser_internal.h"

int jp_fail_at(Ps *p, const JTok *t, const char *fmt, const char *what) {
    char msg[256];
    snprintf(msg, sizeof msg, fmt, what);
    return df_fail(p->err, "template line %d column %d: %s", t->line, t->col, msg);
}

JNode *jp_node(Ps *p, JNodeKind kind, const JTok *t) {
    JNode *n = jv_alloc(p->arena, sizeof *n);
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->line = t->line;
    n->col = t->col;
    return n;
}

void jp_add(Ps *p, JNodeList *l, JNode *n) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        JNode **v = jv_alloc(p->arena, cap * sizeof *v);
        if (l->n) memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = n;
}

int jp_expect_op(Ps *p, const char *s) {
    if (!is_op(p, s)) return jp_fail_at(p, peek(p), "expected '%s'", s);
    next(p);
    return 0;
}
