#define _XOPEN_SOURCE 700 /* realpath */
#include "train/trainer.h"
#include "train/trainer_internal.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/arena.h"
#include "backend/gpu_peaks.h"
#include "backend/select.h"
#include "base/atomic_file.h"
#include "base/clock.h"
#include "base/progress.h"
#include "base/signals.h"
#include "dist/comm.h"
#include "dist/feature_link.h"
#include "dist/rendezvous.h"
#include "formats/token_store.h"
#include "model/drafter.h"
#include "target/target.h"
#include "target/target_random.h"
#include "model/drafter_io.h"
#include "plot/plot_run.h"
#include "model/anchors.h"
#include "train/batcher.h"
#include "train/checkpoint.h"
#include "model/metrics.h"
#include "train/optimizer.h"
#include "train/param_ranges.h"
#include "train/run_dir.h"
#include "train/run_options.h"
#include "train/run_record.h"
#include "train/schedule.h"
#include "train/step_loader.h"
#include "train/step_timing.h"

void df_train_options_default(DfTrainOptions *o) {
    memset(o, 0, sizeof *o);
#define DF_TRAIN_DEFAULT_RUN(field, value) o->field = (value);
#define DF_TRAIN_DEFAULT_PROMPTS(field, value)
#define DF_TRAIN_DEFAULT_COMMAND(field, value)
#define DF_TRAIN_OPTION(name, kind, home, field, value, ...) DF_TRAIN_DEFAULT_##home(field, value)
#include "train/train_options.def"
#undef DF_TRAIN_OPTION
#undef DF_TRAIN_DEFAULT_RUN
#undef DF_TRAIN_DEFAULT_PROMPTS
#undef DF_TRAIN_DEFAULT_COMMAND
    o->log_interval_s = 1.0; /* not an option: the command sets it for a log file */
}

/* ---- helpers ------------------------------------------------------------- */

/* ---- the options that define a run -------------------------------------- */

/* OUTPUT/args.json: every option as resolved and the device that ran them
 * (train/run_record.h); the device also on stderr, once. */
static int write_run_record(const Trainer *t, DfError *err) {
    char path[4200], device[256];
    snprintf(path, sizeof path, "%s/args.json", t->opt->output_dir);
    df_backend_describe(t->be, device, sizeof device);
    if (!t->opt->quiet) fprintf(stderr, "train: device %s: %s\n", t->opt->device ? t->opt->device : "cpu", device);
    return df_run_record_write(path, t->opt, &t->dcfg, device, err);
}

/* ---- setup --------------------------------------------------------------- */

static int load_data(Trainer *t, DfError *err) {
    const DfTrainOptions *o = t->opt;
    if (!(t->store = df_token_store_open(o->data_store, 1, err))) return -1;
    if (df_token_store_vocab_size(t->store) > t->tcfg.vocab_size)
        return df_fail(err, "%s: token ids go up to %d but the target %s has %d embedding rows", o->data_store,
                       df_token_store_vocab_size(t->store) - 1, o->target_dir, t->tcfg.vocab_size);
    if (o->max_length + o->block_size > t->tcfg.max_position_embeddings)
        return df_fail(err, "--max-length %lld plus the block size %d exceeds the target's max_position_embeddings %d",
                       (long long)o->max_length, o->block_size, t->tcfg.max_position_embeddings);
    return df_batcher_init(&t->batcher, t->store, o->block_size, o->max_length, o->token_budget, o->seed, err);
}

static int plan_steps(Trainer *t, DfError *err) {
    const DfTrainOptions *o = t->opt;
    if (o->steps < 0 || o->epochs < 0 || (o->steps == 0 && o->epochs == 0))
        return df_fail(err, "give a positive --steps or --epochs");
    t->total_steps = o->steps ? o->steps : df_batcher_total_batches(&t->batcher, o->epochs);
    t->stop_step = t->total_steps;
    if (o->stop_at < 0) return df_fail(err, "--stop-at must be positive, got %lld", (long long)o->stop_at);
    if (o->stop_at > 0 && o->stop_at < t->total_steps) t->stop_step = o->stop_at;
    if (!(o->lr > 0) || !(o->warmup >= 0 && o->warmup <= 1))
        return df_fail(err, "--lr must be positive and --warmup in [0, 1] (got %g, %g)", o->lr, o->warmup);
    t->schedule = df_lr_schedule(o->lr, t->total_steps, o->warmup);
    return 0;
}

int df_train_drafter_config(DfDrafterConfig *cfg, const DfModelConfig *target, const DfTrainOptions *o,
                            DfError *err) {
    DfDrafterOptions d = {.num_layers = o->draft_layers, .intermediate_size = o->intermediate_size,
                          .block_size = o->block_size, .n_taps = o->num_taps, .mask_token_id = o->mask_token_id,
                          .num_heads = o->draft_heads, .num_kv_heads = o->draft_kv_heads,
                          .head_dim = o->draft_head_dim};
    if (df_drafter_config_from_target(cfg, target, &d, err)) return -1;
    if (o->gamma > 0) cfg->gamma = o->gamma;
    if (df_drafter_set_sliding(cfg, o->sliding_window, o->sliding_layers, err)) return -1;
    if (o->num_anchors < 1) return df_fail(err, "--num-anchors must be positive, got %lld", (long long)o->num_anchors);
    return 0;
}

