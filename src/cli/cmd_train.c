#define _XOPEN_SOURCE 700 /* realpath */
/* dflash train: trains a drafter for a target on a token store or a JSONL
 * file (prepared once into OUTPUT/data.store), with checkpoints, resume and
 * a metrics log; with no arguments, the bundled default run. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/atomic_file.h"
#include "base/signals.h"
#include "cli/args.h"
#include "cli/config_args.h"
#include "cli/commands.h"
#include "formats/model_config.h"
#include "formats/token_store.h"
#include "model/drafter_config.h"
#include "text/tokenizer.h"
#include "train/trainer.h"

/* The bundled default: a small drafter for assets/coder-tiny that trains in
 * a few minutes on two cores (paths relative to the current directory). */
#define DEFAULT_TARGET "assets/coder-tiny"
#define DEFAULT_DATA "assets/data/code-train.jsonl"
#define DEFAULT_OUTPUT "runs/coder-tiny"
#define DEFAULT_EVAL_DATA "assets/data/code-dev.jsonl"

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
    FILE *fp = fopen(path, "rb");
    if (!fp) return df_fail_errno(err, "--data %s: cannot open", path);
    char magic[8] = {0};
    size_t got = fread(magic, 1, sizeof magic, fp);
    fclose(fp);
    *yes = got == sizeof magic && memcmp(magic, DF_TOKEN_STORE_MAGIC, sizeof magic) == 0;
    return 0;
}

/* What the cache was made from: the source's path, size and mtime, the
 * tokenizer's fingerprint and the length limit. */
static char *cache_key(const char *source, const struct stat *st, uint64_t fingerprint, int max_length) {
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
    char *out = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    free(abs);
    return out;
}

