#define _XOPEN_SOURCE 700 /* realpath */
/* dflash train: trains a drafter for a target on a token store or a JSONL
 * file (prepared once into OUTPUT/data.store), with checkpoints, resume and
 * a metrics log; with no arguments, the bundled default run. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include "base/atomic_file.h"
#include "base/hash64.h"
#include "base/output_lock.h"
#include "base/input_file.h"
#include "base/paths_apart.h"
#include "base/signals.h"
#include "base/tee_output.h"
#include "cli/args.h"
#include "cli/config_args.h"
#include "cli/commands.h"
#include "cli/train_args.h"
#include "cli/train_prompts.h"
#include "data/prepare.h"
#include "formats/json_diff.h"
#include "target/model_config.h"
#include "formats/token_store.h"
#include "text/tokenizer.h"
#include "train/trainer.h"

/* The bundled default's held-out prompts (its other paths: cli/train_args.h). */
#define DEFAULT_EVAL_DATA "assets/data/code-dev.jsonl"
/* Exit status of a run stopped by SIGINT/SIGTERM after writing its
 * checkpoint: not finished, resumable (sysexits.h's EX_TEMPFAIL), so that a
 * job script can tell it from a finished run (0) and a failed one (1). */
#define EXIT_STOPPED_RESUMABLE 75

/* ---- data: a token store as it is, or JSONL prepared into a cache ------- */

static int is_token_store(const char *path, int *yes, DfError *err) {
    FILE *fp = df_fopen_regular(path, err);
    if (!fp) return df_context(err, "--data");
    char magic[8] = {0};
    size_t got = fread(magic, 1, sizeof magic, fp);
    fclose(fp);
    *yes = got == sizeof magic && memcmp(magic, DF_TOKEN_STORE_MAGIC, sizeof magic) == 0;
    return 0;
}

/* df_hash64 of the file's bytes (read in 1 MiB chunks); option names the file in errors. */
static int content_hash(const char *path, const char *option, uint64_t *out, DfError *err) {
    FILE *fp = df_fopen_regular(path, err);
    if (!fp) return df_context(err, "%s", option);
    DfHash64 h;
    df_hash64_init(&h);
    size_t cap = 1 << 20, n;
    char *buf = df_xmalloc(cap, "data hash buffer");
    while ((n = fread(buf, 1, cap, fp)) > 0) df_hash64_update(&h, buf, n);
    int bad = ferror(fp);
    fclose(fp);
    free(buf);
    if (bad) return df_fail(err, "%s %s: read error", option, path);
    *out = df_hash64_final(&h);
    return 0;
}

/* The chat options the data was rendered with, only when given (a key
 * without them is that of a rendering with the target's template and no
 * variables): the template's path and content hash, the variables as
 * normalized JSON. */
static void add_chat_key(cJSON *j, const DfTrainOptions *o, uint64_t template_hash) {
    if (o->chat_template) {
        char *abs = realpath(o->chat_template, NULL), text[32];
        cJSON_AddStringToObject(j, "chat_template", abs ? abs : o->chat_template);
        free(abs);
        snprintf(text, sizeof text, "%016llx", (unsigned long long)template_hash);
        cJSON_AddStringToObject(j, "chat_template_hash", text);
    }
    if (!o->chat_kwargs) return;
    cJSON *kwargs = cJSON_Parse(o->chat_kwargs);
    if (kwargs) cJSON_AddItemToObject(j, "chat_template_kwargs", kwargs);
    else cJSON_AddStringToObject(j, "chat_template_kwargs", o->chat_kwargs);
}

/* What the cache was made from: the source's path, size and content hash,
 * the tokenizer's fingerprint, the length limit and the chat options. */
