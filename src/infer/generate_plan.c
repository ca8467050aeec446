/* The generate job's batch (see generate_plan.h). */
#include "infer/generate_plan.h"

#include <stdint.h>

#include "infer/generate.h"
#include "target/target_memory.h"

static const double GIB = 1024.0 * 1024.0 * 1024.0;

/* The decoder's workspace rows for a step of `rows` rows: doubled from 16
 * until they fit (target_decode.c ensure_workspace). */
static size_t rows_allocated(int64_t rows) {
    size_t n = 16;
    while ((int64_t)n < rows) n *= 2;
    return n;
}

/* The most rows a step of b slots has: a token of each slot's decoding and
 * at most step_prompt_tokens of the prompts (chunked prefill, generate.h). */
static int64_t step_rows(int64_t b, int64_t prompt_rows, int64_t step_prompt_tokens) {
    int64_t prompts = b * prompt_rows;
    return b + (prompts < step_prompt_tokens ? prompts : step_prompt_tokens);
}

/* What b slots take beyond the fixed part; SIZE_MAX past size_t. */
static size_t slots_bytes(int64_t b, size_t per_slot, size_t per_prefill_row, int64_t prompt_rows,
                          int64_t step_prompt_tokens) {
    size_t rows = rows_allocated(step_rows(b, prompt_rows, step_prompt_tokens));
    if ((size_t)b > SIZE_MAX / 2 / (per_slot ? per_slot : 1) || rows > SIZE_MAX / 2 / (per_prefill_row ? per_prefill_row : 1))
        return SIZE_MAX;
    return (size_t)b * per_slot + rows * per_prefill_row;
}

