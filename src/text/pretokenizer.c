#include "text/pretokenizer.h"

#include <string.h>
#include <time.h>

#include "text/utf8.h"

const char DF_GPT2_SPLIT_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* A search call's retry limits, a base plus a share per byte searched: for
 * one match attempt (a greedy run that gives back, as \s*[\r\n]+ over
 * spaces, takes a retry a byte) and for the whole call (every start position
 * tried costs a retry per alternative). 100k retries of a deeply nested
 * backtrack take about 0.1 s. */
static const unsigned long RETRY_BASE = 100000, RETRY_MATCH_PER_BYTE = 4, RETRY_SEARCH_PER_BYTE = 16;

/* bounded_search's result past the text's budget (below Oniguruma's error codes) */
enum { SEARCH_OVER_BUDGET = -100000 };

/* How often (ns of the monotonic clock) the thread's CPU time is looked at. */
static const long long LOOK_EVERY_NS = 20000000;

int df_pretokenizer_add_split(DfPreTokenizer *p, const char *pattern, const char *field, DfError *err) {
    if (p->n_splits == DF_PRETOK_MAX_SPLITS) return df_fail(err, "more than %d Split steps", DF_PRETOK_MAX_SPLITS);
    OnigEncoding enc = ONIG_ENCODING_UTF8;
    onig_initialize(&enc, 1); /* once per process; later calls return at once */
    OnigErrorInfo einfo;
    regex_t *re = NULL;
    const OnigUChar *pat = (const OnigUChar *)pattern;
    /* the Rust `onig` crate's Regex::new: no options, Oniguruma's default (Ruby) syntax */
    int r = onig_new(&re, pat, pat + strlen(pattern), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT,
                     &einfo);
    if (r != ONIG_NORMAL) {
        OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
        onig_error_code_to_str(msg, r, &einfo);
        return df_fail(err, "bad Split regex /%s/: %s", pattern, (const char *)msg);
    }
    p->splits[p->n_splits] = re;
    p->patterns[p->n_splits] = df_xstrdup(pattern);
    p->fields[p->n_splits] = df_xstrdup(field ? field : "pre_tokenizer");
    p->n_splits++;
    return 0;
}

void df_pretokenizer_free(DfPreTokenizer *p) {
    for (int i = 0; i < p->n_splits; i++) {
        onig_free(p->splits[i]);
        free(p->patterns[i]);
        free(p->fields[i]);
    }
    memset(p, 0, sizeof *p);
}

void df_pretok_scratch_free(DfPreTokScratch *s) {
    if (s->region) onig_region_free(s->region, 1);
    if (s->match_param) onig_free_match_param(s->match_param);
    free(s->spans.data);
    free(s->next.data);
    memset(s, 0, sizeof *s);
}

static void span_push(DfSpanVec *v, size_t start, size_t end) {
    if (start == end) return; /* `tokenizers` drops empty pieces */
    if (v->len == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 64;
        v->data = df_xrealloc(v->data, v->cap * sizeof *v->data, "pre-token spans");
    }
    v->data[v->len++] = (DfSpan){start, end};
}

static long long clock_ns(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

void df_pretok_budget(DfPreTokScratch *sc, size_t bytes) {
    long long ns = DF_PRETOK_BUDGET_BASE_NS + (long long)(bytes < (size_t)1 << 40 ? bytes : (size_t)1 << 40) *
                                                  DF_PRETOK_BUDGET_PER_BYTE_NS;
    sc->budget_end_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) + ns;
    sc->next_look_ns = clock_ns(CLOCK_MONOTONIC) + LOOK_EVERY_NS;
    sc->budget_bytes = bytes;
    sc->budget_shared = 1;
}

/* Over the text's budget? The thread's CPU time (a system
 * call) is read only once the monotonic clock (vDSO, cheap) says a while passed. */
static int past_budget(DfPreTokScratch *sc) {
    long long now = clock_ns(CLOCK_MONOTONIC);
    if (now < sc->next_look_ns) return 0;
    sc->next_look_ns = now + LOOK_EVERY_NS;
    return clock_ns(CLOCK_THREAD_CPUTIME_ID) > sc->budget_end_ns;
}