static char *cache_key(const DfTrainOptions *o, const struct stat *st, uint64_t hash, uint64_t fingerprint,
                       uint64_t template_hash) {
    const char *source = o->data_source;
    int max_length = (int)o->max_length;
    char *abs = realpath(source, NULL);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "source", abs ? abs : source);
    cJSON_AddNumberToObject(j, "size", (double)st->st_size);
    char text[64];
    snprintf(text, sizeof text, "%016llx", (unsigned long long)hash);
    cJSON_AddStringToObject(j, "content_hash", text);
    snprintf(text, sizeof text, "%016llx", (unsigned long long)fingerprint);
    cJSON_AddStringToObject(j, "tokenizer_fingerprint", text);
    cJSON_AddNumberToObject(j, "max_length", max_length);
    add_chat_key(j, o, template_hash);
    char *out = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    free(abs);
    return out;
}

/* The key of earlier versions (path, size, mtime; no content hash): still
 * current when the source's path, size and mtime are unchanged. */
static int legacy_key_matches(const char *stored, const char *source, const struct stat *st, uint64_t fingerprint,
                              int max_length) {
    if (!strstr(stored, "\"mtime\"") || strstr(stored, "\"content_hash\"")) return 0;
    char *abs = realpath(source, NULL);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "source", abs ? abs : source);
    cJSON_AddNumberToObject(j, "size", (double)st->st_size);
    char text[64];
    snprintf(text, sizeof text, "%lld.%09ld", (long long)st->st_mtim.tv_sec, (long)st->st_mtim.tv_nsec);
    cJSON_AddStringToObject(j, "mtime", text);
    snprintf(text, sizeof text, "%016llx", (unsigned long long)fingerprint);
    cJSON_AddStringToObject(j, "tokenizer_fingerprint", text);
    cJSON_AddNumberToObject(j, "max_length", max_length);
    char *legacy = cJSON_PrintUnformatted(j);
    int same = strcmp(legacy, stored) == 0;
    cJSON_free(legacy);
    cJSON_Delete(j);
    free(abs);
    return same;
}

/* The key file's text ("" when absent). */
static void read_key(const char *key_path, char *stored, size_t cap) {
    stored[0] = '\0';
    DfError ignored;
    FILE *fp = df_fopen_regular(key_path, &ignored);
    if (!fp) return;
    size_t n = fread(stored, 1, cap - 1, fp);
    fclose(fp);
    stored[n] = '\0';
}

static int cache_is_current(const char *store_path, const char *stored, const char *key, uint64_t fingerprint) {
    if (strcmp(stored, key) != 0) return 0;
    DfError ignored = {{0}};
    DfTokenStore *s = df_token_store_open(store_path, 0, &ignored);
    int ok = s && df_token_store_fingerprint(s) == fingerprint;
    if (s) df_token_store_close(s);
    return ok;
}

/* Whether OUTPUT/checkpoints holds a checkpoint: a --resume would continue it. */
static int has_checkpoints(const char *output_dir) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/checkpoints", output_dir);
    DIR *d = opendir(dir);
    int found = 0;
    for (struct dirent *e; d && !found && (e = readdir(d));)
        found = strncmp(e->d_name, "step-", 5) == 0 && !strstr(e->d_name, ".tmp.");
    if (d) closedir(d);
    return found;
}

/* --resume over checkpoints trained on the prepared data: preparing it again
 * from a changed source would break the resume (and replace the data the
 * checkpoints were trained on), so it is refused before anything is touched. */
static int check_resume_source(const DfTrainOptions *o, const char *stored, const char *key, const char *key_path,
                               DfError *err) {
    if (!o->resume || !has_checkpoints(o->output_dir)) return 0;
    char what[4400];
    if (!stored[0])
        snprintf(what, sizeof what, "%s, which says what the data was made from, is missing", key_path);
    else if (!df_json_diff(stored, key, what, sizeof what))
        return 0;
    return df_fail(err,
                   "--resume: --data %s is not what %s/data.store was prepared from (%s); the checkpoints in "
                   "%s/checkpoints were trained on that data, and preparing it again would break the resume: "
                   "restore the source, or start a new run in another --output (nothing was changed)",
                   o->data_source, o->output_dir, what, o->output_dir);
}

