/* Statement parser: text, {{ }}, and the block tags chat templates use.
 * Tags it does not implement (include, extends, import, block, ...) are
 * refused naming them. */
#include <stdio.h>

#include "text/jinja/parser_internal.h"

static int end_tag(Ps *p) {
    if (peek(p)->type != JT_BLOCK_END) return jp_fail_at(p, peek(p), "expected '%s'", "%}");
    next(p);
    return 0;
}

/* Consumes `{% name` known to be there (pos at the name) and its `%}`. */
static int close_tag(Ps *p) {
    next(p);
    return end_tag(p);
}

static int parse_target(Ps *p, JNodeList *targets) {
    for (;;) {
        const JTok *t = next(p);
        if (t->type != JT_NAME) return jp_fail_at(p, t, "expected a variable name, not '%s'", "token");
        JNode *n = jp_node(p, JN_NAME, t);
        n->s = t->p;
        n->n = t->n;
        if (is_op(p, ".")) { /* namespace attribute: ns.attr */
            next(p);
            const JTok *a = next(p);
            if (a->type != JT_NAME) return jp_fail_at(p, a, "expected an attribute name after '%s'", ".");
            JNode *x = jp_node(p, JN_ATTR, a);
            x->a = n;
            x->s = a->p;
            x->n = a->n;
            n = x;
        }
        jp_add(p, targets, n);
        if (!is_op(p, ",")) return 0;
        next(p);
    }
}

static int parse_if(Ps *p, JNode *n) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    if (!(n->a = jp_parse_expr(p)) || end_tag(p) || jp_parse_body(p, &n->body, ends)) return -1;
    if (is_name(p, "elif")) {
        JNode *e = jp_node(p, JN_IF, next(p));
        jp_add(p, &n->orelse, e);
        return parse_if(p, e);
    }
    if (is_name(p, "else")) {
        static const char *const endif[] = {"endif", NULL};
        if (close_tag(p) || jp_parse_body(p, &n->orelse, endif)) return -1;
    }
    return close_tag(p);
}



static int parse_for(Ps *p, JNode *n) {
    static const char *const ends[] = {"else", "endfor", NULL};
    if (parse_target(p, &n->targets)) return -1;
    if (!is_name(p, "in")) return jp_fail_at(p, peek(p), "expected '%s'", "in");
    next(p);
    if (!(n->a = jp_parse_or_expr(p))) return -1;
    if (is_name(p, "if")) {
        next(p);
        if (!(n->b = jp_parse_or_expr(p))) return -1;
    }
    if (is_name(p, "recursive")) return jp_fail_at(p, peek(p), "'%s' loops are not supported", "recursive");
    if (end_tag(p) || jp_parse_body(p, &n->body, ends)) return -1;
    if (is_name(p, "else")) {
        static const char *const endfor[] = {"endfor", NULL};
        if (close_tag(p) || jp_parse_body(p, &n->orelse, endfor)) return -1;
    }
    return close_tag(p);
}

static JNode *parse_filter_chain(Ps *p) {
    JNode *chain = NULL;
    do {
        const JTok *name = next(p);
        if (name->type != JT_NAME) {
            jp_fail_at(p, name, "expected a filter name, not '%s'", "token");
            return NULL;
        }
        JNode *f = jp_node(p, JN_FILTER, name);
        f->a = chain;
        f->s = name->p;
        f->n = name->n;
        if (is_op(p, "(")) {
            next(p);
            if (jp_parse_args(p, &f->args)) return NULL;
        }
        chain = f;
    } while (is_op(p, "|") && next(p));
    return chain;
}

static int parse_set(Ps *p, JNode *n) {
    if (parse_target(p, &n->targets)) return -1;
    if (is_op(p, "=")) {
        next(p);
        JNode *e = jp_parse_expr(p);
        if (!e) return -1;
        if (is_op(p, ",")) { /* set a, b = x, y */
            JNode *t = jp_node(p, JN_LIST, peek(p));
            jp_add(p, &t->args, e);
            while (is_op(p, ",")) {
                next(p);
                if (!(e = jp_parse_expr(p))) return -1;
                jp_add(p, &t->args, e);
            }
            e = t;
        }
        n->a = e;
        return end_tag(p);
    }
    static const char *const ends[] = {"endset", NULL};
    if (is_op(p, "|")) {
        next(p);
        if (!(n->c = parse_filter_chain(p))) return -1;
    }
    if (end_tag(p) || jp_parse_body(p, &n->body, ends)) return -1;
    return close_tag(p);
}

static int parse_params(Ps *p, JNodeList *params) {
    if (!is_op(p, "(")) return 0;
    next(p);
    while (!is_op(p, ")")) {
        const JTok *t = next(p);
        if (t->type != JT_NAME) return jp_fail_at(p, t, "expected a parameter name, not '%s'", "token");
        JNode *n = jp_node(p, JN_NAME, t);
        n->s = t->p;
        n->n = t->n;
        if (is_op(p, "=")) {
            next(p);
            n->kind = JN_KWARG;
            if (!(n->a = jp_parse_expr(p))) return -1;
        }
        jp_add(p, params, n);
        if (!is_op(p, ",")) break;
        next(p);
    }
    return jp_expect_op(p, ")");
}