static int cache_is_current(const char *store_path, const char *key_path, const char *key, uint64_t fingerprint) {
    FILE *fp = fopen(key_path, "r");
    if (!fp) return 0;
    char stored[8192];
    size_t n = fread(stored, 1, sizeof stored - 1, fp);
    fclose(fp);
    stored[n] = '\0';
    if (strcmp(stored, key) != 0) return 0;
    DfError ignored = {{0}};
    DfTokenStore *s = df_token_store_open(store_path, 0, &ignored);
    int ok = s && df_token_store_fingerprint(s) == fingerprint;
    if (s) df_token_store_close(s);
    return ok;
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

/* Prepares the JSONL file into OUTPUT/data.store with `dflash prepare`
 * (the same code path and report), unless the cache is current. */
static int prepare_cache(const DfTrainOptions *o, const DfTokenizer *tok, char *store_path, size_t cap,
                         DfError *err) {
    struct stat st;
    if (stat(o->data_source, &st) != 0) return df_fail_errno(err, "--data %s", o->data_source);
    snprintf(store_path, cap, "%s/data.store", o->output_dir);
    char key_path[4200];
    snprintf(key_path, sizeof key_path, "%s.source.json", store_path);
    uint64_t fingerprint = df_tokenizer_fingerprint(tok);
    char *key = cache_key(o->data_source, &st, fingerprint, (int)o->max_length);
    int rc = 0;
    if (cache_is_current(store_path, key_path, key, fingerprint)) {
        fprintf(stderr, "train: using the prepared data %s (made from %s)\n", store_path, o->data_source);
    } else {
        fprintf(stderr, "train: preparing %s into %s\n", o->data_source, store_path);
        remove(key_path);
        char max_length[32];
        snprintf(max_length, sizeof max_length, "%lld", (long long)o->max_length);
        char *argv[] = {"prepare", "--tokenizer", (char *)o->target_dir, "--input", (char *)o->data_source,
                        "--output", store_path, "--max-length", max_length, NULL};
        if (df_cmd_prepare(DF_COUNT(argv) - 1, argv) != 0) {
            rc = df_fail(err, "could not prepare %s (see the message above)", o->data_source);
        } else {
            DfAtomicFile f;
            rc = df_atomic_open(&f, key_path, err);
            if (rc == 0) {
                fputs(key, f.fp);
                rc = df_atomic_commit(&f, err);
            }
        }
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
    printf("train: metrics in %s/metrics.jsonl, checkpoints in %s/checkpoints\n", o->output_dir, o->output_dir);
    print_memory(s);
    if (s->stages_path[0])
        printf("train: device busy %.1f%% of the loop's wall time (%.1f%% in steady state: without the first step "
               "and the checkpoint writes); stage times in %s\n",
               100 * s->busy, 100 * s->busy_steady, s->stages_path);
    if (s->bad_steps > 0)
        printf("train: %lld steps had a non-finite loss or gradient and made no update (see metrics.jsonl, "
               "\"skipped_update\")\n",
               (long long)s->bad_steps);
    if (s->finished) {
        printf("train: drafter written to %s (config.json, model.safetensors)\n", s->final_dir);
        printf("evaluate it with:\n  ./dflash eval --target %s --draft %s --input %s --max-new-tokens 128\n", o->target_dir, s->final_dir,
               DEFAULT_EVAL_DATA);
    } else {
        if (s->exported)
            printf("train: the drafter of step %lld written to %s (config.json, model.safetensors)\n",
                   (long long)s->last_step, s->final_dir);
        printf("train: stopped at step %lld of %lld; continue with the same command plus --resume\n",
               (long long)s->last_step, (long long)s->total_steps);
    }
}

/* One of the drafter's attention-shape options: INT_MIN when not given
 * (the trainer's default); a given value must lie in 1..max (divisibility
 * and evenness are checked with the target's defaults, by the trainer). */
static int check_shape_option(const char *name, int value, int max, int *dest) {
    if (value == INT_MIN) return 0;
    if (value <= 0 || value > max) {
        fprintf(stderr, "dflash train: --%s must be in 1..%d, got %d\n", name, max, value);
        return -1;
    }
    *dest = value;
    return 0;
}

/* Keys of a run record (OUTPUT/args.json) that --config reads past. */
static const char *const RECORD_ONLY_KEYS[] = {"dflash_version", "backends", NULL};

static int train_main(int argc, char **argv, DfConfigArgs *config) {
    DfTrainOptions o;
    df_train_options_default(&o);
    /* -1: not given (every option below takes only non-negative values) */
    int steps = -1, epochs = -1, layers = -1, inter = -1, block = -1, taps = -1, anchors = -1, budget = -1;
    int seed = -1, save_every = -1, stop_at = -1, max_length = -1, mask = -1, resume = 0, max_bad = -1, window = -1;
    int queue_depth = -1, log_every = -1, target_ranks = -1, drafter_tokens = -1, keep = -1;
    const char *config_path = NULL; /* read by df_config_args_expand */
    const char *layout = NULL, *overlap = NULL;
    double gamma = -1, lr = -1, warmup = -1, peak_tflops = -1, bucket_mib = -1;
    /* INT_MIN: not given (a given value must be positive; the trainer checks it further) */
    int heads = INT_MIN, kv_heads = INT_MIN, head_dim = INT_MIN;
    const DfOption options[] = {
        {"target", DF_OPT_STRING, &o.target_dir, "DIR", "Hugging Face target directory (config.json, model.safetensors, tokenizer.json)", 0},
        {"data", DF_OPT_STRING, &o.data_source, "FILE", "token store (dflash prepare) or JSONL records (prepared once into OUTPUT/data.store)", 0},
        {"output", DF_OPT_STRING, &o.output_dir, "DIR", "run directory: metrics.jsonl, checkpoints/, final/", 0},
        {"steps", DF_OPT_INT, &steps, "N", "optimizer steps (one batch each); or give --epochs", 0},
        {"epochs", DF_OPT_INT, &epochs, "N", "passes over the data (default 6 when --steps is not given)", 0},
        {"draft-layers", DF_OPT_INT, &layers, "N", "drafter decoder layers (default 5)", 0},
        {"intermediate-size", DF_OPT_INT, &inter, "N", "drafter MLP width (default: the target's)", 0},
        {"block-size", DF_OPT_INT, &block, "B", "tokens drafted per block (default 16)", 0},
        {"draft-heads", DF_OPT_INT, &heads, "N", "drafter query heads (default: the target's; 32 for a hybrid Qwen3.5/3.6 target)", 0},
        {"draft-kv-heads", DF_OPT_INT, &kv_heads, "N", "drafter key/value heads, dividing --draft-heads (default: the target's; 8 for a hybrid target)", 0},
        {"draft-head-dim", DF_OPT_INT, &head_dim, "N", "drafter head size, even, at most 256 (64 or 128 on CUDA); RoPE turns all of it (default: the target's; 128 for a hybrid target)", 0},
        {"sliding-window", DF_OPT_INT, &window, "N", "sliding-window drafter layers: a block sees only the last N context positions before its anchor (exported as layer_types sliding_attention + sliding_window; default: off)", 0},
        {"sliding-layers", DF_OPT_STRING, &o.sliding_layers, "LIST", "which layers slide with --sliding-window: all, none, or indices and ranges like 0,1 or 0-3 (negative: from the last) (default: all but the last)", 0},
        {"num-taps", DF_OPT_INT, &taps, "N", "target layers the drafter reads (default: as many as drafter layers)", 0},
        {"num-anchors", DF_OPT_INT, &anchors, "N", "blocks per sequence and epoch (default 512)", 0},
        {"gamma", DF_OPT_DOUBLE, &gamma, "G", "loss decay over block positions (default 7 for B=16, 5 for 10, 4 for 8)", 0},
        {"lr", DF_OPT_DOUBLE, &lr, "LR", "peak learning rate (default 6e-4)", 0},
        {"warmup", DF_OPT_DOUBLE, &warmup, "F", "warmup fraction of the steps, then cosine to 0 (default 0.04)", 0},
        {"token-budget", DF_OPT_INT, &budget, "N", "context tokens per batch (default 8192)", 0},
        {"max-drafter-tokens", DF_OPT_INT, &drafter_tokens, "N", "drafter query positions (block rows: anchors x block size) per micro-batch; a step with more runs as several, its gradients summed (the same step up to summation order) (default: the most that fit in the device's memory beside the rest, sized and printed at start)", 0},
        {"seed", DF_OPT_INT, &seed, "S", "seed of init, data order and anchors (default 0)", 0},
        {"save-every", DF_OPT_INT, &save_every, "N", "checkpoint every N steps (default: only at the end)", 0},
        {"keep-checkpoints", DF_OPT_INT, &keep, "N", "newest checkpoints kept in OUTPUT/checkpoints (default 3, 0: all)", 0},
        {"init-from", DF_OPT_STRING, &o.init_from, "DIR", "start from this drafter's weights (a drafter directory, ours or another trainer's, or a checkpoint file) with a fresh optimizer; its shape must be this run's", 0},
        {"config", DF_OPT_STRING, &config_path, "FILE", "options from a JSON object keyed by option names, e.g. a run's OUTPUT/args.json (flags given here win)", 0},
        {"stop-at", DF_OPT_INT, &stop_at, "N", "stop after step N with a checkpoint, keeping the full run's schedule", 0},
        {"resume", DF_OPT_FLAG, &resume, NULL, "continue from the newest checkpoint in OUTPUT/checkpoints", 0},
        {"max-length", DF_OPT_INT, &max_length, "N", "longest sample in tokens; longer ones are skipped (default 3072)", 0},
        {"mask-token-id", DF_OPT_INT, &mask, "N", "mask token (default: the first id past the tokenizer's vocabulary)", 0},
        {"device", DF_OPT_STRING, &o.device, "DEV", "cpu (default), cuda or cuda:N: where the target forward, the drafter step and the whole training state run", 0},
        {"max-bad-steps", DF_OPT_INT, &max_bad, "N", "stop after N steps in a row with a non-finite loss or gradient (skipped, no update; default 10, 0: never)", 0},
        {"queue-depth", DF_OPT_INT, &queue_depth, "N", "step batches the loader thread assembles ahead (default 3; 1: lock-step)", 0},
        {"layout", DF_OPT_STRING, &layout, "L", "data parallel: colocated (default: every rank runs the target and the drafter on its share of the batch) or split (ranks 0..T-1 run only the target and send the features to the drafter ranks T..W-1)", 0},
        {"target-ranks", DF_OPT_INT, &target_ranks, "T", "split layout: how many ranks run the target (default 1)", 0},
        {"log-every", DF_OPT_INT, &log_every, "N", "a progress line every N steps (default: one a second)", 0},
        {"random-target-weights", DF_OPT_FLAG, &o.random_target_weights, NULL, "give the target random weights instead of reading its safetensors (config.json and the tokenizer still come from --target): throughput at a model's shape without its weights", 0},
        {"overlap-grad-reduce", DF_OPT_STRING, &overlap, "on|off", "data parallel on CUDA: all-reduce gradient buckets during the backward (on, default) or after it (off)", 0},
        {"grad-bucket-mib", DF_OPT_DOUBLE, &bucket_mib, "M", "data parallel on CUDA: MiB of fp32 gradient per NCCL all-reduce bucket (default 25)", 0},
        {"peak-tflops", DF_OPT_DOUBLE, &peak_tflops, "T", "device peak TFLOP/s for MFU (default: 989 on H100/H200, 312 on A100, none on the CPU)", 0},
    };
    const DfCommandSpec spec = {
        "train", "train a DFlash drafter for a target", NULL,
        "Without --target, --data and --output (e.g. no arguments at all), runs the bundled default,\n"
        "with paths relative to the current directory (other options still apply):\n"
        "  --target " DEFAULT_TARGET " --data " DEFAULT_DATA " --output " DEFAULT_OUTPUT "\n"
        "  --draft-layers 2 --intermediate-size 512 --num-taps 3 --num-anchors 32 --token-budget 2048\n"
        "  --steps 500 --lr 1.5e-3 --save-every 100   (a few minutes on two CPU cores).\n"
        "Resume is bit-exact on the CPU for the same OMP_NUM_THREADS; options that define the run\n"
        "(target, data, seed, lr, steps, sizes, ...) must match the checkpoint's.\n"
        "SIGINT/SIGTERM: the step under way finishes, a checkpoint is written, exit 0; a second\n"
        "signal exits at once (130/143), leaving the previous checkpoint intact.\n"
        "Data parallel: start one process per device with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR\n"
        "and MASTER_PORT set (as torchrun does) and the same options, or with mpirun or srun and\n"
        "MASTER_ADDR, MASTER_PORT passed through (their rank variables are read); --device cuda\n"
        "means cuda:LOCAL_RANK. Rank 0 writes OUTPUT (which every rank must see, to resume).\n"
        "--layout split --target-ranks T: ranks 0..T-1 run the target forward only, ranks T..W-1 the\n"
        "drafter only (drafter rank d is fed by target rank d % T); rank T writes OUTPUT.",
        options, DF_COUNT(options)};
    DfParsedArgs parsed;
    DfError err = {{0}};
    int exit_code;
    if (df_config_args_expand(&spec, argc, argv, RECORD_ONLY_KEYS, config, &err)) {
        fprintf(stderr, "dflash train: %s\n", err.msg);
        return 2;
    }
    if (df_parse_command_line(&spec, config->argc, config->argv, &parsed, &exit_code)) return exit_code;
    if (!o.target_dir && !o.data_source && !o.output_dir) {
        apply_bundled_default(&o);
        fprintf(stderr, "train: no --target/--data/--output: the bundled default (see 'dflash train --help')\n");
    } else if (!o.target_dir || !o.data_source || !o.output_dir) {
        fprintf(stderr, "dflash train: --target, --data and --output go together (none of them: the bundled default)\n");
        return 2;
    }
    if (steps >= 0 && epochs >= 0) {
        fprintf(stderr, "dflash train: give --steps or --epochs, not both\n");
        return 2;
    }
    if (steps == 0 || epochs == 0 || layers == 0 || block == 0 || anchors == 0 || budget == 0 || max_length == 0 ||
        lr == 0 || drafter_tokens == 0) {
        fprintf(stderr, "dflash train: --steps, --epochs, --draft-layers, --block-size, --num-anchors, --token-budget, "
                        "--max-drafter-tokens, --max-length and --lr must be positive\n");
        return 2;
    }
    if (check_shape_option("draft-heads", heads, DF_MAX_DRAFT_HEADS, &o.draft_heads) ||
        check_shape_option("draft-kv-heads", kv_heads, DF_MAX_DRAFT_HEADS, &o.draft_kv_heads) ||
        check_shape_option("draft-head-dim", head_dim, DF_MAX_DRAFT_HEAD_DIM, &o.draft_head_dim))
        return 2;
    if (queue_depth == 0) {
        fprintf(stderr, "dflash train: --queue-depth must be at least 1 (1: lock-step)\n");
        return 2;
    }
    if (layout && strcmp(layout, "colocated") != 0 && strcmp(layout, "split") != 0) {
        fprintf(stderr, "dflash train: --layout %s: colocated or split\n", layout);
        return 2;
    }
    if (target_ranks == 0 || (target_ranks > 0 && !(layout && strcmp(layout, "split") == 0))) {
        fprintf(stderr, "dflash train: --target-ranks must be positive and goes with --layout split\n");
        return 2;
    }
    if (queue_depth < -1 || log_every < -1 || target_ranks < -1 || (peak_tflops < 0 && peak_tflops != -1) || steps < -1 || epochs < -1 ||
        drafter_tokens < -1 || layers < -1 || inter < -1 || block < -1 || taps < -1 || anchors < -1 || budget < -1 || seed < -1 ||
        window < -1 || keep < -1 || save_every < -1 || stop_at < -1 || max_length < -1 || mask < -1 || max_bad < -1 ||
        (gamma < 0 && gamma != -1) || (lr < 0 && lr != -1) || (warmup < 0 && warmup != -1)) {
        fprintf(stderr, "dflash train: options take non-negative values\n");
        return 2;
    }
    if (steps > 0) o.steps = steps;
    if (epochs > 0) o.epochs = epochs, o.steps = 0;
    if (layers > 0) o.draft_layers = layers;
    if (inter >= 0) o.intermediate_size = inter;
    if (block > 0) o.block_size = block;
    if (taps >= 0) o.num_taps = taps;
    if (window >= 0) o.sliding_window = window;
    if (anchors > 0) o.num_anchors = anchors;
    if (budget > 0) o.token_budget = budget;
    if (drafter_tokens > 0) o.max_drafter_tokens = drafter_tokens;
    if (seed >= 0) o.seed = (uint64_t)seed;
    if (save_every >= 0) o.save_every = save_every;
    if (keep >= 0) o.keep_checkpoints = keep;
    if (stop_at >= 0) o.stop_at = stop_at;
    if (max_length > 0) o.max_length = max_length;
    if (mask >= 0) o.mask_token_id = mask;
    if (gamma >= 0) o.gamma = gamma;
    if (lr > 0) o.lr = lr;
    if (warmup >= 0) o.warmup = warmup;
    if (max_bad >= 0) o.max_bad_steps = max_bad;
    if (queue_depth > 0) o.queue_depth = queue_depth;
    if (overlap && strcmp(overlap, "on") != 0 && strcmp(overlap, "off") != 0) {
        fprintf(stderr, "dflash train: --overlap-grad-reduce takes on or off, not '%s'\n", overlap);
        return 2;
    }
    if (bucket_mib != -1 && !(bucket_mib > 0 && bucket_mib <= 1 << 20)) {
        fprintf(stderr, "dflash train: --grad-bucket-mib takes a positive size in MiB\n");
        return 2;
    }
    if (bucket_mib > 0) o.bucket_mib = bucket_mib;
    if (overlap) o.overlap_grad_reduce = strcmp(overlap, "on") == 0;
    if (layout && strcmp(layout, "split") == 0) o.layout = DF_LAYOUT_SPLIT;
    if (target_ranks > 0) o.target_ranks = target_ranks;
    if (log_every >= 0) o.log_every = log_every;
    if (peak_tflops >= 0) o.peak_tflops = peak_tflops;
    DfDistEnv dist;
    if (df_dist_env_present()) {
        if (df_dist_env_read(&dist, &err) != 0) {
            fprintf(stderr, "dflash train: %s\n", err.msg);
            return 2;
        }
        o.dist = &dist;
    }
    o.resume = resume;
    if (df_stop_signals_install(&err) != 0) { /* the loop polls the flag (base/signals.h) */
        fprintf(stderr, "dflash train: %s\n", err.msg);
        return 1;
    }
    char store_path[4096];
    DfTrainSummary summary;
    int rc = df_train_check_device(o.device, &err); /* before any data is prepared */
    if (rc == 0) rc = resolve_data_and_mask(&o, store_path, sizeof store_path, &err);
    if (rc == 0) {
        o.data_store = store_path;
        rc = df_train(&o, &summary, &err);
    }
    if (rc != 0) {
        if (o.dist && o.dist->world_size > 1) fprintf(stderr, "dflash train: rank %d: %s\n", o.dist->rank, err.msg);
        else fprintf(stderr, "dflash train: %s\n", err.msg);
        int sig = df_stop_requested();
        return sig ? 128 + sig : 1; /* e.g. interrupted while preparing the data */
    }
    if (summary.rank != summary.writer_rank) {
        printf("train: rank %d of %d: done at step %lld (rank %d writes the run's files)\n", summary.rank,
               summary.world, (long long)summary.last_step, summary.writer_rank);
        return 0;
    }
    print_result(&o, &summary);
    return 0;
}

int df_cmd_train(int argc, char **argv) {
    DfConfigArgs config = {0};
    int rc = train_main(argc, argv, &config);
    df_config_args_free(&config);
    return rc;
}
