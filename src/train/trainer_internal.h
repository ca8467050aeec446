/* The training loop's state, shared by its files, which call one another
 * one way only (trainer.c at the top):
 *   trainer.c             setup, the loop of a colocated or drafter rank, df_train
 *   trainer_target_rank.c the split layout's target ranks' loop
 *   trainer_step.c        one step: the share's forward (or its features
 *                         received), gradients, their reduction, the optimizer
 *   trainer_checkpoint.c  fresh start or resume, checkpoints, best/ and final/
 *   trainer_report.c      metrics and progress (trainer_tb.c: TensorBoard)
 *   trainer_memory.c      the memory plan and report
 *   trainer_topology.c    the group, the ranks' roles
 * Not a public interface: train/trainer.h is. */
#ifndef DF_TRAIN_TRAINER_INTERNAL_H
#define DF_TRAIN_TRAINER_INTERNAL_H

#include <stdio.h>

#include "backend/arena.h"
#include "dist/comm.h"
#include "dist/feature_link.h"
#include "dist/rendezvous.h"
#include "formats/tb_events.h"
#include "formats/token_store.h"
#include "model/drafter.h"
#include "target/target.h"
#include "pipeline/stage_stats.h"
#include "train/batcher.h"
#include "train/checkpoint.h"
#include "train/memory_plan.h"
#include "model/metrics.h"
#include "train/optimizer.h"
#include "train/schedule.h"
#include "train/step_loader.h"
#include "train/step_timing.h"
#include "train/train_eval.h"
#include "train/trainer.h"

/* The step's device inputs (views of the activations arena, sized for the
 * largest batch) and the host's sequence lengths (for the FLOP count). */
typedef struct StepBuffers {
    size_t dev_tokens_cap;   /* tokens the activations arena was sized for */
    DfBuffer dev_ids, features;
    int *seq_lens;
    int seq_lens_cap;
} StepBuffers;

/* The arenas of the training state and the step's inputs, one per role. */
enum { ARENA_WEIGHTS, ARENA_GRADIENTS, ARENA_OPTIMIZER, ARENA_ACTIVATIONS, N_ARENAS };

/* This rank's part in the layout (trainer.h): its role, the rank that
 * writes OUTPUT and its share of each batch (colocated: ROLE_COLOCATED,
 * writer 0, the share rank of world), and in the split layout the drafter
 * ranks' group, the feature links and the steps granted between a drafter
 * rank and its target rank. */
typedef struct TrainerSplit {
    int role;            /* ROLE_COLOCATED, ROLE_TARGET or ROLE_DRAFTER */
    int writer;          /* the rank that writes OUTPUT */
    int share_rank, share_world; /* this rank's place among the ranks that split each batch */
    DfDistGroup *drafters; /* the drafter ranks' own group (drafter ranks only) */
    DfFeatureLinks links;
    int have_links;
    int64_t granted;     /* drafter rank: the last step its target rank may send */
    int peer_signal;     /* drafter rank: the stop signal its target rank sent with this step's features */
} TrainerSplit;

typedef struct Trainer {
    const DfTrainOptions *opt;
    DfModelConfig tcfg;
    DfDrafterConfig dcfg;
    DfTokenStore *store;
    DfBatcher batcher;
    DfLrSchedule schedule;
    int64_t total_steps, stop_step;
    DfBackend *be;
    DfTargetModel target;
    DfPackedBatch packed; /* the step's packed batch for the target forward: its storage kept across steps */
    DfDrafter drafter;
    int have_drafter;
    /* The training state lives on the backend: the drafter's params (ACT)
     * and grads (F32), and here the fp32 master weights and AdamW moments.
     * adamw holds the step count and configuration; its moment arrays and
     * params are host copies, filled only to save or load a checkpoint. */
    DfArena arenas[N_ARENAS];
    DfBuffer master, exp_avg, exp_avg_sq; /* F32 [layout.total], optimizer state arena */
    DfAdamW adamw;
    int have_adamw;
    float *params;
    size_t *sizes;
    DfTrainProgress progress;
    char *options_json;
    char ckpt_dir[4096], metrics_path[4096], final_dir[4096], best_dir[4096];
    FILE *metrics_fp;
    DfMetrics metrics;
    StepBuffers buf;
    DfStepPeaks peaks;   /* the largest step of the run (sizes the step's buffers) */
    DfMemoryPlan plan;
    double elapsed_offset; /* elapsed_s of the run before this call (resume) */
    double start_s;
    int64_t bad_in_row, bad_total; /* steps whose update was skipped (non-finite) */
    int progress_open;   /* a progress line drawn in place awaits its newline */
    DfTbWriter *tb;      /* --report-to tensorboard, on the writing rank; else NULL */
    size_t target_bytes; /* device memory of the target's weights, where the backend tracks it */
    /* held-out eval (train/train_eval.h) */
    DfTrainEval eval;
    int eval_here;       /* this rank evaluates (the writer, with opt->eval_data) */
    double eval_pause_s; /* the last eval's time between two steps: not the next step's */
    int target_layers;   /* layers the target forward runs (for the FLOP count) */
    /* the pipeline and its instrumentation */
    DfStepLoader loader;
    DfStageTable stages;
    int have_stages;
    double peak_tflops;  /* 0: no MFU */
    /* data parallel */
    DfDistGroup *group;  /* NULL with one process */
    int rank, world;
    DfComm comm;
    int have_comm;
    char device[64];     /* the device this rank trains on */
    TrainerSplit split;  /* this rank's part in the layout */
} Trainer;

enum { ROLE_COLOCATED, ROLE_TARGET, ROLE_DRAFTER };

