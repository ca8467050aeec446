/* Statements: output, if, for (with loop.*, else, break/continue), set
 * (names, namespace attributes, blocks), macros and call blocks, filter
 * blocks, generation blocks; scopes; macro calls; the rendering entry. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja/interp.h"
#include "text/jinja/lexer.h"

struct DfJinja {
    JArena arena; /* the syntax tree */
    JLexed lexed;
    JNodeList body;
};

int jx_fail(JCtx *c, const JNode *at, const char *fmt, ...) {
    char msg[DF_ERROR_MAX - 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return df_fail(c->err, "template line %d column %d: %s", at ? at->line : 0, at ? at->col : 0, msg);
}

int jx_step(JCtx *c, const JNode *at) {
    if (++c->steps > c->opt->max_steps)
        return jx_fail(c, at, "more than %ld evaluation steps (a template that does not end?)", c->opt->max_steps);
    if (c->a->over) return jx_fail(c, at, "more than %zu bytes of values", c->opt->max_bytes);
    return 0;
}

static JScope *new_scope(JCtx *c, JScope *parent) {
    JScope *s = jv_alloc(c->a, sizeof *s);
    s->vars = jv_dict(c->a).u.d;
    s->parent = parent;
    return s;
}

static void set_var(JCtx *c, JScope *s, const char *name, size_t n, JVal v) {
    jv_dict_set(c->a, s->vars, jv_str(name, n, -1), v);
}

JVal jx_lookup(JCtx *c, JScope *s, const char *name, size_t n) {
    for (; s; s = s->parent) {
        const JVal *v = jv_dict_getn(s->vars, name, n);
        if (v) return *v;
    }
    int id = jx_builtin_id(name, n);
    if (id >= 0) return (JVal){.type = JV_BUILTIN, .tag = -1, .u.builtin = id};
    return jv_undef();
}

static int capture(JCtx *c, const JNodeList *body, JVal *out) {
    JOut o = {0}, *saved = c->out;
    c->out = &o;
    c->capturing++;
    int rc = jx_exec(c, body);
    c->capturing--;
    c->out = saved;
    if (rc == 0) *out = jx_capture_value(c, &o);
    jx_out_free(&o);
    return rc;
}

/* A filter chain (innermost first in ->a) applied to v. */
static int apply_chain(JCtx *c, const JNode *f, JVal v, JVal *out) {
    if (!f) {
        *out = v;
        return 0;
    }
    if (apply_chain(c, f->a, v, &v)) return -1;
    JArgs args;
    if (jx_eval_args(c, &f->args, &args)) return -1;
    return jx_filter(c, f, f->s, f->n, v, &args, out);
}

static int assign(JCtx *c, const JNode *target, JVal v) {
    if (target->kind == JN_NAME) {
        set_var(c, c->scope, target->s, target->n, v);
        return 0;
    }
    JVal ns = jx_lookup(c, c->scope, target->a->s, target->a->n);
    if (ns.type != JV_NS)
        return jx_fail(c, target, "cannot set attribute '%.*s' of %s '%.*s' (only a namespace's)", (int)target->n,
                       target->s, jv_type_name(ns), (int)target->a->n, target->a->s);
    jv_dict_set(c->a, ns.u.d, jv_str(target->s, target->n, -1), v);
    return 0;
}

static int assign_targets(JCtx *c, const JNode *at, const JNodeList *targets, JVal v) {
    if (targets->n == 1) return assign(c, targets->v[0], v);
    JVal list;
    if (jx_iterate(c, at, v, &list)) return -1;
    if (list.u.l->n != targets->n)
        return jx_fail(c, at, "cannot unpack %zu values into %zu names", list.u.l->n, targets->n);
    for (size_t i = 0; i < targets->n; i++)
        if (assign(c, targets->v[i], list.u.l->v[i])) return -1;
    return 0;
}

static int exec_set(JCtx *c, const JNode *n) {
    JVal v;
    if (n->a) {
        if (jx_eval(c, n->a, &v)) return -1;
    } else if (capture(c, &n->body, &v) || apply_chain(c, n->c, v, &v)) {
        return -1;
    }
    return assign_targets(c, n, &n->targets, v);
}

static int exec_for(JCtx *c, const JNode *n) {
    JVal items, all;
    if (jx_eval(c, n->a, &all) || jx_iterate(c, n->a, all, &all)) return -1;
    JScope *outer = c->scope;
    items = all;
    if (n->b) { /* the loop filter runs before loop.* counts */
        items = jv_list(c->a);
        for (size_t i = 0; i < all.u.l->n; i++) {
            JVal keep;
            c->scope = new_scope(c, outer);
            if (assign_targets(c, n, &n->targets, all.u.l->v[i]) || jx_eval(c, n->b, &keep)) {
                c->scope = outer;
                return -1;
            }
            if (jv_truthy(keep)) jv_list_push(c->a, items.u.l, all.u.l->v[i]);
        }
        c->scope = outer;
    }
    JLoop *loop = jv_alloc(c->a, sizeof *loop);
    loop->items = items.u.l;
    int rc = 0;
    for (size_t i = 0; i < items.u.l->n && rc == 0; i++) {
        loop->index = i;
        if ((rc = jx_step(c, n)) != 0) break;
        c->scope = new_scope(c, outer);
        set_var(c, c->scope, "loop", 4, (JVal){.type = JV_LOOP, .tag = -1, .u.loop = loop});
        rc = assign_targets(c, n, &n->targets, items.u.l->v[i]);
        if (rc == 0) rc = jx_exec(c, &n->body);
        if (c->loop_ctl == 1) {
            c->loop_ctl = 0;
            break;
        }
        c->loop_ctl = 0;
    }
    c->scope = outer;
    if (rc == 0 && items.u.l->n == 0) rc = jx_exec(c, &n->orelse);
    return rc;
}

static int exec_generation(JCtx *c, const JNode *n) {
    size_t start = c->out->buf.n;
    if (jx_exec(c, &n->body)) return -1;
    if (!c->capturing) jx_span_push(&c->generation, (JSpan){0, start, c->out->buf.n});
    return 0;
}

static int exec_call_block(JCtx *c, const JNode *n) {
    JMacro *m = jv_alloc(c->a, sizeof *m);
    memset(m, 0, sizeof *m);
    m->def = n;
    m->closure = c->scope;
    JVal fn, out;
    JArgs args;
    if (jx_eval(c, n->a->a, &fn) || jx_eval_args(c, &n->a->args, &args)) return -1;
    c->caller = m;
    int rc = jx_call(c, n->a, fn, &args, &out);
    c->caller = NULL;
    if (rc == 0) jx_emit(c, out);
    return rc;
}

static int exec_one(JCtx *c, const JNode *n) {
    JVal v;
    if (jx_step(c, n)) return -1;
    switch (n->kind) {
    case JN_TEXT: jb_add(&c->out->buf, n->s, n->n); return 0;
    case JN_OUT:
        if (jx_eval(c, n->a, &v)) return -1;
        jx_emit(c, v);
        return 0;
    case JN_IF:
        if (jx_eval(c, n->a, &v)) return -1;
        return jx_exec(c, jv_truthy(v) ? &n->body : &n->orelse);
    case JN_FOR: return exec_for(c, n);
    case JN_SET: return exec_set(c, n);
    case JN_MACRO: {
        JMacro *m = jv_alloc(c->a, sizeof *m);
        memset(m, 0, sizeof *m);
        m->def = n;
        m->closure = c->scope;
        set_var(c, c->scope, n->s, n->n, (JVal){.type = JV_MACRO, .tag = -1, .u.macro = m});
        return 0;
    }
    case JN_CALLBLOCK: return exec_call_block(c, n);
    case JN_FILTERBLOCK:
        if (capture(c, &n->body, &v) || apply_chain(c, n->a, v, &v)) return -1;
        jx_emit(c, v);
        return 0;
    case JN_BREAK: c->loop_ctl = 1; return 0;
    case JN_CONTINUE: c->loop_ctl = 2; return 0;
    case JN_GENERATION: return exec_generation(c, n);
    default: return jx_fail(c, n, "not a statement");
    }
}

int jx_exec(JCtx *c, const JNodeList *body) {
    for (size_t i = 0; i < body->n; i++) {
        if (exec_one(c, body->v[i])) return -1;
        if (c->loop_ctl) return 0;
    }
    return 0;
}

static int bind_params(JCtx *c, const JNode *at, const JNode *def, JArgs *args) {
    const JNodeList *params = &def->args;
    JVal varargs = jv_tuple(c->a), kwargs = jv_dict(c->a);
    for (size_t i = 0; i < params->n; i++) {
        const JNode *p = params->v[i];
        const JVal *v = jx_arg(args, i, NULL);
        for (size_t k = 0; k < args->nkw; k++)
            if (args->kwl[k] == p->n && memcmp(args->kwn[k], p->s, p->n) == 0) v = &args->kwv[k];
        JVal d = jv_undef();
        if (!v && p->kind == JN_KWARG && jx_eval(c, p->a, &d)) return -1;
        set_var(c, c->scope, p->s, p->n, v ? *v : d);
    }
    for (size_t i = params->n; i < args->npos; i++) jv_list_push(c->a, varargs.u.l, args->pos[i]);
    for (size_t k = 0; k < args->nkw; k++) {
        int known = 0;
        for (size_t i = 0; i < params->n; i++)
            known |= args->kwl[k] == params->v[i]->n && memcmp(args->kwn[k], params->v[i]->s, args->kwl[k]) == 0;
        if (!known) jv_dict_set(c->a, kwargs.u.d, jv_str(args->kwn[k], args->kwl[k], -1), args->kwv[k]);
    }
    set_var(c, c->scope, "varargs", 7, varargs);
    set_var(c, c->scope, "kwargs", 6, kwargs);
    return 0;
}

static int call_macro(JCtx *c, const JNode *at, const JMacro *m, JArgs *args, JVal *out) {
    if (++c->depth > c->opt->max_depth)
        return jx_fail(c, at, "macro calls nested deeper than %d (a macro that recurses forever?)", c->opt->max_depth);
    const JMacro *caller = c->caller;
    c->caller = NULL;
    JScope *saved = c->scope;
    int saved_ctl = c->loop_ctl;
    c->scope = new_scope(c, m->closure);
    int rc = bind_params(c, at, m->def, args);
    if (rc == 0 && caller) set_var(c, c->scope, "caller", 6, (JVal){.type = JV_MACRO, .tag = -1, .u.macro = caller});
    if (rc == 0) rc = capture(c, &m->def->body, out);
    c->scope = saved;
    c->loop_ctl = saved_ctl;
    c->depth--;
    return rc;
}

int jx_call(JCtx *c, const JNode *at, JVal fn, JArgs *args, JVal *out) {
    if (jx_step(c, at)) return -1;
    switch (fn.type) {
    case JV_MACRO: return call_macro(c, at, fn.u.macro, args, out);
    case JV_BUILTIN: return jx_builtin(c, at, fn.u.builtin, args, out);
    case JV_METHOD: return jx_method(c, at, fn.u.m->self, fn.u.m->name, fn.u.m->name_len, args, out);
    case JV_UNDEF: return jx_fail(c, at, "call of an undefined value");
    default: return jx_fail(c, at, "'%s' object is not callable", jv_type_name(fn));
    }
}

DfJinja *df_jinja_compile(const char *src, size_t len, DfError *err) {
    DfJinja *t = df_xcalloc(1, sizeof *t, "template");
    if (jinja_lex(src, len, &t->lexed, err) || jinja_parse(&t->lexed, &t->arena, &t->body, err)) {
        df_jinja_free(t);
        return NULL;
    }
    return t;
}

void df_jinja_free(DfJinja *t) {
    if (!t) return;
    jv_arena_free(&t->arena);
    jinja_lexed_free(&t->lexed);
    free(t);
}

int df_jinja_render(const DfJinja *t, JArena *arena, const JDict *vars, const DfJinjaOptions *opt,
                    DfJinjaOutput *out, DfError *err) {
    DfJinjaOptions o = opt ? *opt : (DfJinjaOptions){0};
    if (!o.max_steps) o.max_steps = 10000000;
    if (!o.max_depth) o.max_depth = 100;
    if (!o.max_bytes) o.max_bytes = (size_t)1 << 30;
    arena->max_bytes = o.max_bytes;
    JOut top = {out->text, {out->tagged.v, 0, out->tagged.cap}};
    top.buf.n = 0;
    if (top.buf.p) top.buf.p[0] = '\0';
    else jb_add(&top.buf, "", 0);
    JCtx c = {.a = arena, .out = &top, .err = err, .opt = &o};
    c.generation = out->generation;
    c.generation.n = 0;
    c.globals = new_scope(&c, NULL);
    c.globals->vars = (JDict *)vars;
    c.scope = new_scope(&c, c.globals);
    int rc = jx_exec(&c, &t->body);
    out->text = top.buf;
    out->tagged = top.spans;
    out->generation = c.generation;
    return rc == 0 ? 0 : c.raised ? DF_JINJA_RAISED : -1;
}

void df_jinja_output_free(DfJinjaOutput *out) {
    free(out->text.p);
    free(out->tagged.v);
    free(out->generation.v);
    memset(out, 0, sizeof *out);
}
