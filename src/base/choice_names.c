#include "base/choice_names.h"

#include <stdio.h>
#include <string.h>

/* The i-th name: its start and length, or NULL past the last one. */
static const char *nth_name(const char *names, int i, size_t *len) {
    const char *p = names;
    for (int k = 0; k < i; k++) {
        p = strchr(p, '|');
        if (!p) return NULL;
        p++;
    }
    const char *end = strchr(p, '|');
    *len = end ? (size_t)(end - p) : strlen(p);
    return p;
}

int df_choice_value(const char *names, const char *name, size_t len) {
    size_t n;
    for (int i = 0; i >= 0; i++) {
        const char *p = nth_name(names, i, &n);
        if (!p) return -1;
        if (n == len && n > 0 && strncmp(p, name, len) == 0) return i;
    }
    return -1;
}

int df_choice_name(const char *names, int value, char *out, size_t cap) {
    size_t n = 0;
    const char *p = value >= 0 ? nth_name(names, value, &n) : NULL;
    if (cap) out[0] = '\0';
    if (!p || n == 0) return -1;
    snprintf(out, cap, "%.*s", (int)n, p);
    return 0;
}

void df_choice_list_text(const char *names, char *out, size_t cap) {
    size_t n, used = 0;
    int count = 0;
    while (nth_name(names, count, &n)) count++;
    out[0] = '\0';
    for (int i = 0; i < count && used < cap; i++) {
        const char *p = nth_name(names, i, &n);
        const char *sep = i == 0 ? "" : i == count - 1 ? " or " : ", ";
        used += (size_t)snprintf(out + used, cap - used, "%s%.*s", sep, (int)n, p);
    }
}
