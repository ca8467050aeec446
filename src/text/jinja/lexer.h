/* Jinja template text -> tokens, with the whitespace control of the
 * environment transformers renders chat templates in: trim_blocks (the first
 * newline after a block or comment tag is dropped), lstrip_blocks (spaces and
 * tabs before a block or comment tag at the start of a line are dropped),
 * "-" on a tag strips all whitespace on that side, "+" keeps it. {% raw %}
 * bodies become text. */
#ifndef DF_TEXT_JINJA_LEXER_H
#define DF_TEXT_JINJA_LEXER_H

#include <stddef.h>

#include "base/error.h"

typedef enum {
    JT_TEXT,
    JT_VAR_BEGIN,
    JT_VAR_END,
    JT_BLOCK_BEGIN,
    JT_BLOCK_END,
    JT_NAME,
    JT_STRING, /* p/n: the decoded string */
    JT_INT,
    JT_FLOAT,
    JT_OP, /* p/n: the operator's text */
    JT_EOF
} JTokType;

typedef struct JTok {
    JTokType type;
    int line, col;
    const char *p; /* into the template, or (strings) into JLexed.strings */
    size_t n;
    long long ival;
    double fval;
} JTok;

typedef struct JLexed {
    JTok *t;
    size_t n, cap;
    char **strings; /* decoded string literals, owned */
    size_t nstrings;
} JLexed;

int jinja_lex(const char *src, size_t len, JLexed *out, DfError *err);
void jinja_lexed_free(JLexed *l);

#endif
