/* The registry of test_backend_ops: every case, in the order they run
 * (tests/test_backend_ops.c runs them; tests/test_kernel_variants.c checks
 * the kernel variants they set against the backend's declared list). */
#include "cases.h"

const OpCase *const OPS_CASES[] = {
    &CASE_MEMORY,
    &CASE_MATMUL,
    &CASE_LINEAR_RESIDUAL,
    &CASE_MATMUL_DECODE,
    &CASE_RMSNORM,
    &CASE_ADD_SWIGLU,
    &CASE_SWIGLU_PACKED,
    &CASE_EMBEDDING,
    &CASE_COPY2D,
    &CASE_FILL_ZERO,
    &CASE_ROPE,
    &CASE_RMSNORM_ROPE,
    &CASE_QK_NORM_ROPE,
    &CASE_RMSNORM_ROPE_BACKWARD,
    &CASE_ATTENTION,
    &CASE_ARGMAX,
    &CASE_RMSNORM_BACKWARD,
    &CASE_SWIGLU_BACKWARD,
    &CASE_LINEAR_WEIGHT_GRAD,
    &CASE_BLOCK_ATTENTION,
    &CASE_LM_HEAD_CE,
    &CASE_ADAMW,
    &CASE_SUM_SQUARES,
    &CASE_KV,
    &CASE_QKV_ROPE_CACHE,
    &CASE_CAUSAL_CONV,
    &CASE_DELTA_RULE,
    &CASE_GATED_RMSNORM,
    &CASE_ROPE_PARTIAL,
    &CASE_HYBRID_STEPS,
    &CASE_CONV_STEP,
    &CASE_DELTA_STEP,
    &CASE_SYNC_ERRORS,
    &CASE_DEVICE_QUERIES,
    &CASE_DEVICE_CAPS,
};
const size_t OPS_N_CASES = sizeof OPS_CASES / sizeof OPS_CASES[0];
