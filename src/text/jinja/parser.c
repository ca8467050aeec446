/* Recursive-descent parser of Jinja, with Jinja's operator precedence:
 * conditional < or < and < not < comparisons < + - < ~ < * / // % < ** <
 * unary minus < filters and tests < postfix (. [] ()) < primary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja/parser_internal.h"

enum { MAX_DEPTH = 200 };

static JNode *parse_unary(Ps *p, int with_filter);

/* (args, name=value, ...) after the '(' was consumed. */
int jp_parse_args(Ps *p, JNodeList *args) {
    while (!is_op(p, ")")) {
        JNode *a;
        if (peek(p)->type == JT_NAME && tok_is(peek2(p), JT_OP, "=")) {
            const JTok *t = next(p);
            next(p);
            a = jp_node(p, JN_KWARG, t);
            a->s = t->p;
            a->n = t->n;
            if (!(a->a = jp_parse_expr(p))) return -1;
        } else if (!(a = jp_parse_expr(p))) {
            return -1;
        }
        jp_add(p, args, a);
        if (!is_op(p, ",")) break;
        next(p);
    }
    return jp_expect_op(p, ")");
}

static JNode *parse_list_or_tuple(Ps *p, const JTok *t, const char *close) {
    JNode *n = jp_node(p, JN_LIST, t);
    while (!is_op(p, close)) {
        JNode *e = jp_parse_expr(p);
        if (!e) return NULL;
        jp_add(p, &n->args, e);
        if (!is_op(p, ",")) break;
        next(p);
    }
    return jp_expect_op(p, close) ? NULL : n;
}

static JNode *parse_dict(Ps *p, const JTok *t) {
    JNode *n = jp_node(p, JN_DICT, t);
    while (!is_op(p, "}")) {
        JNode *k = jp_parse_expr(p), *v;
        if (!k || jp_expect_op(p, ":") || !(v = jp_parse_expr(p))) return NULL;
        jp_add(p, &n->args, k);
        jp_add(p, &n->args, v);
        if (!is_op(p, ",")) break;
        next(p);
    }
    return jp_expect_op(p, "}") ? NULL : n;
}

static JNode *parse_name_lit(Ps *p, const JTok *t) {
    JNode *n = jp_node(p, JN_LIT, t);
    if (tok_is(t, JT_NAME, "true") || tok_is(t, JT_NAME, "True")) n->lit = jv_bool(1);
    else if (tok_is(t, JT_NAME, "false") || tok_is(t, JT_NAME, "False")) n->lit = jv_bool(0);
    else if (tok_is(t, JT_NAME, "none") || tok_is(t, JT_NAME, "None")) n->lit = jv_none();
    else {
        n->kind = JN_NAME;
        n->s = t->p;
        n->n = t->n;
    }
    return n;
}

static JNode *parse_primary(Ps *p) {
    const JTok *t = next(p);
    JNode *n;
    switch (t->type) {
    case JT_NAME: return parse_name_lit(p, t);
    case JT_STRING: {
        n = jp_node(p, JN_LIT, t);
        n->lit = jv_str(t->p, t->n, -1);
        if (peek(p)->type == JT_STRING) { /* adjacent literals concatenate */
            JBuf b = {0};
            jb_add(&b, t->p, t->n);
            while (peek(p)->type == JT_STRING) {
                const JTok *u = next(p);
                jb_add(&b, u->p, u->n);
            }
            n->lit = jv_str_copy(p->arena, b.p, b.n);
            free(b.p);
        }
        return n;
    }
    case JT_INT: n = jp_node(p, JN_LIT, t); n->lit = jv_int(t->ival); return n;
    case JT_FLOAT: n = jp_node(p, JN_LIT, t); n->lit = jv_float(t->fval); return n;
    case JT_OP:
        if (tok_is(t, JT_OP, "(")) {
            if (is_op(p, ")")) {
                next(p);
                JNode *e = jp_node(p, JN_LIST, t);
                e->op = 1;
                return e;
            }
            JNode *e = jp_parse_expr(p);
            if (!e) return NULL;
            if (is_op(p, ",")) { /* a tuple */
                next(p);
                JNode *l = parse_list_or_tuple(p, t, ")");
                if (!l) return NULL;
                JNodeList items = {0};
                jp_add(p, &items, e);
                for (size_t i = 0; i < l->args.n; i++) jp_add(p, &items, l->args.v[i]);
                l->args = items;
                l->op = 1;
                return l;
            }
            return jp_expect_op(p, ")") ? NULL : e;
        }
        if (tok_is(t, JT_OP, "[")) return parse_list_or_tuple(p, t, "]");
        if (tok_is(t, JT_OP, "{")) return parse_dict(p, t);
        break;
    default: break;
    }
    jp_fail_at(p, t, "unexpected '%s' in an expression", t->type == JT_EOF ? "end of template" :
            t->type == JT_VAR_END ? "}}" : t->type == JT_BLOCK_END ? "%}" : "token");
    return NULL;
}

