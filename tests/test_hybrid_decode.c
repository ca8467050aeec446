/* Incremental decoding of a hybrid target (target/target_decode.c with
 * target/hybrid_state.c) on the fixture tests/fixtures/hybrid/qwen35-random,
 * whose packed forward test_hybrid_target.c checks against transformers:
 *  - prefill and decode in uneven steps, two sequences per step, give the
 *    packed forward's logits and tap features row for row;
 *  - greedy generation equals the forward's argmax, teacher-forced;
 *  - a rolled-back verification step (any number of kept tokens, below and
 *    above the convolution's window) continues exactly as if only the kept
 *    tokens had been run; what cannot be rolled back is refused;
 *  - speculative decoding with a random drafter, and with drafts made right
 *    for a varying number of positions, equals plain greedy token for token. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"

#include "base/test_seam.h"
#include "infer/drafter_infer.h"
#include "infer/generate.h"
#include "infer/speculative.h"
#include "target/target_decode.h"
#include "model/drafter_config.h"
#include "model/drafter_layout.h"
#include "target/target.h"

#define MODEL_DIR "tests/fixtures/hybrid/qwen35-random"
/* the same fp32 arithmetic in another order (chunked recurrence, cached attention) */
#define DECODE_TOL 1e-4
#define VOCAB 256

typedef struct Fixture {
    DfBackend *be;
    DfTargetModel m;
} Fixture;

static int setup(void **state) {
    Fixture *f = calloc(1, sizeof *f);
    DfError err;
    f->be = df_backend_cpu_create(&err);
    assert_non_null(f->be);
    DfModelConfig c;
    if (df_model_config_load(&c, df_test_path(MODEL_DIR), &err)) fail_msg("%s", err.msg);
    if (df_target_load(&f->m, f->be, df_test_path(MODEL_DIR), c.num_layers, 1, &err)) fail_msg("%s", err.msg);
    assert_true(f->m.cfg.is_hybrid);
    assert_int_equal(f->m.cfg.vocab_size, VOCAB);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    Fixture *f = *state;
    df_target_free(&f->m);
    df_backend_destroy(f->be);
    free(f);
    return 0;
}

static void random_ids(int32_t *ids, int n, uint64_t seed) {
    uint64_t r = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int i = 0; i < n; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        ids[i] = (int32_t)(4 + r % (VOCAB - 4)); /* past the EOS ids 2, 3 */
    }
}

/* The packed forward of one sequence: logits [n, V] and features [n, n_taps*H]. */
static void forward(Fixture *f, const int32_t *ids, int n, const int *taps, int n_taps, float *logits, float *feats) {
    DfError err;
    int32_t starts[2] = {0, n};
    if (df_target_forward(&f->m, ids, starts, 1, taps, n_taps, feats, logits, &err)) fail_msg("%s", err.msg);
}

