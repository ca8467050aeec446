/* The training loop (DFLASH.md section 4) on one backend: one optimizer step
 * per batch of the batcher.
 *
 * A step: gather the batch's samples from the token store and pack them
 * (no padding); run the target's layers 0..max tap for the tap features;
 * select each sample's anchors (keyed by seed, epoch, sample index); compute
 * the loss-weight sum; forward and backward of the drafter with
 * grad_scale = 1 / weight sum; clip the gradient to global norm 1.0; AdamW
 * with the learning rate of the schedule.
 *
 * Device: every step runs on one backend (--device: the CPU, or a CUDA GPU),
 * and the whole training state stays there: the drafter's weights (in the
 * backend's dtype) and fp32 gradients, the fp32 master weights and AdamW
 * moments. The global gradient norm is a backend reduction (only the number
 * comes back, for the guard and the metrics); clipping and AdamW are one
 * backend op that also rewrites the drafter's weights from the master
 * (backend.h: sum_squares, adamw_step, with the host optimizer's arithmetic,
 * train/optimizer.h). The host sees the state only to write a checkpoint or
 * the export (download) and to start or resume (upload): checkpoints hold
 * fp32 values, so a run saved on one device resumes on the other.
 *
 * Memory: the state and the step's input buffers (token ids, tap features
 * of the largest batch) are cut from one arena per role (backend/arena.h:
 * weights, gradients, optimizer state, activations), sized up front; the
 * summary reports each arena's size and peak use.
 *
 * OUTPUT holds:
 *   metrics.jsonl       one JSON line per step (see df_train), appended and
 *                       flushed each step
 *   checkpoints/        step-N.safetensors every save_every steps and at the
 *                       end (and at stop_at)
 *   final/              the exported drafter (spec section 7) when the run
 *                       reaches its last step or its stop_at step
 *   eval.jsonl          with eval_data: one line per held-out eval
 *                       (train/train_eval.h), every eval_every steps and at
 *                       the stop step, before that step's checkpoint
 *
 * Pipeline: a loader thread (train/step_loader.h) assembles the host inputs
 * of the next queue_depth steps while the compute thread runs the current
 * one; the inputs are pure functions of the step, so every queue depth
 * trains on the same batches to the bit. Each step's time per stage
 * (train/step_timing.h) goes to metrics.jsonl and, summed, to a table on
 * stderr and OUTPUT/stages.json at the end.
 *
 * Data parallel (opt->dist with WORLD_SIZE > 1) and the split layout
 * (opt->layout DF_LAYOUT_SPLIT, opt->target_ranks T) are described in
 * docs/distributed.md. In the code: the ranks join through
 * dist/rendezvous.h, each trains on its share (train/rank_share.h), the
 * gradients are summed by dist/comm.h, the roles are set up in
 * trainer_topology.c, a split layout's target ranks run
 * trainer_target_rank.c and send their features over dist/feature_link.h.
 *
 * Resume: the newest checkpoint gives the weights, the AdamW state and the
 * position (epoch, batch in epoch); the batcher's epoch plans, the anchors
 * and the schedule are pure functions of the options, so on the CPU (with the
 * same OMP_NUM_THREADS) the continued run is bit-identical to an
 * uninterrupted one. Every op of a step uses static work splits that depend
 * on the thread count only, and every reduction has a fixed order. */
#ifndef DF_TRAIN_TRAINER_H
#define DF_TRAIN_TRAINER_H

#include <stdint.h>

#include "backend/backend.h"
#include "backend/kernel_variants.h"
#include "base/error.h"
#include "dist/dist_env.h"
#include "model/drafter_config.h"
#include "target/model_config.h"

/* The data of the test seam point DF_SEAM_TRAIN_FEATURES (base/test_seam.h):
 * after each step's target forward, this rank's tap features (ACT [tokens,
 * n_taps * hidden] on the training backend, before the drafter reads them)
 * and the step (from 1). A test may alter them (tests/test_reliability.c puts
 * NaN there to exercise the non-finite guard); a failure stops the run. */