/* mkdir -p: creates the directory and any missing parents. */
static int make_dirs(const char *path, DfError *err) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return df_fail(err, "path too long: %s", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) return df_fail_errno(err, "cannot create directory %s", buf);
        *p = c;
        if (!c) return 0;
    }
}

/* --data prepared into store_path as `dflash prepare` would (the same
 * pipeline and report); its errors say so and where ("--data X: ..."). */
static int prepare_data(const DfTrainOptions *o, const char *store_path, DfError *err) {
    const char *inputs[] = {o->data_source};
    /* bad records skipped, every core, the template's date */
    DfPrepareOptions p = {.tokenizer = o->target_dir, .inputs = inputs, .n_inputs = 1, .output = store_path,
                          .max_length = (int)o->max_length, .chat_template = o->chat_template,
                          .chat_kwargs = o->chat_kwargs, .quiet = o->quiet};
    DfPrepareSummary summary;
    if (df_prepare(&p, &summary, err) != 0) return df_context(err, "--data %s", o->data_source);
    df_prepare_summary_print(&p, &summary);
    return 0;
}

/* Prepares the JSONL file into OUTPUT/data.store (prepare_data), unless the
 * cache is current. */
static int prepare_cache(const DfTrainOptions *o, const DfTokenizer *tok, char *store_path, size_t cap,
                         DfError *err) {
    struct stat st;
    uint64_t hash = 0;
    if (stat(o->data_source, &st) != 0) return df_fail_errno(err, "--data %s", o->data_source);
    if (content_hash(o->data_source, "--data", &hash, err)) return -1;
    uint64_t template_hash = 0;
    if (o->chat_template && content_hash(o->chat_template, "--chat-template", &template_hash, err)) return -1;
    snprintf(store_path, cap, "%s/data.store", o->output_dir);
    char key_path[4200], stored[8192];
    snprintf(key_path, sizeof key_path, "%s.source.json", store_path);
    read_key(key_path, stored, sizeof stored);
    uint64_t fingerprint = df_tokenizer_fingerprint(tok);
    char *key = cache_key(o, &st, hash, fingerprint, template_hash);
    int plain = !o->chat_template && !o->chat_kwargs; /* earlier keys had no chat options */
    if (plain && legacy_key_matches(stored, o->data_source, &st, fingerprint, (int)o->max_length))
        snprintf(stored, sizeof stored, "%s", key);
    int rc = 0;
    if (cache_is_current(store_path, stored, key, fingerprint)) {
        if (!o->quiet) fprintf(stderr, "train: using the prepared data %s (made from %s)\n", store_path, o->data_source);
    } else if ((rc = check_resume_source(o, stored, key, key_path, err)) == 0) {
        if (!o->quiet) fprintf(stderr, "train: preparing %s into %s\n", o->data_source, store_path);
        remove(key_path);
        rc = prepare_data(o, store_path, err);
        if (rc == 0) rc = df_atomic_write_text(key_path, key, 0, err);
    }
    cJSON_free(key);
    return rc;
}

/* Spec section 7: the first id past the tokenizer's vocabulary, which must
 * still have a row in the target's embedding. */
static int default_mask_token(const DfTokenizer *tok, const DfModelConfig *cfg, const char *target, int *id,
                              DfError *err) {
    int v = df_tokenizer_vocab_size(tok);
    if (v >= cfg->vocab_size)
        return df_fail(err,
                       "%s: the tokenizer uses all %d embedding rows, so there is no spare row for the mask token; "
                       "give --mask-token-id",
                       target, cfg->vocab_size);
    *id = v;
    return 0;
}

