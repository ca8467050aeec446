#define _XOPEN_SOURCE 700 /* realpath */
/* dflash train: trains a drafter for a target on a token store or a JSONL
 * file (prepared once into OUTPUT/data.store), with checkpoints, resume and
 * a metrics log; with no arguments, the bundled default run. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
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
#include "cli/train_prompts.h"
#include "data/prepare.h"
#include "formats/json_diff.h"
#include "target/model_config.h"
#include "formats/token_store.h"
#include "model/drafter_config.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "train/trainer.h"

/* The bundled default: a small drafter for assets/coder-tiny that trains in
 * a few minutes on two cores (paths relative to the current directory). */
#define DEFAULT_TARGET "assets/coder-tiny"
/* the target's own responses to the prompts of assets/data/code-train.jsonl
 * (spec section 5's recipe; `make demo-data` remakes it with dflash generate) */
#define DEFAULT_DATA "assets/data/code-train.regenerated.jsonl"
#define DEFAULT_OUTPUT "runs/coder-tiny"
#define DEFAULT_EVAL_DATA "assets/data/code-dev.jsonl"
/* Exit status of a run stopped by SIGINT/SIGTERM after writing its
 * checkpoint: not finished, resumable (sysexits.h's EX_TEMPFAIL), so that a
 * job script can tell it from a finished run (0) and a failed one (1). */
#define EXIT_STOPPED_RESUMABLE 75

static void apply_bundled_default(DfTrainOptions *o) {
    o->target_dir = DEFAULT_TARGET;
    o->data_source = DEFAULT_DATA;
    o->output_dir = DEFAULT_OUTPUT;
    o->draft_layers = 2;
    o->intermediate_size = 512;
    o->block_size = 16;
    o->num_taps = 3;
    o->num_anchors = 32;
    o->token_budget = 2048;
    o->steps = 500;
    o->lr = 1.5e-3;
    o->save_every = 100;
}

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
    DfPrepareOptions p;
    df_prepare_options_default(&p);
    p.tokenizer = o->target_dir, p.inputs = inputs, p.n_inputs = 1, p.output = store_path;
    p.max_length = (int)o->max_length;
    p.chat_template = o->chat_template, p.chat_kwargs = o->chat_kwargs, p.quiet = o->quiet;
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

/* An explicit --num-taps beyond what the target offers is a bad command
 * line (exit 2); a config that cannot be read is left to the run, which
 * names what is wrong with it. */
static int num_taps_out_of_range(const DfTrainOptions *o, DfError *err) {
    DfModelConfig cfg;
    DfError ignored;
    if (!o->target_dir || df_model_config_load(&cfg, o->target_dir, &ignored)) return 0;
    return df_drafter_check_num_taps(&cfg, o->num_taps, err) != 0;
}

/* A --chat-template that does not parse, --chat-template-kwargs that are
 * not a JSON object, or either with no template to apply to, are a bad
 * command line (exit 2, as for prepare), found before any data is prepared. */
