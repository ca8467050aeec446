/* dflash train end to end on the bundled target (assets/coder-tiny) with a
 * tiny drafter and a slice of assets/data/code-dev.jsonl: the loss falls,
 * metrics.jsonl has one well-formed line per step, final/ is a drafter
 * directory; an interrupted and resumed run equals the uninterrupted one to
 * the bit (metrics and final weights); resume refuses changed options; a
 * drafter with its own attention shape trains, exports, loads and evaluates;
 * bad options fail with clear messages; --data whose records are all bad
 * fails with the bad lines in train's own message; drafter micro-batches
 * (--max-drafter-tokens) give the whole steps' losses within 1e-6 and their
 * weights within what a change of summation order does, and resume
 * bit-exactly. */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "target/model_config.h"
#include "formats/safetensors.h"
#include "formats/token_store.h"
#include "infer/drafter_infer.h"
#include "model/drafter_io.h"

#define TINY_OPTIONS DF_TEST_TINY_TRAIN_OPTIONS

typedef DfTestRunDir Fixture;

static int setup(void **state) { return df_test_run_dir_setup(state, "train"); }
static int teardown(void **state) { return df_test_run_dir_teardown(state); }

/* Runs dflash train with fixed threads; returns the exit status, output in
 * f->out (printed when the run fails unexpectedly). */
static int run_train_on(Fixture *f, const char *output, const char *extra, int expect_ok, int threads) {
    char args[4096];
    snprintf(args, sizeof args, "train --target '%s' --data '%s' --output '%s/%s' %s", df_test_path("assets/coder-tiny"),
             f->data, f->dir, output, extra);
    int rc = df_test_dflash_in(f, threads, args);
    if (expect_ok && rc != 0) fprintf(stderr, "dflash train exited %d:\n%s\n", rc, f->out);
    return rc;
}

static int run_train(Fixture *f, const char *output, const char *extra, int expect_ok) {
    return run_train_on(f, output, extra, expect_ok, 2);
}

static int run_train_threads(Fixture *f, const char *output, const char *extra, int threads) {
    return run_train_on(f, output, extra, 1, threads);
}

static int train(Fixture *f, const char *output, const char *extra) { return run_train(f, output, extra, 1); }
static int train_refused(Fixture *f, const char *output, const char *extra) { return run_train(f, output, extra, 0); }

/* Metrics lines with the timing fields (tokens_per_s, elapsed_s: wall-clock
 * dependent) cut off; every line must be JSON with the documented fields. */
static int read_metrics(const char *run_dir, char lines[][4096], int max, int block, double *loss) {
    char path[1024];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    char *text = df_test_read_file(path, NULL);
    assert_non_null(text);
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        assert_true(n < max);
        cJSON *j = cJSON_Parse(line);
        assert_non_null(j);
        const char *fields[] = {"step", "epoch", "loss", "train_tau", "lr", "grad_norm", "tokens", "tokens_per_s",
                                "elapsed_s"};
        for (size_t k = 0; k < sizeof fields / sizeof *fields; k++)
            assert_true(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, fields[k])));
        assert_int_equal(cJSON_GetObjectItemCaseSensitive(j, "step")->valuedouble, n + 1);
        const cJSON *acc = cJSON_GetObjectItemCaseSensitive(j, "acc");
        assert_true(cJSON_IsArray(acc));
        assert_int_equal(cJSON_GetArraySize(acc), block - 1);
        double tau = cJSON_GetObjectItemCaseSensitive(j, "train_tau")->valuedouble;
        assert_true(tau >= 1.0 && tau <= block);
        if (loss) loss[n] = cJSON_GetObjectItemCaseSensitive(j, "loss")->valuedouble;
        cJSON_Delete(j);
        char *cut = strstr(line, ", \"tokens_per_s\"");
        assert_non_null(cut);
        *cut = '\0';
        snprintf(lines[n++], 4096, "%s", line);
    }
    free(text);
    return n;
}

