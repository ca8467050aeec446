/* Every option of `dflash train` survives its run record: for each option
 * train/train_options.def lists, a value other than its default is given,
 * args.json is written by the run's own record function, `train --config`
 * reads it back, and every recorded option comes back the same (an option
 * missing from args.json comes back as its default and fails). And runs
 * written before the option names were the identity's keys still resume:
 * a checkpoint whose resume identity spells them with underscores
 * ("token_budget") resumes bit-exactly when nothing changed and is refused,
 * naming the option, when one did; an args.json as those runs wrote it
 * starts the same run. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/train_args.h"
#include "target/model_config.h"
#include "model/drafter_config.h"
#include "model/drafter_layout.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"
#include "train/run_record.h"

/* ---- the list, as the test walks it -------------------------------------- */

#define ARGS_NO 0
#define ARGS_VALUE 1
#define ARGS_NULL_IF_0 1

static const struct {
    const char *name;
    int recorded;
} OPTIONS[] = {
#define DF_TRAIN_OPTION(name, kind, home, field, value, args, ...) {name, args},
#include "train/train_options.def"
#undef DF_TRAIN_OPTION
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

/* ---- comparing two parses, option by option ------------------------------ */

static int same_FLAG(const int *a, const int *b) { return *a == *b; }
static int same_INT(const int *a, const int *b) { return *a == *b; }
static int same_CHOICE(const int *a, const int *b) { return *a == *b; }
static int same_INT64(const int64_t *a, const int64_t *b) { return *a == *b; }
static int same_UINT64(const uint64_t *a, const uint64_t *b) { return *a == *b; }
static int same_DOUBLE(const double *a, const double *b) { return *a == *b; }
static int same_STRING(const char *const *a, const char *const *b) {
    return (!*a && !*b) || (*a && *b && strcmp(*a, *b) == 0);
}
static int same_JSON(const char *const *a, const char *const *b) { return same_STRING(a, b); }
/* a record holds a path absolute */
static int same_PATH(const char *const *a, const char *const *b) {
    if (!*a || !*b) return !*a && !*b;
    char *ra = realpath(*a, NULL), *rb = realpath(*b, NULL);
    int same = strcmp(ra ? ra : *a, rb ? rb : *b) == 0;
    free(ra), free(rb);
    return same;
}
static int same_STRING_LIST(const DfStringList *a, const DfStringList *b) { return a->count == b->count; }

/* Per option of the list: whether a and b hold the same value. */
static void compare(const DfTrainArgs *a, const DfTrainArgs *b, int *same) {
    int i = 0;
#define DF_TRAIN_OPTION(name, kind, home, field, ...) \
    same[i++] = same_##kind(&DF_TRAIN_ARG(a, home, field), &DF_TRAIN_ARG(b, home, field));
#include "train/train_options.def"
#undef DF_TRAIN_OPTION
}

/* ---- parsing, recording, reading back ------------------------------------ */

static char g_dir[512];

/* Parses the command line in `line`, which is cut into its tokens in place
 * (a's strings point into it and into *config). */
static void parse(char *line, DfTrainArgs *a, DfConfigArgs *config) {
    char *argv[128];
    int argc = 0;
    argv[argc++] = "train";
    for (char *t = strtok(line, " "); t && argc < 127; t = strtok(NULL, " ")) argv[argc++] = t;
    argv[argc] = NULL;
    int exit_code = -1;
    if (df_train_args_parse(argc, argv, a, config, &exit_code) != 0) fail_msg("train: exit %d", exit_code);
}

/* What a run with these options resolves (as the trainer does, from
 * assets/coder-tiny): the drafter config, whose shape, taps, mask token and
 * gamma are then put into o, as the run would record them (and the
 * device, "cpu" when none is given). */
static void resolve_drafter(DfTrainOptions *o, DfDrafterConfig *c) {
    DfModelConfig target;
    DfError err = {{0}};
    if (df_model_config_load(&target, df_test_path("assets/coder-tiny"), &err)) fail_msg("%s", err.msg);
    if (o->mask_token_id < 0) o->mask_token_id = 8190;
    if (!o->device) o->device = "cpu"; /* the record names the default device */
    DfDrafterOptions d = {.num_layers = o->draft_layers, .intermediate_size = o->intermediate_size,
                          .block_size = o->block_size, .n_taps = o->num_taps, .mask_token_id = o->mask_token_id,
                          .num_heads = o->draft_heads, .num_kv_heads = o->draft_kv_heads,
                          .head_dim = o->draft_head_dim};
    if (df_drafter_config_from_target(c, &target, &d, &err)) fail_msg("%s", err.msg);
    if (o->gamma > 0) c->gamma = o->gamma;
    if (df_drafter_set_sliding(c, o->sliding_window, o->sliding_layers, &err)) fail_msg("%s", err.msg);
    o->intermediate_size = c->intermediate_size;
    o->draft_heads = c->num_heads;
    o->draft_kv_heads = c->num_kv_heads;
    o->draft_head_dim = c->head_dim;
    o->num_taps = c->n_taps;
    o->gamma = c->gamma;
}

/* args.json of a's options (resolved first), read back with --config into b
 * (its command line in line[800]); the JSON in *record. */
static void round_trip(DfTrainArgs *a, DfTrainArgs *b, DfConfigArgs *config, char *line, cJSON **record) {
    DfDrafterConfig dcfg;
    resolve_drafter(&a->run, &dcfg);
    char *text = df_run_record_json(&a->run, &dcfg, NULL), path[700];
    snprintf(path, sizeof path, "%s/args.json", g_dir);
    df_test_write_file(path, text);
    *record = cJSON_Parse(text);
    cJSON_free(text);
    snprintf(line, 800, "--config %s", path);
    parse(line, b, config);
}

/* Two command lines between them give every option a value other than its
 * default (--steps and --epochs exclude each other; so do --prompts and
 * --data, and the regeneration's options go with --prompts, which a record
 * holds as the regenerated --data). */
static char *command_lines(int which, char *out, size_t cap) {
    const char *target = df_test_path("assets/coder-tiny"), *dev = df_test_path("assets/data/code-dev.jsonl");
    const char *chat = df_test_path("tests/fixtures/chat_templates/chatml-generation.jinja");
    if (which == 0)
        snprintf(out, cap,
                 "--target %s --data %s --output %s/run --chat-template %s --chat-template-kwargs "
                 "{\"enable_thinking\":false} --steps 7 --draft-layers 3 --intermediate-size 384 --block-size 8 "
                 "--draft-heads 4 --draft-kv-heads 2 --draft-head-dim 32 --sliding-window 64 --sliding-layers 0,2 "
                 "--num-taps 2 --num-anchors 20 --gamma 5.5 --lr 1e-3 --warmup 0.2 --weight-decay 0.01 "
                 "--adam-beta1 0.8 --adam-beta2 0.99 --max-grad-norm 2 --token-budget 1234 --max-drafter-tokens 640 "
                 "--seed 42 --save-every 5 --keep-checkpoints 7 --init-from %s --stop-at 3 --max-length 2000 "
                 "--mask-token-id 8000 --eval-data %s --eval-every 2 --eval-prompts 4 --report-to tensorboard "
                 "--select-by last --eval-max-new-tokens 32 --device cuda:1 --max-bad-steps 4 --queue-depth 2 "
                 "--layout split --target-ranks 2 --log-every 5 --random-target-weights --overlap-grad-reduce off "
                 "--grad-bucket-mib 12.5 --peak-tflops 100",
                 target, dev, g_dir, chat, target, dev);
    else
        snprintf(out, cap, "--target %s --data %s --output %s/run --epochs 2 --select-by tau --eval-data %s "
                 "--eval-every 3", target, dev, g_dir, dev);
    return out;
}

static void test_every_option_round_trips(void **state) {
    DfTrainArgs defaults;
    DfConfigArgs none = {0};
    char plain[64] = "--target x --data y --output z", line[8192], back[800];
    parse(plain, &defaults, &none);
    int changed[N_OPTIONS] = {0}, same[N_OPTIONS];
    for (int which = 0; which < 2; which++) {
        DfTrainArgs a, b;
        DfConfigArgs ca = {0}, cb = {0};
        parse(command_lines(which, line, sizeof line), &a, &ca);
        compare(&defaults, &a, same);
        for (int i = 0; i < N_OPTIONS; i++) changed[i] |= !same[i];
        cJSON *record;
        round_trip(&a, &b, &cb, back, &record);
        compare(&a, &b, same);
        for (int i = 0; i < N_OPTIONS; i++) {
            if (!OPTIONS[i].recorded) continue;
            if (!cJSON_GetObjectItemCaseSensitive(record, OPTIONS[i].name))
                fail_msg("args.json has no \"%s\"", OPTIONS[i].name);
            if (!same[i]) fail_msg("--%s does not come back the same from args.json (command line %d)", OPTIONS[i].name, which);
        }
        cJSON_Delete(record);
        df_config_args_free(&ca);
        df_config_args_free(&cb);
    }
    for (int i = 0; i < N_OPTIONS; i++)
        if (OPTIONS[i].recorded && !changed[i])
            fail_msg("--%s: give it a value other than its default in command_lines()", OPTIONS[i].name);
    df_config_args_free(&none);
}

/* The comparison notices an option missing from the record: the test fails
 * when the record function leaves one out. */
static void test_a_missing_option_is_noticed(void **state) {
    DfTrainArgs a, b;
    DfConfigArgs ca = {0}, cb = {0};
    char line[8192], back[800], path[700];
    parse(command_lines(0, line, sizeof line), &a, &ca);
    DfDrafterConfig dcfg;
    resolve_drafter(&a.run, &dcfg);
    char *text = df_run_record_json(&a.run, &dcfg, NULL);
    cJSON *j = cJSON_Parse(text);
    cJSON_free(text);
    cJSON_DeleteItemFromObjectCaseSensitive(j, "token-budget");
    text = cJSON_Print(j);
    snprintf(path, sizeof path, "%s/cut.json", g_dir);
    df_test_write_file(path, text);
    cJSON_free(text);
    cJSON_Delete(j);
    snprintf(back, sizeof back, "--config %s", path);
    parse(back, &b, &cb);
    int same[N_OPTIONS], differ = 0;
    compare(&a, &b, same);
    for (int i = 0; i < N_OPTIONS; i++)
        if (OPTIONS[i].recorded && !same[i]) {
            assert_string_equal(OPTIONS[i].name, "token-budget");
            differ++;
        }
    assert_int_equal(differ, 1);
    df_config_args_free(&ca);
    df_config_args_free(&cb);
}

/* ---- runs written before: identity keys with underscores ------------------ */

typedef DfTestRunDir Fixture;

static int setup_run(void **state) { return df_test_run_dir_setup(state, "oldrun"); }
static int teardown_run(void **state) { return df_test_run_dir_teardown(state); }

static void train(Fixture *f, const char *output, const char *extra, int expect_ok) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "train --target '%s' --data '%s' --output %s " DF_TEST_TINY_TRAIN_OPTIONS " %s",
             df_test_path("assets/coder-tiny"), f->data, output, extra);
    int rc = df_test_dflash_in(f, 2, cmd);
    if (expect_ok && rc != 0) fail_msg("%s exited %d:\n%s", cmd, rc, f->out);
    if (!expect_ok && rc == 0) fail_msg("%s succeeded", cmd);
}