typedef struct DfTrainFeaturesSeam {
    int64_t step;
    DfBackend *be;
    DfBuffer features;
} DfTrainFeaturesSeam;

/* The options of a run: those `dflash train` sets are rows of
 * train/train_options.def (option name, kind, default, help, whether the
 * run record and the resume identity hold it); the others are set by the
 * command or the caller. */
typedef struct DfTrainOptions {
    const char *target_dir;
    const char *data_store;  /* the token store trained on */
    const char *data_source; /* what the user named (a JSONL file or the store): recorded in the options */
    const char *output_dir;
    int64_t steps;           /* total steps; 0: from epochs */
    int64_t epochs;          /* used when steps is 0 */
    int draft_layers;
    int intermediate_size;   /* 0: the target's */
    int draft_heads;         /* the drafter's attention shape (spec section 3); 0: the default, */
    int draft_kv_heads;      /*   df_drafter_default_attention: the target's for the dense families, */
    int draft_head_dim;      /*   32 heads, 8 KV heads of 128 for the hybrid one */
    int block_size;
    int num_taps;            /* 0: the drafter config's default */
    int sliding_window;      /* 0: every drafter layer sees the whole context */
    const char *sliding_layers; /* which layers slide (df_drafter_set_sliding); NULL: all but the last */
    int64_t num_anchors;
    double gamma;            /* 0: df_default_gamma(block_size) */
    double lr;
    double warmup;           /* fraction of the steps */
    double weight_decay;     /* AdamW's decoupled weight decay (default 0) */
    double adam_beta1, adam_beta2; /* AdamW's moment decays (default 0.9, 0.999) */
    double max_grad_norm;    /* global gradient norm clipped to this (default 1; 0: no clipping) */
    int64_t token_budget;
    int64_t max_drafter_tokens; /* block rows per drafter micro-batch (0: sized to the device by the memory plan) */
    uint64_t seed;
    int64_t save_every;      /* 0: only at the end */
    int64_t stop_at;         /* 0: run to the end; else stop after this step */
    int resume;
    int64_t max_length;
    int mask_token_id;
    int keep_checkpoints;    /* newest checkpoints kept (0: all) */
    const char *init_from;   /* a fresh run starts from this drafter's weights (a drafter directory or a
                                checkpoint file, train/init_from.h) with a fresh optimizer; NULL: random init */
    double log_interval_s;   /* at most one progress line per this many seconds (0: every step) */
    int quiet;               /* no progress lines, plan or stage tables on stderr (errors and warnings still) */
    int progress_columns;    /* > 0: stderr is a terminal this wide: one short progress line, redrawn in place
                                (\r); 0: a full line each time (a log) */
    int max_bad_steps;       /* stop after this many non-finite steps in a row (0: never) */
    const char *device;      /* training backend: NULL or "cpu", "cuda", "cuda:N" (not part of the run's
                                identity: a checkpoint resumes on any device); "cuda" in a group of
                                several processes means cuda:LOCAL_RANK */
    int queue_depth;         /* step batches assembled ahead by the loader thread (1: lock-step; default 3) */
    int64_t log_every;       /* a progress line every N steps (0: every log_interval_s seconds) */
    double peak_tflops;      /* device peak for MFU (0: a default for known GPUs, none on the CPU) */
    const DfKernelVariants *kernel_variants; /* --kernel-variant: kernels the training device runs instead of
                                                its defaults (NULL or none: the defaults; not part of the
                                                run's identity, as the device is not) */
    const DfDistEnv *dist;   /* data parallel: this process's place in the group (NULL: one process) */
    double bucket_mib;       /* NCCL gradient buckets (MiB of fp32; default 25) */
    int random_target_weights; /* 1: the target's weights are random (df_target_init_random, seeded by
                                  seed) instead of read from target_dir, whose config.json and
                                  tokenizer still define it: throughput at a model's shape */
    int overlap_grad_reduce; /* NCCL: all-reduce buckets during the backward (1, default) or after it (0) */
    int layout;              /* DfTrainLayout (data parallel only; --layout's names in its order) */
    int target_ranks;        /* split layout: ranks 0..target_ranks-1 run the target (default 1) */
    const char *chat_template; /* --chat-template FILE: renders conversations (data, --prompts, eval_data); NULL: the target's */
    const char *chat_kwargs;   /* --chat-template-kwargs JSON: extra template variables; NULL: none */
    const char *eval_data;   /* held-out eval (train/train_eval.h): prompt or chat records; NULL: none */
    int64_t eval_every;      /* an eval every N steps (and at the run's last step); needed with eval_data */
    int eval_prompts;        /* the first K prompts of eval_data (default 16) */
    int eval_max_new_tokens; /* tokens decoded per eval prompt at most (default 128) */
    int select_by;           /* DfSelectBy: which drafter final/ holds at the end */
    int report_tensorboard;  /* also TensorBoard event files under OUTPUT/tb/ (metrics.jsonl is always written);
                                --report-to's value (jsonl 0, tensorboard 1) */
} DfTrainOptions;

