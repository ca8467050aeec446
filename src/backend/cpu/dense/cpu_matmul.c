/* Matrix products through OpenBLAS on whole packed batches (M = T rows).
 *
 * Threads: OpenBLAS here is its pthread build, and its worker threads fight
 * OpenMP's (which spin for a while after each parallel region) for the same
 * cores: mixing the two ran the forward 2-4x slower and erratically. So the
 * CPU backend keeps OpenBLAS single-threaded (set once in
 * df_backend_cpu_create) and parallelizes every op with OpenMP; a product is
 * split into one row block (or column block) per OpenMP thread, each an
 * independent single-threaded sgemm. */
#include <cblas.h>
#include <omp.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"

/* Rows of a block below which splitting costs more than it gains. */
#define MIN_BLOCK 32

void df_cpu_matmul(DfBackend *be, DfBuffer c, DfBuffer a, DfBuffer b, int m, int n, int k, int trans_a, int trans_b,
                   float beta) {
    (void)be;
    const float *as = a.ptr, *bs = b.ptr;
    float *cs = c.ptr;
    int lda = trans_a ? m : k, ldb = trans_b ? k : n;
    CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
    int threads = omp_get_max_threads();
    int split_rows = m >= n;
    int extent = split_rows ? m : n;
    int parts = extent / MIN_BLOCK < threads ? extent / MIN_BLOCK : threads;
    if (parts <= 1) {
        cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, as, lda, bs, ldb, beta, cs, n);
        return;
    }
#pragma omp parallel for num_threads(parts) schedule(static, 1)
    for (int p = 0; p < parts; p++) {
        int lo = (int)((long)extent * p / parts), hi = (int)((long)extent * (p + 1) / parts);
        if (split_rows) /* rows lo..hi of op(A) and C */
            cblas_sgemm(CblasRowMajor, ta, tb, hi - lo, n, k, 1.0f, as + (trans_a ? (size_t)lo : (size_t)lo * lda), lda,
                        bs, ldb, beta, cs + (size_t)lo * n, n);
        else /* columns lo..hi of op(B) and C */
            cblas_sgemm(CblasRowMajor, ta, tb, m, hi - lo, k, 1.0f, as, lda,
                        bs + (trans_b ? (size_t)lo * ldb : (size_t)lo), ldb, beta, cs + lo, n);
    }
}

/* The residual copied into y first (unless it is y), then the product added. */
void df_cpu_linear_residual(DfBackend *be, DfBuffer y, DfBuffer x, DfBuffer w, DfBuffer r, int m, int n, int k) {
    if (r.ptr != y.ptr) memcpy(y.ptr, r.ptr, (size_t)m * n * sizeof(float));
    df_cpu_matmul(be, y, x, w, m, n, k, 0, 1, 1.0f);
}