/* The identity with every key's '-' as '_', as runs of earlier versions wrote it. */
static char *old_spelling(const char *identity) {
    cJSON *j = cJSON_Parse(identity), *out = cJSON_CreateObject();
    assert_non_null(j);
    for (const cJSON *item = j->child; item; item = item->next) {
        char key[128];
        snprintf(key, sizeof key, "%s", item->string);
        for (char *p = key; *p; p++)
            if (*p == '-') *p = '_';
        cJSON_AddItemToObject(out, key, cJSON_Duplicate(item, 1));
    }
    char *text = cJSON_PrintUnformatted(out);
    cJSON_Delete(j);
    cJSON_Delete(out);
    return text;
}

/* Rewrites the checkpoint at path with its identity in the old spelling. */
static void rewrite_identity_old(const char *dir, const char *path) {
    DfDrafterConfig cfg;
    DfDrafterLayout layout;
    float *params = NULL, *loaded = NULL;
    DfError err = {{0}};
    if (df_checkpoint_read_drafter(path, &cfg, &layout, &params, NULL, &err)) fail_msg("%s", err.msg);
    size_t *sizes = malloc((size_t)layout.n_params * sizeof *sizes);
    for (int i = 0; i < layout.n_params; i++) sizes[i] = layout.params[i].count;
    DfAdamW opt;
    const DfAdamWConfig adam = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    assert_int_equal(df_adamw_init(&opt, &adam, sizes, layout.n_params, &err), 0);
    DfTrainProgress progress;
    char *identity = NULL;
    if (df_checkpoint_load(path, &cfg, &layout, &loaded, &opt, &progress, &identity, &err)) fail_msg("%s", err.msg);
    assert_non_null(strstr(identity, "\"token-budget\""));
    char *old = old_spelling(identity);
    assert_non_null(strstr(old, "\"token_budget\""));
    if (df_checkpoint_save(dir, &cfg, &layout, loaded, &opt, &progress, old, 0, &err)) fail_msg("%s", err.msg);
    cJSON_free(old);
    free(identity);
    free(loaded);
    free(params);
    free(sizes);
    df_adamw_free(&opt);
    df_drafter_layout_free(&layout);
}

