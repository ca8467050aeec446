/* How many sequences the generate job decodes together (its batch: the
 * target decoder's slots) and how many pages its paged KV cache holds,
 * chosen once the target's weights are loaded and the records' lengths are
 * known, and printed at the start as train prints its memory plan.
 *
 * A sequence holds the pages of DF_KV_PAGE_ROWS rows (every KV layer's K
 * and V) that its prompt and max new tokens need, from its start to its end
 * (generate.h); its slot holds, for a hybrid target, the recurrent and
 * convolution states of its Gated DeltaNet layers, its row of logits and
 * its greedy choice; and it brings its next token, or a slice of its prompt,
 * to each step, whose rows the decoder's workspace holds (grown by doubling
 * from 16 rows). The worst step has a token of every slot and
 * DF_GENERATE_STEP_PROMPT_TOKENS of the prompts (chunked prefill), or every
 * slot's whole prompt where that is less. Fixed beside the slots: the rope
 * tables of the longest sequence's rows.
 *
 * With --batch N that is the batch. Otherwise it is as many slots as fit the
 * device's free memory beside the loaded weights, less what the plan keeps
 * free (df_memory_reserve), each with the pages of a sequence of the
 * records' mean length, at most the device's cap and at most the records
 * left. The pool then takes the memory left (no more than every slot's
 * longest sequence needs, and never less than one longest sequence), so
 * that sequences shorter than the longest leave room for more of them: a
 * record waits for pages only when the running ones hold them all. A device
 * where not even one slot and one longest sequence fit is an error naming the
 * sizes. */
#ifndef DF_INFER_GENERATE_PLAN_H
#define DF_INFER_GENERATE_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"
#include "base/error.h"
#include "target/model_config.h"

/* The most slots a GPU decodes together when --batch is not given: past
 * some batch a larger one stops paying (the step's time grows about as fast
 * as its tokens once the weights' read is shared by enough sequences, and
 * the KV cache read grows with it). Measured at the Qwen3-8B shape on an
 * H100 (bench/RESULTS.md): the decode steps reach 74% of their bandwidth
 * limit at 256 and 68% at 512, 16% more tokens/s; the whole generate job
 * (4,000 prompts, 256 new tokens) 21,600 tokens/s at 512 against 19,238 at
 * 256 in the same run. At the bundled target, whose steps are short, larger
 * batches are slower still: the recipe's regeneration of 79,989 prompts took
 * 119 s at 512, 136 s at 1024 and 169 s at 2048. */
#define DF_GENERATE_GPU_MAX_BATCH 512

/* The same on the CPU: its matrix products reach their rate at a few rows
 * (OpenMP over OpenBLAS-sized tiles on a handful of cores), so a larger
 * batch only lengthens each step and the prefill's workspace, and makes the
 * written output wait longer for the records before it. */
#define DF_GENERATE_CPU_MAX_BATCH 8

/* --batch's default in --help (generate's and train --prompts'). */
#define DF_GENERATE_BATCH_TEXT                                                                                     \
    "as many as fit the device's memory beside the weights, at most " DF_GENERATE_BATCH_TEXT_(                     \
        DF_GENERATE_GPU_MAX_BATCH) " on a GPU and " DF_GENERATE_BATCH_TEXT_(DF_GENERATE_CPU_MAX_BATCH) " on the CPU"
#define DF_GENERATE_BATCH_TEXT_(n) DF_GENERATE_BATCH_TEXT__(n)
#define DF_GENERATE_BATCH_TEXT__(n) #n

typedef struct DfGeneratePlanInput {
    const DfModelConfig *target;
    const char *device;  /* for the messages: "cuda:0", "cpu" */
    size_t act_elem;     /* bytes of an ACT element on the device */
    int slot_rows;       /* the KV cache's rows per slot: the longest record's prompt + max new tokens */
    int max_new_tokens;  /* of a slot's rows, those its prompt cannot take */
    int records;         /* records left to generate (no more slots than that) */
    int batch;           /* --batch (0: sized here) */
    DfMemoryInfo memory; /* the device now, the target's weights loaded */
    int mean_rows;       /* the records' mean prompt + max new tokens (0: slot_rows) */
} DfGeneratePlanInput;

typedef struct DfGeneratePlan {
    size_t weights;         /* the target's (all layers and the head): what memory.in_use holds already */
    size_t available;       /* free on the device now */
    size_t reserve;         /* of it kept free (df_memory_reserve) */
    size_t fixed;           /* the rope tables */
    size_t page_bytes;      /* one page: DF_KV_PAGE_ROWS rows of K and V in every KV layer */
    int seq_pages;          /* pages of a sequence of the mean length (rounded up, and one more) */
    int longest_pages;      /* pages of the longest sequence (slot_rows) */
    size_t slot_state;      /* one slot's state beside its pages: a hybrid's recurrent states (0: dense) */
    size_t per_slot;        /* slot_state, seq_pages pages, its logits row and its choice */
    size_t per_prefill_row; /* the decoder's workspace per row of a step */
    int64_t prompt_rows;    /* the longest prompt a slot prefills: slot_rows - max_new_tokens */
    int slot_rows, kv_layers, kv_dim, linear_layers; /* for the message */
    size_t total;           /* what the chosen batch takes: fixed + slots + the workspace of its largest prefill */
    int fit;                /* slots that fit (sized plans only) */
    int cap;                /* the device's cap */
    int batch;
    int n_pages;            /* the paged KV cache's pool */
    const char *why;        /* what bounded it: "--batch", "memory", "the cap", "the records" */
} DfGeneratePlan;

/* The most slots b (0..cap) with b * per_slot + per_prefill_row *
 * rows_allocated(b + min(b * prompt_rows, step_prompt_tokens)) <= room,
 * where rows_allocated is the decoder workspace's doubling from 16 rows: 0
 * when not even one fits. */
int df_generate_slots_that_fit(size_t room, size_t per_slot, size_t per_prefill_row, int64_t prompt_rows,
                               int64_t step_prompt_tokens, int cap);

/* Makes the plan (a pure function of in); fails, naming the sizes and what
 * to lower, when not even one slot fits. */
int df_generate_plan_make(const DfGeneratePlanInput *in, DfGeneratePlan *plan, DfError *err);

/* One line: the batch and why, for the start of a run. */
void df_generate_plan_print(const DfGeneratePlan *plan, const char *device, FILE *fp);

#endif