/* A store made with another tokenizer holds ids that mean other tokens. */
static int check_store_tokenizer(const char *path, const DfTokenizer *tok, const char *target, DfError *err) {
    DfTokenStore *s = df_token_store_open(path, 0, err);
    if (!s) return df_context(err, "--data");
    uint64_t have = df_token_store_fingerprint(s), want = df_tokenizer_fingerprint(tok);
    df_token_store_close(s);
    if (have != want)
        return df_fail(err,
                       "--data %s was tokenized with another tokenizer (fingerprint %016llx) than the target %s's "
                       "(%016llx); prepare it again with --tokenizer %s",
                       path, (unsigned long long)have, target, (unsigned long long)want, target);
    return 0;
}

static int resolve_data_and_mask(DfTrainOptions *o, char *store_path, size_t cap, DfError *err) {
    DfModelConfig cfg;
    if (df_model_config_load(&cfg, o->target_dir, err)) return df_context(err, "--target");
    int store = 0;
    if (is_token_store(o->data_source, &store, err)) return -1;
    if (make_dirs(o->output_dir, err)) return df_context(err, "--output");
    if (store && o->mask_token_id >= 0) {
        snprintf(store_path, cap, "%s", o->data_source);
        return 0;
    }
    DfTokenizer *tok = df_tokenizer_load(o->target_dir, err);
    if (!tok) return df_context(err, "--target");
    int rc = 0;
    if (o->mask_token_id < 0) rc = default_mask_token(tok, &cfg, o->target_dir, &o->mask_token_id, err);
    if (rc == 0) {
        if (store) {
            snprintf(store_path, cap, "%s", o->data_source);
            rc = check_store_tokenizer(store_path, tok, o->target_dir, err);
        } else {
            rc = prepare_cache(o, tok, store_path, cap, err);
        }
    }
    df_tokenizer_free(tok);
    return rc;
}

/* The width of the terminal on stderr (80 when it does not say). */
static int terminal_columns(void) {
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
    const char *env = getenv("COLUMNS");
    int columns = env ? atoi(env) : 0;
    return columns >= 20 ? columns : 80;
}

/* The topmost directory of path that does not exist yet (caller frees):
 * what a run creates for --output, and removes again when it fails empty.
 * NULL when path exists. */
static char *first_missing_dir(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0) return NULL;
    char *p = df_xstrdup(path), *missing = df_xstrdup(path);
    for (char *slash; (slash = strrchr(p, '/')) && slash != p;) {
        *slash = '\0';
        if (stat(p, &st) == 0) break;
        free(missing);
        missing = df_xstrdup(p);
    }
    free(p);
    return missing;
}

/* OUTPUT/train.log: what the run prints (stdout and stderr), appended to
 * by each start of the run (a resume adds to it). */
static int start_run_log(const DfTrainOptions *o, DfTeeOutput *tee, DfError *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/train.log", o->output_dir);
    return df_tee_output_start(tee, path, err);
}

/* Whether dir holds nothing but its train.log. */
static int only_a_log(const char *dir) {
    DIR *d = opendir(dir);
    int other = !d;
    for (struct dirent *e; d && !other && (e = readdir(d));)
        other = strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 && strcmp(e->d_name, "train.log") != 0;
    if (d) closedir(d);
    return !other;
}

/* After a failed run: output_dir and its parents up to top (the ones the
 * run created), each only when empty (output_dir's own train.log aside:
 * the failure is said on stderr). */
static void remove_created_dirs(const char *output_dir, const char *top) {
    char log[4200];
    snprintf(log, sizeof log, "%s/train.log", output_dir);
    if (only_a_log(output_dir)) unlink(log);
    char *p = df_xstrdup(output_dir);
    while (rmdir(p) == 0 && strcmp(p, top) != 0) {
        char *slash = strrchr(p, '/');
        if (!slash) break;
        *slash = '\0';
    }
    free(p);
}

/* One writer per run directory: the rank that writes OUTPUT (every process
 * when there is one) holds OUTPUT/train.lock for the whole run, data
 * preparation included. */
