#include "train/memory_plan.h"

#include <stdint.h>

#include "model/drafter.h"
#include "model/drafter_layout.h"
#include "target/target_memory.h"

static const double GIB = 1024.0 * 1024.0 * 1024.0;

/* What the plan keeps free (df_memory_reserve): fp32 activations are the host's. */
static size_t reserve_for(const DfMemoryPlanInput *in) { return df_memory_reserve(in->memory.total, in->act_elem == 4); }

size_t df_memory_plan_drafter_work(const DfDrafterConfig *c, int64_t n_ctx, int64_t n_q, size_t act_elem) {
    size_t act, f32, i32;
    df_drafter_work_elements(c, (int)n_ctx, (int)n_q, &act, &f32, &i32);
    size_t kvd = (size_t)c->num_kv_heads * c->head_dim;
    size_t attn_scratch = ((size_t)c->num_heads * (size_t)n_q + 2 * (size_t)n_ctx * kvd) * sizeof(float);
    return act * act_elem + (f32 + i32) * sizeof(float) + attn_scratch;
}

/* Workspaces grow by doubling from 16 rows (target/target_decode.c, drafter_infer.c). */
static size_t rows_allocated(int64_t rows) {
    size_t n = 16;
    while ((int64_t)n < rows) n *= 2;
    return n;
}

size_t df_memory_plan_eval_bytes(const DfModelConfig *t, const DfDrafterConfig *d, int64_t slot_rows,
                                 int64_t prompt_rows, size_t act_elem) {
    size_t rows = (size_t)slot_rows, B = (size_t)d->block_size, V = (size_t)t->vocab_size, H = (size_t)t->hidden_size;
    size_t decoder = df_target_decoder_slot_bytes(t, slot_rows, d->block_size, act_elem);
    size_t prefill = rows_allocated(prompt_rows > (int64_t)B ? prompt_rows : (int64_t)B);
    decoder += df_target_decoder_workspace_bytes(t, d->n_taps, prefill, act_elem) + B * V * act_elem + B * sizeof(int32_t) +
               rows * (size_t)df_target_rope_dim(t) * sizeof(float);
    size_t dkv = (size_t)d->num_kv_heads * d->head_dim, dq = (size_t)d->num_heads * d->head_dim;
    size_t per_row = (size_t)d->n_taps * H + 2 * H + 2 * dq + 2 * dkv + 2 * (size_t)d->intermediate_size;
    size_t runner = (size_t)d->num_layers * 2 * rows * dkv * act_elem + prefill * (per_row * act_elem + sizeof(int32_t)) +
                    B * (V * act_elem + sizeof(int32_t)) + rows * (size_t)d->head_dim * sizeof(float);
    /* the steps' layouts (DfKvBatch: grown by doubling to about 2 ints a row): the decoder's, the runner's
     * two, a hybrid's record */
    size_t layouts = 4 * 2 * (prefill + 8) * sizeof(int32_t);
    return decoder + runner + layouts;
}

static size_t drafter_params(const DfDrafterConfig *c) {
    DfDrafterLayout layout;
    df_drafter_layout_build(&layout, c);
    size_t n = layout.total;
    df_drafter_layout_free(&layout);
    return n;
}

static void plan_fixed(const DfMemoryPlanInput *in, DfMemoryPlan *p) {
    const DfDrafterConfig *c = in->drafter;
    size_t T = (size_t)in->step_tokens;
    p->backend = in->memory.in_use;
    p->target_weights = df_target_weight_bytes(in->target, in->target_layers, in->with_head, in->act_elem);
    if (in->target_layers > 0)
        p->target_workspace = df_target_forward_workspace_bytes(in->target, (int)in->step_tokens, (int)in->step_seqs,
                                                                (int)in->max_seq_len, in->act_elem);
    p->step_inputs = T * sizeof(int32_t) + T * (size_t)c->n_taps * c->hidden_size * in->act_elem;
    if (in->runs_drafter) {
        size_t n = drafter_params(in->drafter);
        p->drafter_state = n * in->act_elem + 4 * n * sizeof(float); /* weights; gradients, master, moments */
        if (in->host_state) p->host_copies = 3 * n * sizeof(float);    /* weights and moments for checkpoints */
        p->op_scratch = in->memory.op_scratch;
    }
    if (in->eval_slot_rows > 0)
        p->eval = df_memory_plan_eval_bytes(in->target, c, in->eval_slot_rows, in->eval_prompt_rows, in->act_elem);
    p->reserve = reserve_for(in);
    size_t have = in->memory.available > SIZE_MAX - in->memory.in_use ? SIZE_MAX /* nothing known */
                                                                       : in->memory.in_use + in->memory.available;
    p->capacity = have > p->reserve ? have - p->reserve : 0;
}

/* What the backend's buffers hold whatever the micro-batch. */
static size_t fixed_buffers(const DfMemoryPlan *p) {
    return p->backend + p->target_weights + p->target_workspace + p->drafter_state + p->step_inputs + p->op_scratch +
           p->eval;
}

static size_t fixed_total(const DfMemoryPlan *p) { return fixed_buffers(p) + p->host_copies; }

