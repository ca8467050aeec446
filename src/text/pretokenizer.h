/* The pre-tokenizer of tokenizer.json: Split steps with a regex (behavior
 * Isolated) run by Oniguruma, as `tokenizers` does, followed by ByteLevel
 * (whose own GPT-2 regex is one more Split step when use_regex is true).
 *
 * Thread safety: onig_search() keeps its match stack in the call and only
 * reads the compiled regex_t (Oniguruma 6.9 regexec.c: the statics there are
 * settings and debug counters), so one compiled regex serves every thread as
 * long as each call brings its own OnigRegion (DfPreTokScratch). */
#ifndef DF_TEXT_PRETOKENIZER_H
#define DF_TEXT_PRETOKENIZER_H

#include <stddef.h>

#include <oniguruma.h>

#include "base/error.h"

#define DF_PRETOK_MAX_SPLITS 8

typedef struct DfPreTokenizer {
    regex_t *splits[DF_PRETOK_MAX_SPLITS];
    char *patterns[DF_PRETOK_MAX_SPLITS];
    int n_splits;
} DfPreTokenizer;

typedef struct DfSpan {
    size_t start, end;
} DfSpan;

typedef struct DfSpanVec {
    DfSpan *data;
    size_t len, cap;
} DfSpanVec;

typedef struct DfPreTokScratch {
    OnigRegion *region;
    DfSpanVec spans, next;
} DfPreTokScratch;

/* The regex GPT-2's ByteLevel pre-tokenizer uses when use_regex is true. */
extern const char DF_GPT2_SPLIT_PATTERN[];

/* Compiles and appends a Split step. */
int df_pretokenizer_add_split(DfPreTokenizer *p, const char *pattern, DfError *err);
void df_pretokenizer_free(DfPreTokenizer *p);

/* Splits s[0..n) into pre-tokens; the result is in scratch->spans (offsets into s). */
int df_pretokenize(const DfPreTokenizer *p, const char *s, size_t n, DfPreTokScratch *scratch, DfError *err);
void df_pretok_scratch_free(DfPreTokScratch *s);

#endif