static void test_short_run_learns(void **state) {
    Fixture *f = *state;
    enum { STEPS = 20 };
    assert_int_equal(train(f, "run", TINY_OPTIONS " --steps 20"), 0);
    assert_non_null(strstr(f->out, "drafter written to"));
    assert_non_null(strstr(f->out, "dflash eval"));
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/run", f->dir);
    static char lines[64][4096];
    double loss[64];
    assert_int_equal(read_metrics(dir, lines, 64, 8, loss), STEPS);
    double first = (loss[0] + loss[1] + loss[2]) / 3, last = (loss[STEPS - 1] + loss[STEPS - 2] + loss[STEPS - 3]) / 3;
    fprintf(stderr, "loss: first steps %.4f, last steps %.4f\n", first, last);
    assert_true(last < first - 0.5);
    const char *files[] = {"final/config.json", "final/model.safetensors", "data.store", "checkpoints"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        assert_true(df_test_file_exists(path));
    }
    snprintf(path, sizeof path, "%s/final/config.json", dir);
    char *cfg_text = df_test_read_file(path, NULL);
    cJSON *cfg = cJSON_Parse(cfg_text);
    assert_non_null(cfg);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(cfg, "block_size")->valueint, 8);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(cfg, "num_hidden_layers")->valueint, 1);
    const cJSON *dc = cJSON_GetObjectItemCaseSensitive(cfg, "dflash_config");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(dc, "mask_token_id")->valueint, 8190); /* spec section 7 */
    cJSON_Delete(cfg);
    free(cfg_text);

    /* the same output again without --resume is refused; nothing is lost */
    assert_int_not_equal(train_refused(f, "run", TINY_OPTIONS " --steps 20"), 0);
    assert_non_null(strstr(f->out, "--resume"));
}

static void test_resume_is_bit_identical(void **state) {
    Fixture *f = *state;
    enum { STEPS = 8 };
    assert_int_equal(train(f, "whole", TINY_OPTIONS " --steps 8"), 0);
    assert_int_equal(train(f, "split", TINY_OPTIONS " --steps 8 --stop-at 4"), 0);
    assert_non_null(strstr(f->out, "stopped at step 4"));
    char path[1200];
    assert_non_null(strstr(f->out, "the drafter of step 4 written to")); /* final/ of step 4, replaced at the end */
    snprintf(path, sizeof path, "%s/split/final/model.safetensors", f->dir);
    assert_true(df_test_file_exists(path));
    /* a line past the checkpoint (as after a crash) must not survive the resume */
    snprintf(path, sizeof path, "%s/split/metrics.jsonl", f->dir);
    FILE *fp = fopen(path, "a");
    fputs("{\"step\": 5, \"loss\": 1}\n{\"step\": 6, \"lo", fp);
    fclose(fp);
    assert_int_equal(train(f, "split", TINY_OPTIONS " --steps 8 --resume"), 0);
    assert_non_null(strstr(f->out, "resuming from"));
    assert_non_null(strstr(f->out, "using the prepared data")); /* the JSONL cache is reused */

    static char whole[16][4096], split[16][4096];
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/whole", f->dir);
    snprintf(b, sizeof b, "%s/split", f->dir);
    assert_int_equal(read_metrics(a, whole, 16, 8, NULL), STEPS);
    assert_int_equal(read_metrics(b, split, 16, 8, NULL), STEPS);
    for (int i = 0; i < STEPS; i++) assert_string_equal(split[i], whole[i]);

    size_t na, nb;
    snprintf(a, sizeof a, "%s/whole/final/model.safetensors", f->dir);
    snprintf(b, sizeof b, "%s/split/final/model.safetensors", f->dir);
    char *wa = df_test_read_file(a, &na), *wb = df_test_read_file(b, &nb);
    assert_non_null(wa);
    assert_non_null(wb);
    assert_int_equal(na, nb);
    assert_memory_equal(wa, wb, na);
    free(wa);
    free(wb);

    /* a changed option that defines the run is refused, naming it */
    assert_int_not_equal(train_refused(f, "split", "--draft-layers 1 --intermediate-size 256 --num-taps 2 --block-size 8 "
                                           "--num-anchors 12 --token-budget 1100 --lr 1e-3 --warmup 0.1 --seed 7 "
                                           "--steps 8 --resume"),
                         0);
    assert_non_null(strstr(f->out, "--lr differs"));
    assert_int_not_equal(train_refused(f, "split", TINY_OPTIONS " --steps 8 --seed 8 --resume"), 0);
    assert_non_null(strstr(f->out, "--seed differs"));
}

static int config_int(const cJSON *cfg, const char *field) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, field);
    assert_true(cJSON_IsNumber(v));
    return v->valueint;
}

/* A drafter whose attention shape is not the target's (coder-tiny: 4 heads
 * of 64, 2 KV heads; here 8 heads of 32, 4 KV heads): a run stopped after a
 * checkpoint refuses to resume with another --draft-heads, naming it; resumed
 * with the same shape it exports that shape in final/config.json, which the
 * loader reads back, df_drafter_fit_target accepts against the target, and
 * `dflash eval` runs. */