static int make_drafter_config(Trainer *t, DfError *err) {
    if (df_train_drafter_config(&t->dcfg, &t->tcfg, t->opt, err)) return -1;
    /* refuse a head size the device's kernels lack now rather than at the first step */
    return df_device_check_drafter_head_dim(t->opt->device, t->dcfg.head_dim, err);
}

/* The training device (--device) with the kernel variants asked for
 * (--kernel-variant), refused at once when it lacks an op of the drafter's
 * step or of the optimizer, or one of the variants. */
static DfBackend *create_training_backend(const char *device, const DfKernelVariants *variants, DfError *err) {
    DfBackend *be = df_backend_create(device, err);
    if (!be) {
        df_context(err, "--device %s", device ? device : "cpu");
        return NULL;
    }
    const char *missing = df_backend_missing_op(be);
    if (missing) {
        df_fail(err,
                "--device %s: the %s backend cannot train a drafter yet: it lacks the '%s' op (the drafter's "
                "forward/backward and the optimizer run on the training device)",
                device ? device : "cpu", be->ops->name, missing);
        df_backend_destroy(be);
        return NULL;
    }
    if (variants && variants->count > 0 &&
        df_kernel_variants_apply(be, variants, "--kernel-variant", err)) {
        df_context(err, "--device %s", device ? device : "cpu");
        df_backend_destroy(be);
        return NULL;
    }
    return be;
}

int df_train_check_device(const char *device, const DfKernelVariants *variants, DfError *err) {
    DfBackend *be = create_training_backend(device, variants, err);
    df_backend_destroy(be);
    return be ? 0 : -1;
}

/* The kernel variants the run was asked for, as the backend now has them
 * all (stderr, once: a timing that names its kernels). */
static void report_kernel_variants(const Trainer *t) {
    const DfKernelVariants *v = t->opt->kernel_variants;
    if (!v || v->count == 0 || t->opt->quiet) return;
    char line[512];
    df_backend_variants(t->be, line, sizeof line);
    fprintf(stderr, "train: kernel variants: %s\n", line);
}

/* Sizes the arenas up front and cuts the training state and the step's
 * input buffers from them. */
static int alloc_training_state(Trainer *t, size_t n, DfBuffer *params, DfBuffer *grads, DfError *err) {
    DfBackend *be = t->be;
    size_t tokens = df_trainer_max_batch_tokens(t), width = (size_t)t->dcfg.n_taps * t->dcfg.hidden_size;
    size_t act = df_arena_bytes_for(be, DF_BUF_ACT, n), f32 = df_arena_bytes_for(be, DF_BUF_F32, n);
    size_t sizes[N_ARENAS] = {act, f32, 3 * f32,
                              df_arena_bytes_for(be, DF_BUF_I32, tokens) +
                                  df_arena_bytes_for(be, DF_BUF_ACT, tokens * width)};
    for (int r = 0; r < N_ARENAS; r++)
        if (df_arena_init(&t->arenas[r], be, df_trainer_arena_role(r), sizes[r], err)) return -1;
    DfArena *opt = &t->arenas[ARENA_OPTIMIZER], *acts = &t->arenas[ARENA_ACTIVATIONS];
    if (df_arena_alloc(&t->arenas[ARENA_WEIGHTS], params, DF_BUF_ACT, n, err) ||
        df_arena_alloc(&t->arenas[ARENA_GRADIENTS], grads, DF_BUF_F32, n, err) ||
        df_arena_alloc(opt, &t->master, DF_BUF_F32, n, err) || df_arena_alloc(opt, &t->exp_avg, DF_BUF_F32, n, err) ||
        df_arena_alloc(opt, &t->exp_avg_sq, DF_BUF_F32, n, err) ||
        df_arena_alloc(acts, &t->buf.dev_ids, DF_BUF_I32, tokens, err) ||
        df_arena_alloc(acts, &t->buf.features, DF_BUF_ACT, tokens * width, err))
        return -1;
    t->buf.dev_tokens_cap = tokens;
    return 0;
}

/* The target's layers 0..n_layers-1 (and an untied head when with_head)
 * from its safetensors, or with --random-target-weights the same tensors random:
 * the same seed gives every rank the same weights (a split layout's drafter
 * ranks the target ranks' embedding and head: the values do not depend on
 * the layers built, see df_target_init_random_layers). */
