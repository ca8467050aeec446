/* What the kernel benchmarks of dev/cuda/ share. Each program (one per op
 * family, llm.c's dev/cuda pattern) runs the op's kernel variants beside the
 * CPU backend's op as the reference, validates each variant's outputs, then
 * times it with device events after a warm-up. Variants are chosen by name
 * through the op table (df_backend_set_variant, the variants declared in
 * src/backend/cuda/kernel_variants.def). Kernel versions tried and dropped
 * are kept beside them as NAME_vN_WHAT.cu (make dev compiles them). Every helper here ends the program
 * with a message on failure: a benchmark whose outputs are wrong reports
 * nothing. */
#ifndef DF_DEV_CUDA_DEV_UTIL_H
#define DF_DEV_CUDA_DEV_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

/* The GPU (cuda:0) and the CPU backend; ends the program (exit status 1)
 * where there is no GPU or CUDA is not built in. */
typedef struct DevBackends {
    DfBackend *gpu, *cpu;
} DevBackends;
DevBackends dev_open(const char *program);
void dev_close(DevBackends *b);

/* Prints the message (printf format) and a newline to stderr, exits with status 1. */
void dev_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* n values uniform in [-scale, scale] from `seed`, rounded to bf16 (a bf16
 * device and the fp32 CPU then read the same values); heap. */
float *dev_random(size_t n, uint64_t seed, float scale);

DfBuffer dev_upload(DfBackend *be, const float *host, size_t n, DfBufKind kind);
DfBuffer dev_upload_i32(DfBackend *be, const int32_t *host, size_t n);
DfBuffer dev_poisoned(DfBackend *be, size_t n, DfBufKind kind); /* n NaNs */
DfBuffer dev_alloc(DfBackend *be, size_t n, DfBufKind kind);
void dev_sync(DfBackend *be);
float *dev_download(DfBackend *be, DfBuffer b);     /* after a sync; heap */
int32_t *dev_download_i32(DfBackend *be, DfBuffer b); /* after a sync; heap */

/* Sets knob `name` (df_backend_set_variant); name NULL: every knob back to its default. */
void dev_variant(DfBackend *be, const char *name, int value);

/* The relative error max|got - want| / max|want| (NaN never passes) within
 * tol, or the program ends; prints "    validated <what>: ..." either way. */
void dev_validate(const char *what, const float *got, const float *want, size_t n, double tol);
/* got equal to want bit for bit (copies, bit-identical results). */
void dev_validate_exact(const char *what, const float *got, const float *want, size_t n);

/* Median milliseconds of `reps` (at most 64) runs of work(ctx) on be's
 * stream, each between two device events, after `warmup` untimed runs,
 * divided by per_run (the units one run holds: layers, weight copies). */
double dev_median_ms(DfBackend *be, void (*work)(void *ctx), void *ctx, int warmup, int reps, int per_run);

#endif