static int lock_run(const DfTrainOptions *o, DfOutputLock *lock, DfError *err) {
    int writer = o->layout == DF_LAYOUT_SPLIT ? o->target_ranks : 0;
    if (o->dist && o->dist->world_size > 1 && o->dist->rank != writer) return 0;
    if (make_dirs(o->output_dir, err)) return df_context(err, "--output");
    char path[4200];
    snprintf(path, sizeof path, "%s/train.lock", o->output_dir);
    if (df_output_lock(lock, path, o->output_dir, err)) return df_context(err, "--output");
    return 0;
}

/* ---- the command --------------------------------------------------------- */

/* Memory of each role on the training device: size (peak use). */
static void print_memory(const DfTrainSummary *s) {
    const double mib = 1024.0 * 1024.0;
    printf("train: memory on %s:", s->device);
    for (int i = 0; i < s->n_memory; i++)
        printf("%s %s %.1f MiB (peak %.1f)", i ? "," : "", s->memory[i].role, s->memory[i].capacity / mib,
               s->memory[i].peak / mib);
    if (s->device_peak_bytes)
        printf("; device peak %.1f MiB in all (target weights %.1f MiB; beyond them and the arenas: the drafter's work buffers "
               "and workspaces)",
               s->device_peak_bytes / mib, s->target_bytes / mib);
    printf("\n");
    if (s->device_peak_bytes && s->planned_bytes)
        printf("train: peak %.2f GiB against the memory plan's %.2f GiB (%.1f%%), drafter micro-batches of up to %lld "
               "block rows\n",
               s->device_peak_bytes / (mib * 1024), s->planned_bytes / (mib * 1024),
               100.0 * (double)s->device_peak_bytes / (double)s->planned_bytes, (long long)s->drafter_block_rows);
}

/* The program as the user started it (argv[0], from /proc/self/cmdline), so
 * that a printed command can be pasted back; "dflash" when unknown. */
static void program_name(char *out, size_t cap) {
    snprintf(out, cap, "dflash");
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (!f) return;
    size_t n = fread(out, 1, cap - 1, f);
    fclose(f);
    out[n] = '\0'; /* the first NUL ends argv[0] */
    if (!out[0]) snprintf(out, cap, "dflash");
}

/* The eval command for the drafter just written: the run's own held-out
 * data, or the bundled default's, or a placeholder to fill in. */
static void print_eval_hint(const DfTrainOptions *o, const DfTrainSummary *s) {
    char program[1024];
    program_name(program, sizeof program);
    int bundled = strcmp(o->target_dir, DF_TRAIN_DEFAULT_TARGET) == 0 && strcmp(o->output_dir, DF_TRAIN_DEFAULT_OUTPUT) == 0;
    const char *input = o->eval_data ? o->eval_data : bundled ? DEFAULT_EVAL_DATA : "HELD_OUT_PROMPTS.jsonl";
    printf("evaluate it with:\n  %s eval --target %s --draft %s --input %s --max-new-tokens 128%s%s\n", program,
           o->target_dir, s->final_dir, input, o->device ? " --device " : "", o->device ? o->device : "");
}

