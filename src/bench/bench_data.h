/* Inputs of the CPU benchmark: the texts of a JSONL prompt/response file, and
 * a token store built from them for the random-access figure. */
#ifndef DF_BENCH_BENCH_DATA_H
#define DF_BENCH_BENCH_DATA_H

#include <stddef.h>

#include "base/error.h"
#include "text/tokenizer.h"

typedef struct DfBenchTexts {
    char **text; /* each prompt and each response, as separate texts */
    size_t *len;
    size_t count;
    size_t bytes;
} DfBenchTexts;

int df_bench_texts_load(DfBenchTexts *t, const char *jsonl_path, DfError *err);
void df_bench_texts_free(DfBenchTexts *t);

/* Encodes the texts into a temporary token store (one sample per text) and
 * times one million random sample lookups that read each sample's first id;
 * *ns_per_access receives the mean time per lookup. */
int df_bench_store_access(const DfTokenizer *tok, const DfBenchTexts *t, double *ns_per_access, DfError *err);

#endif