/* One step's outcome, summed over the ranks where it says so. */
typedef struct StepResult {
    int64_t tokens, samples; /* of the global batch */
    double lr, weight_sum;   /* weight_sum: of the global batch */
    double flops;            /* of the global batch (all ranks) */
    float grad_norm;
    const char *nonfinite; /* "loss" or "grad_norm" when the update was skipped, else NULL */
    int stop_signal;       /* data parallel: a rank received SIGINT/SIGTERM: every rank stops after this step */
} StepResult;

/* The timing of one step, for its metrics line and progress line. */
typedef struct StepReport {
    DfStepTimes times;
    double wall_s;      /* the compute thread's time for the step, from the end of the previous one */
    double elapsed_s;   /* of the whole run */
    double eta_s;       /* to stop_step, at this call's mean step time */
    double queue_depth; /* ready batches, time-weighted mean since the loop started */
} StepReport;

/* Reporting (trainer_report.c): the step's metrics.jsonl line; its progress
 * line; a step whose update was skipped (counted here, reported by the
 * writing rank); the stage table of the run (first: the first step's times,
 * first_wall_s its wall time, both kept out of the steady-state figure). */
int df_trainer_write_metrics(Trainer *t, int64_t epoch, const StepResult *r, const int64_t *samples,
                             const StepReport *rep, DfError *err);
void df_trainer_print_progress(Trainer *t, const StepResult *r, const StepReport *rep);
/* The step's scalars, and a held-out eval's, in the TensorBoard event file
 * (trainer_tb.c), equal to what metrics.jsonl and eval.jsonl hold. */
int df_trainer_tb_step(Trainer *t, const StepResult *r, const StepReport *rep, DfError *err);
int df_trainer_tb_eval(Trainer *t, const DfTrainEvalResult *e, DfError *err);
/* Ends a progress line drawn in place, so that what is printed next starts
 * a line of its own. */
void df_trainer_end_progress_line(Trainer *t);
void df_trainer_report_bad_step(Trainer *t, const StepResult *r, const int64_t *samples, DfTrainSummary *s);
int df_trainer_report_stages(Trainer *t, DfTrainSummary *s, double wall_s, const DfStepTimes *first,
                             double first_wall_s, DfError *err);

/* One step (trainer_step.c): target forward of this rank's share (upload
 * of its ids, the forward to the last tap): its tap features, in the
 * activations arena, for the drafter batch *db; times the upload and target
 * stages from *t0. One optimizer step of a colocated or drafter rank on its
 * share of the batch b. */
int df_trainer_share_forward(Trainer *t, const DfStepBatch *b, DfPackedBatch *pb, DfDrafterBatch *db,
                             DfStepTimes *times, double *t0, DfError *err);
int df_trainer_train_step(Trainer *t, const DfStepBatch *b, StepResult *r, DfStepTimes *times, DfError *err);

/* The training state (trainer_checkpoint.c): a fresh start (refusing an
 * OUTPUT that holds a run) or a resume (*resumed: from a checkpoint, not
 * fresh for want of one); the state to the backend (the moments too when
 * resumed); a checkpoint by the writing rank, its time in the summary;
 * curves.png; best/ when the step reached holds the best eval; whether
 * best/ holds a drafter; final/ (the best eval's drafter when --select-by
 * says so, else the step reached's). */
int df_trainer_start_fresh(Trainer *t, DfError *err);
int df_trainer_resume(Trainer *t, int *resumed, DfError *err);
int df_trainer_upload_state(Trainer *t, int with_moments, DfError *err);
int df_trainer_save_checkpoint(Trainer *t, DfTrainSummary *s, DfError *err);
void df_trainer_refresh_curves(const Trainer *t);
int df_trainer_keep_best(Trainer *t, DfError *err);
int df_trainer_have_best_dir(const Trainer *t);
int df_trainer_export_final(Trainer *t, int at_end, DfTrainSummary *s, DfError *err);

/* Memory (trainer_memory.c): the layers the target forward runs (up to the
 * deepest tap); the memory plan of this rank's role, made before anything is
 * loaded (it sizes the drafter's micro-batches, or fails with the sizes);
 * the tokens of the run's largest batch; what the backend's buffers hold now
 * (0 where it cannot tell); an arena's name; each arena's peak and the
 * device's, into the summary. */
int df_trainer_target_layers(const Trainer *t);
int df_trainer_plan_memory(Trainer *t, DfError *err);
size_t df_trainer_max_batch_tokens(const Trainer *t);
size_t df_trainer_bytes_in_use(DfBackend *be);
const char *df_trainer_arena_role(int arena);
void df_trainer_report_memory(const Trainer *t, DfTrainSummary *s);

/* Topology (trainer_topology.c): data parallel, joins the group (blocks
 * until every rank is there), sets this rank's role and share and picks its
 * device ("cuda" means cuda:LOCAL_RANK); the group the drafter's reductions
 * run over (every rank, or the drafter ranks in the split layout); the check
 * that every rank starts from the same step, schedule and weights; the split
 * layout's drafter group and feature links (every rank, in the same order);
 * the position the first drafter rank starts from, learnt by every rank;
 * leaving the group (after an error telling the others, else after a
 * barrier). */
int df_trainer_join_group(Trainer *t, DfError *err);
DfDistGroup *df_trainer_reduce_group(const Trainer *t);
int df_trainer_check_replicas_agree(Trainer *t, DfError *err);
int df_trainer_connect_split(Trainer *t, DfError *err);
int df_trainer_share_position(Trainer *t, DfError *err);
void df_trainer_leave_group(Trainer *t, int failed, const DfError *err);

/* A split layout target rank's whole run: steps from the position the first
 * drafter rank resumed at, until the last one or until the drafter ranks
 * stop (trainer_target_rank.c). */
int df_trainer_run_target_loop(Trainer *t, DfTrainSummary *s, DfError *err);

#endif
