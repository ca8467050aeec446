/* dflash train: trains a drafter for a target on a token store or a JSONL
 * file (prepared once into OUTPUT/data.store), with checkpoints, resume and
 * a metrics log; with no arguments, the bundled default run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>

#include "base/output_lock.h"
#include "base/paths_apart.h"
#include "base/signals.h"
#include "base/tee_output.h"
#include "cli/args.h"
#include "cli/config_args.h"
#include "cli/commands.h"
#include "cli/train_args.h"
#include "cli/train_prompts.h"
#include "train/run_dir.h"
#include "train/train_data.h"
#include "train/trainer.h"

/* The bundled default's held-out prompts (its other paths: cli/train_args.h). */
#define DEFAULT_EVAL_DATA "assets/data/code-dev.jsonl"
/* Exit status of a run stopped by SIGINT/SIGTERM after writing its
 * checkpoint: not finished, resumable (sysexits.h's EX_TEMPFAIL), so that a
 * job script can tell it from a finished run (0) and a failed one (1). */
#define EXIT_STOPPED_RESUMABLE 75

/* The width of the terminal on stderr (80 when it does not say). */
static int terminal_columns(void) {
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
    const char *env = getenv("COLUMNS");
    int columns = env ? atoi(env) : 0;
    return columns >= 20 ? columns : 80;
}

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
    char *created = df_run_dir_first_missing(o->output_dir);
    if (rc == 0) rc = df_run_dir_lock(o, &lock, err);
    if (rc == 0 && lock.fd >= 0) rc = df_run_dir_start_log(o, tee, err); /* the writing rank's */
    if (rc == 0 && a->prompts.path) {
        rc = df_train_regenerate(&a->prompts, o, o->quiet, regenerated, sizeof regenerated, err);
        o->data_source = regenerated; /* trained on as --data would be */
    }
    if (rc == 0) rc = df_train_resolve_data(o, store_path, sizeof store_path, err);
    if (rc == 0) {
        o->data_store = store_path;
        rc = df_train(o, summary, err);
    }
    df_output_unlock(&lock);
    if (rc != 0 && created) df_run_dir_remove_created(o->output_dir, created);
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
