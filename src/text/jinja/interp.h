/* The interpreter's state and the pieces it is made of: statements
 * (interp.c), expressions (eval.c), filters, tests, methods, globals and
 * tojson. Internal to src/text/jinja. */
#ifndef DF_TEXT_JINJA_INTERP_H
#define DF_TEXT_JINJA_INTERP_H

#include <stdarg.h>

#include "text/jinja/ast.h"
#include "text/jinja/jinja.h"
#include "text/jinja/value.h"

typedef struct JScope {
    JDict *vars;
    struct JScope *parent;
} JScope;

/* An output being written: the rendering, or a capture (macro, block set, filter block). */
typedef struct JOut {
    JBuf buf;
    JSpanList spans;
} JOut;

typedef struct JCtx {
    JArena *a;
    JOut *out;
    DfError *err;
    const DfJinjaOptions *opt;
    long steps;
    int depth;
    int loop_ctl; /* 1: break, 2: continue pending */
    int raised;   /* raise_exception was called */
    int capturing;
    JScope *globals;
    JScope *scope;          /* where set writes */
    const JMacro *caller;   /* a call block's caller, for the macro about to be called */
    JSpanList *composites; /* spans of strings made of several pieces: tag -2 - index */
    size_t ncomposites, capcomposites;
    JSpanList generation; /* {% generation %} ranges of the rendering */
} JCtx;

typedef struct JArgs {
    JVal pos[16];
    size_t npos;
    const char *kwn[16];
    size_t kwl[16];
    JVal kwv[16];
    size_t nkw;
} JArgs;

int jx_fail(JCtx *c, const JNode *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int jx_step(JCtx *c, const JNode *at);

int jx_eval(JCtx *c, const JNode *n, JVal *out);
int jx_exec(JCtx *c, const JNodeList *body);
int jx_eval_args(JCtx *c, const JNodeList *args, JArgs *out);
int jx_call(JCtx *c, const JNode *at, JVal fn, JArgs *args, JVal *out);
JVal jx_lookup(JCtx *c, JScope *s, const char *name, size_t n);
void jx_emit(JCtx *c, JVal v);
int jx_getattr(JCtx *c, const JNode *at, JVal obj, const char *name, size_t n, JVal *out);
int jx_getitem(JCtx *c, const JNode *at, JVal obj, JVal key, JVal *out);
int jx_iterate(JCtx *c, const JNode *at, JVal v, JVal *list); /* any iterable -> a list (dicts: keys) */

/* Strings with their tags: pieces keep where they came from. */
JVal jx_substr(JCtx *c, JVal s, size_t start, size_t end);
JVal jx_concat(JCtx *c, JVal a, JVal b);
JVal jx_capture_value(JCtx *c, JOut *o);
void jx_out_free(JOut *o);
void jx_span_push(JSpanList *l, JSpan s); /* a malloc-backed list */

/* An argument by position or name; NULL when absent. */
const JVal *jx_arg(const JArgs *a, size_t pos, const char *name);

int jx_filter(JCtx *c, const JNode *at, const char *name, size_t n, JVal v, JArgs *args, JVal *out);
int jx_test(JCtx *c, const JNode *at, const char *name, size_t n, JVal v, JArgs *args, int *out);
int jx_method(JCtx *c, const JNode *at, JVal self, const char *name, size_t n, JArgs *args, JVal *out);
int jx_has_method(JVal self, const char *name, size_t n);
int jx_builtin_id(const char *name, size_t n); /* -1 when not a global */
int jx_builtin(JCtx *c, const JNode *at, int id, JArgs *args, JVal *out);
int jx_tojson(JCtx *c, const JNode *at, JVal v, JArgs *args, JVal *out);
int jx_binop(JCtx *c, const JNode *at, int op, JVal a, JVal b, JVal *out);

#endif
