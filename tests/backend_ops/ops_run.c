/* A run of a test_backend_ops case on one backend: inputs, outputs, the
 * reference checks and the comparison with the CPU's run (ops_run.h). */
#include "ops_run.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/numeric.h"

void ops_label(Run *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->label, sizeof r->label, fmt, ap);
    va_end(ap);
}

int ops_skip(Run *r, OpsScope scope) {
    int runs = scope == OPS_CHECKED || (scope == OPS_COMPARED && r->compared_ok) || (scope == OPS_MODEL && r->model_ok);
    r->skipped = !runs;
    return !runs;
}

int ops_variant(const Run *r, const char *knob) {
    if (!r->variant) return 0;
    for (int i = 0; i < 2; i++)
        if (r->variant->knob[i] && strcmp(r->variant->knob[i], knob) == 0) return r->variant->value[i];
    return 0;
}

void *ops_track(Run *r, void *p) {
    assert_non_null(p);
    if (r->n_host == r->cap_host) {
        r->cap_host = r->cap_host ? 2 * r->cap_host : 64;
        r->host = realloc(r->host, (size_t)r->cap_host * sizeof *r->host);
        assert_non_null(r->host);
    }
    return r->host[r->n_host++] = p;
}

double *ops_dvec(Run *r, size_t n) { return ops_track(r, calloc(n ? n : 1, sizeof(double))); }
float *ops_fvec(Run *r, size_t n) { return ops_track(r, calloc(n ? n : 1, sizeof(float))); }

float *ops_inputs(Run *r, size_t n, uint64_t seed, float scale) {
    float *x = ops_track(r, df_test_random_array(n ? n : 1, seed, 1.0f));
    for (size_t i = 0; i < n; i++) {
        float mag = 0.1f + 0.9f * fabsf(x[i]);
        x[i] = df_bf16_to_f32(df_f32_to_bf16((x[i] < 0 ? -mag : mag) * scale));
    }
    return x;
}

float *ops_inputs_around(Run *r, size_t n, uint64_t seed, float center, float half) {
    float *x = ops_inputs(r, n, seed, 1.0f);
    for (size_t i = 0; i < n; i++) x[i] = df_bf16_to_f32(df_f32_to_bf16(center + half * x[i]));
    return x;
}

DfBuffer ops_keep(Run *r, DfBuffer b) {
    if (r->n_bufs == r->cap_bufs) {
        r->cap_bufs = r->cap_bufs ? 2 * r->cap_bufs : 64;
        r->bufs = realloc(r->bufs, (size_t)r->cap_bufs * sizeof *r->bufs);
        assert_non_null(r->bufs);
    }
    return r->bufs[r->n_bufs++] = b;
}

DfBuffer ops_up(Run *r, const float *h, size_t n, DfBufKind kind) { return ops_keep(r, df_test_upload(r->be, h, n, kind)); }
DfBuffer ops_up_i32(Run *r, const int32_t *h, size_t n) { return ops_keep(r, df_test_upload_i32(r->be, h, n)); }

DfBuffer ops_poisoned(Run *r, size_t n, DfBufKind kind) {
    if (kind != DF_BUF_I32) return ops_keep(r, df_test_upload_poisoned(r->be, n, kind));
    int32_t *v = malloc(n * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++) v[i] = INT32_MIN;
    DfBuffer b = ops_up_i32(r, v, n);
    free(v);
    return b;
}

void ops_sync(Run *r) {
    DfError err;
    if (r->be->ops->sync(r->be, &err)) fail_msg("%s: %s", r->label, err.msg);
}

static float *add_out(Run *r, const char *name, float *v, size_t n, OpsCheck check) {
    if (r->n_out == OPS_MAX_OUTS) fail_msg("%s: more than %d outputs", r->label, OPS_MAX_OUTS);
    OpsOut *o = &r->out[r->n_out++];
    snprintf(o->name, sizeof o->name, "%s", name);
    o->v = v, o->n = n, o->check = check, o->tol = r->tol;
    return v;
}

float *ops_result(Run *r, const char *name, DfBuffer b) {
    return add_out(r, name, df_test_download(r->be, b), b.count, OPS_REL);
}

float *ops_result_exact(Run *r, const char *name, DfBuffer b) {
    return add_out(r, name, df_test_download(r->be, b), b.count, OPS_EXACT);
}

float *ops_result_partial(Run *r, const char *name, DfBuffer b) {
    return add_out(r, name, df_test_download(r->be, b), b.count, OPS_PARTIAL);
}

float *ops_result_i32(Run *r, const char *name, DfBuffer b) {
    DfError err;
    int32_t *v = malloc((b.count ? b.count : 1) * sizeof *v);
    assert_non_null(v);
    if (r->be->ops->sync(r->be, &err) || r->be->ops->download_i32(r->be, v, b, &err))
        fail_msg("%s: %s", r->label, err.msg);
    float *h = malloc((b.count ? b.count : 1) * sizeof *h);
    assert_non_null(h);
    for (size_t i = 0; i < b.count; i++) h[i] = (float)v[i];
    free(v);
    return add_out(r, name, h, b.count, OPS_EXACT);
}

float *ops_result_host(Run *r, const char *name, const float *v, size_t n, OpsCheck check) {
    float *h = malloc((n ? n : 1) * sizeof *h);
    assert_non_null(h);
    memcpy(h, v, n * sizeof *h);
    return add_out(r, name, h, n, check);
}