static JNode *parse_subscript(Ps *p, JNode *obj, const JTok *t) {
    JNode *parts[3] = {NULL, NULL, NULL};
    int k = 0, is_slice = 0;
    for (;;) {
        if (is_op(p, ":")) {
            is_slice = 1;
            next(p);
            if (++k > 2) break;
            continue;
        }
        if (is_op(p, "]")) break;
        if (!(parts[k] = jp_parse_expr(p))) return NULL;
        if (!is_op(p, ":")) break;
    }
    if (jp_expect_op(p, "]")) return NULL;
    JNode *n = jp_node(p, is_slice ? JN_SLICE : JN_ITEM, t);
    n->a = obj;
    if (!is_slice) n->b = parts[0];
    else for (int i = 0; i < 3; i++) jp_add(p, &n->args, parts[i]);
    return n;
}

static JNode *parse_postfix(Ps *p, JNode *n) {
    for (;;) {
        const JTok *t = peek(p);
        if (tok_is(t, JT_OP, ".")) {
            next(p);
            const JTok *name = next(p);
            if (name->type != JT_NAME && name->type != JT_INT) {
                jp_fail_at(p, name, "expected an attribute name after '%s'", ".");
                return NULL;
            }
            JNode *a = jp_node(p, name->type == JT_INT ? JN_ITEM : JN_ATTR, t);
            a->a = n;
            if (name->type == JT_INT) {
                a->b = jp_node(p, JN_LIT, name);
                a->b->lit = jv_int(name->ival);
            } else {
                a->s = name->p;
                a->n = name->n;
            }
            n = a;
        } else if (tok_is(t, JT_OP, "[")) {
            next(p);
            if (!(n = parse_subscript(p, n, t))) return NULL;
        } else if (tok_is(t, JT_OP, "(")) {
            next(p);
            JNode *c = jp_node(p, JN_CALL, t);
            c->a = n;
            if (jp_parse_args(p, &c->args)) return NULL;
            n = c;
        } else {
            return n;
        }
    }
}

/* A test's single argument without parentheses (`is divisibleby 3`). */
static int test_arg_follows(const Ps *p) {
    const JTok *t = peek(p);
    if (t->type == JT_STRING || t->type == JT_INT || t->type == JT_FLOAT) return 1;
    if (t->type == JT_NAME) {
        static const char *const stop[] = {"else", "or", "and", "if", "in", "not", "is", NULL};
        for (int i = 0; stop[i]; i++)
            if (tok_is(t, JT_NAME, stop[i])) return 0;
        return 1;
    }
    return tok_is(t, JT_OP, "[") || tok_is(t, JT_OP, "{") || tok_is(t, JT_OP, "-");
}

static JNode *parse_filter_test(Ps *p, JNode *n) {
    for (;;) {
        const JTok *t = peek(p);
        if (tok_is(t, JT_OP, "|")) {
            next(p);
            const JTok *name = next(p);
            if (name->type != JT_NAME) {
                jp_fail_at(p, name, "expected a filter name after '%s'", "|");
                return NULL;
            }
            JNode *f = jp_node(p, JN_FILTER, name);
            f->a = n;
            f->s = name->p;
            f->n = name->n;
            while (is_op(p, ".")) { /* a dotted filter name */
                next(p);
                const JTok *part = next(p);
                f->n = (size_t)(part->p + part->n - f->s);
            }
            if (is_op(p, "(")) {
                next(p);
                if (jp_parse_args(p, &f->args)) return NULL;
            }
            n = f;
        } else if (tok_is(t, JT_NAME, "is")) {
            next(p);
            JNode *x = jp_node(p, JN_TEST, t);
            if (is_name(p, "not")) {
                next(p);
                x->op = 1;
            }
            const JTok *name = next(p);
            if (name->type != JT_NAME) {
                jp_fail_at(p, name, "expected a test name after '%s'", "is");
                return NULL;
            }
            x->a = n;
            x->s = name->p;
            x->n = name->n;
            if (is_op(p, "(")) {
                next(p);
                if (jp_parse_args(p, &x->args)) return NULL;
            } else if (test_arg_follows(p)) {
                JNode *arg = parse_unary(p, 0);
                if (!arg) return NULL;
                jp_add(p, &x->args, arg);
            }
            n = x;
        } else {
            return n;
        }
    }
}

static JNode *parse_unary(Ps *p, int with_filter) {
    const JTok *t = peek(p);
    JNode *n;
    if (++p->depth > MAX_DEPTH) {
        jp_fail_at(p, t, "expression nested deeper than %s levels", "200");
        return NULL;
    }
    if (tok_is(t, JT_OP, "-") || tok_is(t, JT_OP, "+")) {
        next(p);
        n = jp_node(p, JN_NEG, t);
        n->op = t->p[0];
        if (!(n->a = parse_unary(p, 0))) return NULL;
    } else {
        n = parse_primary(p);
        if (n) n = parse_postfix(p, n);
    }
    if (n && with_filter) n = parse_filter_test(p, n);
    p->depth--;
    return n;
}