#define SHAPE_OPTIONS TINY_OPTIONS " --draft-heads 8 --draft-kv-heads 4 --draft-head-dim 32 --steps 3"

static void test_own_attention_shape(void **state) {
    Fixture *f = *state;
    assert_int_equal(train(f, "shape", SHAPE_OPTIONS " --stop-at 2"), 0);
    assert_int_not_equal(train_refused(f, "shape", TINY_OPTIONS " --draft-heads 4 --draft-kv-heads 4 "
                                                   "--draft-head-dim 32 --steps 3 --resume"), 0);
    assert_non_null(strstr(f->out, "--draft-heads"));
    assert_non_null(strstr(f->out, "num_attention_heads: 8 vs 4"));
    assert_int_equal(train(f, "shape", SHAPE_OPTIONS " --resume"), 0);
    assert_non_null(strstr(f->out, "drafter written to"));

    char final_dir[1024], path[1200];
    snprintf(final_dir, sizeof final_dir, "%s/shape/final", f->dir);
    snprintf(path, sizeof path, "%s/config.json", final_dir);
    char *text = df_test_read_file(path, NULL);
    cJSON *cfg = cJSON_Parse(text);
    assert_non_null(cfg);
    assert_int_equal(config_int(cfg, "num_attention_heads"), 8);
    assert_int_equal(config_int(cfg, "num_key_value_heads"), 4);
    assert_int_equal(config_int(cfg, "head_dim"), 32);
    assert_int_equal(config_int(cfg, "hidden_size"), 256);
    cJSON_Delete(cfg);
    free(text);

    DfDrafterConfig dcfg;
    DfDrafterLayout layout;
    DfModelConfig tcfg;
    float *params = NULL;
    DfError err = {{0}};
    if (df_drafter_load(final_dir, &dcfg, &layout, &params, &err)) fail_msg("%s", err.msg);
    assert_int_equal(dcfg.num_heads, 8);
    assert_int_equal(dcfg.num_kv_heads, 4);
    assert_int_equal(dcfg.head_dim, 32);
    if (df_model_config_load(&tcfg, df_test_path("assets/coder-tiny"), &err)) fail_msg("%s", err.msg);
    if (df_drafter_fit_target(&dcfg, &tcfg, 8190, final_dir, &err)) fail_msg("%s", err.msg);
    free(params);
    df_drafter_layout_free(&layout);

    char prompts[1024], cmd[4096];
    snprintf(prompts, sizeof prompts, "%s/prompts.jsonl", f->dir);
    df_test_write_file(prompts, "{\"prompt\": \"def add(a, b):\\n\"}\n");
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=2 '%s' eval --target '%s' --draft '%s' --input '%s' --max-new-tokens 8",
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), final_dir, prompts);
    if (df_test_run(cmd, f->out, sizeof f->out) != 0) fail_msg("dflash eval failed: %s", f->out);
    assert_non_null(strstr(f->out, "8 heads of 32 (4 kv heads)"));
    assert_non_null(strstr(f->out, "tau "));
}

