/* One run of a test_backend_ops case on one backend (tests/test_backend_ops.c
 * says how the registry runs them): the case builds its inputs from seeds,
 * poisons its outputs, runs the op(s) and hands back host copies of the
 * outputs, each with the way it is compared with the CPU's (relative error,
 * exact, partly written, element by element). On the CPU (reference) run it
 * also checks the outputs against an independent reference.
 *
 * A case takes a list of shapes; each shape has a scope:
 *   OPS_CHECKED   runs everywhere, checked against the reference on the CPU;
 *   OPS_COMPARED  runs only where another backend is present, whose outputs
 *                 it is compared against the CPU backend's (the naive
 *                 reference would take too long on the CPU);
 *   OPS_MODEL     the same at a whole model's shapes (left out in the quick
 *                 mode, DFLASH_OPS_QUICK=1, which the compute-sanitizer runs
 *                 take).
 * A case may also list kernel variants (df_backend_set_variant knobs): each
 * backend that has knobs runs every shape under each of them, and must match
 * the CPU under each. */
#ifndef DF_TESTS_BACKEND_OPS_OPS_RUN_H
#define DF_TESTS_BACKEND_OPS_OPS_RUN_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "test_util.h"

#include "backend/backend.h"

#define OPS_MAX_OUTS 48

typedef enum OpsScope { OPS_CHECKED, OPS_COMPARED, OPS_MODEL } OpsScope;

/* How an output is compared with the CPU's. */
typedef enum OpsCheck {
    OPS_REL,         /* max|x - cpu| / max|cpu| <= tol; NaN never passes */
    OPS_EXACT,       /* the same values (NaN where the CPU has NaN) */
    OPS_PARTIAL,     /* written in part: NaN at the CPU's NaN places, the relative error over the rest */
    OPS_PER_ELEMENT, /* every |x - cpu| <= tol * max(1, |cpu|) */
} OpsCheck;

/* A set of kernel variants (at most two knobs; knob NULL: unused). */
typedef struct OpsVariant {
    const char *label;
    const char *knob[2];
    int value[2];
} OpsVariant;

typedef struct OpsOut {
    char name[80];
    float *v; /* host copy */
    size_t n;
    OpsCheck check;
    double tol;
} OpsOut;

typedef struct Run {
    DfBackend *be;
    int reference;             /* the CPU run: also checked against the reference */
    int compared_ok;           /* OPS_COMPARED shapes run (another backend is present) */
    int model_ok;              /* OPS_MODEL shapes run (and not the quick mode) */
    int skipped;               /* the shape's scope left it out, or its case does not run it under this variant */
    const OpsVariant *variant; /* the kernel variants set on be (NULL: the defaults) */
    double tol;                /* the case's tolerance: each output's unless set otherwise */
    char label[192];           /* the shape, for messages */
    int n_out;
    OpsOut out[OPS_MAX_OUTS];
    DfBuffer *bufs; /* device buffers of the run, freed by ops_run_release */
    int n_bufs, cap_bufs;
    void **host; /* host scratch of the run, freed by ops_run_release */
    int n_host, cap_host;
} Run;

typedef struct OpCase {
    const char *name;
    const char *ops; /* the list's ops it covers, space-separated */
    void (*run)(Run *r, const void *shape);
    const void *shapes; /* NULL: one run with shape NULL */
    size_t shape_size;
    int n_shapes;
    double tol; /* the outputs' default tolerance against the CPU; < 0: each backend is checked alone */
    const OpsVariant *variants;
    int n_variants;
} OpCase;

/* Shapes that several cases take. */
typedef struct OpsCount {
    size_t n;
} OpsCount;
typedef struct OpsRowsDim {
    int rows, dim;
} OpsRowsDim;

#define OPS_SHAPES(a) (a), sizeof((a)[0]), (int)(sizeof(a) / sizeof((a)[0]))
#define OPS_NO_SHAPES NULL, 0, 1
#define OPS_VARIANTS(a) (a), (int)(sizeof(a) / sizeof((a)[0]))
#define OPS_NO_VARIANTS NULL, 0

/* Describes the shape (printf format) for messages. */
void ops_label(Run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 1 (and the run is skipped) when the shape's scope leaves it out here. */
int ops_skip(Run *r, OpsScope scope);
/* The value the run's variant gives knob (0, the default, when it sets none). */
int ops_variant(const Run *r, const char *knob);

/* Host memory freed with the run's scratch. */
void *ops_track(Run *r, void *p);
double *ops_dvec(Run *r, size_t n);
float *ops_fvec(Run *r, size_t n);
/* n values with |x| in [0.1, 1] * scale and random signs, rounded to bf16
 * (a bf16 backend and the fp32 CPU then read the same values). */
float *ops_inputs(Run *r, size_t n, uint64_t seed, float scale);
/* center + half * u, u as ops_inputs gives them with scale 1 (so within
 * [center - half, center + half]), rounded to bf16. */
float *ops_inputs_around(Run *r, size_t n, uint64_t seed, float center, float half);

/* Device buffers freed with the run. */
DfBuffer ops_keep(Run *r, DfBuffer b);
DfBuffer ops_up(Run *r, const float *h, size_t n, DfBufKind kind);
DfBuffer ops_up_i32(Run *r, const int32_t *h, size_t n);
/* An output before the op: NaN, or INT32_MIN in an I32 buffer. */
DfBuffer ops_poisoned(Run *r, size_t n, DfBufKind kind);
/* Waits for the backend; fails the test on an error. */
void ops_sync(Run *r);

/* Downloads b (after a sync) as the run's next output, compared by relative
 * error at the case's tolerance; the host copy lives as long as the run. */
float *ops_result(Run *r, const char *name, DfBuffer b);
/* The same, the same values required (copies, gathers, integer results). */
float *ops_result_exact(Run *r, const char *name, DfBuffer b);
float *ops_result_i32(Run *r, const char *name, DfBuffer b);
/* The same for an output the op writes only in part: its poisoned rest must
 * stay NaN, at the same places on every backend (the case's reference
 * check says which places). */
float *ops_result_partial(Run *r, const char *name, DfBuffer b);
/* A host array (copied) as the next output. */
float *ops_result_host(Run *r, const char *name, const float *v, size_t n, OpsCheck check);
/* The last output's tolerance, instead of the case's. */
void ops_last_tol(Run *r, double tol);

/* The reference check: max|got - want| <= tol * max(1, max|want|), no NaN. */
void ops_near(const Run *r, const char *what, const float *got, const double *want, size_t n, double tol);
/* max|got - want| / max|want| <= tol (the relative error of the other backends' comparison). */
void ops_near_rel(const Run *r, const char *what, const float *got, const double *want, size_t n, double tol);

/* Frees the run's device buffers and host scratch (its outputs stay). */
void ops_run_release(Run *r);
/* Frees everything, outputs included. */
void ops_run_free(Run *r);

/* other's outputs against the CPU run's (the case's checks); fails the test
 * on a difference. Returns the largest error as a fraction of its tolerance
 * (0 where every comparison was exact), with the output's name in worst. */
double ops_compare(const OpCase *c, const Run *cpu, const Run *other, char *worst, size_t cap);

static inline double ops_silu(double x) { return x / (1 + exp(-x)); }
static inline double ops_sigmoid(double x) { return 1 / (1 + exp(-x)); }

#endif
