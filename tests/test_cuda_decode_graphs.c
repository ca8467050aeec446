/* Recorded decode steps on CUDA (target/decode_graphs.h, cuda_graph.cu)
 * against the same steps op by op: coder-tiny in bf16, three sequences of
 * different lengths decoded greedily with recording on and off, their
 * visible-key bound crossing a DF_KV_VISIBLE_BUCKET boundary (a new
 * recording), a sequence leaving the batch halfway and the greedy choice
 * moving onto the GPU (new keys each). A replay runs the same kernels on the
 * same buffers, so the logits must be the same bits; and replays must have
 * served most steps, or the comparison would check nothing.
 * And the drafter's side of speculative decoding (its proposals and context
 * appends, infer/drafter_infer.c) recorded against op by op, with every
 * accepted length 0..B-1 arising (so appends of 1..B rows).
 * Skips without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "base/test_seam.h"
#include "backend/backend.h"
#include "infer/drafter_infer.h"
#include "infer/speculative.h"
#include "target/target_decode.h"
#include "model/drafter_config.h"
#include "target/target.h"

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

/* coder-tiny, all its layers and its head, on be. */
static void load_coder_tiny(DfBackend *be, DfTargetModel *m) {
    DfError err;
    DfModelConfig cfg;
    const char *dir = df_test_path("assets/coder-tiny");
    if (df_model_config_load(&cfg, dir, &err) || df_target_load(m, be, dir, cfg.num_layers, 1, &err))
        fail_msg("%s", err.msg);
}

