/* What the kernel benchmarks of dev/cuda/ share (dev_util.h). */
#include "dev_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/select.h"
#include "base/numeric.h"
#include "base/sort.h"

void dev_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

DevBackends dev_open(const char *program) {
    DfError err = {{0}};
    DevBackends b = {0};
    if (!(b.gpu = df_backend_create("cuda", &err))) dev_die("%s: needs a CUDA GPU: %s", program, err.msg);
    if (!(b.cpu = df_backend_create("cpu", &err))) dev_die("%s: the CPU backend: %s", program, err.msg);
    char desc[256];
    df_backend_describe(b.gpu, desc, sizeof desc);
    printf("%s on %s\n", program, desc);
    return b;
}

void dev_close(DevBackends *b) {
    df_backend_destroy(b->gpu);
    df_backend_destroy(b->cpu);
}

static void *checked(void *p, size_t bytes) {
    if (!p) dev_die("out of host memory (%zu bytes)", bytes);
    return p;
}

float *dev_random(size_t n, uint64_t seed, float scale) {
    float *x = checked(malloc((n ? n : 1) * sizeof *x), n * sizeof *x);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17; /* xorshift64 */
        float u = (float)(((double)(s >> 11) / 9007199254740992.0) * 2.0 - 1.0);
        x[i] = df_bf16_to_f32(df_f32_to_bf16(scale * u));
    }
    return x;
}

DfBuffer dev_alloc(DfBackend *be, size_t n, DfBufKind kind) {
    DfError err;
    DfBuffer b;
    if (df_buffer_alloc(be, &b, kind, n, &err)) dev_die("%s", err.msg);
    return b;
}

DfBuffer dev_upload(DfBackend *be, const float *host, size_t n, DfBufKind kind) {
    DfError err;
    DfBuffer b = dev_alloc(be, n, kind);
    if (be->ops->upload_f32(be, b, host, &err)) dev_die("%s", err.msg);
    return b;
}

DfBuffer dev_upload_i32(DfBackend *be, const int32_t *host, size_t n) {
    DfError err;
    DfBuffer b = dev_alloc(be, n, DF_BUF_I32);
    if (be->ops->upload_i32(be, b, host, &err)) dev_die("%s", err.msg);
    return b;
}

DfBuffer dev_poisoned(DfBackend *be, size_t n, DfBufKind kind) {
    float *nan = checked(malloc((n ? n : 1) * sizeof *nan), n * sizeof *nan);
    for (size_t i = 0; i < n; i++) nan[i] = NAN;
    DfBuffer b = dev_upload(be, nan, n, kind);
    free(nan);
    return b;
}

void dev_sync(DfBackend *be) {
    DfError err;
    if (be->ops->sync(be, &err)) dev_die("%s backend: %s", be->ops->name, err.msg);
}

float *dev_download(DfBackend *be, DfBuffer b) {
    DfError err;
    dev_sync(be);
    float *x = checked(malloc((b.count ? b.count : 1) * sizeof *x), b.count * sizeof *x);
    if (be->ops->download_f32(be, x, b, &err)) dev_die("%s", err.msg);
    return x;
}

int32_t *dev_download_i32(DfBackend *be, DfBuffer b) {
    DfError err;
    dev_sync(be);
    int32_t *x = checked(malloc((b.count ? b.count : 1) * sizeof *x), b.count * sizeof *x);
    if (be->ops->download_i32(be, x, b, &err)) dev_die("%s", err.msg);
    return x;
}

void dev_variant(DfBackend *be, const char *name, int value) {
    DfError err;
    if (df_backend_set_variant(be, name, value, &err)) dev_die("%s", err.msg);
}

void dev_validate(const char *what, const float *got, const float *want, size_t n, double tol) {
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (d != d) dev_die("    %s: value %zu is %g, the CPU's %g: not validated", what, i, got[i], want[i]);
        max_diff = fmax(max_diff, d);
        max_ref = fmax(max_ref, fabs((double)want[i]));
    }
    double e = max_ref > 0 ? max_diff / max_ref : max_diff;
    if (!(e <= tol)) dev_die("    %s: relative error %g against the CPU (tolerance %g): not validated", what, e, tol);
    printf("    validated %s: relative error %.3g against the CPU (tolerance %g)\n", what, e, tol);
}

void dev_validate_exact(const char *what, const float *got, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof got[i]) != 0)
            dev_die("    %s: value %zu is %.9g, the reference's %.9g (must be equal): not validated", what, i, got[i],
                    want[i]);
    printf("    validated %s: the reference's bits\n", what);
}

double dev_median_ms(DfBackend *be, void (*work)(void *ctx), void *ctx, int warmup, int reps, int per_run) {
    double ms[64];
    if (reps < 1 || reps > 64 || per_run < 1) dev_die("dev_median_ms: %d reps of %d", reps, per_run);
    DfError err = {{0}};
    DfTimer *t = be->ops->timer_create ? be->ops->timer_create(be, &err) : NULL;
    if (!t) dev_die("the %s backend has no device timer: %s", be->ops->name, err.msg);
    for (int rep = -warmup; rep < reps; rep++) {
        be->ops->timer_start(be, t);
        work(ctx);
        double v = be->ops->timer_stop(be, t);
        if (v < 0) dev_die("a device timer failed");
        if (rep >= 0) ms[rep] = v / per_run;
    }
    be->ops->timer_destroy(be, t);
    dev_sync(be);
    return df_median_sorting(ms, (size_t)reps);
}