static void test_bad_options(void **state) {
    Fixture *f = *state;
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' train --target '%s/no-such-model' --data '%s' --output '%s/bad1' --steps 2",
             df_test_path("dflash"), f->dir, f->data, f->dir);
    assert_int_not_equal(df_test_run(cmd, f->out, sizeof f->out), 0);
    assert_non_null(strstr(f->out, "no-such-model"));

    snprintf(cmd, sizeof cmd, "'%s' train --target '%s' --data '%s/missing.jsonl' --output '%s/bad2' --steps 2",
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), f->dir, f->dir);
    assert_int_not_equal(df_test_run(cmd, f->out, sizeof f->out), 0);
    assert_non_null(strstr(f->out, "missing.jsonl"));

    snprintf(cmd, sizeof cmd, "'%s' train --target '%s' --data '%s' --output '%s/bad3' --steps 2 --epochs 1",
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), f->data, f->dir);
    assert_int_equal(df_test_run(cmd, f->out, sizeof f->out), 2);
    assert_non_null(strstr(f->out, "not both"));

    snprintf(cmd, sizeof cmd, "'%s' train --target '%s' --output '%s/bad4'", df_test_path("dflash"),
             df_test_path("assets/coder-tiny"), f->dir);
    assert_int_equal(df_test_run(cmd, f->out, sizeof f->out), 2);
    assert_non_null(strstr(f->out, "--data"));

    /* the drafter's attention shape: out of range on the command line, or not fitting together */
    assert_int_equal(train_refused(f, "bad7", TINY_OPTIONS " --steps 2 --draft-heads 0"), 2);
    assert_non_null(strstr(f->out, "--draft-heads must be in 1..256, got 0"));
    assert_int_not_equal(train_refused(f, "bad8", TINY_OPTIONS " --steps 2 --draft-heads 6 --draft-kv-heads 4"), 0);
    assert_non_null(strstr(f->out, "--draft-heads 6 must be a multiple of --draft-kv-heads 4"));
    assert_int_not_equal(train_refused(f, "bad9", TINY_OPTIONS " --steps 2 --draft-head-dim 33"), 0);
    assert_non_null(strstr(f->out, "--draft-head-dim must be even"));

    /* --resume before any checkpoint exists (a run killed early, a requeued job's first launch) starts at 0 */
    assert_int_equal(train(f, "fresh5", TINY_OPTIONS " --steps 2 --resume"), 0);
    assert_non_null(strstr(f->out, "no checkpoint"));
    assert_non_null(strstr(f->out, "starting from step 0"));

    /* a token store made with another tokenizer */
    char store[1024];
    snprintf(store, sizeof store, "%s/other.store", f->dir);
    DfError err = {{0}};
    DfTokenStoreWriter *w = df_token_store_writer_open(store, 8192, 0x1234, &err);
    assert_non_null(w);
    int32_t ids[40];
    uint8_t mask[40];
    for (int i = 0; i < 40; i++) ids[i] = i, mask[i] = i >= 4;
    assert_int_equal(df_token_store_writer_append(w, ids, mask, 40, &err), 0);
    assert_int_equal(df_token_store_writer_commit(w, &err), 0);
    snprintf(cmd, sizeof cmd, "'%s' train --target '%s' --data '%s' --output '%s/bad6' --steps 2",
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), store, f->dir);
    assert_int_not_equal(df_test_run(cmd, f->out, sizeof f->out), 0);
    assert_non_null(strstr(f->out, "another tokenizer"));
}

/* The line of out that starts with prefix (NUL-terminated copy in line), or NULL. */
static const char *line_starting(const char *out, const char *prefix, char *line, size_t cap) {
    for (const char *at = out; at && *at; at = strchr(at, '\n') ? strchr(at, '\n') + 1 : NULL) {
        if (strncmp(at, prefix, strlen(prefix)) != 0) continue;
        size_t n = strcspn(at, "\n");
        snprintf(line, cap, "%.*s", (int)(n < cap ? n : cap - 1), at);
        return line;
    }
    return NULL;
}

/* --data JSONL without a usable record: train's own error names the option,
 * the file and the bad lines with why they are bad. */
static void test_bad_data_line(void **state) {
    Fixture *f = *state;
    char data[1024];
    snprintf(data, sizeof data, "%s/bad-lines.jsonl", f->dir);
    FILE *fp = fopen(data, "w");
    assert_non_null(fp);
    fputs("{\"prompt\": \"a\"}\n{\"prompt\": \"b\", \"response\": 3}\n{\"prompt\": \"c\", \"response\": \"d\"\n", fp);
    fclose(fp);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' train --target '%s' --data '%s' --output '%s/bad-data' " TINY_OPTIONS " --steps 2",
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), data, f->dir);
    assert_int_equal(df_test_run(cmd, f->out, sizeof f->out), 1);
    char line[2048], want[1200];
    if (!line_starting(f->out, "dflash train: ", line, sizeof line)) fail_msg("no train error in:\n%s", f->out);
    snprintf(want, sizeof want, "--data %s: no usable records", data);
    if (!strstr(line, want)) fail_msg("'%s' not in '%s'", want, line);
    snprintf(want, sizeof want, "%s:1: missing field \"response\"", data);
    if (!strstr(line, want)) fail_msg("'%s' not in '%s'", want, line);
    snprintf(want, sizeof want, "%s:3: ", data);
    if (!strstr(line, want) || !strstr(line, "invalid JSON")) fail_msg("line 3's invalid JSON not in '%s'", line);
    assert_null(strstr(f->out, "see the message above"));
}