static void print_result(const DfTrainOptions *o, const DfTrainSummary *s) {
    if (s->stop_signal) {
        if (s->last_checkpoint[0])
            printf("train: %s received: stopped after step %lld of %lld; checkpoint written to %s; continue with the "
                   "same command plus --resume\n",
                   df_signal_name(s->stop_signal), (long long)s->last_step, (long long)s->total_steps,
                   s->last_checkpoint);
        else
            printf("train: %s received before the first step of this run; nothing new to save (checkpoints, if any, "
                   "are in %s/checkpoints)\n",
                   df_signal_name(s->stop_signal), o->output_dir);
        return;
    }
    if (s->last_step < s->first_step) {
        printf("train: the run was already complete at step %lld\n", (long long)s->last_step);
    } else {
        printf("train: steps %lld..%lld of %lld in %.1f s, %.0f tokens/s; mean of the first and last 10 steps: "
               "loss %.4f -> %.4f, train-tau %.3f -> %.3f\n",
               (long long)s->first_step, (long long)s->last_step, (long long)s->total_steps, s->seconds,
               s->tokens_per_s, s->first_loss, s->last_loss, s->first_tau, s->last_tau);
    }
    if (!o->quiet) {
        printf("train: metrics in %s/metrics.jsonl, checkpoints in %s/checkpoints\n", o->output_dir, o->output_dir);
        print_memory(s);
    }
    if (s->eval_best_step >= 0) /* a result line: printed under --quiet too */
        printf("train: held-out tau (%s/eval.jsonl): best %.3f at step %lld, last %.3f at step %lld (%lld eval(s) in "
               "this run, %.1f s)\n",
               o->output_dir, s->eval_best_tau, (long long)s->eval_best_step, s->eval_last_tau,
               (long long)s->eval_last_step, (long long)s->evals, s->eval_s);
    if (s->stages_path[0] && !o->quiet)
        printf("train: device busy %.1f%% of the loop's wall time (%.1f%% in steady state: without the first step "
               "and the checkpoint writes); stage times in %s\n",
               100 * s->busy, 100 * s->busy_steady, s->stages_path);
    if (s->bad_steps > 0)
        printf("train: %lld steps had a non-finite loss or gradient and made no update (see metrics.jsonl, "
               "\"skipped_update\")\n",
               (long long)s->bad_steps);
    if (s->finished) {
        printf("train: drafter written to %s (config.json, model.safetensors, dflash.py)\n", s->final_dir);
        if (s->best_dir[0] && s->final_step == s->eval_best_step)
            printf("train: %s is the drafter of step %lld, the best held-out tau (%.3f), as is %s\n",
                   s->final_dir, (long long)s->final_step, s->eval_best_tau, s->best_dir);
        else if (s->best_dir[0])
            printf("train: %s is the last step's drafter (--select-by last); %s holds step %lld's, the best held-out "
                   "tau (%.3f)\n",
                   s->final_dir, s->best_dir, (long long)s->eval_best_step, s->eval_best_tau);
        if (!o->quiet) print_eval_hint(o, s);
    } else {
        if (s->exported)
            printf("train: the drafter of step %lld written to %s (config.json, model.safetensors)\n",
                   (long long)s->last_step, s->final_dir);
        printf("train: stopped at step %lld of %lld; continue with the same command plus --resume\n",
               (long long)s->last_step, (long long)s->total_steps);
    }
}

/* The inputs and outputs of the run apart (the run replaces final/ whole
 * and rotates checkpoints/: neither may hold what it reads): 0, or the
 * usage exit code with the message printed. */
static int check_paths_apart(const DfTrainArgs *a) {
    const DfTrainOptions *o = &a->run;
    const DfPathArg ins[] = {{"--target", o->target_dir}, {"--data", o->data_source}, {"--prompts", a->prompts.path},
                             {"--init-from", o->init_from}, {"--config", a->config_path}, {"--eval-data", o->eval_data}};
    char final_dir[4200], checkpoints_dir[4200];
    snprintf(final_dir, sizeof final_dir, "%s/final", o->output_dir);
    snprintf(checkpoints_dir, sizeof checkpoints_dir, "%s/checkpoints", o->output_dir);
    const DfPathArg outs[] = {{"--output", o->output_dir},
                              {"--output", final_dir, DF_OUTPUT_WHOLE_DIR},
                              {"--output", checkpoints_dir, DF_OUTPUT_WHOLE_DIR}};
    return df_paths_apart_or_usage("train", ins, DF_COUNT(ins), outs, DF_COUNT(outs));
}

/* Data parallel: this process's place in the group (launcher variables),
 * into *dist and a->run.dist. 0, or 2 with the message printed. */