static int load_target_weights(Trainer *t, int n_layers, int with_head, DfError *err) {
    const DfTrainOptions *o = t->opt;
    if (!o->random_target_weights) return df_target_load(&t->target, t->be, o->target_dir, n_layers, with_head, err);
    /* the same layers and head as the load: the memory it takes is the plan's (target/target_memory.h) */
    uint64_t seed = df_target_random_weights_seed(o->seed);
    if (df_target_init_random_layers(&t->target, t->be, &t->tcfg, seed, n_layers, with_head, err))
        return df_context(err, "random weights for the target %s", o->target_dir);
    return 0;
}

static int load_models(Trainer *t, DfError *err) {
    /* Training loads and runs layers 0..max tap only; an untied lm head is
     * loaded on its own (the drafter needs it, the target's last layers not). */
    int tied = t->tcfg.tie_word_embeddings;
    int n_layers = df_trainer_target_layers(t);
    t->target_layers = n_layers;
    size_t before = df_trainer_bytes_in_use(t->be);
    /* split layout: a drafter rank needs the embedding and the head, none of the layers; the held-out
     * eval decodes with the whole target and its head (the step's forward still stops at the last tap) */
    int load_layers = t->eval_here ? t->tcfg.num_layers : t->split.role == ROLE_DRAFTER ? 0 : n_layers;
    if (load_target_weights(t, load_layers, !tied || t->eval_here, err)) return -1;
    t->target_bytes = df_trainer_bytes_in_use(t->be) - before;
    DfBuffer lm_head = tied ? t->target.embed : t->target.lm_head;
    DfDrafterLayout layout;
    df_drafter_layout_build(&layout, &t->dcfg);
    size_t n = layout.total;
    df_drafter_layout_free(&layout);
    DfBuffer params, grads;
    if (alloc_training_state(t, n, &params, &grads, err)) return -1;
    if (df_drafter_create_in(&t->drafter, t->be, &t->dcfg, t->target.embed, lm_head, params, grads, err)) return -1;
    t->have_drafter = 1;
    /* the micro-batches the plan sized, their work buffers taken once, before the first step */
    df_drafter_set_max_block_rows(&t->drafter, (int)t->plan.block_rows);
    if (df_drafter_reserve(&t->drafter, (int)t->peaks.tokens, (int)t->plan.block_rows, err))
        return df_context(err, "the drafter's work buffers (the memory plan's micro-batch of %lld block rows)",
                          (long long)t->plan.block_rows);
    return 0;
}

/* The held-out eval's prompts (train --eval-data), read before the memory
 * plan (which counts the eval's decoding) by the rank that writes OUTPUT. */
static int read_eval_prompts(Trainer *t, DfError *err) {
    const DfTrainOptions *o = t->opt;
    if (!o->eval_data) return 0;
    if (o->eval_every < 1) return df_fail(err, "--eval-data needs --eval-every N (a positive step count)");
    if (o->eval_prompts < 1 || o->eval_max_new_tokens < 1)
        return df_fail(err, "--eval-prompts and --eval-max-new-tokens must be positive (got %d, %d)", o->eval_prompts,
                       o->eval_max_new_tokens);
    t->eval_here = t->rank == t->split.writer && t->split.role != ROLE_TARGET;
    if (!t->eval_here) return 0;
    const DfChatOptions chat = {.template_file = o->chat_template, .kwargs = o->chat_kwargs};
    if (df_train_eval_read(&t->eval, o->target_dir, &t->tcfg, o->eval_data, &chat, o->eval_prompts,
                           o->eval_max_new_tokens, t->dcfg.block_size, err))
        return -1;
    if (!o->quiet)
        fprintf(stderr, "train: held-out eval every %lld steps: %d prompts of %s (up to %lld tokens), %d new tokens each\n",
                (long long)o->eval_every, t->eval.n_prompts, o->eval_data, (long long)t->eval.max_prompt,
                o->eval_max_new_tokens);
    return 0;
}

/* Split layout, a target rank: the target's layers up to the last tap (no
 * head, no drafter) and the step's input buffers. */
static int load_target_role(Trainer *t, DfError *err) {
    t->target_layers = df_trainer_target_layers(t);
    size_t before = df_trainer_bytes_in_use(t->be);
    if (load_target_weights(t, t->target_layers, 0, err)) return -1;
    t->target_bytes = df_trainer_bytes_in_use(t->be) - before;
    size_t tokens = df_trainer_max_batch_tokens(t), width = (size_t)t->dcfg.n_taps * t->dcfg.hidden_size;
    DfArena *acts = &t->arenas[ARENA_ACTIVATIONS];
    size_t bytes =
        df_arena_bytes_for(t->be, DF_BUF_I32, tokens) + df_arena_bytes_for(t->be, DF_BUF_ACT, tokens * width);
    if (df_arena_init(acts, t->be, df_trainer_arena_role(ARENA_ACTIVATIONS), bytes, err) ||
        df_arena_alloc(acts, &t->buf.dev_ids, DF_BUF_I32, tokens, err) ||
        df_arena_alloc(acts, &t->buf.features, DF_BUF_ACT, tokens * width, err))
        return -1;
    t->buf.dev_tokens_cap = tokens;
    return 0;
}