/* The fp32 weights of a run's checkpoint of step `step`. */
static float *checkpoint_params(const Fixture *f, const char *run, int step, size_t *n) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s/checkpoints/step-%08d.safetensors", f->dir, run, step);
    DfSafetensors st;
    DfError err;
    if (df_safetensors_open(&st, path, &err)) fail_msg("%s", err.msg);
    const DfTensorInfo *t = df_safetensors_find(&st, "params");
    assert_non_null(t);
    assert_int_equal(t->dtype, DF_DTYPE_F32);
    float *out = malloc(t->nbytes);
    memcpy(out, t->data, t->nbytes);
    *n = t->nbytes / sizeof *out;
    df_safetensors_close(&st);
    return out;
}

static void test_micro_batches_match_whole_steps(void **state) {
    Fixture *f = *state;
    enum { STEPS = 8 };
    assert_int_equal(train(f, "whole", TINY_OPTIONS " --steps 8"), 0);
    assert_non_null(strstr(f->out, "the largest step takes 1 of them"));
    /* 5 blocks of 8 rows a micro-batch; a sequence has up to 12 blocks, so sequences are cut */
    assert_int_equal(train(f, "micro", TINY_OPTIONS " --steps 8 --max-drafter-tokens 40"), 0);
    assert_non_null(strstr(f->out, "micro-batches of up to 40 block rows"));
    assert_null(strstr(f->out, "takes 1 of them"));
    static char whole[16][4096], micro[16][4096];
    double loss_whole[16], loss_micro[16];
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/whole", f->dir);
    snprintf(b, sizeof b, "%s/micro", f->dir);
    assert_int_equal(read_metrics(a, whole, 16, 8, loss_whole), STEPS);
    assert_int_equal(read_metrics(b, micro, 16, 8, loss_micro), STEPS);
    double worst = 0;
    for (int i = 0; i < STEPS; i++) {
        double e = fabs(loss_micro[i] - loss_whole[i]) / fabs(loss_whole[i]);
        if (!(e <= 1e-6)) fail_msg("step %d: loss %.9g in micro-batches, %.9g whole", i + 1, loss_micro[i], loss_whole[i]);
        if (e > worst) worst = e;
    }
    size_t na, nb;
    float *pa = checkpoint_params(f, "whole", STEPS, &na), *pb = checkpoint_params(f, "micro", STEPS, &nb);
    assert_int_equal(na, nb);
    double e = df_rel_error(pb, pa, na);
    /* The weights after AdamW are compared with what any change of summation
     * order does to them: the same whole-step run on one thread instead of
     * two (the CPU ops split their work by the thread count). AdamW divides
     * each gradient element by its own running size, so an element whose
     * gradient is small beside the others gets the rounding of the large
     * terms as a relative error of its update; 1e-6 holds for the gradients
     * of a step (test_drafter) and the losses, not for every weight after
     * such updates. */
    assert_int_equal(run_train_threads(f, "whole-1-thread", TINY_OPTIONS " --steps 8", 1), 0);
    float *pt = checkpoint_params(f, "whole-1-thread", STEPS, &nb);
    double e_threads = df_rel_error(pt, pa, na);
    fprintf(stderr, "micro-batches against whole steps: loss within %.2e, final weights within %.2e (one thread "
                    "against two: %.2e)\n", worst, e, e_threads);
    double bound = 3 * e_threads > 1e-5 ? 3 * e_threads : 1e-5; /* as test_train_dist bounds its ranks */
    if (!(e <= bound)) fail_msg("final weights differ by %.3g, summation order alone by %.3g", e, e_threads);
    free(pt);
    free(pa), free(pb);

    /* stopped and resumed in micro-batches: the same run to the bit */
    assert_int_equal(train(f, "micro-resumed", TINY_OPTIONS " --steps 8 --max-drafter-tokens 40 --stop-at 3"), 0);
    assert_int_equal(train(f, "micro-resumed", TINY_OPTIONS " --steps 8 --max-drafter-tokens 40 --resume"), 0);
    static char resumed[16][4096];
    snprintf(b, sizeof b, "%s/micro-resumed", f->dir);
    assert_int_equal(read_metrics(b, resumed, 16, 8, NULL), STEPS);
    for (int i = 0; i < STEPS; i++) assert_string_equal(resumed[i], micro[i]);
    pa = checkpoint_params(f, "micro", STEPS, &na), pb = checkpoint_params(f, "micro-resumed", STEPS, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(pa, pb, na * sizeof *pa);
    free(pa), free(pb);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_short_run_learns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_is_bit_identical, setup, teardown),
        cmocka_unit_test_setup_teardown(test_own_attention_shape, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_options, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_data_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_micro_batches_match_whole_steps, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
