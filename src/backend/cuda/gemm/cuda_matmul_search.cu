/* Which of cuBLASLt's algorithms a matmul plan runs.
 *
 * The heuristic's first algorithm is its guess, and what runs by default. At
 * some shapes of the training step another it offers is faster, so with the
 * variant gemm_search a product large enough that
 * the choice matters (SEARCH_MIN_FLOPS) times the heuristic's candidates on
 * its own buffers the first time its shape comes, and keeps the fastest:
 *   - a plan whose shape is close to one already timed (the same n, trans
 *     flags, C type and alignment, m and k in the same power-of-two bucket,
 *     the same leading dimensions or the dense ones: packed batches change
 *     the token count every step) takes that plan's choice when cuBLASLt
 *     accepts it at the new shape (cublasLtMatmulAlgoCheck), so a run times
 *     each bucket once, not each step;
 *   - nothing is timed while a graph is recorded (the heuristic's first then);
 *   - a product that accumulates (beta != 0) has its C saved to pinned host
 *     memory before the timing and put back after, so the op's result is
 *     the same as without the search (no device memory is added).
 * The choice depends on measured times, so two runs may pick different
 * algorithms: results agree within rounding, not bit for bit. Why it is not
 * the default (H200, docs/kernels.md): at the Qwen3-8B bench shape
 * the step's products took 192.3 ms searched against 195.1 with the
 * heuristic's first (dev/cuda/bench_gemm), but in the seed's configuration,
 * whose token counts change every step, the drafter's phase of the same
 * batches ran about 6% slower than in an earlier run without it
 * and the first step took 5.6 s longer; no A/B in one call has settled which
 * of the search and the machine that was. The variant gemm_algo
 * (k >= 1, the heuristic's k-th candidate everywhere)
 * fixes the choice instead. */
#include <math.h>

#include "backend/cuda/gemm/cuda_matmul_plan.h"

