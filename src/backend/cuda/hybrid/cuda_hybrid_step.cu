/* conv_step (backend.h, DfConvStepArgs): the DeltaNet's causal
 * convolution + SiLU for a decode step, continuing each slot's window of
 * its last kernel-1 inputs. Two kernels in stream order:
 *   - the outputs, one thread per (new row, channel): every output depends
 *     on inputs only (window rows, then the step's rows), so the rows of a
 *     long prefill run in parallel as in k_causal_conv_silu;
 *   - the windows, one thread per (sequence, channel): it reads the old
 *     window (after the first kernel has read it), saves it when asked, and
 *     writes the last kernel-1 inputs of [window ; new rows].
 * Math as the CPU's df_causal_conv_silu_continue: fp32 sums over the taps in
 * order; the window holds the inputs exactly (bf16 values in fp32). */
#include "backend/cuda/common/cuda_internal.h"
#include "backend/cuda/decode/cuda_kv_rows.h"

#define CONV_MAX_KEEP 7 /* kernel - 1 window rows a thread holds (Qwen3.5/3.6: kernel 4) */

struct ConvStepParams {
    bf16 *out;
    const bf16 *x;
    const float *w;
    float *window, *save;
    const int32_t *slots, *row_starts;
    int n_seqs, n_rows, channels, kernel;
};

__global__ void k_conv_step_out(ConvStepParams p) {
    size_t total = (size_t)p.n_rows * p.channels;
    int keep = p.kernel - 1;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        int t = (int)(e / p.channels), c = (int)(e % p.channels);
        int i = df_kv_seq_of_row(p.row_starts, p.n_seqs, t), j = t - p.row_starts[i];
        const float *win = p.window + (size_t)p.slots[i] * keep * p.channels;
        float acc = 0.0f;
        for (int tap = 0; tap < p.kernel; tap++) {
            int src = j - keep + tap; /* < 0: window row keep + src */
            float xv = src < 0 ? win[(size_t)(keep + src) * p.channels + c]
                               : __bfloat162float(p.x[(size_t)(t - j + src) * p.channels + c]);
            acc += p.w[(size_t)c * p.kernel + tap] * xv;
        }
        p.out[e] = __float2bfloat16_rn(acc * (1.0f / (1.0f + expf(-acc)))); /* silu, as k_causal_conv_silu */
    }
}

__global__ void k_conv_step_window(ConvStepParams p) {
    size_t total = (size_t)p.n_seqs * p.channels;
    int keep = p.kernel - 1;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(e / p.channels), c = (int)(e % p.channels);
        int r0 = p.row_starts[i], n = p.row_starts[i + 1] - r0;
        size_t base = (size_t)p.slots[i] * keep * p.channels + c;
        float old[CONV_MAX_KEEP];
        for (int r = 0; r < keep; r++) {
            old[r] = p.window[base + (size_t)r * p.channels];
            if (p.save) p.save[base + (size_t)r * p.channels] = old[r];
        }
        /* row r of the new window is row n + r of [old ; new rows] */
        for (int r = 0; r < keep; r++) {
            int k = n + r;
            float v = k < keep ? old[k] : __bfloat162float(p.x[(size_t)(r0 + k - keep) * p.channels + c]);
            p.window[base + (size_t)r * p.channels] = v;
        }
    }
}

void df_cuda_conv_step(DfBackend *be, const DfConvStepArgs *a) {
    DfCudaState *st = df_cuda_state(be);
    const DfKvBatch *kb = a->batch;
    if (a->kernel - 1 > CONV_MAX_KEEP) {
        df_cuda_record_failure(be, __FILE__, __LINE__, "conv_step: a kernel of %d taps (at most %d on CUDA)",
                               a->kernel, CONV_MAX_KEEP + 1);
        return;
    }
    ConvStepParams p;
    p.out = (bf16 *)a->out.ptr;
    p.x = (const bf16 *)a->x.ptr;
    p.w = (const float *)a->w.ptr;
    p.window = (float *)a->window.ptr;
    p.save = (float *)a->save.ptr;
    p.slots = (const int32_t *)kb->slots.ptr;
    p.row_starts = (const int32_t *)kb->row_starts.ptr;
    p.n_seqs = kb->n_seqs, p.n_rows = kb->n_rows, p.channels = a->channels, p.kernel = a->kernel;
    if (p.out) {
        size_t n = (size_t)kb->n_rows * a->channels;
        k_conv_step_out<<<df_cuda_blocks(n, 256), 256, 0, st->stream>>>(p);
        DF_CUDA_CHECK_LAUNCH(be, "conv_step (outputs)");
    }
    size_t n = (size_t)kb->n_seqs * a->channels;
    k_conv_step_window<<<df_cuda_blocks(n, 256), 256, 0, st->stream>>>(p);
    DF_CUDA_CHECK_LAUNCH(be, "conv_step (windows)");
}