static int init_optimizer(Trainer *t, DfError *err) {
    const DfDrafterLayout *L = &t->drafter.layout;
    t->sizes = df_xmalloc((size_t)L->n_params * sizeof *t->sizes, "parameter sizes");
    if (!t->params) t->params = df_xmalloc(L->total * sizeof *t->params, "parameters");
    for (int i = 0; i < L->n_params; i++) t->sizes[i] = L->params[i].count;
    DfAdamWConfig acfg = {.beta1 = t->opt->adam_beta1, .beta2 = t->opt->adam_beta2, .eps = 1e-8,
                          .weight_decay = t->opt->weight_decay};
    if (df_adamw_init(&t->adamw, &acfg, t->sizes, L->n_params, err)) return -1;
    t->have_adamw = 1;
    return 0;
}

/* ---- one step ------------------------------------------------------------ */

/* The gradient reduction over the drafter's parameters (dist/ takes their
 * ranges in the flat gradient, not the drafter's layout). */
static int init_comm(Trainer *t, DfError *err) {
    DfParamRanges ranges;
    df_param_ranges_from_layout(&ranges, &t->drafter.layout);
    int rc = df_comm_init(&t->comm, df_trainer_reduce_group(t), t->be, &ranges, t->opt->bucket_mib, err);
    df_param_ranges_free(&ranges);
    return rc;
}

/* Data parallel over NCCL: the gradient buckets' all-reduce starts during
 * the backward, as the drafter reports its gradient ranges final (unless
 * --overlap-grad-reduce off; the host transport always reduces after it). */
static int setup_grad_overlap(Trainer *t, DfError *err) {
    if (!t->opt->overlap_grad_reduce) return 0;
    int on = df_comm_enable_overlap(&t->comm, err);
    if (on < 0) return -1;
    if (on) {
        df_drafter_set_grad_ready(&t->drafter, df_comm_grad_ready, &t->comm);
        fprintf(stderr, "train: rank %d: gradient all-reduce overlapped with the backward (%d buckets)\n", t->rank,
                t->comm.buckets.n);
    }
    return 0;
}

/* Fails after max_bad_steps skipped steps in a row. */
static int too_many_bad_steps(Trainer *t, const DfTrainSummary *s, DfError *err) {
    if (!(t->opt->max_bad_steps > 0 && t->bad_in_row >= t->opt->max_bad_steps)) return 0;
    char where[8800];
    if (s->last_checkpoint[0])
        snprintf(where, sizeof where, "the checkpoints in %s hold good weights (newest of this run: %s)", t->ckpt_dir,
                 s->last_checkpoint);
    else if (df_run_dir_has_checkpoint(t->ckpt_dir))
        snprintf(where, sizeof where, "the checkpoints in %s hold good weights", t->ckpt_dir);
    else
        snprintf(where, sizeof where, "no checkpoint has been written yet (--save-every N writes them)");
    return df_fail(err,
                   "stopping: %lld steps in a row (up to step %lld) had a non-finite loss or gradient "
                   "(--max-bad-steps %d); they made no update; %s",
                   (long long)t->bad_in_row, (long long)t->progress.step, t->opt->max_bad_steps, where);
}

/* ---- the loop ------------------------------------------------------------ */

/* Means of loss and train-tau over the first and the last SUMMARY_WINDOW
 * steps of this call (single steps are noisy). */
enum { SUMMARY_WINDOW = 10 };

typedef struct SummaryWindow {
    double first_loss, first_tau;
    double last_loss[SUMMARY_WINDOW], last_tau[SUMMARY_WINDOW];
    int64_t n;
} SummaryWindow;

static void window_add(SummaryWindow *w, double loss, double tau) {
    if (w->n < SUMMARY_WINDOW) w->first_loss += loss, w->first_tau += tau;
    w->last_loss[w->n % SUMMARY_WINDOW] = loss;
    w->last_tau[w->n % SUMMARY_WINDOW] = tau;
    w->n++;
}

static void window_summary(const SummaryWindow *w, DfTrainSummary *s) {
    int k = w->n < SUMMARY_WINDOW ? (int)w->n : SUMMARY_WINDOW;
    if (k == 0) return;
    s->first_loss = w->first_loss / k;
    s->first_tau = w->first_tau / k;
    s->last_loss = s->last_tau = 0;
    for (int i = 0; i < k; i++) s->last_loss += w->last_loss[i] / k, s->last_tau += w->last_tau[i] / k;
}

/* Starts the loader thread at the step after the one reached. */
static int start_loader(Trainer *t, DfError *err) {
    DfStepLoaderConfig c = {.store = t->store, .batcher = &t->batcher, .num_anchors = t->opt->num_anchors,
                            .drafter = &t->dcfg, .seed = t->opt->seed, .rank = t->split.share_rank,
                            .world = t->split.share_world,
                            .depth = t->opt->queue_depth, .first_step = t->progress.step + 1,
                            .last_step = t->stop_step, .epoch = t->progress.epoch,
                            .batch_in_epoch = t->progress.batch_in_epoch, .stages = &t->stages,
                            .load_stage = DF_STEP_LOAD};
    return df_step_loader_start(&t->loader, &c, err);
}

