/* Edit distance (insertions, deletions, substitutions, and swaps of two
 * neighbouring characters), for "did you mean" suggestions of a misspelt
 * option or command. */
#ifndef DF_BASE_EDIT_DISTANCE_H
#define DF_BASE_EDIT_DISTANCE_H

#include <stddef.h>

/* The distance between a[0..na) and b[0..nb), or limit + 1 once it is over
 * limit (names are short: at most 63 characters are compared). */
int df_edit_distance(const char *a, size_t na, const char *b, size_t nb, int limit);

/* The closest of names[0..n) to word, if within max(1, len / 3) edits
 * (a typo, not another word); NULL otherwise. */
const char *df_closest_name(const char *word, size_t len, const char *const *names, int n);

#endif
