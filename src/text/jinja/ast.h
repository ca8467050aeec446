/* The syntax tree of a compiled template. */
#ifndef DF_TEXT_JINJA_AST_H
#define DF_TEXT_JINJA_AST_H

#include "text/jinja/value.h"

typedef enum {
    /* expressions */
    JN_LIT,     /* lit */
    JN_NAME,    /* s */
    JN_LIST,    /* args: items (also tuples) */
    JN_DICT,    /* args: key, value, key, value ... */
    JN_ATTR,    /* a.s */
    JN_ITEM,    /* a[b] */
    JN_SLICE,   /* a[args[0]:args[1]:args[2]], a NULL arg is omitted */
    JN_CALL,    /* a(args), kwargs as JN_KWARG */
    JN_KWARG,   /* s=a */
    JN_FILTER,  /* a|s(args); a NULL in a filter block */
    JN_TEST,    /* a is [not] s(args); op: negated */
    JN_NEG,     /* -a (op '-') or +a (op '+') */
    JN_NOT,
    JN_AND,
    JN_OR,
    JN_BINOP,   /* a op b, op one of JOp */
    JN_COND,    /* b if a else c */
    /* statements */
    JN_TEXT,    /* s */
    JN_OUT,     /* {{ a }} */
    JN_IF,      /* if a: body else orelse */
    JN_FOR,     /* for targets in a [if b]: body else orelse; op: recursive */
    JN_SET,     /* targets = a, or (block set) targets = body filtered by c */
    JN_MACRO,   /* s(params) body; params are JN_NAME or JN_KWARG (with default) */
    JN_CALLBLOCK, /* call(params) a: body */
    JN_FILTERBLOCK, /* body filtered by a (a JN_FILTER chain ending in NULL) */
    JN_BREAK,
    JN_CONTINUE,
    JN_GENERATION  /* body */
} JNodeKind;

typedef enum { JOP_ADD, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW, JOP_CONCAT,
               JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOTIN } JOp;

typedef struct JNode JNode;
typedef struct JNodeList {
    JNode **v;
    size_t n, cap;
} JNodeList;

struct JNode {
    JNodeKind kind;
    int line, col;
    int op;
    const char *s;
    size_t n;
    JVal lit;
    JNode *a, *b, *c;
    JNodeList args, body, orelse, targets;
};

typedef struct JMacro {
    const JNode *def; /* the JN_MACRO or JN_CALLBLOCK node */
    struct JScope *closure;
    const JNode *caller_body; /* a call block's body, given to the macro as caller() */
    struct JMacro *caller;    /* the caller macro passed along */
} JMacro;

/* Parses tokens into the statement list `out`; nodes live in arena. */
struct JLexed;
int jinja_parse(const struct JLexed *lx, JArena *arena, JNodeList *out, DfError *err);

#endif