static int parse_macro(Ps *p, JNode *n) {
    static const char *const ends[] = {"endmacro", NULL};
    const JTok *name = next(p);
    if (name->type != JT_NAME) return jp_fail_at(p, name, "expected a macro name, not '%s'", "token");
    n->s = name->p;
    n->n = name->n;
    if (parse_params(p, &n->args) || end_tag(p) || jp_parse_body(p, &n->body, ends)) return -1;
    return close_tag(p);
}

static int parse_call(Ps *p, JNode *n) {
    static const char *const ends[] = {"endcall", NULL};
    if (parse_params(p, &n->args)) return -1;
    if (!(n->a = jp_parse_expr(p))) return -1;
    if (n->a->kind != JN_CALL) return jp_fail_at(p, peek(p), "a call block needs a macro call, before '%s'", "%}");
    if (end_tag(p) || jp_parse_body(p, &n->body, ends)) return -1;
    return close_tag(p);
}

static int parse_filter_block(Ps *p, JNode *n) {
    static const char *const ends[] = {"endfilter", NULL};
    if (!(n->a = parse_filter_chain(p)) || end_tag(p) || jp_parse_body(p, &n->body, ends)) return -1;
    return close_tag(p);
}

static int parse_simple(Ps *p, JNode *n, const char *end) {
    const char *const ends[] = {end, NULL};
    if (end_tag(p) || jp_parse_body(p, &n->body, ends)) return -1;
    return close_tag(p);
}

static const struct {
    const char *name;
    JNodeKind kind;
} STMTS[] = {{"if", JN_IF},       {"for", JN_FOR},           {"set", JN_SET},
             {"macro", JN_MACRO}, {"call", JN_CALLBLOCK},     {"filter", JN_FILTERBLOCK},
             {"break", JN_BREAK}, {"continue", JN_CONTINUE}, {"generation", JN_GENERATION},
             {NULL, JN_TEXT}};

static int parse_stmt(Ps *p, JNodeList *out) {
    const JTok *t = next(p);
    int k = 0;
    for (; STMTS[k].name; k++)
        if (tok_is(t, JT_NAME, STMTS[k].name)) break;
    if (!STMTS[k].name) {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(t->n < 40 ? t->n : 40), t->p);
        return jp_fail_at(p, t, t->type == JT_NAME ? "the '%s' tag is not supported" : "unexpected '%s' in a tag",
                          name);
    }
    JNode *n = jp_node(p, STMTS[k].kind, t);
    jp_add(p, out, n);
    switch (n->kind) {
    case JN_IF: return parse_if(p, n);
    case JN_FOR: return parse_for(p, n);
    case JN_SET: return parse_set(p, n);
    case JN_MACRO: return parse_macro(p, n);
    case JN_CALLBLOCK: return parse_call(p, n);
    case JN_FILTERBLOCK: return parse_filter_block(p, n);
    case JN_GENERATION: return parse_simple(p, n, "endgeneration");
    default: return end_tag(p);
    }
}

static int is_end(const Ps *p, const char *const *ends) {
    if (!ends) return 0;
    for (int i = 0; ends[i]; i++)
        if (is_name(p, ends[i])) return 1;
    return 0;
}

int jp_parse_body(Ps *p, JNodeList *out, const char *const *ends) {
    if (++p->depth > 200) return jp_fail_at(p, peek(p), "blocks nested deeper than %s levels", "200");
    for (;;) {
        const JTok *t = peek(p);
        if (t->type == JT_EOF) {
            p->depth--;
            if (!ends) return 0;
            size_t last = 0;
            while (ends[last + 1]) last++;
            return jp_fail_at(p, t, "end of template before '{%% %s %%}'", ends[last]);
        }
        next(p);
        if (t->type == JT_TEXT) {
            JNode *n = jp_node(p, JN_TEXT, t);
            n->s = t->p;
            n->n = t->n;
            jp_add(p, out, n);
        } else if (t->type == JT_VAR_BEGIN) {
            JNode *n = jp_node(p, JN_OUT, t);
            if (!(n->a = jp_parse_expr(p))) return -1;
            if (peek(p)->type != JT_VAR_END) return jp_fail_at(p, peek(p), "expected '%s'", "}}");
            next(p);
            jp_add(p, out, n);
        } else if (t->type == JT_BLOCK_BEGIN) {
            if (is_end(p, ends)) {
                p->depth--;
                return 0;
            }
            if (parse_stmt(p, out)) return -1;
        } else {
            return jp_fail_at(p, t, "unexpected '%s'", "token");
        }
    }
}