/* The metrics lines up to the timing fields (wall-clock dependent). */
static char *losses_of(const Fixture *f, const char *run) {
    char rel[256];
    snprintf(rel, sizeof rel, "%s/metrics.jsonl", run);
    char *text = df_test_read_in(f, rel), *out = calloc(1, strlen(text) + 1);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *cut = strstr(line, ", \"tokens_per_s\"");
        assert_non_null(cut);
        *cut = '\0';
        strcat(strcat(out, line), "\n");
    }
    free(text);
    return out;
}

static void test_old_identity_resumes(void **state) {
    Fixture *f = *state;
    train(f, "whole", "--steps 4", 1);
    train(f, "part", "--steps 4 --save-every 2 --stop-at 2", 1);
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/part/checkpoints", f->dir);
    snprintf(path, sizeof path, "%s/step-00000002.safetensors", dir);
    rewrite_identity_old(dir, path);

    /* a changed option is refused by name, as before */
    train(f, "part", "--steps 4 --save-every 2 --resume --token-budget 1000", 0);
    assert_non_null(strstr(f->out, "--resume: --token-budget differs"));
    /* nothing changed: accepted, and the same run to the bit */
    train(f, "part", "--steps 4 --save-every 2 --resume", 1);
    char *whole = losses_of(f, "whole"), *part = losses_of(f, "part");
    assert_string_equal(whole, part);
    free(whole), free(part);
}

