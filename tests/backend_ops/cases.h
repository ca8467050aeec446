/* The cases of test_backend_ops, by family, and the registry of them all
 * (registry.c: the order they run in). */
#ifndef DF_TESTS_BACKEND_OPS_CASES_H
#define DF_TESTS_BACKEND_OPS_CASES_H

#include <stddef.h>

#include "ops_run.h"

/* registry.c: every case, in the order test_backend_ops runs them */
extern const OpCase *const OPS_CASES[];
extern const size_t OPS_N_CASES;

/* cases_device.c: memory, errors reported by sync, device queries */
extern const OpCase CASE_MEMORY, CASE_SYNC_ERRORS, CASE_DEVICE_QUERIES, CASE_DEVICE_CAPS;
/* cases_dense.c: a dense layer's ops */
extern const OpCase CASE_MATMUL, CASE_LINEAR_RESIDUAL, CASE_MATMUL_DECODE, CASE_RMSNORM, CASE_ADD_SWIGLU, CASE_SWIGLU_PACKED;
extern const OpCase CASE_EMBEDDING, CASE_COPY2D, CASE_FILL_ZERO, CASE_ROPE, CASE_RMSNORM_ROPE, CASE_QK_NORM_ROPE, CASE_RMSNORM_ROPE_BACKWARD, CASE_ATTENTION, CASE_ARGMAX;
/* cases_train.c: the drafter's training ops */
extern const OpCase CASE_RMSNORM_BACKWARD, CASE_SWIGLU_BACKWARD, CASE_LINEAR_WEIGHT_GRAD, CASE_BLOCK_ATTENTION;
extern const OpCase CASE_LM_HEAD_CE, CASE_ADAMW, CASE_SUM_SQUARES;
/* cases_infer.c: KV caches and the fused dense decode step */
extern const OpCase CASE_KV, CASE_QKV_ROPE_CACHE;
/* cases_hybrid.c: hybrid targets' layers and decode steps */
extern const OpCase CASE_CAUSAL_CONV, CASE_DELTA_RULE, CASE_GATED_RMSNORM, CASE_ROPE_PARTIAL;
extern const OpCase CASE_HYBRID_STEPS, CASE_CONV_STEP, CASE_DELTA_STEP;

#endif
