/* Weight gradient of a linear layer, dW = beta dW + dY^T X, through the
 * row/column split sgemm of cpu_matmul.c (fp32 on this backend, so F32 and
 * ACT agree). */
#include "backend/cpu/cpu_ops.h"

void df_cpu_linear_weight_grad(DfBackend *be, DfBuffer dw, DfBuffer dy, DfBuffer x, int m, int n, int k, float beta) {
    df_cpu_matmul(be, dw, dy, x, n, k, m, 1, 0, beta);
}