/* The step's block rows, at least one block. */
static int64_t step_rows(const DfMemoryPlanInput *in) {
    return in->step_block_rows > in->drafter->block_size ? in->step_block_rows : in->drafter->block_size;
}

static size_t work_for(const DfMemoryPlanInput *in, int64_t rows) {
    return df_memory_plan_drafter_work(in->drafter, in->step_tokens, rows, in->act_elem);
}

/* The most block rows (whole blocks, at most the step's) whose work fits
 * room; 0 when not even one block does. */
static int64_t rows_that_fit(const DfMemoryPlanInput *in, size_t room) {
    int64_t B = in->drafter->block_size, lo = 0, hi = (step_rows(in) + B - 1) / B;
    while (lo < hi) { /* the work grows with the rows: the last block count that fits */
        int64_t mid = (lo + hi + 1) / 2;
        if (work_for(in, mid * B) <= room) lo = mid;
        else hi = mid - 1;
    }
    return lo * B;
}

static int fail_too_small(const DfMemoryPlanInput *in, const DfMemoryPlan *p, DfError *err) {
    size_t one = work_for(in, in->drafter->block_size);
    char eval_note[256] = "";
    if (p->eval)
        snprintf(eval_note, sizeof eval_note, " %.2f for --eval-data's decoding (the whole target is loaded for it; "
                 "a lower --eval-max-new-tokens, shorter eval prompts or no --eval-data lower that),", p->eval / GIB);
    return df_fail(err,
                   "memory plan for %s: the run cannot fit: %.2f GiB for the target's weights, %.2f for its "
                   "forward over the largest step (%lld tokens), %.2f for the drafter's state, %.2f for the step's "
                   "features, %.2f for the backend,%s and %.2f for a micro-batch of one block, against %.2f GiB usable "
                   "(%.2f kept free%s); lower --token-budget or --max-length (the step), --draft-layers or "
                   "--intermediate-size (the drafter), or train with the split layout (the target on other GPUs)",
                   in->device, p->target_weights / GIB, p->target_workspace / GIB, (long long)in->step_tokens,
                   (p->drafter_state + p->host_copies) / GIB, p->step_inputs / GIB, (p->backend + p->op_scratch) / GIB, eval_note, one / GIB,
                   p->capacity / GIB, p->reserve / GIB, p->host_copies ? ", the state's host copies counted" : "");
}

int df_memory_plan_make(const DfMemoryPlanInput *in, DfMemoryPlan *p, DfError *err) {
    *p = (DfMemoryPlan){0};
    plan_fixed(in, p);
    size_t fixed = fixed_total(p);
    if (in->runs_drafter) {
        int64_t B = in->drafter->block_size;
        size_t room = p->capacity > fixed ? p->capacity - fixed : 0;
        int64_t fit = rows_that_fit(in, room);
        if (in->max_drafter_tokens > 0) {
            p->block_rows = in->max_drafter_tokens < B ? B : in->max_drafter_tokens / B * B;
            if (p->block_rows > step_rows(in)) p->block_rows = step_rows(in);
            if (work_for(in, p->block_rows) > room) {
                if (fit == 0) return fail_too_small(in, p, err);
                return df_fail(err,
                               "memory plan for %s: --max-drafter-tokens %lld needs %.2f GiB of drafter work "
                               "buffers, %.2f GiB is left beside the rest (%.2f GiB); at most %lld fit (or leave "
                               "the option out: it is sized to fit)",
                               in->device, (long long)in->max_drafter_tokens, work_for(in, p->block_rows) / GIB,
                               room / GIB, fixed / GIB, (long long)fit);
            }
        } else {
            if (fit == 0) return fail_too_small(in, p, err);
            p->block_rows = fit;
            p->sized = 1;
        }
        p->drafter_work = work_for(in, p->block_rows);
        p->micro_batches = (step_rows(in) + p->block_rows - 1) / p->block_rows;
    } else if (fixed > p->capacity) {
        return fail_too_small(in, p, err);
    }
    p->total = fixed_buffers(p) + p->drafter_work;
    return 0;
}

void df_memory_plan_print(const DfMemoryPlan *p, const char *device, FILE *fp) {
    fprintf(fp,
            "train: memory plan on %s: %.2f GiB of %.2f usable (%.2f kept free): target weights %.2f, target "
            "forward %.2f, drafter state %.2f, step features %.2f, backend %.2f, drafter micro-batch %.2f\n",
            device, p->total / GIB, p->capacity / GIB, p->reserve / GIB, p->target_weights / GIB,
            p->target_workspace / GIB, p->drafter_state / GIB, p->step_inputs / GIB, (p->backend + p->op_scratch) / GIB,
            p->drafter_work / GIB);
    if (p->eval)
        fprintf(fp, "train: the held-out eval (--eval-data) adds %.2f GiB of decoding buffers; the target's weights "
                    "are all of its layers and its head\n",
                p->eval / GIB);
    if (p->block_rows > 0)
        fprintf(fp, "train: drafter micro-batches of up to %lld block rows (--max-drafter-tokens%s); the largest step "
                    "takes %lld of them\n",
                (long long)p->block_rows, p->sized ? ": sized to fit" : "", (long long)p->micro_batches);
}
