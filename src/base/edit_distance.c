#include "base/edit_distance.h"

#include <string.h>

enum { MAX_NAME = 63 };

static int min3(int a, int b, int c) { return a < b ? (a < c ? a : c) : (b < c ? b : c); }

int df_edit_distance(const char *a, size_t na, const char *b, size_t nb, int limit) {
    if (na > MAX_NAME || nb > MAX_NAME) return limit + 1;
    int d[MAX_NAME + 1][MAX_NAME + 1];
    for (size_t i = 0; i <= na; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= nb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= na; i++)
        for (size_t j = 1; j <= nb; j++) {
            int cost = a[i - 1] != b[j - 1];
            d[i][j] = min3(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < d[i][j])
                d[i][j] = d[i - 2][j - 2] + 1; /* two neighbours swapped */
        }
    return d[na][nb] > limit ? limit + 1 : d[na][nb];
}

const char *df_closest_name(const char *word, size_t len, const char *const *names, int n) {
    int limit = len / 3 > 1 ? (int)(len / 3) : 1, best = limit + 1;
    const char *found = NULL;
    for (int i = 0; i < n; i++) {
        int dist = df_edit_distance(word, len, names[i], strlen(names[i]), limit);
        if (dist < best) best = dist, found = names[i];
    }
    return found;
}
