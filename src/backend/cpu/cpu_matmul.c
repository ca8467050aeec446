/* Matrix products through OpenBLAS: whole packed batches at once (M = T). */
#include <cblas.h>

#include "backend/cpu/cpu_ops.h"

void df_cpu_matmul(DfBackend *be, DfBuffer c, DfBuffer a, DfBuffer b, int m, int n, int k, int trans_a, int trans_b,
                   float beta) {
    (void)be;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f,
                (const float *)a.ptr, trans_a ? m : k, (const float *)b.ptr, trans_b ? k : n, beta, (float *)c.ptr, n);
}