/* Split layout, a drafter rank: lets its target rank send the steps up to
 * queue_depth ahead of the one reached. */
static int grant_ahead(Trainer *t, DfError *err) {
    while (t->split.granted < t->stop_step && t->split.granted < t->progress.step + t->opt->queue_depth)
        if (df_feature_link_grant(&t->split.links, ++t->split.granted, err)) return df_context(err, "feature link");
    return 0;
}

/* Split layout, a drafter rank stopping early (a signal): tells its target
 * rank, and takes the features of the steps it had granted (the target rank
 * sends them before it reads the stop). */
static int release_target(Trainer *t, DfError *err) {
    if (df_feature_link_stop(&t->split.links, t->progress.step, err)) return df_context(err, "feature link");
    for (int64_t step = t->progress.step + 1; step <= t->split.granted; step++)
        if (df_feature_link_drain(&t->split.links, step, t->buf.features, err)) return df_context(err, "feature link");
    t->split.granted = t->progress.step;
    return 0;
}

/* The next batch from the loader; it must be the step the trainer is at. */
static int next_batch(Trainer *t, DfStepBatch **b, DfError *err) {
    DfQueueResult q = df_step_loader_next(&t->loader, b, err);
    if (q == DF_QUEUE_CLOSED) return df_fail(err, "internal: the loader ended before step %lld", (long long)t->progress.step + 1);
    if (q != DF_QUEUE_OK) return df_context(err, "loading step %lld", (long long)t->progress.step + 1);
    const DfStepBatch *x = *b;
    if (x->step != t->progress.step + 1 || x->epoch != t->progress.epoch ||
        x->batch_in_epoch != t->progress.batch_in_epoch)
        return df_fail(err, "internal: the loader made step %lld (epoch %lld, batch %lld) for step %lld (epoch %lld, "
                            "batch %lld)",
                       (long long)x->step, (long long)x->epoch, (long long)x->batch_in_epoch,
                       (long long)t->progress.step + 1, (long long)t->progress.epoch,
                       (long long)t->progress.batch_in_epoch);
    return 0;
}

static int eval_due(const Trainer *t) {
    const DfTrainOptions *o = t->opt;
    return o->eval_data && (t->progress.step % o->eval_every == 0 || t->progress.step == t->stop_step);
}

/* The held-out eval of the step reached, by the evaluating rank; the other
 * ranks that run the drafter wait for it at a barrier (the split layout's
 * target ranks wait for their next grant). */
static int held_out_eval(Trainer *t, DfTrainSummary *s, const StepReport *rep, DfError *err) {
    double t0 = df_now_seconds();
    if (t->eval_here) {
        DfTrainEvalResult r;
        if (df_train_eval_run(&t->eval, t->progress.step, rep->elapsed_s, &r, err))
            return df_context(err, "the held-out eval of step %lld", (long long)t->progress.step);
        s->evals++;
        if (df_trainer_keep_best(t, err) || (t->tb && df_trainer_tb_eval(t, &r, err))) return -1;
        df_trainer_end_progress_line(t);
        if (!t->opt->quiet || r.mismatches) /* a lossless failure is said even under --quiet */
            fprintf(stderr, "train: eval at step %lld: tau %.3f over %d prompts (%lld tokens, %s) in %.1f s; best %.3f at "
                            "step %lld\n",
                    (long long)t->progress.step, r.tau, t->eval.n_prompts, (long long)r.tokens,
                    r.mismatches ? "NOT lossless" : "lossless", r.seconds, t->eval.best_tau,
                    (long long)t->eval.best_step);
    }
    DfDistGroup *g = df_trainer_reduce_group(t);
    if (g && df_dist_world_size(g) > 1 && df_dist_barrier(g, err)) return df_context(err, "waiting for the eval");
    t->eval_pause_s = df_now_seconds() - t0;
    s->eval_s += t->eval_pause_s;
    return 0;
}

/* After a step: the metrics line, the progress line and the checkpoint. */
static int finish_step(Trainer *t, DfTrainSummary *s, const DfStepBatch *b, const StepResult *r,
                       const StepReport *rep, int64_t steps_here, double *last_print, int64_t *saved_at,
                       DfError *err) {
    if (t->metrics_fp && df_trainer_write_metrics(t, b->epoch, r, b->samples, rep, err)) return -1;
    if (r->nonfinite && too_many_bad_steps(t, s, err)) return -1;
    double now = df_now_seconds();
    int due = t->opt->log_every > 0 ? t->progress.step % t->opt->log_every == 0
                                    : now - *last_print >= t->opt->log_interval_s;
    if (t->rank == t->split.writer && (due || t->progress.step == t->stop_step || steps_here == 1)) {
        df_trainer_print_progress(t, r, rep);
        *last_print = now;
    }
    if (eval_due(t) && held_out_eval(t, s, rep, err)) return -1; /* before the checkpoint: a resume redoes it */
    int periodic = t->opt->save_every > 0 && t->progress.step % t->opt->save_every == 0;
    if (periodic || t->progress.step == t->stop_step) {
        if (df_trainer_save_checkpoint(t, s, err)) return -1;
        *saved_at = t->progress.step;
    }
    return 0;
}

