/* The declared kernel variants of the CUDA backend (kernel_variants.def):
 * their table, and setting, resetting and printing them by name. */
#include "backend/cuda/kernel_variants.h"

#include <stdio.h>
#include <string.h>

static const DfKernelVariantDecl VARIANTS[] = {
#define DF_KERNEL_VARIANT(name, kind, lo, hi, def, replans, why) \
    {#name, kind, lo, hi, def, replans, why, offsetof(DfCudaVariants, name)},
#include "backend/cuda/kernel_variants.def"
#undef DF_KERNEL_VARIANT
};
enum { N_VARIANTS = sizeof VARIANTS / sizeof VARIANTS[0] };

const DfKernelVariantDecl *df_cuda_kernel_variants(int *n) {
    *n = N_VARIANTS;
    return VARIANTS;
}

static int *field(DfCudaVariants *v, const DfKernelVariantDecl *d) {
    return (int *)((char *)v + d->offset);
}

/* value as d's kind takes it into *out; -1 with a message when refused. */
static int normalized(const DfKernelVariantDecl *d, int value, int *out, DfError *err) {
    switch (d->kind) {
    case DF_VARIANT_FLAG:
        *out = value != 0;
        return 0;
    case DF_VARIANT_COUNT:
        *out = value > 0 ? value : 0;
        return 0;
    case DF_VARIANT_RANGE:
        if (value < d->lo || value > d->hi)
            return df_fail(err, "cuda variant %s: %d (expected %d to %d)", d->name, value, d->lo, d->hi);
        *out = value;
        return 0;
    case DF_VARIANT_CHOICE:
        if (value != 0 && value != d->lo && value != d->hi)
            return df_fail(err, "cuda variant %s: %d (expected 0, %d or %d)", d->name, value, d->lo, d->hi);
        *out = value;
        return 0;
    case DF_VARIANT_MODE:
        *out = value >= d->lo && value <= d->hi ? value : d->def;
        return 0;
    }
    return df_fail(err, "cuda variant %s: unknown kind %d", d->name, (int)d->kind);
}

/* *f = value; whether that changed a variant with replans. */
static int assign(int *f, int value, const DfKernelVariantDecl *d) {
    int changed = *f != value;
    *f = value;
    return changed && d->replans;
}

int df_cuda_variants_reset(DfCudaVariants *v) {
    int replan = 0;
    for (int i = 0; i < N_VARIANTS; i++) replan |= assign(field(v, &VARIANTS[i]), VARIANTS[i].def, &VARIANTS[i]);
    return replan;
}

int df_cuda_variants_set(DfCudaVariants *v, const char *name, int value, int *replan, DfError *err) {
    for (int i = 0; i < N_VARIANTS; i++) {
        if (strcmp(VARIANTS[i].name, name) != 0) continue;
        int n = 0;
        if (normalized(&VARIANTS[i], value, &n, err)) return -1;
        *replan |= assign(field(v, &VARIANTS[i]), n, &VARIANTS[i]);
        return 0;
    }
    return df_fail(err, "the cuda backend has no kernel variant '%s'", name);
}

void df_cuda_variants_print(const DfCudaVariants *v, char *buf, size_t cap) {
    size_t used = 0;
    if (cap) buf[0] = '\0';
    for (int i = 0; i < N_VARIANTS && used < cap; i++) {
        int value = *(const int *)((const char *)v + VARIANTS[i].offset);
        int n = snprintf(buf + used, cap - used, "%s%s=%d", i ? " " : "", VARIANTS[i].name, value);
        if (n < 0) break;
        used += (size_t)n;
    }
}