/* onig_search from str + pos with retry limits for the n - pos bytes it may search. */
static int bounded_search(regex_t *re, const OnigUChar *str, size_t n, size_t pos, DfPreTokScratch *sc) {
    if (past_budget(sc)) return SEARCH_OVER_BUDGET;
    unsigned long bytes = n - pos < (size_t)1 << 32 ? (unsigned long)(n - pos) : 1UL << 32;
    onig_set_retry_limit_in_match_of_match_param(sc->match_param, RETRY_BASE + bytes * RETRY_MATCH_PER_BYTE);
    onig_set_retry_limit_in_search_of_match_param(sc->match_param, RETRY_BASE + bytes * RETRY_SEARCH_PER_BYTE);
    return onig_search_with_param(re, str, str + n, str + pos, str + n, sc->region, ONIG_OPTION_NONE,
                                  sc->match_param);
}

static int search_fail(const DfPreTokenizer *p, int k, int r, size_t offset, const DfPreTokScratch *sc,
                       DfError *err) {
    if (r == SEARCH_OVER_BUDGET)
        return df_fail(err,
                       "field '%s': the Split regex /%s/ took more than %.1f s of CPU time on a %zu-byte text "
                       "(at byte %zu): a pattern that backtracks without bound (nested repetition) is refused",
                       p->fields[k], p->patterns[k],
                       (DF_PRETOK_BUDGET_BASE_NS + (double)sc->budget_bytes * DF_PRETOK_BUDGET_PER_BYTE_NS) * 1e-9,
                       sc->budget_bytes, offset);
    if (r == ONIGERR_RETRY_LIMIT_IN_MATCH_OVER || r == ONIGERR_RETRY_LIMIT_IN_SEARCH_OVER)
        return df_fail(err,
                       "field '%s': the Split regex /%s/ backtracks past its limit at byte %zu of the text: a "
                       "pattern that backtracks without bound (nested repetition) is refused",
                       p->fields[k], p->patterns[k], offset);
    OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(msg, r);
    return df_fail(err, "field '%s': the Split regex /%s/ failed at byte %zu: %s", p->fields[k], p->patterns[k],
                   offset, (const char *)msg);
}

/* Split with behavior Isolated: every match is a piece, and so is the text
 * between matches. An empty match splits nothing; the search then moves on by
 * one character, as the onig crate's find_iter does. */
static int split_isolated(const DfPreTokenizer *p, int k, const char *s, DfSpan span, DfPreTokScratch *sc,
                          DfError *err) {
    regex_t *re = p->splits[k];
    const OnigUChar *str = (const OnigUChar *)s + span.start;
    size_t n = span.end - span.start, pos = 0, prev = 0;
    while (pos <= n) {
        int r = bounded_search(re, str, n, pos, sc);
        if (r == ONIG_MISMATCH) break;
        if (r < 0) return search_fail(p, k, r, span.start + pos, sc, err);
        size_t ms = (size_t)sc->region->beg[0], me = (size_t)sc->region->end[0];
        if (me == ms) {
            if (ms >= n) break;
            size_t len = 1, bad;
            if (str[ms] >= 0x80) {
                len = df_utf8_sequence_len(str + ms, n - ms, &bad);
                if (!len) len = bad;
            }
            pos = ms + len;
            continue;
        }
        span_push(&sc->next, span.start + prev, span.start + ms);
        span_push(&sc->next, span.start + ms, span.start + me);
        prev = pos = me;
    }
    span_push(&sc->next, span.start + prev, span.end);
    return 0;
}

int df_pretokenize(const DfPreTokenizer *p, const char *s, size_t n, DfPreTokScratch *sc, DfError *err) {
    if (!sc->region) sc->region = onig_region_new();
    if (!sc->match_param) {
        sc->match_param = onig_new_match_param();
        if (!sc->region || !sc->match_param) return df_fail(err, "out of memory for the pre-tokenizer's search state");
        onig_initialize_match_param(sc->match_param);
    }
    if (!sc->budget_shared) {
        df_pretok_budget(sc, n);
        sc->budget_shared = 0;
    }
    sc->spans.len = 0;
    span_push(&sc->spans, 0, n);
    for (int k = 0; k < p->n_splits; k++) {
        sc->next.len = 0;
        for (size_t i = 0; i < sc->spans.len; i++)
            if (split_isolated(p, k, s, sc->spans.data[i], sc, err) < 0) return -1;
        DfSpanVec t = sc->spans;
        sc->spans = sc->next;
        sc->next = t;
    }
    return 0;
}