static void advance_progress(Trainer *t, const DfStepBatch *b, const StepResult *r) {
    t->progress.step++;
    t->progress.tokens_seen += r->tokens;
    if (++t->progress.batch_in_epoch == b->epoch_batches) t->progress.epoch++, t->progress.batch_in_epoch = 0;
}

static int run_loop(Trainer *t, DfTrainSummary *s, DfError *err) {
    double loop_start = df_now_seconds(), last_print = 0, mark = loop_start;
    SummaryWindow window = {0};
    int64_t steps_here = 0, tokens_here = 0, saved_at = -1;
    DfStepTimes first = {0};
    double first_wall_s = 0;
    s->first_step = t->progress.step + 1;
    if (t->progress.step < t->stop_step && start_loader(t, err)) return -1;
    t->split.granted = t->progress.step;
    int rc = t->split.role == ROLE_DRAFTER ? grant_ahead(t, err) : 0;
    while (rc == 0 && t->progress.step < t->stop_step) {
        if (t->world == 1 && (s->stop_signal = df_stop_requested())) break; /* several: agreed on in the step */
        if (t->group && df_dist_poll_failure(t->group, err)) {
            rc = -1;
            break;
        }
        StepReport rep = {0};
        mark += t->eval_pause_s; /* an eval between two steps is neither's */
        t->eval_pause_s = 0;
        double t0 = df_now_seconds();
        rep.times.s[DF_STEP_HOST] = t0 - mark; /* the previous step's bookkeeping */
        if (steps_here > 0) df_stage_record(&t->stages, DF_STEP_HOST, t0 - mark);
        DfStepBatch *b;
        if (next_batch(t, &b, err)) {
            rc = -1;
            break;
        }
        rep.times.s[DF_STEP_WAIT] = df_now_seconds() - t0;
        df_stage_record(&t->stages, DF_STEP_WAIT, rep.times.s[DF_STEP_WAIT]);
        rep.times.s[DF_STEP_LOAD] = b->load_s;
        StepResult r;
        if (df_trainer_train_step(t, b, &r, &rep.times, err)) {
            df_context(err, "step %lld", (long long)t->progress.step + 1);
            df_step_loader_release(&t->loader, b);
            rc = -1;
            break;
        }
        double now = df_now_seconds();
        rep.wall_s = now - mark;
        mark = now;
        advance_progress(t, b, &r);
        if (t->split.role == ROLE_DRAFTER && (r.stop_signal ? release_target(t, err) : grant_ahead(t, err))) {
            df_step_loader_release(&t->loader, b);
            rc = -1;
            break;
        }
        if (++steps_here == 1) first = rep.times, first_wall_s = rep.wall_s;
        tokens_here += r.tokens;
        rep.elapsed_s = t->elapsed_offset + (now - loop_start);
        rep.eta_s = (now - loop_start) / (double)steps_here * (double)(t->stop_step - t->progress.step);
        DfQueueStats q;
        df_step_loader_queue_stats(&t->loader, &q);
        rep.queue_depth = q.mean_depth;
        if (r.nonfinite) {
            df_trainer_report_bad_step(t, &r, b->samples, s);
        } else {
            t->bad_in_row = 0;
            window_add(&window, df_metrics_loss(&t->metrics), df_metrics_train_tau(&t->metrics));
        }
        rc = finish_step(t, s, b, &r, &rep, steps_here, &last_print, &saved_at, err);
        df_step_loader_release(&t->loader, b);
        if (rc) break;
        if (r.stop_signal) {
            s->stop_signal = r.stop_signal;
            break;
        }
    }
    df_step_loader_stop(&t->loader);
    if (rc) return -1;
    /* the end, or a stop signal: the step reached gets its checkpoint */
    if (steps_here > 0 && saved_at != t->progress.step && df_trainer_save_checkpoint(t, s, err)) return -1;
    window_summary(&window, s);
    s->last_step = t->progress.step;
    s->seconds = df_now_seconds() - loop_start;
    s->tokens_per_s = s->seconds > 0 ? (double)tokens_here / s->seconds : 0;
    return steps_here > 0 ? df_trainer_report_stages(t, s, s->seconds, &first, first_wall_s, err) : 0;
}