/* Two sequences fed in uneven steps (a whole chunk, one token, several), both in every step. */
static void test_steps_match_forward(void **state) {
    Fixture *f = *state;
    DfError err;
    enum { N0 = 23, N1 = 17 };
    int32_t ids0[N0], ids1[N1];
    random_ids(ids0, N0, 1);
    random_ids(ids1, N1, 2);
    const int taps[2] = {1, 3};
    int hid = f->m.cfg.hidden_size, nf = 2 * hid;
    DfTargetDecoder d;
    if (df_target_decoder_init(&d, &f->m, 3, 64, taps, 2, &err)) fail_msg("%s", err.msg);
    const int cuts0[] = {0, 10, 11, 16, 23}, cuts1[] = {0, 5, 12, 13, 17};
    float *got0 = malloc((size_t)N0 * VOCAB * sizeof *got0), *got1 = malloc((size_t)N1 * VOCAB * sizeof *got1);
    float *gf0 = malloc((size_t)N0 * nf * sizeof *gf0), *gf1 = malloc((size_t)N1 * nf * sizeof *gf1);
    df_target_decoder_reset_slot(&d, 2);
    df_target_decoder_reset_slot(&d, 0);
    for (int s = 0; s < 4; s++) {
        int a0 = cuts0[s], b0 = cuts0[s + 1], a1 = cuts1[s], b1 = cuts1[s + 1];
        int32_t ids[64], starts[3] = {0, b0 - a0, b0 - a0 + b1 - a1}, slots[2] = {2, 0};
        memcpy(ids, ids0 + a0, (size_t)(b0 - a0) * sizeof *ids);
        memcpy(ids + starts[1], ids1 + a1, (size_t)(b1 - a1) * sizeof *ids);
        float logits[64 * VOCAB], feats[64 * 128];
        DfDecodeStep step = {2, slots, ids, starts, DF_LOGITS_ALL, logits, NULL, feats, 0};
        if (df_target_decode(&d, &step, &err)) fail_msg("step %d: %s", s, err.msg);
        memcpy(got0 + (size_t)a0 * VOCAB, logits, (size_t)(b0 - a0) * VOCAB * sizeof *logits);
        memcpy(got1 + (size_t)a1 * VOCAB, logits + (size_t)starts[1] * VOCAB, (size_t)(b1 - a1) * VOCAB * sizeof *logits);
        memcpy(gf0 + (size_t)a0 * nf, feats, (size_t)(b0 - a0) * nf * sizeof *feats);
        memcpy(gf1 + (size_t)a1 * nf, feats + (size_t)starts[1] * nf, (size_t)(b1 - a1) * nf * sizeof *feats);
    }
    float *want = malloc((size_t)N0 * VOCAB * sizeof *want), *wf = malloc((size_t)N0 * nf * sizeof *wf);
    forward(f, ids0, N0, taps, 2, want, wf);
    double e0 = df_rel_error(got0, want, (size_t)N0 * VOCAB), ef0 = df_rel_error(gf0, wf, (size_t)N0 * nf);
    forward(f, ids1, N1, taps, 2, want, wf);
    double e1 = df_rel_error(got1, want, (size_t)N1 * VOCAB), ef1 = df_rel_error(gf1, wf, (size_t)N1 * nf);
    printf("  decode steps vs packed forward: logits %.2e %.2e, taps %.2e %.2e\n", e0, e1, ef0, ef1);
    if (!(e0 < DECODE_TOL && e1 < DECODE_TOL && ef0 < DECODE_TOL && ef1 < DECODE_TOL))
        fail_msg("decode differs from the forward: %g %g %g %g", e0, e1, ef0, ef1);
    free(got0), free(got1), free(gf0), free(gf1), free(want), free(wf);
    df_target_decoder_free(&d);
}

static void greedy_equals_forward_argmax(Fixture *f, int step_prompt_tokens, int n_pages) {
    DfError err;
    enum { NP = 3, MAX_NEW = 30 };
    int lens[NP] = {9, 14, 5};
    int32_t prompts[NP][16];
    const int32_t *pp[NP];
    for (int i = 0; i < NP; i++) random_ids(prompts[i], lens[i], 10 + i), pp[i] = prompts[i];
    DfTargetDecoder d;
    if (df_target_decoder_init_paged(&d, &f->m, 2, 64, n_pages, NULL, 0, &err)) fail_msg("%s", err.msg);
    DfGenerateOptions g = {0};
    g.max_new_tokens = MAX_NEW;
    g.top_p = 1;
    g.step_prompt_tokens = step_prompt_tokens;
    DfI32Vec out[NP] = {{0}};
    if (df_generate_batch(&d, NP, pp, lens, &g, out, NULL, &err)) fail_msg("%s", err.msg);
    for (int i = 0; i < NP; i++) {
        int n = lens[i] + (int)out[i].len;
        assert_true(out[i].len > 0);
        int32_t ids[64];
        memcpy(ids, prompts[i], (size_t)lens[i] * sizeof *ids);
        memcpy(ids + lens[i], out[i].data, out[i].len * sizeof *ids);
        float *logits = malloc((size_t)n * VOCAB * sizeof *logits);
        forward(f, ids, n, NULL, 0, logits, NULL);
        for (size_t k = 0; k < out[i].len; k++) {
            int32_t want = df_argmax_f32(logits + (size_t)(lens[i] - 1 + k) * VOCAB, VOCAB);
            if (want != out[i].data[k])
                fail_msg("prompt %d token %zu (prompt slices of %d): generated %d, forward argmax %d", i, k,
                         step_prompt_tokens, (int)out[i].data[k], (int)want);
        }
        /* the stop rule: the length limit, or an EOS the forward predicts next */
        if ((int)out[i].len < MAX_NEW) {
            int32_t next = df_argmax_f32(logits + (size_t)(n - 1) * VOCAB, VOCAB);
            assert_true(next == 2 || next == 3);
        }
        free(logits);
        df_i32vec_free(&out[i]);
    }
    df_target_decoder_free(&d);
}