static void test_recorded_steps_equal_op_by_op(void **state) {
    DfTestBackendPair *f = df_test_gpu_or_skip(state);
    DfError err;
    DfTargetModel m;
    load_coder_tiny(f->gpu, &m);
    const DfModelConfig cfg = m.cfg;
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

/* The drafter's raw proposals, then the block steered so that cycle c accepts
 * exactly c mod B drafts: the first drafts replaced by the greedy
 * continuation `ref`, the next one made wrong. */
typedef struct Steer {
    const int32_t *ref;
    int n_ref, cycle, vocab;
    int32_t *proposals; /* [cycles, B] as the drafter made them */
    int max_cycles;
} Steer;

static int steer_block(void *ctx, DfSeamPoint point, void *data, DfError *err) {
    if (point != DF_SEAM_SPEC_DRAFT) return 0;
    const DfSpecDraftSeam *draft = data;
    int n_generated = draft->n_generated, b = draft->block_size;
    int32_t *block = draft->block;
    Steer *s = ctx;
    if (s->cycle < s->max_cycles) memcpy(s->proposals + (size_t)s->cycle * b, block, (size_t)b * sizeof *block);
    int accept = s->cycle++ % b;
    for (int k = 1; k < b; k++) {
        int at = n_generated + k - 1;
        int32_t right = at < s->n_ref ? s->ref[at] : 0;
        block[k] = k <= accept ? right : (right + 1) % (s->vocab - 2);
    }
    return 0;
}

#define SPEC_B 8
#define SPEC_NEW 120
#define SPEC_CYCLES 64

static void speculate(DfTargetDecoder *d, DfDrafterRunner *r, const int32_t *prompt, int n, Steer *steer,
                      DfSpecResult *res) {
    DfError err;
    DfSpecOptions o;
    memset(&o, 0, sizeof o);
    o.max_new_tokens = SPEC_NEW;
    o.block_size = SPEC_B;
    df_test_seam_set(steer ? steer_block : NULL, steer);
    int rc = df_speculative_generate(d, r, 0, prompt, n, &o, res, &err);
    df_test_seam_set(NULL, NULL);
    if (rc) fail_msg("%s", err.msg);
}

static void test_recorded_proposals_equal_op_by_op(void **state) {
    DfTestBackendPair *f = df_test_gpu_or_skip(state);
    DfError err;
    DfTargetModel m;
    load_coder_tiny(f->gpu, &m);
    const DfModelConfig cfg = m.cfg;
    DfDrafterConfig dcfg;
    DfDrafterOptions dopt = {.num_layers = 2, .block_size = SPEC_B, .mask_token_id = cfg.vocab_size - 1};
    if (df_drafter_config_from_target(&dcfg, &cfg, &dopt, &err)) fail_msg("%s", err.msg);
    DfDrafterLayout layout;
    df_drafter_layout_build(&layout, &dcfg);
    float *params = malloc(layout.total * sizeof *params);
    df_drafter_init_params(&layout, params, 7);
    int32_t prompt[200];
    for (int i = 0; i < 200; i++) prompt[i] = (int32_t)((i * 7919L + 13) % (cfg.vocab_size - 2));
    int cap = 200 + SPEC_NEW + SPEC_B;
    DfTargetDecoder d;
    DfDrafterRunner runs[2]; /* 0: recorded proposals and appends, 1: op by op */
    if (df_target_decoder_init(&d, &m, 1, cap, dcfg.target_layer_ids, dcfg.n_taps, &err)) fail_msg("%s", err.msg);
    for (int r = 0; r < 2; r++) {
        if (df_drafter_runner_init(&runs[r], f->gpu, &dcfg, params, m.embed, m.lm_head, 1, cap, &err))
            fail_msg("%s", err.msg);
        df_drafter_runner_set_graphs(&runs[r], r == 0);
    }
    assert_true(runs[0].propose_graphs.enabled && !runs[1].propose_graphs.enabled);
    /* the greedy continuation: what an unsteered speculative run gives (lossless) */
    DfSpecResult greedy, res[2];
    memset(&greedy, 0, sizeof greedy), memset(res, 0, sizeof res);
    speculate(&d, &runs[1], prompt, 200, NULL, &greedy);
    Steer steer[2];
    for (int r = 0; r < 2; r++) {
        steer[r] = (Steer){greedy.tokens.data, (int)greedy.tokens.len, 0, cfg.vocab_size,
                           calloc((size_t)SPEC_CYCLES * SPEC_B, sizeof(int32_t)), SPEC_CYCLES};
        speculate(&d, &runs[r], prompt, 200, &steer[r], &res[r]);
        assert_int_equal(res[r].tokens.len, greedy.tokens.len);
        assert_memory_equal(res[r].tokens.data, greedy.tokens.data, greedy.tokens.len * sizeof(int32_t));
    }
    int cycles = (int)res[0].accepted.len;
    assert_int_equal(cycles, (int)res[1].accepted.len);
    assert_true(cycles >= 2 * SPEC_B); /* every accepted length, twice */
    /* the last cycle's block may run past the reference: its acceptance is not steered */
    for (int c = 0; c < cycles - 1 && c < SPEC_CYCLES; c++) {
        assert_int_equal(res[0].accepted.data[c], c % SPEC_B);
        for (int k = 1; k < SPEC_B; k++)
            if (steer[0].proposals[c * SPEC_B + k] != steer[1].proposals[c * SPEC_B + k])
                fail_msg("cycle %d, block position %d: draft %d recorded, %d op by op", c, k,
                         steer[0].proposals[c * SPEC_B + k], steer[1].proposals[c * SPEC_B + k]);
    }
    /* the last proposal's logits, bit for bit */
    size_t n_logits = (size_t)SPEC_B * cfg.vocab_size;
    const float *l0 = df_drafter_logits(&runs[0], &err), *l1 = df_drafter_logits(&runs[1], &err);
    if (!l0 || !l1) fail_msg("%s", err.msg);
    assert_memory_equal(l0, l1, n_logits * sizeof *l1);
    fprintf(stderr, "drafter: %d cycles; proposals %lu recordings, %lu replays; appends %lu recordings, %lu replays\n",
            cycles, runs[0].propose_graphs.recordings, runs[0].propose_graphs.replays,
            runs[0].append_graphs.recordings, runs[0].append_graphs.replays);
    assert_true(runs[0].propose_graphs.replays >= (unsigned long)cycles - 4);
    assert_true(runs[0].append_graphs.replays >= (unsigned long)cycles / 2);
    assert_int_equal(runs[1].propose_graphs.replays + runs[1].append_graphs.replays, 0);
    for (int r = 0; r < 2; r++) {
        df_spec_result_free(&res[r]);
        free(steer[r].proposals);
        df_drafter_runner_free(&runs[r]);
    }
    df_spec_result_free(&greedy);
    free(params);
    df_drafter_layout_free(&layout);
    df_target_decoder_free(&d);
    df_target_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recorded_steps_equal_op_by_op),
        cmocka_unit_test(test_recorded_proposals_equal_op_by_op),
    };
    return cmocka_run_group_tests(tests, df_test_backend_pair_setup, df_test_backend_pair_teardown);
}