int df_generate_slots_that_fit(size_t room, size_t per_slot, size_t per_prefill_row, int64_t prompt_rows,
                               int64_t step_prompt_tokens, int cap) {
    int lo = 0, hi = cap; /* the bytes grow with the slots: the last count that fits */
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (slots_bytes(mid, per_slot, per_prefill_row, prompt_rows, step_prompt_tokens) <= room) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* The sizes of one slot, of a page and of the fixed part (generate_plan.h says what they hold). */
static void plan_sizes(const DfGeneratePlanInput *in, DfGeneratePlan *p) {
    const DfModelConfig *c = in->target;
    p->weights = df_target_weight_bytes(c, c->num_layers, 1, in->act_elem);
    p->available = in->memory.available;
    p->reserve = df_memory_reserve(in->memory.total, in->memory.host);
    p->fixed = df_target_rope_table_bytes(c, in->slot_rows);
    p->slot_state = df_target_decoder_slot_bytes(c, 0, 0, in->act_elem);
    p->page_bytes = df_target_decoder_slot_bytes(c, DF_KV_PAGE_ROWS, 0, in->act_elem) - p->slot_state;
    int mean = in->mean_rows > 0 && in->mean_rows < in->slot_rows ? in->mean_rows : in->slot_rows;
    p->longest_pages = df_kv_pages_for(in->slot_rows);
    p->seq_pages = df_kv_pages_for(mean) + 1; /* a sequence's last page is half empty on average: one more */
    if (p->seq_pages > p->longest_pages) p->seq_pages = p->longest_pages;
    p->per_slot = p->slot_state + (size_t)p->seq_pages * p->page_bytes + (size_t)c->vocab_size * in->act_elem +
                  sizeof(int32_t); /* logits row, choice */
    /* the workspace (its features are one tap wide without taps) and the step's layout, about 2 ints a row */
    p->per_prefill_row = df_target_decoder_workspace_bytes(c, 1, 1, in->act_elem) + 2 * sizeof(int32_t);
    p->prompt_rows = in->slot_rows > in->max_new_tokens ? in->slot_rows - in->max_new_tokens : 1;
    p->cap = in->memory.host ? DF_GENERATE_CPU_MAX_BATCH : DF_GENERATE_GPU_MAX_BATCH;
    p->slot_rows = in->slot_rows;
    p->kv_layers = df_target_kv_layers(c);
    p->kv_dim = c->num_kv_heads * c->head_dim;
    p->linear_layers = c->num_layers - p->kv_layers;
}

/* One slot's bytes beside its pages: a hybrid's recurrent states, its logits row and its choice. */
static size_t slot_beside_pages(const DfGeneratePlan *p) {
    return p->per_slot - (size_t)p->seq_pages * p->page_bytes;
}

static int fail_none_fits(const DfGeneratePlanInput *in, const DfGeneratePlan *p, DfError *err) {
    size_t prefill = rows_allocated(step_rows(1, p->prompt_rows, DF_GENERATE_STEP_PROMPT_TOKENS)) * p->per_prefill_row;
    return df_fail(err,
                   "generate on %s: not even one sequence fits: the longest, %d tokens (its prompt, %lld tokens, "
                   "+ --max-new-tokens %d), takes %.3f GiB of KV cache%s, %.3f GiB of logits and %.3f GiB of workspace "
                   "for its prefill, beside %.3f GiB of rope tables, against %.3f GiB free beside the %.3f GiB of "
                   "weights (%.3f GiB kept free); lower --max-new-tokens or cut the longest prompts",
                   in->device, in->slot_rows, (long long)p->prompt_rows, in->max_new_tokens,
                   (double)p->longest_pages * p->page_bytes / GIB,
                   in->target->is_hybrid ? " and recurrent state" : "",
                   (slot_beside_pages(p) - p->slot_state) / GIB, prefill / GIB,
                   p->fixed / GIB, p->available / GIB, p->weights / GIB, p->reserve / GIB);
}

/* What b slots take beside their pages and the fixed part. */
static size_t slots_without_pages(const DfGeneratePlan *p, int b) {
    return slots_bytes(b, slot_beside_pages(p), p->per_prefill_row, p->prompt_rows, DF_GENERATE_STEP_PROMPT_TOKENS);
}

/* The pool for b slots in `room` bytes: what is left beside the slots, at
 * most every slot's longest sequence; 0 when not even one longest fits. */
static int pool_pages(const DfGeneratePlan *p, int b, size_t room) {
    int64_t most = (int64_t)b * p->longest_pages;
    size_t taken = slots_without_pages(p, b);
    if (room == SIZE_MAX) return (int)(most < INT32_MAX ? most : INT32_MAX);
    int64_t fit = taken < room ? (int64_t)((room - taken) / p->page_bytes) : 0;
    int64_t pages = fit < most ? fit : most;
    return pages >= p->longest_pages ? (int)(pages < INT32_MAX ? pages : INT32_MAX) : 0;
}

/* The batch and why, sized by memory (0 when not even one fits). */
static void size_batch(const DfGeneratePlanInput *in, DfGeneratePlan *p, size_t room) {
    p->fit = df_generate_slots_that_fit(room, p->per_slot, p->per_prefill_row, p->prompt_rows,
                                        DF_GENERATE_STEP_PROMPT_TOKENS, p->cap);
    while (p->fit > 0 && !pool_pages(p, p->fit, room)) p->fit--; /* the longest sequence must fit the pool */
    p->batch = p->fit, p->why = p->fit < p->cap ? "memory" : "the cap";
    if (in->records > 0 && in->records < p->batch) p->batch = in->records, p->why = "the records";
}

int df_generate_plan_make(const DfGeneratePlanInput *in, DfGeneratePlan *p, DfError *err) {
    *p = (DfGeneratePlan){0};
    plan_sizes(in, p);
    size_t usable = p->available > p->reserve ? p->available - p->reserve : 0;
    size_t room = usable > p->fixed ? usable - p->fixed : 0;
    if (p->available == SIZE_MAX) room = SIZE_MAX; /* the backend cannot tell: the cap, every page */
    if (in->batch > 0) {
        p->batch = in->batch;
        p->why = "--batch";
    } else {
        size_batch(in, p, room);
        if (p->batch == 0) return fail_none_fits(in, p, err);
    }
    p->n_pages = pool_pages(p, p->batch, room);
    if (!p->n_pages) p->n_pages = p->longest_pages; /* --batch past the memory: the allocation says what fails */
    p->total = p->fixed + slots_without_pages(p, p->batch) + (size_t)p->n_pages * p->page_bytes;
    return 0;
}

void df_generate_plan_print(const DfGeneratePlan *p, const char *device, FILE *fp) {
    size_t pages = (size_t)p->n_pages * p->page_bytes;
    size_t workspace = p->total - p->fixed - pages - (size_t)p->batch * slot_beside_pages(p);
    fprintf(fp,
            "generate: batch %d (%s) on %s: a paged KV cache of %d pages x %d tokens (%.2f GiB; 2 x %d layers x %d "
            "values a token) for sequences of up to %d tokens (%d pages at the records' mean length, %d the longest)",
            p->batch, p->why, device, p->n_pages, DF_KV_PAGE_ROWS, pages / GIB, p->kv_layers, p->kv_dim, p->slot_rows,
            p->seq_pages, p->longest_pages);
    if (p->linear_layers) fprintf(fp, ", each slot's recurrent state of %d layers", p->linear_layers);
    fprintf(fp, ", the slots' logits, and %.2f GiB of workspace for a step of %lld rows (a token of each slot and at "
                "most %d of the prompts) = %.2f GiB",
            workspace / GIB, (long long)step_rows(p->batch, p->prompt_rows, DF_GENERATE_STEP_PROMPT_TOKENS),
            DF_GENERATE_STEP_PROMPT_TOKENS, p->total / GIB);
    if (p->available == SIZE_MAX) fprintf(fp, " beside %.2f GiB of weights (free memory unknown)", p->weights / GIB);
    else
        fprintf(fp, " of %.2f GiB free beside %.2f GiB of weights (%.2f kept free)", p->available / GIB,
                p->weights / GIB, p->reserve / GIB);
    if (p->fit > 0 && p->fit != p->batch) fprintf(fp, "; %d would fit", p->fit);
    fprintf(fp, "; cap %d\n", p->cap);
}