typedef enum DfTrainLayout { DF_LAYOUT_COLOCATED, DF_LAYOUT_SPLIT } DfTrainLayout;

/* final/ at the end of a run: the drafter of the step with the best
 * held-out tau (also in OUTPUT/best/), or of the last step. AUTO: TAU with
 * eval_data, else LAST. In the order of --select-by's names (tau|last), AUTO
 * past them (train/train_options.def). */
typedef enum DfSelectBy { DF_SELECT_TAU, DF_SELECT_LAST, DF_SELECT_AUTO } DfSelectBy;

/* Device memory of one role (an arena): bytes reserved and the most used. */
typedef struct DfTrainMemoryUse {
    char role[48];
    size_t capacity, peak;
} DfTrainMemoryUse;

/* The defaults of the spec's recipe where one exists: the default column of
 * train/train_options.def, the list of the options (each field above that
 * an option sets is named there, with its option). */
void df_train_options_default(DfTrainOptions *opt);

/* The drafter a run of these options trains for target (its layers, block,
 * heads, taps, mask token, loss decay, sliding layers), as the trainer
 * builds it; the mask token must be resolved (o->mask_token_id >= 0). */
int df_train_drafter_config(DfDrafterConfig *cfg, const DfModelConfig *target, const DfTrainOptions *o,
                            DfError *err);

typedef struct DfTrainSummary {
    int64_t first_step, last_step, total_steps; /* steps run by this call: first_step..last_step */
    double first_loss, last_loss, first_tau, last_tau; /* means over the first / last 10 steps of this call */
    double seconds;        /* wall time of the loop in this call */
    double tokens_per_s;   /* context tokens per second over this call */
    int64_t skipped_samples;
    int finished;          /* the run reached total_steps and final/ was written */
    int exported;          /* final/ was written: at the end, or at --stop-at (the drafter of that step) */
    char final_dir[4096];
    int stop_signal;       /* SIGINT/SIGTERM that ended the run early (0: none) */
    int64_t bad_steps;     /* steps of this call whose update was skipped (non-finite loss or gradient) */
    char last_checkpoint[4200]; /* newest checkpoint written by this call ("" if none) */
    char device[16];       /* the backend's name ("cpu", "cuda") */
    DfTrainMemoryUse memory[4]; /* per role: weights, gradients, optimizer state, activations */
    int n_memory;
    size_t device_peak_bytes; /* the backend's peak allocation, all of it (0: not tracked, e.g. the CPU) */
    size_t target_bytes;      /* of which the target's weights (0: not tracked) */
    size_t planned_bytes;     /* the memory plan's peak (train/memory_plan.h) */
    int64_t drafter_block_rows; /* block rows per drafter micro-batch */
    int rank, world;          /* data parallel (0, 1: one process) */
    int writer_rank;          /* the rank that writes OUTPUT (0; split layout: the first drafter rank) */
    double busy;              /* device stages over the loop's wall time (step_timing.h) */
    double busy_steady;       /* the same without the first step (warm-up) and the checkpoint writes */
    double checkpoint_s;      /* writing checkpoints (rank 0), summed */
    int checkpoints;          /* written by this call */
    double wait_s;            /* compute thread waiting for batches, summed */
    char stages_path[4200];   /* the stage report (rank 0; "" when no step ran) */
    int64_t evals;            /* held-out evals of this call (the writing rank) */
    double eval_s;            /* their time, summed */
    int64_t eval_best_step;   /* over the whole run's eval.jsonl: the step of the best tau (-1: no eval) */
    double eval_best_tau;
    int64_t eval_last_step;   /* the newest eval (-1: none) */
    double eval_last_tau;
    int64_t final_step;       /* the step whose drafter final/ holds (when exported) */
    char best_dir[4200];      /* OUTPUT/best/ when it holds the best eval's drafter, else "" */
} DfTrainSummary;