/* Greedy generation (continuous batching, one token per step after the
 * prefill) against the forward's argmax, with whole prompts a step and with
 * prompts prefilled 4 tokens a step (chunked prefill: the recurrent state
 * carried from slice to slice); contiguous caches, and a paged cache of one
 * page (64 tokens) for two slots, so that each record waits for the one
 * before it to end and starts in a slot whose state that one left. */
static void test_greedy_equals_forward_argmax(void **state) {
    for (int step_prompt_tokens = 0; step_prompt_tokens <= 4; step_prompt_tokens += 4)
        for (int n_pages = 0; n_pages <= 1; n_pages++) greedy_equals_forward_argmax(*state, step_prompt_tokens, n_pages);
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Prefill P tokens, verify a block of B, roll back to P + k, continue with C
 * tokens: their logits must equal the forward over the kept tokens. */
static void test_rollback_continues_exactly(void **state) {
    Fixture *f = *state;
    DfError err;
    enum { P = 11, B = 7, C = 3 };
    int32_t ids[P + B + C], cont[C];
    random_ids(ids, P + B, 20);
    random_ids(cont, C, 21);
    DfTargetDecoder d;
    if (df_target_decoder_init(&d, &f->m, 1, 64, NULL, 0, &err)) fail_msg("%s", err.msg);
    if (df_target_decoder_enable_rollback(&d, B, &err)) fail_msg("%s", err.msg);
    int32_t slot = 0;
    double t_verify = 0, t_rollback = 0;
    for (int k = 0; k <= B; k++) {
        df_target_decoder_reset_slot(&d, 0);
        int32_t s0[2] = {0, P}, s1[2] = {0, B}, s2[2] = {0, C};
        DfDecodeStep pre = {1, &slot, ids, s0, DF_LOGITS_NONE, NULL, NULL, NULL, 0};
        DfDecodeStep verify = {1, &slot, ids + P, s1, DF_LOGITS_ALL, NULL, NULL, NULL, 0};
        float got[C * VOCAB];
        DfDecodeStep next = {1, &slot, cont, s2, DF_LOGITS_ALL, got, NULL, NULL, 0};
        if (df_target_decode(&d, &pre, &err)) fail_msg("%s", err.msg);
        double t0 = seconds();
        if (df_target_decode(&d, &verify, &err)) fail_msg("%s", err.msg);
        double t1 = seconds();
        if (df_target_decoder_rollback(&d, 0, P + k, &err)) fail_msg("keep %d: %s", k, err.msg);
        t_verify += t1 - t0, t_rollback += seconds() - t1;
        /* beyond the step, or after another step: refused */
        assert_int_equal(df_target_decoder_rollback(&d, 0, P - 1, &err), -1);
        if (df_target_decode(&d, &next, &err)) fail_msg("%s", err.msg);
        int32_t kept[P + B + C];
        memcpy(kept, ids, (size_t)(P + k) * sizeof *kept);
        memcpy(kept + P + k, cont, C * sizeof *kept);
        float *want = malloc((size_t)(P + k + C) * VOCAB * sizeof *want);
        forward(f, kept, P + k + C, NULL, 0, want, NULL);
        double e = df_rel_error(got, want + (size_t)(P + k) * VOCAB, (size_t)C * VOCAB);
        if (!(e < DECODE_TOL)) fail_msg("keep %d of %d: continuation logits differ from the forward by %g", k, B, e);
        free(want);
    }
    printf("  rollback: verify pass of %d tokens %.3f ms, rollback %.3f ms (mean over %d)\n", B,
           1e3 * t_verify / (B + 1), 1e3 * t_rollback / (B + 1), B + 1);
    /* a step longer than the recorded rows cannot be undone */
    df_target_decoder_reset_slot(&d, 0);
    int32_t s0[2] = {0, B + 2};
    DfDecodeStep big = {1, &slot, ids, s0, DF_LOGITS_NONE, NULL, NULL, NULL, 0};
    if (df_target_decode(&d, &big, &err)) fail_msg("%s", err.msg);
    assert_int_equal(df_target_decoder_rollback(&d, 0, 3, &err), -1);
    assert_non_null(strstr(err.msg, "not recorded"));
    assert_int_equal(df_target_decoder_rollback(&d, 0, B + 2, &err), -1);
    df_target_decoder_free(&d);
}

/* ---- speculative decoding ---------------------------------------------------- */

typedef struct Spec {
    DfDrafterConfig cfg;
    DfDrafterLayout layout;
    float *params;
    DfDrafterRunner runner;
    DfTargetDecoder dec;
} Spec;

static void spec_setup(Fixture *f, Spec *s, int block) {
    DfError err;
    DfDrafterOptions dopt = {.num_layers = 2, .block_size = block, .mask_token_id = VOCAB - 1};
    if (df_drafter_config_from_target(&s->cfg, &f->m.cfg, &dopt, &err)) fail_msg("%s", err.msg);
    df_drafter_layout_build(&s->layout, &s->cfg);
    s->params = df_test_random_array(s->layout.total, 77, 0.3f);
    if (df_drafter_runner_init(&s->runner, f->be, &s->cfg, s->params, f->m.embed, f->m.lm_head, 1, 128, &err))
        fail_msg("%s", err.msg);
    if (df_target_decoder_init(&s->dec, &f->m, 1, 128, s->cfg.target_layer_ids, s->cfg.n_taps, &err))
        fail_msg("%s", err.msg);
}

static void spec_free(Spec *s) {
    df_target_decoder_free(&s->dec);
    df_drafter_runner_free(&s->runner);
    df_drafter_layout_free(&s->layout);
    free(s->params);
}

/* Drafts right for (cycle % block_size) positions, then wrong: every acceptance length occurs. */
typedef struct Partial {
    const int32_t *greedy;
    size_t n;
    int cycle;
} Partial;

static int partial_hook(void *ctx, DfSeamPoint point, void *data, DfError *err) {
    if (point != DF_SEAM_SPEC_DRAFT) return 0;
    const DfSpecDraftSeam *draft = data;
    int n_generated = draft->n_generated, block_size = draft->block_size;
    int32_t *block = draft->block;
    Partial *p = ctx;
    int right = p->cycle++ % block_size;
    for (int k = 1; k < block_size; k++) {
        size_t idx = (size_t)n_generated + (size_t)k - 1;
        int32_t truth = idx < p->n ? p->greedy[idx] : 5;
        block[k] = k <= right ? truth : (int32_t)((truth + 1) % VOCAB);
    }
    return 0;
}

static void test_speculative_is_lossless(void **state) {
    Fixture *f = *state;
    DfError err;
    enum { B = 6, MAX_NEW = 40 };
    Spec s;
    spec_setup(f, &s, B);
    int seen[B] = {0};
    for (int p = 0; p < 3; p++) {
        int32_t prompt[16];
        int len = 6 + 4 * p;
        random_ids(prompt, len, 30 + p);
        DfGenerateOptions g = {0};
        g.max_new_tokens = MAX_NEW;
        g.top_p = 1;
        g.eos_ids[0] = 2, g.eos_ids[1] = 3, g.n_eos = 2;
        DfI32Vec greedy = {0};
        const int32_t *pp = prompt;
        if (df_generate_batch(&s.dec, 1, &pp, &len, &g, &greedy, NULL, &err)) fail_msg("%s", err.msg);
        for (int use_hook = 0; use_hook < 2; use_hook++) {
            DfSpecOptions o = {0};
            o.max_new_tokens = MAX_NEW;
            o.block_size = B;
            o.eos_ids[0] = 2, o.eos_ids[1] = 3, o.n_eos = 2;
            Partial partial = {greedy.data, greedy.len, 0};
            df_test_seam_set(use_hook ? partial_hook : NULL, &partial);
            DfSpecResult r = {0};
            int rc = df_speculative_generate(&s.dec, &s.runner, 0, prompt, len, &o, &r, &err);
            df_test_seam_set(NULL, NULL);
            if (rc) fail_msg("%s", err.msg);
            if (r.tokens.len != greedy.len ||
                memcmp(r.tokens.data, greedy.data, greedy.len * sizeof *greedy.data) != 0)
                fail_msg("prompt %d (%s drafts): speculative output differs from greedy (%zu vs %zu tokens)", p,
                         use_hook ? "partly right" : "random", r.tokens.len, greedy.len);
            for (size_t c = 0; c < r.accepted.len; c++) seen[r.accepted.data[c]]++;
            df_spec_result_free(&r);
        }
        df_i32vec_free(&greedy);
    }
    for (int n = 0; n < B; n++)
        if (!seen[n]) fail_msg("no cycle accepted exactly %d drafts: the rollback paths are not all exercised", n);
    spec_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_steps_match_forward, setup, teardown),
        cmocka_unit_test_setup_teardown(test_greedy_equals_forward_argmax, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rollback_continues_exactly, setup, teardown),
        cmocka_unit_test_setup_teardown(test_speculative_is_lossless, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
