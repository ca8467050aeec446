/* The pre-tokenizer of tokenizer.json: Split steps with a regex (behavior
 * Isolated) run by Oniguruma, as `tokenizers` does, followed by ByteLevel
 * (whose own GPT-2 regex is one more Split step when use_regex is true).
 *
 * Thread safety: onig_search() keeps its match stack in the call and only
 * reads the compiled regex_t (Oniguruma 6.9 regexec.c: the statics there are
 * settings and debug counters), so one compiled regex serves every thread as
 * long as each call brings its own OnigRegion (DfPreTokScratch).
 *
 * A tokenizer.json comes from the internet, and a Split regex with nested
 * repetition (a*a*a*b|.) backtracks polynomially: Oniguruma's retry limits
 * bound one search call, while a text takes a call per piece. So each call
 * gets a retry limit (for a match attempt and for the whole call) that grows
 * with the bytes it searches, and the whole text a budget of the thread's CPU
 * time (DF_PRETOK_BUDGET_*: a hundred times what the GPT-2 regex takes); a
 * regex past either fails naming its field. */
#ifndef DF_TEXT_PRETOKENIZER_H
#define DF_TEXT_PRETOKENIZER_H

#include <stddef.h>

#include <oniguruma.h>

#include "base/error.h"

#define DF_PRETOK_MAX_SPLITS 8

/* The CPU-time budget of one text's pre-tokenization: a base plus a share per byte. The densest
 * benign text (a piece per byte, so a search call per byte) costs about 1 us a byte in a release
 * build and 10-25 us under AddressSanitizer (whose allocator serves Oniguruma's allocation in every
 * search call): 100 us a byte keeps every machine and build clear of it, while a pattern whose search
 * calls each rescan the rest of the text (quadratic) costs milliseconds a byte on a 100 KB text. */
#define DF_PRETOK_BUDGET_BASE_NS 500000000LL
#define DF_PRETOK_BUDGET_PER_BYTE_NS 100000LL

typedef struct DfPreTokenizer {
    regex_t *splits[DF_PRETOK_MAX_SPLITS];
    char *patterns[DF_PRETOK_MAX_SPLITS];
    char *fields[DF_PRETOK_MAX_SPLITS]; /* the tokenizer.json field each came from */
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
    OnigMatchParam *match_param; /* the per-call retry limits */
    DfSpanVec spans, next;
    /* the text's budget (df_pretok_budget): its CPU-time end, and when to look at the thread's CPU time
     * next (by a monotonic clock, cheaper); budget_shared: set by df_pretok_budget for the calls that follow */
    long long budget_end_ns, next_look_ns;
    size_t budget_bytes;
    int budget_shared;
} DfPreTokScratch;

/* The regex GPT-2's ByteLevel pre-tokenizer uses when use_regex is true. */
extern const char DF_GPT2_SPLIT_PATTERN[];

/* Compiles and appends a Split step; `field` names it in errors ("pre_tokenizer.pretokenizers[0].pattern"). */
int df_pretokenizer_add_split(DfPreTokenizer *p, const char *pattern, const char *field, DfError *err);
void df_pretokenizer_free(DfPreTokenizer *p);

/* Starts the CPU-time budget for a text of `bytes` bytes, shared by the
 * df_pretokenize calls on its pieces that follow with this scratch (without
 * it each call has a budget for its own bytes). */
void df_pretok_budget(DfPreTokScratch *scratch, size_t bytes);

/* Splits s[0..n) into pre-tokens; the result is in scratch->spans (offsets into s).
 * Fails naming the Split's field when its regex goes past the limits above. */
int df_pretokenize(const DfPreTokenizer *p, const char *s, size_t n, DfPreTokScratch *scratch, DfError *err);
void df_pretok_scratch_free(DfPreTokScratch *s);

#endif