static JNode *binop(Ps *p, const JTok *t, int op, JNode *a, JNode *b) {
    if (!b) return NULL;
    JNode *n = jp_node(p, JN_BINOP, t);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static JNode *parse_pow(Ps *p) {
    JNode *n = parse_unary(p, 1);
    while (n && is_op(p, "**")) {
        const JTok *t = next(p);
        n = binop(p, t, JOP_POW, n, parse_unary(p, 1));
    }
    return n;
}

static JNode *parse_math2(Ps *p) {
    JNode *n = parse_pow(p);
    for (;;) {
        int op = is_op(p, "*") ? JOP_MUL : is_op(p, "/") ? JOP_DIV : is_op(p, "//") ? JOP_FLOORDIV
                                                                   : is_op(p, "%") ? JOP_MOD : -1;
        if (!n || op < 0) return n;
        const JTok *t = next(p);
        n = binop(p, t, op, n, parse_pow(p));
    }
}

static JNode *parse_concat(Ps *p) {
    JNode *n = parse_math2(p);
    while (n && is_op(p, "~")) {
        const JTok *t = next(p);
        n = binop(p, t, JOP_CONCAT, n, parse_math2(p));
    }
    return n;
}

static JNode *parse_math1(Ps *p) {
    JNode *n = parse_concat(p);
    for (;;) {
        int op = is_op(p, "+") ? JOP_ADD : is_op(p, "-") ? JOP_SUB : -1;
        if (!n || op < 0) return n;
        const JTok *t = next(p);
        n = binop(p, t, op, n, parse_concat(p));
    }
}

static int compare_op(Ps *p) {
    static const char *const ops[] = {"==", "!=", "<", "<=", ">", ">="};
    static const int codes[] = {JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE};
    for (int i = 0; i < 6; i++)
        if (is_op(p, ops[i])) return codes[i];
    if (is_name(p, "in")) return JOP_IN;
    if (is_name(p, "not") && tok_is(peek2(p), JT_NAME, "in")) return JOP_NOTIN;
    return -1;
}

static JNode *parse_compare(Ps *p) {
    JNode *n = parse_math1(p);
    for (;;) {
        int op = compare_op(p);
        if (!n || op < 0) return n;
        const JTok *t = next(p);
        if (op == JOP_NOTIN) next(p);
        n = binop(p, t, op, n, parse_math1(p));
    }
}

static JNode *parse_not(Ps *p) {
    if (is_name(p, "not")) {
        const JTok *t = next(p);
        JNode *n = jp_node(p, JN_NOT, t);
        if (++p->depth > MAX_DEPTH) {
            jp_fail_at(p, t, "expression nested deeper than %s levels", "200");
            return NULL;
        }
        n->a = parse_not(p);
        p->depth--;
        return n->a ? n : NULL;
    }
    return parse_compare(p);
}

static JNode *parse_and(Ps *p) {
    JNode *n = parse_not(p);
    while (n && is_name(p, "and")) {
        const JTok *t = next(p);
        JNode *b = parse_not(p);
        if (!b) return NULL;
        JNode *x = jp_node(p, JN_AND, t);
        x->a = n;
        x->b = b;
        n = x;
    }
    return n;
}

JNode *jp_parse_or_expr(Ps *p) {
    JNode *n = parse_and(p);
    while (n && is_name(p, "or")) {
        const JTok *t = next(p);
        JNode *b = parse_and(p);
        if (!b) return NULL;
        JNode *x = jp_node(p, JN_OR, t);
        x->a = n;
        x->b = b;
        n = x;
    }
    return n;
}

JNode *jp_parse_expr(Ps *p) {
    JNode *n = jp_parse_or_expr(p);
    while (n && is_name(p, "if")) {
        const JTok *t = next(p);
        JNode *c = jp_node(p, JN_COND, t);
        c->b = n;
        if (!(c->a = jp_parse_or_expr(p))) return NULL;
        if (is_name(p, "else")) {
            next(p);
            if (!(c->c = jp_parse_expr(p))) return NULL;
        }
        n = c;
    }
    return n;
}

int jinja_parse(const JLexed *lx, JArena *arena, JNodeList *out, DfError *err) {
    Ps p = {lx, 0, arena, err, 0};
    memset(out, 0, sizeof *out);
    if (jp_parse_body(&p, out, NULL)) return -1;
    if (peek(&p)->type != JT_EOF) return jp_fail_at(&p, peek(&p), "unexpected '%s'", "end tag");
    return 0;
}
