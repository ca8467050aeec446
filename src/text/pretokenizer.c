#include "text/pretokenizer.h"

#include <string.h>

#include "text/utf8.h"

const char DF_GPT2_SPLIT_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

int df_pretokenizer_add_split(DfPreTokenizer *p, const char *pattern, DfError *err) {
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
    p->n_splits++;
    return 0;
}

void df_pretokenizer_free(DfPreTokenizer *p) {
    for (int i = 0; i < p->n_splits; i++) {
        onig_free(p->splits[i]);
        free(p->patterns[i]);
    }
    memset(p, 0, sizeof *p);
}

void df_pretok_scratch_free(DfPreTokScratch *s) {
    if (s->region) onig_region_free(s->region, 1);
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

/* Split with behavior Isolated: every match is a piece, and so is the text
 * between matches. An empty match splits nothing; the search then moves on by
 * one character, as the onig crate's find_iter does. */
static int split_isolated(regex_t *re, const char *s, DfSpan span, DfPreTokScratch *sc, DfError *err) {
    const OnigUChar *str = (const OnigUChar *)s + span.start, *end = (const OnigUChar *)s + span.end;
    size_t n = span.end - span.start, pos = 0, prev = 0;
    while (pos <= n) {
        int r = onig_search(re, str, end, str + pos, end, sc->region, ONIG_OPTION_NONE);
        if (r == ONIG_MISMATCH) break;
        if (r < 0) {
            OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
            onig_error_code_to_str(msg, r);
            return df_fail(err, "regex search failed: %s", (const char *)msg);
        }
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
    sc->spans.len = 0;
    span_push(&sc->spans, 0, n);
    for (int k = 0; k < p->n_splits; k++) {
        sc->next.len = 0;
        for (size_t i = 0; i < sc->spans.len; i++)
            if (split_isolated(p->splits[k], s, sc->spans.data[i], sc, err) < 0) return -1;
        DfSpanVec t = sc->spans;
        sc->spans = sc->next;
        sc->next = t;
    }
    return 0;
}
