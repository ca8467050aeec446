/* Recorded decode steps on CUDA (infer/decode_graphs.h, cuda_graph.cu)
 * against the same steps op by op: coder-tiny in bf16, three sequences of
 * different lengths decoded greedily with recording on and off, their
 * visible-key bound crossing a DF_KV_VISIBLE_BUCKET boundary (a new
 * recording), a sequence leaving the batch halfway and the greedy choice
 * moving onto the GPU (new keys each). A replay runs the same kernels on the
 * same buffers, so the logits must be the same bits; and replays must have
 * served most steps, or the comparison would check nothing.
 * Skips without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend/backend.h"
#include "infer/target_decode.h"
#include "model/target.h"

#define N_SEQS 3
#define STEPS 40
#define DROP_AT 20 /* sequence 1 leaves; the choice moves onto the GPU */

typedef struct Decoding {
    DfTargetDecoder d;
    float *logits;   /* [N_SEQS, vocab] of the last step */
    int32_t next[N_SEQS];
} Decoding;

static void decode_step(Decoding *r, int n, const int32_t *slots, const int32_t *ids, const int32_t *starts,
                        int on_gpu_argmax) {
    DfError err;
    DfDecodeStep step = {n, slots, ids, starts, DF_LOGITS_LAST, on_gpu_argmax ? NULL : r->logits, r->next, NULL, 0};
    if (df_target_decode(&r->d, &step, &err)) fail_msg("%s", err.msg);
}

static void test_recorded_steps_equal_op_by_op(void **state) {
    DfTestBackendPair *f = df_test_gpu_or_skip(state);
    DfError err;
    DfModelConfig cfg;
    DfTargetModel m;
    const char *dir = df_test_path("assets/coder-tiny");
    if (df_model_config_load(&cfg, dir, &err) || df_target_load(&m, f->gpu, dir, cfg.num_layers, 1, &err))
        fail_msg("%s", err.msg);
    int vocab = cfg.vocab_size;
    static const int prompt_len[N_SEQS] = {240, 100, 250};
    Decoding runs[2]; /* 0: recorded steps, 1: op by op */
    for (int r = 0; r < 2; r++) {
        if (df_target_decoder_init(&runs[r].d, &m, N_SEQS, 320, NULL, 0, &err)) fail_msg("%s", err.msg);
        df_target_decoder_set_graphs(&runs[r].d, r == 0);
        runs[r].logits = malloc((size_t)N_SEQS * vocab * sizeof(float));
    }
    assert_true(runs[0].d.graphs.enabled);
    /* the prompts in one step */
    int32_t slots[N_SEQS] = {0, 1, 2}, starts[N_SEQS + 1] = {0}, ids[1024];
    for (int i = 0; i < N_SEQS; i++) starts[i + 1] = starts[i] + prompt_len[i];
    for (int i = 0; i < starts[N_SEQS]; i++) ids[i] = (int32_t)((i * 7919L + 13) % vocab);
    for (int r = 0; r < 2; r++) decode_step(&runs[r], N_SEQS, slots, ids, starts, 0);
    int n = N_SEQS;
    for (int s = 0; s < STEPS; s++) {
        int gpu_argmax = s >= DROP_AT;
        if (s == DROP_AT) { /* sequence 1 leaves the batch */
            slots[1] = 2;
            runs[1].next[1] = runs[1].next[2];
            n = 2;
        }
        int32_t step_ids[N_SEQS], step_starts[N_SEQS + 1];
        for (int i = 0; i < n; i++) step_ids[i] = runs[1].next[i], step_starts[i] = i;
        step_starts[n] = n;
        for (int r = 0; r < 2; r++) decode_step(&runs[r], n, slots, step_ids, step_starts, gpu_argmax);
        for (int i = 0; i < n; i++)
            if (runs[0].next[i] != runs[1].next[i])
                fail_msg("step %d, sequence %d: token %d recorded, %d op by op", s, i, runs[0].next[i],
                         runs[1].next[i]);
        if (!gpu_argmax && memcmp(runs[0].logits, runs[1].logits, (size_t)n * vocab * sizeof(float)) != 0)
            fail_msg("step %d: the logits differ between recorded and op-by-op steps", s);
    }
    /* first sightings (op by op): the prompt, and 3 decode keys (bucket 256, bucket 512, 2 sequences on the GPU argmax) */
    fprintf(stderr, "recorded steps: %lu recordings, %lu replays in %d steps\n", runs[0].d.graphs.recordings,
            runs[0].d.graphs.replays, STEPS + 1);
    assert_true(runs[0].d.graphs.replays >= STEPS - 4);
    assert_int_equal(runs[1].d.graphs.replays, 0);
    for (int r = 0; r < 2; r++) {
        df_target_decoder_free(&runs[r].d);
        free(runs[r].logits);
    }
    df_target_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recorded_steps_equal_op_by_op),
    };
    return cmocka_run_group_tests(tests, df_test_backend_pair_setup, df_test_backend_pair_teardown);
}