static int join_group(DfTrainArgs *a, DfDistEnv *dist) {
    DfError err = {{0}};
    if (!df_dist_env_present()) return 0;
    if (df_dist_env_read(dist, &err) != 0) {
        fprintf(stderr, "dflash train: %s\n", err.msg);
        return 2;
    }
    a->run.dist = dist;
    if (a->prompts.path && dist->world_size > 1) {
        fprintf(stderr, "dflash train: --prompts regenerates in one process; with %d ranks, run `dflash generate` "
                        "once before they start and give its output as --data\n",
                dist->world_size);
        return 2;
    }
    return 0;
}

/* The run: device check, lock, log, regeneration, data, training. */
static int run_training(DfTrainArgs *a, DfTeeOutput *tee, DfTrainSummary *summary, DfError *err) {
    DfTrainOptions *o = &a->run;
    char store_path[4096], regenerated[4200];
    DfOutputLock lock = {-1, NULL};
    int rc = df_train_check_device(o->device, o->kernel_variants, err); /* before any data is prepared */
    char *created = first_missing_dir(o->output_dir);
    if (rc == 0) rc = lock_run(o, &lock, err);
    if (rc == 0 && lock.fd >= 0) rc = start_run_log(o, tee, err); /* the writing rank's */
    if (rc == 0 && a->prompts.path) {
        rc = df_train_regenerate(&a->prompts, o, o->quiet, regenerated, sizeof regenerated, err);
        o->data_source = regenerated; /* trained on as --data would be */
    }
    if (rc == 0) rc = resolve_data_and_mask(o, store_path, sizeof store_path, err);
    if (rc == 0) {
        o->data_store = store_path;
        rc = df_train(o, summary, err);
    }
    df_output_unlock(&lock);
    if (rc != 0 && created) remove_created_dirs(o->output_dir, created);
    free(created);
    return rc;
}

static int train_main(int argc, char **argv, DfConfigArgs *config, DfTeeOutput *tee) {
    DfTrainArgs args; /* outlives the run: o->kernel_variants points into it */
    DfTrainOptions *o = &args.run;
    int exit_code;
    if (df_train_args_parse(argc, argv, &args, config, &exit_code)) return exit_code;
    if (!isatty(STDERR_FILENO)) o->log_interval_s = 30; /* a log file, not a person watching: fewer lines */
    else o->progress_columns = terminal_columns(); /* taken before stderr is copied to train.log through a pipe */
    DfDistEnv dist;
    if ((exit_code = check_paths_apart(&args)) != 0 || (exit_code = join_group(&args, &dist)) != 0) return exit_code;
    DfError err = {{0}};
    if (df_stop_signals_install(&err) != 0) { /* the loop polls the flag (base/signals.h) */
        fprintf(stderr, "dflash train: %s\n", err.msg);
        return 1;
    }
    DfTrainSummary summary;
    if (run_training(&args, tee, &summary, &err) != 0) {
        if (o->dist && o->dist->world_size > 1) fprintf(stderr, "dflash train: rank %d: %s\n", o->dist->rank, err.msg);
        else fprintf(stderr, "dflash train: %s\n", err.msg);
        int sig = df_stop_requested();
        return sig ? 128 + sig : 1; /* e.g. interrupted while preparing the data */
    }
    if (summary.rank != summary.writer_rank) {
        printf("train: rank %d of %d: done at step %lld (rank %d writes the run's files)\n", summary.rank,
               summary.world, (long long)summary.last_step, summary.writer_rank);
        return summary.stop_signal ? EXIT_STOPPED_RESUMABLE : 0;
    }
    print_result(o, &summary);
    return summary.stop_signal ? EXIT_STOPPED_RESUMABLE : 0;
}

int df_cmd_train(int argc, char **argv) {
    DfConfigArgs config = {0};
    DfTeeOutput tee = {.child = -1, .saved_out = -1, .saved_err = -1};
    int rc = train_main(argc, argv, &config, &tee);
    df_tee_output_stop(&tee);
    df_config_args_free(&config);
    return rc;
}
