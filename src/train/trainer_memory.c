/* The trainer's device memory (train/trainer_internal.h): the memory plan
 * of this rank's role before anything is loaded (train/memory_plan.h), the
 * sizes the arenas are cut for, and what the summary reports at the end. */
#include "train/trainer_internal.h"

#include <stdio.h>

static const char *const ARENA_ROLES[N_ARENAS] = {"weights", "gradients", "optimizer state", "activations"};

const char *df_trainer_arena_role(int arena) { return ARENA_ROLES[arena]; }

/* The layers the target forward runs: up to the deepest tap. */
int df_trainer_target_layers(const Trainer *t) {
    return df_target_layers_needed(&t->tcfg, t->dcfg.target_layer_ids, t->dcfg.n_taps, 0);
}

/* The memory plan (train/memory_plan.h) for this rank's role, before
 * anything is loaded: it sizes the drafter's micro-batches, or fails with
 * the sizes when the run cannot fit. */
int df_trainer_plan_memory(Trainer *t, DfError *err) {
    df_batcher_step_peaks(&t->batcher, t->total_steps, t->opt->num_anchors, t->dcfg.block_size, &t->peaks);
    DfMemoryInfo mem;
    df_backend_memory_info(t->be, &mem);
    int tied = t->tcfg.tie_word_embeddings;
    DfMemoryPlanInput in = {.target = &t->tcfg, .drafter = &t->dcfg, .device = t->device,
                            .act_elem = (size_t)df_backend_elem_size(t->be, DF_BUF_ACT),
                            .target_layers = t->split.role == ROLE_DRAFTER ? 0 : df_trainer_target_layers(t),
                            .with_head = t->split.role != ROLE_TARGET && !tied, .runs_drafter = t->split.role != ROLE_TARGET,
                            .host_state = mem.host, .step_tokens = t->peaks.tokens, .step_seqs = t->peaks.seqs,
                            .max_seq_len = t->peaks.max_len, .step_block_rows = t->peaks.block_rows,
                            .max_drafter_tokens = t->opt->max_drafter_tokens, .memory = mem};
    if (t->eval_here) { /* the decoder needs every layer and the head */
        in.target_layers = t->tcfg.num_layers;
        in.with_head = 1;
        in.eval_slot_rows = t->eval.slot_rows;
        in.eval_prompt_rows = t->eval.max_prompt;
    }
    if (df_memory_plan_make(&in, &t->plan, err)) return -1;
    if ((t->rank == t->split.writer || t->rank == 0) && !t->opt->quiet) df_memory_plan_print(&t->plan, t->device, stderr);
    return 0;
}

/* Tokens of the run's largest batch (the memory plan's scan). */
size_t df_trainer_max_batch_tokens(const Trainer *t) { return (size_t)t->peaks.tokens; }

/* What the backend's buffers hold now (0 where it cannot tell). */
size_t df_trainer_bytes_in_use(DfBackend *be) {
    DfMemoryInfo mem;
    df_backend_memory_info(be, &mem);
    return mem.in_use;
}

/* Peak use of each arena, and of the whole device where the backend knows it. */
void df_trainer_report_memory(const Trainer *t, DfTrainSummary *s) {
    for (int r = 0; r < N_ARENAS; r++) {
        DfTrainMemoryUse *m = &s->memory[r];
        snprintf(m->role, sizeof m->role, "%s", ARENA_ROLES[r]);
        m->capacity = t->arenas[r].capacity;
        m->peak = t->arenas[r].peak;
    }
    s->n_memory = N_ARENAS;
    snprintf(s->device, sizeof s->device, "%s", t->be ? t->be->ops->name : "");
    DfMemoryInfo mem = {0};
    if (t->be) df_backend_memory_info(t->be, &mem);
    s->device_peak_bytes = mem.peak;
    s->target_bytes = t->target_bytes;
    s->planned_bytes = t->plan.total;
    s->drafter_block_rows = t->plan.block_rows;
}