/* Fails (with a message naming the device and the missing op, or the
 * kernel variant it lacks) unless the device exists, its backend implements
 * every op of a training step and has each of variants (NULL: none); lets a
 * command refuse a device before it prepares any data. */
int df_train_check_device(const char *device, const DfKernelVariants *variants, DfError *err);

/* Runs (or resumes) a training run. Metrics line per step:
 *   {"step", "epoch", "loss", "train_tau", "acc": [positions 1..B-1], "lr",
 *    "grad_norm", "tokens", "samples", then the timing fields: "tokens_per_s",
 *    "seqs_per_s", "step_s", "stage_ms": {per stage of train/step_timing.h},
 *    "busy", "queue_depth", "tflops", "mfu" (null without a peak), "eta_s",
 *    "elapsed_s"}
 * with doubles printed as %.17g (lossless). step counts completed steps
 * from 1; lr is the rate used by that step; grad_norm is before clipping;
 * tokens and samples are the global batch's (every rank's).
 *
 * Numerical guard: a step whose loss or gradient norm is not finite makes no
 * update (no optimizer step, the weights stay as they were) but still counts
 * as a step (its batch is consumed and the schedule moves on, so a resumed
 * run stays identical); it is reported on stderr and in its metrics line
 * with "skipped_update": true, "nonfinite": "loss" or "grad_norm" and
 * "sample_ids" (the batch's sample indices in the token store). After
 * max_bad_steps such steps in a row the run fails; the checkpoints are those
 * of good weights (a skipped step never changes them).
 *
 * Signals: when df_stop_requested() (base/signals.h) becomes set, the loop
 * finishes the step under way, writes a checkpoint, and returns 0 with
 * summary->stop_signal set (the caller installs the handler).
 *
 * Crashes: at start, temporaries left in OUTPUT, checkpoints/ and final/ by
 * killed runs (NAME.tmp.PID of a process that no longer exists) are removed.
 *
 * Memory: before anything is loaded, the memory plan (train/memory_plan.h)
 * adds up what the run takes on the training device (the target's weights,
 * the drafter's state, the largest step's features and forward, one drafter
 * micro-batch's work buffers) against what the device has (a GPU's free
 * memory; on the CPU MemAvailable, RLIMIT_AS and RLIMIT_DATA) and sizes the
 * drafter's micro-batches (max_drafter_tokens block rows) to fit; a run
 * that cannot fit fails with the sizes, before loading. The drafter's work
 * buffers are reserved once, for the largest micro-batch.
 *
 * Held-out eval (opt->eval_data, train/train_eval.h): the writing rank
 * loads the whole target with its head (not only the layers up to the
 * deepest tap; the memory plan counts them and the decoding's buffers) and
 * decodes the eval prompts speculatively with the drafter's training
 * weights between steps; the other ranks wait at a barrier, so every rank
 * starts the next step together. A resumed run keeps the eval.jsonl lines
 * of steps up to the checkpoint's. The summary names the best step.
 *
 * Features: the test seam point DF_SEAM_TRAIN_FEATURES (base/test_seam.h)
 * sees each step's tap features before the drafter does. */
int df_train(const DfTrainOptions *opt, DfTrainSummary *summary, DfError *err);

#endif