static void trainer_free(Trainer *t) {
    if (t->metrics_fp) fclose(t->metrics_fp);
    df_tb_close(t->tb);
    df_train_eval_free(&t->eval);
    df_step_loader_free(&t->loader);
    if (t->have_stages) df_stage_table_free(&t->stages);
    df_comm_free(&t->comm);
    if (t->split.have_links) df_feature_links_close(&t->split.links);
    if (t->have_adamw) df_adamw_free(&t->adamw);
    if (t->have_drafter) df_drafter_free(&t->drafter);
    for (int r = 0; r < N_ARENAS; r++) df_arena_free(&t->arenas[r]);
    if (t->be) df_packed_batch_free(&t->packed, t->be);
    df_target_free(&t->target);
    if (t->be) df_backend_destroy(t->be);
    df_batcher_free(&t->batcher);
    if (t->store) df_token_store_close(t->store);
    free(t->buf.seq_lens);
    free(t->params), free(t->sizes);
    cJSON_free(t->options_json);
}

/* The stage table and the device's peak (for MFU). */
static int setup_instrumentation(Trainer *t, DfError *err) {
    const char *names[DF_STEP_STAGES];
    for (int i = 0; i < DF_STEP_STAGES; i++) names[i] = df_step_stage_label(i);
    if (df_stage_table_init(&t->stages, names, DF_STEP_STAGES, err)) return -1;
    t->have_stages = 1;
    t->peak_tflops = t->opt->peak_tflops;
    if (t->peak_tflops <= 0) { /* a GPU the description names, else none (no MFU) */
        char desc[256];
        df_backend_describe(t->be, desc, sizeof desc);
        t->peak_tflops = df_gpu_nominal_bf16_tflops(desc);
        if (t->peak_tflops <= 0 && df_device_kind(t->opt->device) == DF_DEVICE_ACCELERATOR && !t->opt->quiet)
            fprintf(stderr, "train: no MFU: dflash does not know the bf16 peak of %s; give it as --peak-tflops T\n",
                    desc);
    }
    return 0;
}

/* Split layout, a target rank: the target, the step's buffers, the links. */
static int setup_target_role(Trainer *t, DfError *err) {
    if (load_target_role(t, err) || setup_instrumentation(t, err) || df_trainer_connect_split(t, err)) return -1;
    return df_trainer_share_position(t, err);
}

static int setup(Trainer *t, DfError *err) {
    const DfTrainOptions *o = t->opt;
    if (o->queue_depth < 1) return df_fail(err, "--queue-depth %d: must be at least 1", o->queue_depth);
    if (df_model_config_load(&t->tcfg, o->target_dir, err)) return -1;
    if (df_trainer_join_group(t, err)) return -1;
    if (!(t->be = create_training_backend(t->device, o->kernel_variants, err))) return -1; /* before the data */
    report_kernel_variants(t);
    if (load_data(t, err) || plan_steps(t, err)) return -1;
    if (df_run_dir_make(o->output_dir, err)) return -1;
    snprintf(t->ckpt_dir, sizeof t->ckpt_dir, "%s/checkpoints", o->output_dir);
    snprintf(t->metrics_path, sizeof t->metrics_path, "%s/metrics.jsonl", o->output_dir);
    snprintf(t->final_dir, sizeof t->final_dir, "%s/final", o->output_dir);
    snprintf(t->best_dir, sizeof t->best_dir, "%s/best", o->output_dir);
    if (t->rank == t->split.writer) {
        df_run_dir_remove_stale_temporaries(o->output_dir);
        df_run_dir_remove_stale_temporaries(t->ckpt_dir);
        df_run_dir_remove_stale_temporaries(t->final_dir);
        df_run_dir_remove_stale_temporaries(t->best_dir);
    }
    if (make_drafter_config(t, err) || read_eval_prompts(t, err) || df_trainer_plan_memory(t, err)) return -1;
    if (t->split.role == ROLE_TARGET) return setup_target_role(t, err);
    if (load_models(t, err) || init_optimizer(t, err)) return -1;
    if (t->eval_here && df_train_eval_attach(&t->eval, &t->target, &t->dcfg, t->drafter.params, err)) return -1;
    if (df_metrics_init(&t->metrics, t->dcfg.block_size, err)) return -1;
    t->options_json = df_run_options_json(t->opt, &t->dcfg, t->store, t->total_steps);
    if (t->rank == t->split.writer && write_run_record(t, err)) return -1;
    int resumed = 0;
    if (o->resume ? df_trainer_resume(t, &resumed, err) : df_trainer_start_fresh(t, err)) return -1;
    if (t->rank == t->split.writer && o->report_tensorboard) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/tb", o->output_dir);
        if (!(t->tb = df_tb_open(dir, err))) return df_context(err, "--report-to tensorboard");
    }
    if (t->eval_here && df_train_eval_open_log(&t->eval, o->output_dir, resumed ? t->progress.step : -1, err))
        return -1;
    if (df_trainer_upload_state(t, resumed, err) || setup_instrumentation(t, err)) return -1;
    if (t->split.role == ROLE_DRAFTER && df_trainer_connect_split(t, err)) return -1;
    if (init_comm(t, err) || setup_grad_overlap(t, err)) return -1;
    if (t->world > 1)
        fprintf(stderr, "train: rank %d of %d: gradients summed over %s\n", t->rank, t->world,
                df_comm_transport_name(&t->comm));
    if (df_trainer_check_replicas_agree(t, err)) return -1;
    return t->split.role == ROLE_DRAFTER ? df_trainer_share_position(t, err) : 0;
}