/* An args.json as runs wrote it (the keys and order of the record before
 * the option list generated it) starts the same run. */
static void test_old_record_is_read(void **state) {
    Fixture *f = *state;
    train(f, "a", "--steps 3", 1);
    char path[1024], *text = malloc(8192);
    snprintf(text, 8192,
             "{\n\t\"dflash_version\":\t\"0.1.0\",\n\t\"backends\":\t\"cpu\",\n\t\"target\":\t\"%s\",\n"
             "\t\"data\":\t\"%s\",\n\t\"output\":\t\"%s/b\",\n\t\"init-from\":\tnull,\n\t\"chat-template\":\tnull,\n"
             "\t\"chat-template-kwargs\":\tnull,\n\t\"steps\":\t3,\n\t\"epochs\":\tnull,\n\t\"max-length\":\t3072,\n"
             "\t\"draft-layers\":\t1,\n\t\"intermediate-size\":\t256,\n\t\"block-size\":\t8,\n\t\"draft-heads\":\t4,\n"
             "\t\"draft-kv-heads\":\t2,\n\t\"draft-head-dim\":\t64,\n\t\"sliding-window\":\tnull,\n"
             "\t\"sliding-layers\":\tnull,\n\t\"num-taps\":\t2,\n\t\"mask-token-id\":\t8190,\n\t\"num-anchors\":\t12,\n"
             "\t\"gamma\":\t4,\n\t\"lr\":\t0.003,\n\t\"warmup\":\t0.1,\n\t\"weight-decay\":\t0,\n\t\"adam-beta1\":\t0.9,\n"
             "\t\"adam-beta2\":\t0.999,\n\t\"max-grad-norm\":\t1,\n\t\"token-budget\":\t1100,\n"
             "\t\"max-drafter-tokens\":\tnull,\n\t\"seed\":\t7,\n\t\"save-every\":\tnull,\n\t\"stop-at\":\tnull,\n"
             "\t\"keep-checkpoints\":\t3,\n\t\"max-bad-steps\":\t10,\n\t\"eval-data\":\tnull,\n\t\"eval-every\":\tnull,\n"
             "\t\"eval-prompts\":\tnull,\n\t\"eval-max-new-tokens\":\tnull,\n\t\"report-to\":\t\"jsonl\",\n"
             "\t\"select-by\":\tnull,\n\t\"device\":\t\"cpu\",\n\t\"queue-depth\":\t3,\n\t\"log-every\":\tnull,\n"
             "\t\"random-target-weights\":\tfalse,\n\t\"layout\":\t\"colocated\",\n\t\"target-ranks\":\tnull,\n"
             "\t\"overlap-grad-reduce\":\t\"on\",\n\t\"grad-bucket-mib\":\t25,\n\t\"peak-tflops\":\tnull\n}",
             df_test_path("assets/coder-tiny"), f->data, f->dir);
    snprintf(path, sizeof path, "%s/old.json", f->dir);
    df_test_write_file(path, text);
    free(text);
    if (df_test_dflash_in(f, 2, "train --config old.json") != 0) fail_msg("train --config old.json:\n%s", f->out);
    char *la = losses_of(f, "a"), *lb = losses_of(f, "b");
    assert_string_equal(la, lb);
    free(la), free(lb);
    /* and the record it writes is the old one's, key for key */
    char *ra = df_test_read_in(f, "a/args.json"), *rb = df_test_read_in(f, "b/args.json");
    cJSON *a = cJSON_Parse(ra), *b = cJSON_Parse(rb);
    cJSON_ReplaceItemInObjectCaseSensitive(b, "output", cJSON_Duplicate(cJSON_GetObjectItem(a, "output"), 1));
    assert_true(cJSON_Compare(a, b, 1));
    cJSON_Delete(a), cJSON_Delete(b);
    free(ra), free(rb);
}

static int setup_dir(void **state) {
    char *dir = df_test_tmpdir("roundtrip");
    snprintf(g_dir, sizeof g_dir, "%s", dir);
    free(dir);
    return 0;
}

static int teardown_dir(void **state) {
    df_test_rmtree(g_dir);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_every_option_round_trips, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_a_missing_option_is_noticed, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_old_identity_resumes, setup_run, teardown_run),
        cmocka_unit_test_setup_teardown(test_old_record_is_read, setup_run, teardown_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