void ops_last_tol(Run *r, double tol) {
    assert_true(r->n_out > 0);
    r->out[r->n_out - 1].tol = tol;
}

void ops_near(const Run *r, const char *what, const float *got, const double *want, size_t n, double tol) {
    double scale = 1;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= tol * scale))
            fail_msg("%s: %s[%zu]: %.8g, reference %.8g (tolerance %g x %g)", r->label, what, i, got[i], want[i], tol,
                     scale);
    }
}

void ops_near_rel(const Run *r, const char *what, const float *got, const double *want, size_t n, double tol) {
    double max_diff = 0, max_ref = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (d != d) fail_msg("%s: %s[%zu] is %g, reference %g", r->label, what, i, got[i], want[i]);
        if (d > max_diff) max_diff = d, at = i;
        max_ref = fmax(max_ref, fabs(want[i]));
    }
    double e = max_ref > 0 ? max_diff / max_ref : max_diff;
    if (!(e <= tol))
        fail_msg("%s: %s: relative error %g against the reference (tolerance %g; worst at %zu: %.8g, reference %.8g)",
                 r->label, what, e, tol, at, got[at], want[at]);
}

void ops_run_release(Run *r) {
    for (int i = 0; i < r->n_bufs; i++) df_buffer_free(r->be, &r->bufs[i]);
    for (int i = 0; i < r->n_host; i++) free(r->host[i]);
    free(r->bufs), free(r->host);
    r->bufs = NULL, r->host = NULL;
    r->n_bufs = r->cap_bufs = r->n_host = r->cap_host = 0;
}

void ops_run_free(Run *r) {
    ops_run_release(r);
    for (int i = 0; i < r->n_out; i++) free(r->out[i].v);
    r->n_out = 0;
}

/* The relative error of a partly written output over the places the CPU
 * wrote; INFINITY where the untouched (NaN) places differ. */
static double partial_rel_error(const float *got, const float *want, size_t n) {
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(want[i]) != isnan(got[i])) return INFINITY;
        if (isnan(want[i])) continue;
        double d = fabs((double)got[i] - want[i]);
        if (d != d) return INFINITY;
        max_diff = fmax(max_diff, d);
        max_ref = fmax(max_ref, fabs((double)want[i]));
    }
    return max_ref > 0 ? max_diff / max_ref : max_diff;
}

/* The first element that differs (NaN matching NaN), or n. */
static size_t first_difference(const float *got, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!(got[i] == want[i] || (isnan(got[i]) && isnan(want[i])))) return i;
    return n;
}

/* The largest |got - want| / max(1, |want|) (INFINITY where either is NaN). */
static double per_element_error(const float *got, const float *want, size_t n, size_t *at) {
    double worst = 0;
    *at = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / fmax(1.0, fabs((double)want[i]));
        if (e != e) e = INFINITY;
        if (e > worst) worst = e, *at = i;
    }
    return worst;
}

double ops_compare(const OpCase *c, const Run *cpu, const Run *other, char *worst, size_t cap) {
    const char *variant = other->variant ? other->variant->label : "default variants";
    if (cpu->n_out != other->n_out)
        fail_msg("%s [%s]: %d outputs on the CPU, %d on the %s backend", c->name, cpu->label, cpu->n_out, other->n_out,
                 other->be->ops->name);
    double fraction = 0;
    for (int i = 0; i < cpu->n_out; i++) {
        const OpsOut *w = &cpu->out[i], *g = &other->out[i];
        if (w->n != g->n)
            fail_msg("%s [%s]: %s has %zu values on the CPU, %zu elsewhere", c->name, cpu->label, w->name, w->n, g->n);
        double tol = g->tol, e = 0;
        size_t at = 0;
        switch (w->check) {
        case OPS_EXACT:
            at = first_difference(g->v, w->v, w->n);
            if (at < w->n)
                fail_msg("%s [%s, %s]: %s on the %s backend: value %zu is %.9g, on the CPU %.9g (must be equal)",
                         c->name, cpu->label, variant, w->name, other->be->ops->name, at, g->v[at], w->v[at]);
            continue;
        case OPS_REL: e = df_rel_error(g->v, w->v, w->n); break;
        case OPS_PARTIAL: e = partial_rel_error(g->v, w->v, w->n); break;
        case OPS_PER_ELEMENT: e = per_element_error(g->v, w->v, w->n, &at); break;
        }
        if (!(e <= tol)) {
            if (w->check == OPS_PER_ELEMENT)
                fail_msg("%s [%s, %s]: %s on the %s backend: value %zu is %.9g, on the CPU %.9g: apart by %g of "
                         "max(1, |cpu|) (tolerance %g)",
                         c->name, cpu->label, variant, w->name, other->be->ops->name, at, g->v[at], w->v[at], e, tol);
            fail_msg("%s [%s, %s]: %s on the %s backend: relative error %g against the CPU (tolerance %g)", c->name,
                     cpu->label, variant, w->name, other->be->ops->name, e, tol);
        }
        double f = tol > 0 ? e / tol : 0;
        if (f > fraction) {
            fraction = f;
            snprintf(worst, cap, "%s at %s (%s): %.3g", w->name, cpu->label, variant, e);
        }
    }
    return fraction;
}
