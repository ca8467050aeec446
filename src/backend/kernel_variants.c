#include "backend/kernel_variants.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

int df_kernel_variants_parse(DfKernelVariants *v, const char *const *items, int n, const char *option, DfError *err) {
    memset(v, 0, sizeof *v);
    if (n > DF_MAX_KERNEL_VARIANTS) return df_fail(err, "%s: at most %d", option, DF_MAX_KERNEL_VARIANTS);
    for (int i = 0; i < n; i++) {
        const char *item = items[i], *eq = strchr(item, '=');
        char *end = NULL;
        long value = eq ? strtol(eq + 1, &end, 10) : 0;
        size_t len = eq ? (size_t)(eq - item) : 0;
        if (!eq || len == 0 || len >= sizeof v->names[0] || end == eq + 1 || *end || value < 0 || value > INT_MAX)
            return df_fail(err, "%s '%s': expected NAME=VALUE, VALUE a non-negative integer (names as the "
                                "`kernel variants:` line of `dflash bench --device cuda` prints them)",
                           option, item);
        memcpy(v->names[i], item, len);
        v->names[i][len] = '\0';
        v->values[i] = (int)value;
    }
    v->count = n;
    return 0;
}

int df_kernel_variants_apply(DfBackend *be, const DfKernelVariants *v, const char *option, DfError *err) {
    if (df_backend_set_variant(be, NULL, 0, err)) return df_context(err, "%s: the default kernel variants", option);
    for (int i = 0; v && i < v->count; i++)
        if (df_backend_set_variant(be, v->names[i], v->values[i], err))
            return df_context(err, "%s %s=%d", option, v->names[i], v->values[i]);
    return 0;
}