namespace {

/* 2 m n k at or above this (about 21 us at the H200's 800 TFLOP/s) is timed:
 * the eight candidates' runs cost a few hundred such products once a bucket. */
constexpr double SEARCH_MIN_FLOPS = 17.0e9;
constexpr int WARMUP_RUNS = 1, TIMED_RUNS = 3;
/* The heuristic's first keeps its place unless another is this much faster:
 * timing noise does not move a choice. */
constexpr float SWITCH_MARGIN = 0.98f;

int log2_bucket(int x) {
    int b = 0;
    while (x > 1) x >>= 1, b++;
    return b;
}

/* Leading dimensions of a dense row-major layout at the plan's shape. */
int dense_lda(const DfMatmulPlan *p) { return p->trans_a ? p->m : p->k; }
int dense_ldb(const DfMatmulPlan *p) { return p->trans_b ? p->k : p->n; }

bool same_ld(int a, int dense_a, int b, int dense_b) { return a == b || (a == dense_a && b == dense_b); }

bool close_shape(const DfMatmulPlan *a, const DfMatmulPlan *b) {
    return a->n == b->n && a->trans_a == b->trans_a && a->trans_b == b->trans_b && a->c_f32 == b->c_f32 &&
           a->align == b->align && log2_bucket(a->m) == log2_bucket(b->m) &&
           log2_bucket(a->k) == log2_bucket(b->k) && same_ld(a->lda, dense_lda(a), b->lda, dense_lda(b)) &&
           same_ld(a->ldb, dense_ldb(a), b->ldb, dense_ldb(b)) && a->ldc == b->ldc;
}

/* The choice of an earlier timed plan of a close shape, when cuBLASLt runs it at p's. */
bool take_timed_choice(DfCudaState *st, DfMatmulPlan *p) {
    for (int i = 0; i < st->n_plans; i++) {
        const DfMatmulPlan *q = &st->plans[i];
        if (!q->searched || !close_shape(p, q)) continue;
        cublasLtMatmulHeuristicResult_t check;
        if (cublasLtMatmulAlgoCheck(st->lt, p->desc, p->la, p->lb, p->lc, p->lc, &q->algo, &check) ==
                CUBLAS_STATUS_SUCCESS &&
            check.workspaceSize <= st->lt_workspace_bytes) {
            p->algo = q->algo;
            p->searched = 1;
            return true;
        }
    }
    return false;
}

/* Milliseconds of one run of algo (mean of TIMED_RUNS after WARMUP_RUNS); negative when it cannot run. */
float time_algo(DfCudaState *st, const DfMatmulPlan *p, const DfCudaGemm *g, const cublasLtMatmulAlgo_t *algo,
                cudaEvent_t ev[2]) {
    for (int i = 0; i < WARMUP_RUNS; i++)
        if (df_cuda_plan_run(st, p, g, algo) != CUBLAS_STATUS_SUCCESS) return -1.0f;
    if (cudaEventRecord(ev[0], st->stream) != cudaSuccess) return -1.0f;
    for (int i = 0; i < TIMED_RUNS; i++)
        if (df_cuda_plan_run(st, p, g, algo) != CUBLAS_STATUS_SUCCESS) return -1.0f;
    float ms = -1.0f;
    if (cudaEventRecord(ev[1], st->stream) != cudaSuccess || cudaEventSynchronize(ev[1]) != cudaSuccess ||
        cudaEventElapsedTime(&ms, ev[0], ev[1]) != cudaSuccess)
        return -1.0f;
    return ms / TIMED_RUNS;
}

/* The bytes of C the product touches (row-major, ldc apart). */
size_t c_bytes(const DfCudaGemm *g) {
    return ((size_t)(g->m - 1) * g->ldc + g->n) * (g->c_f32 ? sizeof(float) : sizeof(__nv_bfloat16));
}

/* Times the candidates; the index of the fastest (0 when none could be timed).
 * C is saved first and put back after when the product accumulates into it. */
int fastest_candidate(DfBackend *be, const DfMatmulPlan *p, const DfCudaGemm *g,
                      const cublasLtMatmulHeuristicResult_t *cand, int n) {
    DfCudaState *st = df_cuda_state(be);
    void *saved = nullptr;
    size_t bytes = c_bytes(g);
    if (g->beta != 0.0f && (!g->c_in || g->c_in == g->c)) {
        if (cudaMallocHost(&saved, bytes) != cudaSuccess) {
            cudaGetLastError(); /* no pinned memory to spare: the heuristic's first, untimed */
            return 0;
        }
        if (cudaMemcpyAsync(saved, g->c, bytes, cudaMemcpyDeviceToHost, st->stream) != cudaSuccess) {
            cudaFreeHost(saved);
            df_cuda_record_failure(be, __FILE__, __LINE__, "matmul algorithm search: saving C (%zu bytes)", bytes);
            return 0;
        }
    }
    cudaEvent_t ev[2] = {nullptr, nullptr};
    int best = 0;
    if (cudaEventCreate(&ev[0]) == cudaSuccess && cudaEventCreate(&ev[1]) == cudaSuccess) {
        float best_ms = INFINITY;
        for (int i = 0; i < n; i++) {
            float ms = time_algo(st, p, g, &cand[i].algo, ev);
            if (ms < 0.0f) continue;
            if (i == 0) ms *= SWITCH_MARGIN;
            if (ms < best_ms) best_ms = ms, best = i;
        }
    }
    cudaGetLastError(); /* a candidate that failed to launch is skipped, not the op's failure */
    for (int i = 0; i < 2; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    if (saved) {
        cudaError_t e = cudaMemcpyAsync(g->c, saved, bytes, cudaMemcpyHostToDevice, st->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(st->stream); /* the host copy is freed next */
        if (e != cudaSuccess)
            df_cuda_record_failure(be, __FILE__, __LINE__, "matmul algorithm search: restoring C: %s",
                                   cudaGetErrorString(e));
        cudaFreeHost(saved);
    }
    return best;
}

bool capturing(cudaStream_t s) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    return cudaStreamIsCapturing(s, &status) != cudaSuccess || status != cudaStreamCaptureStatusNone;
}

} // namespace

int df_cuda_gemm_candidates_wanted(const DfCudaState *st) {
    if (st->variant.gemm_search) return DF_GEMM_CANDIDATES;
    return st->variant.gemm_algo > 1 ? st->variant.gemm_algo : 1; /* the variant caps gemm_algo at DF_GEMM_CANDIDATES */
}

void df_cuda_gemm_choose_algo(DfBackend *be, DfMatmulPlan *p, const DfCudaGemm *g,
                              const cublasLtMatmulHeuristicResult_t *cand, int n) {
    DfCudaState *st = df_cuda_state(be);
    if (st->variant.gemm_algo > 0) { /* a fixed rank (variant gemm_algo) */
        p->algo = cand[(st->variant.gemm_algo < n ? st->variant.gemm_algo : n) - 1].algo;
        return;
    }
    p->algo = cand[0].algo;
    if (!st->variant.gemm_search) return;
    double flops = 2.0 * g->m * g->n * g->k;
    if (n < 2 || flops < SEARCH_MIN_FLOPS || st->recording || capturing(st->stream)) return;
    if (take_timed_choice(st, p)) return;
    p->algo = cand[fastest_candidate(be, p, g, cand, n)].algo;
    p->searched = 1;
}