/* What --num-anchors does with this data: below every sample's candidate
 * count it draws a fresh subset each epoch; above all of them (responses
 * shorter than it) every candidate is an anchor, each epoch the same blocks,
 * and the drafter's work a step follows the batch's response tokens. */
static void print_epoch_anchors(const Trainer *t) {
    DfEpochAnchors a;
    df_batcher_epoch_anchors(&t->batcher, t->opt->num_anchors, &a);
    double per_sample = t->batcher.n_usable > 0 ? (double)a.anchors / (double)t->batcher.n_usable : 0;
    fprintf(stderr, "train: an epoch's anchors: %lld, %.1f a sample, %d block rows each; ", (long long)a.anchors,
            per_sample, t->dcfg.block_size);
    if (a.capped == 0)
        fprintf(stderr,
                "every candidate, since no sample has more than --num-anchors %lld (the most: %lld): each epoch "
                "trains the same blocks\n",
                (long long)t->opt->num_anchors, (long long)a.max_candidates);
    else
        fprintf(stderr, "--num-anchors %lld draws a fresh subset each epoch on %lld of the %lld samples (the most "
                        "candidates: %lld)\n",
                (long long)t->opt->num_anchors, (long long)a.capped, (long long)t->batcher.n_usable,
                (long long)a.max_candidates);
}

int df_train(const DfTrainOptions *opt, DfTrainSummary *summary, DfError *err) {
    Trainer t = {.opt = opt};
    memset(summary, 0, sizeof *summary);
    int rc = setup(&t, err);
    if (rc == 0) {
        summary->total_steps = t.total_steps;
        summary->skipped_samples = t.batcher.n_few_loss_tokens + t.batcher.n_too_long;
        int banner = t.rank == t.split.writer && !opt->quiet;
        if (banner)
        fprintf(stderr,
                "train: %lld steps (%lld trainable samples, %lld tokens an epoch; skipped %lld with fewer than %d "
                "loss tokens, %lld longer than %lld); drafter %d layers, %d heads of %d (%d KV heads), %zu "
                "parameters, taps",
                (long long)t.total_steps, (long long)t.batcher.n_usable, (long long)t.batcher.usable_tokens,
                (long long)t.batcher.n_few_loss_tokens, 2 * t.dcfg.block_size, (long long)t.batcher.n_too_long,
                (long long)opt->max_length, t.dcfg.num_layers, t.dcfg.num_heads, t.dcfg.head_dim, t.dcfg.num_kv_heads,
                t.drafter.layout.total);
        for (int i = 0; i < t.dcfg.n_taps && banner; i++)
            fprintf(stderr, "%s%d", i ? "," : " ", t.dcfg.target_layer_ids[i]);
        if (banner) fprintf(stderr, ", block %d, mask token %d\n", t.dcfg.block_size, t.dcfg.mask_token_id);
        if (banner) print_epoch_anchors(&t);
        rc = t.split.role == ROLE_TARGET ? df_trainer_run_target_loop(&t, summary, err) : run_loop(&t, summary, err);
        df_trainer_end_progress_line(&t);
    }
    df_trainer_leave_group(&t, rc != 0, err);
    summary->rank = t.rank;
    summary->world = t.world;
    summary->writer_rank = t.split.writer;
    /* final/: at the end of the run, and at --stop-at from that step's checkpoint's weights */
    int at_end = t.progress.step == t.total_steps, at_stop = opt->stop_at > 0 && t.progress.step == t.stop_step;
    if (rc == 0 && (at_end || at_stop) && t.rank == t.split.writer) {
        rc = df_trainer_export_final(&t, at_end, summary, err);
        if (rc == 0) {
            df_trainer_refresh_curves(&t);
            summary->finished = at_end;
            summary->exported = 1;
            snprintf(summary->final_dir, sizeof summary->final_dir, "%s", t.final_dir);
        }
    }
    if (t.be) df_trainer_report_memory(&t, summary);
    summary->eval_best_step = t.eval_here ? t.eval.best_step : -1;
    if (df_trainer_have_best_dir(&t)) snprintf(summary->best_dir, sizeof summary->best_dir, "%s", t.best_dir);
    summary->eval_best_tau = t.eval.best_tau;
    summary->eval_last_step = t.eval_here ? t.eval.last_step : -1;
    summary->eval_last_tau = t.eval.last_tau;
    trainer_free(&t);
    return rc;
}
