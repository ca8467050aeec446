#ifndef DFLASH_BACKEND_KERNEL_VARIANTS_H
#define DFLASH_BACKEND_KERNEL_VARIANTS_H

#include "backend/backend.h"
#include "base/error.h"

/* Kernel variants a run asks for instead of the backend's defaults
 * (--kernel-variant NAME=VALUE of bench and train): an A/B of two kernels
 * with one binary, and a kernel choice for a shape the defaults do not suit.
 * Names as the backend's variant list prints them (df_backend_variants). */
enum { DF_MAX_KERNEL_VARIANTS = 16 };
typedef struct DfKernelVariants {
    int count;
    char names[DF_MAX_KERNEL_VARIANTS][64];
    int values[DF_MAX_KERNEL_VARIANTS];
} DfKernelVariants;

/* items[0..n) as NAME=VALUE (VALUE a non-negative integer) into v; fails
 * naming the item and the option (e.g. "--kernel-variant") when one is
 * malformed or there are more than DF_MAX_KERNEL_VARIANTS. Whether the
 * backend has each name is found by df_kernel_variants_apply. */
int df_kernel_variants_parse(DfKernelVariants *v, const char *const *items, int n, const char *option, DfError *err);

/* Every knob of be back to its default, then each of v (NULL: none) set;
 * fails naming the first the backend refuses, as `option NAME=VALUE`. */
int df_kernel_variants_apply(DfBackend *be, const DfKernelVariants *v, const char *option, DfError *err);

#endif