static int chat_options_bad(const DfTrainOptions *o, DfError *err) {
    if (!o->chat_template && !o->chat_kwargs) return 0;
    DfChatTemplate *t = df_chat_template_open(o->target_dir, o->chat_template, o->chat_kwargs, err);
    df_chat_template_free(t);
    return !t;
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
    int bundled = strcmp(o->target_dir, DEFAULT_TARGET) == 0 && strcmp(o->output_dir, DEFAULT_OUTPUT) == 0;
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

/* Hugging Face Trainer options whose meaning differs here: what to give instead. */
static const char *const HF_OPTIONS_ADVICE[] = {
    "per_device_train_batch_size", "a batch is counted in context tokens here: give --token-budget N",
    "gradient_accumulation_steps", "a batch larger than the device holds is split into micro-batches by itself "
                                   "(--max-drafter-tokens); give the whole batch as --token-budget N",
    "resume_from_checkpoint", "give --resume: it continues from the newest checkpoint in OUTPUT/checkpoints",
    "logging_steps", "metrics.jsonl gets every step; --log-every N sets how often a progress line is printed",
    NULL};

/* Keys of a run record (OUTPUT/args.json) that --config reads past. */
static const char *const RECORD_ONLY_KEYS[] = {"dflash_version", "backends", NULL};

static int train_main(int argc, char **argv, DfConfigArgs *config, DfTeeOutput *tee) {
    DfTrainOptions o;
    df_train_options_default(&o);
    /* each written only when given (df_option_given), in the range its entry names */
    int steps = 0, epochs = 0, layers = 0, inter = 0, block = 0, taps = 0, anchors = 0, budget = 0;
    int seed = 0, save_every = 0, stop_at = 0, max_length = 0, mask = 0, resume = 0, max_bad = 0, window = 0;
    int queue_depth = 0, log_every = 0, target_ranks = 0, drafter_tokens = 0, keep = 0;
    const char *config_path = NULL; /* read by df_config_args_expand */
    const char *layout = NULL, *overlap = NULL, *select_by = NULL, *report_to = NULL;
    DfTrainPrompts prompts;
    df_train_prompts_default(&prompts);
    double gamma = 0, lr = 0, warmup = 0, peak_tflops = 0, bucket_mib = 0;
    DfStringList kernel_variant = {0};
    DfKernelVariants variants; /* parsed from kernel_variant; o.kernel_variants points here */
    int heads = 0, kv_heads = 0, head_dim = 0, eval_every = 0, eval_prompts = 0, eval_new = 0;
    const DfOption options[] = {
        {"target", DF_OPT_STRING, &o.target_dir, "DIR", "Hugging Face target directory (config.json, model.safetensors, tokenizer.json)", 0},
        {"data", DF_OPT_STRING, &o.data_source, "FILE", "token store (dflash prepare) or JSONL records (prepared once into OUTPUT/data.store)", 0},
        {"prompts", DF_OPT_STRING, &prompts.path, "FILE", "instead of --data: prompt or conversation records (as generate takes them) whose responses the target regenerates first (dflash generate, on --device, resumable) into OUTPUT/regenerated.jsonl, then trained on", 0},
        {"prompt-cuts", DF_OPT_INT, &prompts.cuts, "N", "--prompts: each prompt record's text (prompt + response) cut at N line boundaries into N prompts (OUTPUT/prompts.cut.jsonl) (default: the records as given)", 0, DF_RANGE(1, 1000)},
        {"max-new-tokens", DF_OPT_INT, &prompts.max_new_tokens, "N", "--prompts: tokens generated at most per response, as for generate (default 256)", 0, DF_RANGE(1, 1 << 20)},
        {"temperature", DF_OPT_DOUBLE, &prompts.temperature, "T", "--prompts: sampling temperature, as for generate; 0 = greedy (default)", 0, DF_RANGE(0, 100)},
        {"top-p", DF_OPT_DOUBLE, &prompts.top_p, "P", "--prompts: nucleus sampling mass, as for generate (default 1: off)", 0, DF_RANGE_POSITIVE(1)},
        {"batch", DF_OPT_INT, &prompts.batch, "N", "--prompts: sequences decoded together, as for generate (default 8)", 0, DF_RANGE(1, 4096)},
        {"no-graphs", DF_OPT_FLAG, &prompts.no_graphs, NULL, "--prompts on a GPU: no CUDA graphs in the regeneration, as for generate", 0},
        {"chat-template", DF_OPT_STRING, &o.chat_template, "FILE", "a Jinja chat template for conversations instead of the target's: the --data records prepared, the --prompts regenerated and the --eval-data decoded (as for prepare, generate and eval)", 0},
        {"chat-template-kwargs", DF_OPT_STRING, &o.chat_kwargs, "JSON", "extra chat-template variables for those conversations, as the serving stacks' chat_template_kwargs (e.g. '{\"enable_thinking\": false}')", 0},
        {"output", DF_OPT_STRING, &o.output_dir, "DIR", "run directory: metrics.jsonl, train.log, checkpoints/, final/ (best/ with --eval-data, tb/ with --report-to tensorboard)", 0, .alias = "output_dir"},
        {"steps", DF_OPT_INT, &steps, "N", "optimizer steps (one batch each); or give --epochs", 0, DF_RANGE(1, INT_MAX), .alias = "max_steps"},
        {"epochs", DF_OPT_INT, &epochs, "N", "passes over the data (default 6 when --steps is not given)", 0, DF_RANGE(1, 1e6), .alias = "num_train_epochs"},
        {"draft-layers", DF_OPT_INT, &layers, "N", "drafter decoder layers (default 5)", 0, DF_RANGE(1, 64)},
        {"intermediate-size", DF_OPT_INT, &inter, "N", "drafter MLP width (default: the target's)", 0, DF_RANGE(1, INT_MAX)},
        {"block-size", DF_OPT_INT, &block, "B", "tokens drafted per block (default 16)", 0, DF_RANGE(2, 64)},
        {"draft-heads", DF_OPT_INT, &heads, "N", "drafter query heads (default: the target's; 32 for a hybrid Qwen3.5/3.6 target)", 0, DF_RANGE(1, DF_MAX_DRAFT_HEADS)},
        {"draft-kv-heads", DF_OPT_INT, &kv_heads, "N", "drafter key/value heads, dividing --draft-heads (default: the target's; 8 for a hybrid target)", 0, DF_RANGE(1, DF_MAX_DRAFT_HEADS)},
        {"draft-head-dim", DF_OPT_INT, &head_dim, "N", "drafter head size, even, at most 256 (64, 128 or 256 on CUDA); RoPE turns all of it (default: the target's; 128 for a hybrid target)", 0, DF_RANGE(1, DF_MAX_DRAFT_HEAD_DIM)},
        {"sliding-window", DF_OPT_INT, &window, "N", "sliding-window drafter layers: a block sees only the last N context positions before its anchor (exported as layer_types sliding_attention + sliding_window; default: off)", 0, DF_RANGE(1, INT_MAX)},
        {"sliding-layers", DF_OPT_STRING, &o.sliding_layers, "LIST", "which layers slide with --sliding-window: all, none, or indices and ranges like 0,1 or 0-3 (negative: from the last) (default: all but the last)", 0},
        {"num-taps", DF_OPT_INT, &taps, "N", "target layers the drafter reads (default: as many as drafter layers)", 0, DF_RANGE(1, 256)},
        {"num-anchors", DF_OPT_INT, &anchors, "N", "blocks per sequence and epoch (default 512)", 0, DF_RANGE(1, 1 << 20)},
        {"gamma", DF_OPT_DOUBLE, &gamma, "G", "loss decay over block positions (default 7 for B=16, 5 for 10, 4 for 8)", 0, DF_RANGE_POSITIVE(1e6)},
        {"lr", DF_OPT_DOUBLE, &lr, "LR", "peak learning rate (default 6e-4)", 0, DF_RANGE_POSITIVE(10), .alias = "learning_rate"},
        {"warmup", DF_OPT_DOUBLE, &warmup, "F", "warmup fraction of the steps, then cosine to 0 (default 0.04)", 0, DF_RANGE(0, 1), .alias = "warmup_ratio"},
        {"weight-decay", DF_OPT_DOUBLE, &o.weight_decay, "W", "AdamW decoupled weight decay (default 0)", 0, DF_RANGE(0, 10), .alias = "weight_decay"},
        {"adam-beta1", DF_OPT_DOUBLE, &o.adam_beta1, "B", "AdamW first-moment decay (default 0.9)", 0, DF_RANGE(0, 0.999999), .alias = "adam_beta1"},
        {"adam-beta2", DF_OPT_DOUBLE, &o.adam_beta2, "B", "AdamW second-moment decay (default 0.999)", 0, DF_RANGE(0, 0.999999), .alias = "adam_beta2"},
        {"max-grad-norm", DF_OPT_DOUBLE, &o.max_grad_norm, "N", "clip the global gradient norm to N (default 1; 0: no clipping)", 0, DF_RANGE(0, 1e6), .alias = "max_grad_norm"},
        {"token-budget", DF_OPT_INT, &budget, "N", "context tokens per batch (default 8192)", 0, DF_RANGE(1, INT_MAX)},
        {"max-drafter-tokens", DF_OPT_INT, &drafter_tokens, "N", "drafter query positions (block rows: anchors x block size) per micro-batch; a step with more runs as several, its gradients summed (the same step up to summation order) (default: the most that fit in the device's memory beside the rest, sized and printed at start)", 0, DF_RANGE(1, INT_MAX)},
        {"seed", DF_OPT_INT, &seed, "S", "seed of init, data order and anchors, and --prompts' sampling (default 0)", 0, DF_RANGE(0, INT_MAX)},
        {"save-every", DF_OPT_INT, &save_every, "N", "checkpoint every N steps (default: only at the end)", 0, DF_RANGE(1, INT_MAX), .alias = "save_steps"},
        {"keep-checkpoints", DF_OPT_INT, &keep, "N", "newest checkpoints kept in OUTPUT/checkpoints (default 3, 0: all)", 0, DF_RANGE(0, INT_MAX), .alias = "save_total_limit"},
        {"init-from", DF_OPT_STRING, &o.init_from, "DIR", "start from this drafter's weights (a drafter directory, ours or another trainer's, or a checkpoint file) with a fresh optimizer; its shape must be this run's", 0},
        {"config", DF_OPT_STRING, &config_path, "FILE", "options from a JSON object keyed by option names, e.g. a run's OUTPUT/args.json (flags given here win)", 0},
        {"stop-at", DF_OPT_INT, &stop_at, "N", "stop after step N with a checkpoint, keeping the full run's schedule", 0, DF_RANGE(1, INT_MAX)},
        {"resume", DF_OPT_FLAG, &resume, NULL, "continue from the newest checkpoint in OUTPUT/checkpoints", 0},
        {"max-length", DF_OPT_INT, &max_length, "N", "longest sample in tokens; longer ones are skipped (default 3072)", 0, DF_RANGE(1, 1 << 30)},
        {"mask-token-id", DF_OPT_INT, &mask, "N", "mask token (default: the first id past the tokenizer's vocabulary)", 0, DF_RANGE(0, INT_MAX)},
        {"eval-data", DF_OPT_STRING, &o.eval_data, "FILE", "held-out prompts {\"prompt\"} or conversations {\"messages\"} / {\"conversations\"} (as eval takes them): greedy speculative decoding of them with the current drafter, on the training device, every --eval-every steps; tau, acceptance by position and the lossless check go to OUTPUT/eval.jsonl, the best step is named at the end", 0},
        {"eval-every", DF_OPT_INT, &eval_every, "N", "a held-out eval every N steps and at the last step (needed with --eval-data)", 0, DF_RANGE(1, INT_MAX), .alias = "eval_steps"},
        {"eval-prompts", DF_OPT_INT, &eval_prompts, "K", "the first K prompts of --eval-data (default 16)", 0, DF_RANGE(1, 1 << 20)},
        {"report-to", DF_OPT_STRING, &report_to, "jsonl|tensorboard", "where the curves go besides the console: jsonl (default: OUTPUT/metrics.jsonl and eval.jsonl) or tensorboard (those and TensorBoard event files under OUTPUT/tb/: the step's loss, train-tau, accuracy by position, lr, grad norm, tokens/s, MFU, stage times; the held-out eval's tau and acceptance by position)", 0, .alias = "report_to"},
        {"select-by", DF_OPT_STRING, &select_by, "tau|last", "which drafter final/ holds at the end: the step with the best held-out tau (tau; its drafter is also kept in OUTPUT/best/ and its checkpoint outlives --keep-checkpoints) or the last step (last) (default: tau with --eval-data, else last)", 0},
        {"eval-max-new-tokens", DF_OPT_INT, &eval_new, "M", "tokens decoded per eval prompt at most (default 128)", 0, DF_RANGE(1, 1 << 20)},
        {"device", DF_OPT_STRING, &o.device, "DEV", "cpu (default), cuda or cuda:N: where the target forward, the drafter step and the whole training state run", 0},
        {"max-bad-steps", DF_OPT_INT, &max_bad, "N", "stop after N steps in a row with a non-finite loss or gradient (skipped, no update; default 10, 0: never)", 0, DF_RANGE(0, INT_MAX)},
        {"queue-depth", DF_OPT_INT, &queue_depth, "N", "step batches the loader thread assembles ahead (default 3; 1: lock-step)", 0, DF_RANGE(1, 64)},
        {"layout", DF_OPT_STRING, &layout, "L", "data parallel: colocated (default: every rank runs the target and the drafter on its share of the batch) or split (ranks 0..T-1 run only the target and send the features to the drafter ranks T..W-1)", 0},
        {"target-ranks", DF_OPT_INT, &target_ranks, "T", "split layout: how many ranks run the target (default 1)", 0, DF_RANGE(1, 4096)},
        {"log-every", DF_OPT_INT, &log_every, "N", "a progress line every N steps (default: one a second on a terminal, one every 30 s in a log)", 0, DF_RANGE(1, INT_MAX)},
        {"random-target-weights", DF_OPT_FLAG, &o.random_target_weights, NULL, "give the target random weights instead of reading its safetensors (config.json and the tokenizer still come from --target): throughput at a model's shape without its weights", 0},
        {"overlap-grad-reduce", DF_OPT_STRING, &overlap, "on|off", "data parallel on CUDA: all-reduce gradient buckets during the backward (on, default) or after it (off)", 0},
        {"grad-bucket-mib", DF_OPT_DOUBLE, &bucket_mib, "M", "data parallel on CUDA: MiB of fp32 gradient per NCCL all-reduce bucket (default 25)", 0, DF_RANGE_POSITIVE(1 << 20)},
        {"peak-tflops", DF_OPT_DOUBLE, &peak_tflops, "T", "device peak TFLOP/s for MFU (default: 989 on H100/H200, 312 on A100, none on the CPU)", 0, DF_RANGE_POSITIVE(1e6)},
        {"kernel-variant", DF_OPT_STRING_LIST, &kernel_variant, "NAME=VALUE", "GPU: run this kernel variant instead of its default (repeatable; names and defaults as the `kernel variants:` line of `dflash bench --device cuda` prints them), e.g. an A/B of two kernels at this run's shapes", 0},
    };
    const DfCommandSpec spec = {
        "train", "train a DFlash drafter for a target", NULL,
        "Without --target, --data (or --prompts) and --output (e.g. no arguments at all), runs the bundled\n"
        "default, with paths relative to the current directory (other options still apply), on the\n"
        "target's own responses to the prompts of assets/data/code-train.jsonl (make demo-data):\n"
        "  --target " DEFAULT_TARGET " --data " DEFAULT_DATA " --output " DEFAULT_OUTPUT "\n"
        "  --draft-layers 2 --intermediate-size 512 --num-taps 3 --num-anchors 32 --token-budget 2048\n"
        "  --steps 500 --lr 1.5e-3 --save-every 100   (a few minutes on two CPU cores).\n"
        "--prompts FILE instead of --data: the target's responses to FILE's records are regenerated first\n"
        "(dflash generate, with --max-new-tokens, --temperature, --top-p, --batch, --seed) into\n"
        "OUTPUT/regenerated.jsonl, resumably, then trained on as --data would be.\n"
        "Resume is bit-exact on the CPU for the same OMP_NUM_THREADS; options that define the run\n"
        "(target, data, seed, lr, steps, sizes, ...) must match the checkpoint's.\n"
        "SIGINT/SIGTERM: the step under way finishes, a checkpoint is written, exit 75 (stopped,\n"
        "resumable with --resume); a second signal exits at once (130/143), leaving the previous\n"
        "checkpoint intact.\n"
        "Data parallel: one process per device, started as torchrun, mpirun or srun start them, with\n"
        "the same options; --device cuda means cuda:LOCAL_RANK. The layouts, launchers and NCCL are\n"
        "described in docs/distributed.md; every option in docs/usage.md.",
        options, DF_COUNT(options), HF_OPTIONS_ADVICE};
    DfParsedArgs parsed;
    DfError err = {{0}};
    int exit_code;
    if (df_config_args_expand(&spec, argc, argv, RECORD_ONLY_KEYS, config, &err)) {
        fprintf(stderr, "dflash train: %s\n", err.msg);
        return 2;
    }
    if (df_parse_command_line(&spec, config->argc, config->argv, &parsed, &exit_code)) return exit_code;
    o.quiet = parsed.quiet;
    if (o.data_source && prompts.path) {
        fprintf(stderr, "dflash train: give --data or --prompts, not both\n");
        return 2;
    }
    if (!o.target_dir && !o.data_source && !prompts.path && !o.output_dir) {
        apply_bundled_default(&o);
        if (!o.quiet) fprintf(stderr, "train: no --target/--data/--output: the bundled default (see 'dflash train --help')\n");
    } else if (!o.target_dir || !(o.data_source || prompts.path) || !o.output_dir) {
        fprintf(stderr, "dflash train: --target, --data (or --prompts) and --output go together (none of them: the "
                        "bundled default)\n");
        return 2;
    }
#define GIVEN(name) df_option_given(&spec, &parsed, name)
    static const char *const REGENERATION_OPTIONS[] = {"prompt-cuts", "max-new-tokens", "temperature", "top-p",
                                                       "batch", "no-graphs"};
    for (int i = 0; i < DF_COUNT(REGENERATION_OPTIONS) && !prompts.path; i++)
        if (GIVEN(REGENERATION_OPTIONS[i])) {
            fprintf(stderr, "dflash train: --%s goes with --prompts (the responses train regenerates)\n",
                    REGENERATION_OPTIONS[i]);
            return 2;
        }
    if (GIVEN("steps") && GIVEN("epochs")) {
        fprintf(stderr, "dflash train: give --steps or --epochs, not both\n");
        return 2;
    }
    if (layout && strcmp(layout, "colocated") != 0 && strcmp(layout, "split") != 0) {
        fprintf(stderr, "dflash train: --layout %s: colocated or split\n", layout);
        return 2;
    }
    if (GIVEN("target-ranks") && !(layout && strcmp(layout, "split") == 0)) {
        fprintf(stderr, "dflash train: --target-ranks goes with --layout split\n");
        return 2;
    }
    if (overlap && strcmp(overlap, "on") != 0 && strcmp(overlap, "off") != 0) {
        fprintf(stderr, "dflash train: --overlap-grad-reduce takes on or off, not '%s'\n", overlap);
        return 2;
    }
    if (GIVEN("steps")) o.steps = steps;
    if (GIVEN("keep-checkpoints")) o.keep_checkpoints = keep;
    if (GIVEN("epochs")) o.epochs = epochs, o.steps = 0;
    if (GIVEN("draft-layers")) o.draft_layers = layers;
    if (GIVEN("intermediate-size")) o.intermediate_size = inter;
    if (GIVEN("block-size")) o.block_size = block;
    if (GIVEN("draft-heads")) o.draft_heads = heads;
    if (GIVEN("draft-kv-heads")) o.draft_kv_heads = kv_heads;
    if (GIVEN("draft-head-dim")) o.draft_head_dim = head_dim;
    if (GIVEN("num-taps")) o.num_taps = taps;
    if (GIVEN("sliding-window")) o.sliding_window = window;
    if (GIVEN("num-anchors")) o.num_anchors = anchors;
    if (GIVEN("token-budget")) o.token_budget = budget;
    if (GIVEN("max-drafter-tokens")) o.max_drafter_tokens = drafter_tokens;
    if (GIVEN("seed")) o.seed = (uint64_t)seed;
    if (GIVEN("save-every")) o.save_every = save_every;
    if (GIVEN("stop-at")) o.stop_at = stop_at;
    if (GIVEN("max-length")) o.max_length = max_length;
    if (GIVEN("mask-token-id")) o.mask_token_id = mask;
    if (GIVEN("gamma")) o.gamma = gamma;
    if (GIVEN("lr")) o.lr = lr;
    if (GIVEN("warmup")) o.warmup = warmup;
    if (GIVEN("max-bad-steps")) o.max_bad_steps = max_bad;
    if (GIVEN("queue-depth")) o.queue_depth = queue_depth;
    if (GIVEN("grad-bucket-mib")) o.bucket_mib = bucket_mib;
    if (overlap) o.overlap_grad_reduce = strcmp(overlap, "on") == 0;
    if (layout && strcmp(layout, "split") == 0) o.layout = DF_LAYOUT_SPLIT;
    if (GIVEN("target-ranks")) o.target_ranks = target_ranks;
    if (GIVEN("log-every")) o.log_every = log_every;
    if (!isatty(STDERR_FILENO)) o.log_interval_s = 30; /* a log file, not a person watching: fewer lines */
    else o.progress_columns = terminal_columns(); /* taken before stderr is copied to train.log through a pipe */
    if (o.quiet && GIVEN("log-every")) {
        fprintf(stderr, "dflash train: --log-every asks for progress lines, --quiet for none: give one of them\n");
        return 2;
    }
    if (GIVEN("peak-tflops")) o.peak_tflops = peak_tflops;
    if (df_kernel_variants_parse(&variants, kernel_variant.items, kernel_variant.count, "--kernel-variant", &err)) {
        fprintf(stderr, "dflash train: %s\n", err.msg);
        return 2;
    }
    if (variants.count > 0) o.kernel_variants = &variants;
    if (GIVEN("eval-every")) o.eval_every = eval_every;
    if (GIVEN("eval-prompts")) o.eval_prompts = eval_prompts;
    if (GIVEN("eval-max-new-tokens")) o.eval_max_new_tokens = eval_new;
    if (GIVEN("num-taps") && num_taps_out_of_range(&o, &err)) {
        fprintf(stderr, "dflash train: %s\n", err.msg);
        return 2;
    }
    if (chat_options_bad(&o, &err)) {
        fprintf(stderr, "dflash train: %s\n", err.msg);
        return 2;
    }
    if ((GIVEN("eval-every") || GIVEN("eval-prompts") || GIVEN("eval-max-new-tokens")) && !o.eval_data) {
        fprintf(stderr, "dflash train: --eval-every, --eval-prompts and --eval-max-new-tokens go with --eval-data\n");
        return 2;
    }
    if (report_to && strcmp(report_to, "jsonl") != 0 && strcmp(report_to, "tensorboard") != 0) {
        fprintf(stderr, "dflash train: --report-to takes jsonl or tensorboard, not '%s'\n", report_to);
        return 2;
    }
    o.report_tensorboard = report_to && strcmp(report_to, "tensorboard") == 0;
    if (select_by && strcmp(select_by, "tau") != 0 && strcmp(select_by, "last") != 0) {
        fprintf(stderr, "dflash train: --select-by takes tau or last, not '%s'\n", select_by);
        return 2;
    }
    if (select_by && strcmp(select_by, "tau") == 0 && !o.eval_data) {
        fprintf(stderr, "dflash train: --select-by tau needs held-out data: give --eval-data and --eval-every\n");
        return 2;
    }
    if (select_by) o.select_by = strcmp(select_by, "tau") == 0 ? DF_SELECT_TAU : DF_SELECT_LAST;
    if (o.eval_data && !GIVEN("eval-every")) {
        fprintf(stderr, "dflash train: --eval-data needs --eval-every N (an eval every N steps)\n");
        return 2;
    }
#undef GIVEN
    const DfPathArg ins[] = {{"--target", o.target_dir}, {"--data", o.data_source}, {"--prompts", prompts.path},
                             {"--init-from", o.init_from}, {"--config", config_path}, {"--eval-data", o.eval_data}};
    /* the run replaces final/ whole and rotates checkpoints/: neither may hold what it reads */
    char final_dir[4200], checkpoints_dir[4200];
    snprintf(final_dir, sizeof final_dir, "%s/final", o.output_dir);
    snprintf(checkpoints_dir, sizeof checkpoints_dir, "%s/checkpoints", o.output_dir);
    const DfPathArg outs[] = {{"--output", o.output_dir},
                              {"--output", final_dir, DF_OUTPUT_WHOLE_DIR},
                              {"--output", checkpoints_dir, DF_OUTPUT_WHOLE_DIR}};
    if ((exit_code = df_paths_apart_or_usage("train", ins, DF_COUNT(ins), outs, DF_COUNT(outs))) != 0)
        return exit_code;
    DfDistEnv dist;
    if (df_dist_env_present()) {
        if (df_dist_env_read(&dist, &err) != 0) {
            fprintf(stderr, "dflash train: %s\n", err.msg);
            return 2;
        }
        o.dist = &dist;
        if (prompts.path && dist.world_size > 1) {
            fprintf(stderr, "dflash train: --prompts regenerates in one process; with %d ranks, run `dflash generate` "
                            "once before they start and give its output as --data\n",
                    dist.world_size);
            return 2;
        }
    }
    o.resume = resume;
    if (df_stop_signals_install(&err) != 0) { /* the loop polls the flag (base/signals.h) */
        fprintf(stderr, "dflash train: %s\n", err.msg);
        return 1;
    }
    char store_path[4096], regenerated[4200];
    DfTrainSummary summary;
    DfOutputLock lock = {-1, NULL};
    int rc = df_train_check_device(o.device, o.kernel_variants, &err); /* before any data is prepared */
    char *created = first_missing_dir(o.output_dir);
    if (rc == 0) rc = lock_run(&o, &lock, &err);
    if (rc == 0 && lock.fd >= 0) rc = start_run_log(&o, tee, &err); /* the writing rank's */
    if (rc == 0 && prompts.path) {
        rc = df_train_regenerate(&prompts, &o, o.quiet, regenerated, sizeof regenerated, &err);
        o.data_source = regenerated; /* trained on as --data would be */
    }
    if (rc == 0) rc = resolve_data_and_mask(&o, store_path, sizeof store_path, &err);
    if (rc == 0) {
        o.data_store = store_path;
        rc = df_train(&o, &summary, &err);
    }
    df_output_unlock(&lock);
    if (rc != 0 && created) remove_created_dirs(o.output_dir, created);
    free(created);
    if (rc != 0) {
        if (o.dist && o.dist->world_size > 1) fprintf(stderr, "dflash train: rank %d: %s\n", o.dist->rank, err.msg);
        else fprintf(stderr, "dflash train: %s\n", err.msg);
        int sig = df_stop_requested();
        return sig ? 128 + sig : 1; /* e.g. interrupted while preparing the data */
    }
    if (summary.rank != summary.writer_rank) {
        printf("train: rank %d of %d: done at step %lld (rank %d writes the run's files)\n", summary.rank,
               summary.world, (long long)summary.last_step, summary.writer_rank);
        return summary.stop_signal ? EXIT_STOPPED_RESUMABLE : 0;
    }
    print_result(&o, &summary);
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
