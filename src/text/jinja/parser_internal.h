/* Shared by the expression and statement parsers. */
#ifndef DF_TEXT_JINJA_PARSER_INTERNAL_H
#define DF_TEXT_JINJA_PARSER_INTERNAL_H

#include <string.h>

#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"

typedef struct Ps {
    const JLexed *lx;
    size_t pos;
    JArena *arena;
    DfError *err;
    int depth;
} Ps;

static inline const JTok *peek(const Ps *p) { return &p->lx->t[p->pos]; }

static inline const JTok *peek2(const Ps *p) {
    return p->pos + 1 < p->lx->n ? &p->lx->t[p->pos + 1] : &p->lx->t[p->lx->n - 1];
}

static inline const JTok *next(Ps *p) {
    const JTok *t = &p->lx->t[p->pos];
    if (t->type != JT_EOF) p->pos++;
    return t;
}

static inline int tok_is(const JTok *t, JTokType type, const char *s) {
    if (t->type != type) return 0;
    if (!s) return 1;
    size_t n = strlen(s);
    return t->n == n && memcmp(t->p, s, n) == 0;
}

static inline int is_op(const Ps *p, const char *s) { return tok_is(peek(p), JT_OP, s); }

static inline int is_name(const Ps *p, const char *s) { return tok_is(peek(p), JT_NAME, s); }

int jp_fail_at(Ps *p, const JTok *t, const char *fmt, const char *what);

JNode *jp_node(Ps *p, JNodeKind kind, const JTok *t);

void jp_add(Ps *p, JNodeList *l, JNode *n);

int jp_expect_op(Ps *p, const char *s);

JNode *jp_parse_expr(Ps *p);
JNode *jp_parse_or_expr(Ps *p); /* without the conditional: a for's iterable */
int jp_parse_args(Ps *p, JNodeList *args); /* after '(' */
int jp_parse_body(Ps *p, JNodeList *out, const char *const *ends);

#endif
