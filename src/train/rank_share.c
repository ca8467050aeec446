#include "train/rank_share.h"

#include <stdlib.h>

#include "base/error.h"

typedef struct ByLength {
    int64_t length;
    int index;
} ByLength;

/* Decreasing length, then increasing batch index: a total order, so qsort's
 * instability cannot change the result. */
static int longer_first(const void *pa, const void *pb) {
    const ByLength *a = pa, *b = pb;
    if (a->length != b->length) return a->length > b->length ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

int df_rank_share(const int64_t *lengths, int n, int world, int rank, int *out) {
    if (n <= 0 || world < 1 || rank < 0 || rank >= world) return 0;
    if (world == 1) {
        for (int i = 0; i < n; i++) out[i] = i;
        return n;
    }
    ByLength *order = df_xmalloc((size_t)n * sizeof *order, "rank share order");
    int64_t *load = df_xcalloc((size_t)world, sizeof *load, "rank share loads");
    int *owner = df_xmalloc((size_t)n * sizeof *owner, "rank share owners");
    for (int i = 0; i < n; i++) order[i] = (ByLength){lengths[i], i};
    qsort(order, (size_t)n, sizeof *order, longer_first);
    for (int i = 0; i < n; i++) {
        int best = 0;
        for (int r = 1; r < world; r++)
            if (load[r] < load[best]) best = r;
        owner[order[i].index] = best;
        load[best] += order[i].length;
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        if (owner[i] == rank) out[k++] = i;
    free(order), free(load), free(owner);
    return k;
}
