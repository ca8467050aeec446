#include "train/train_eval.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "infer/chat_turns.h"
#include "infer/prompts.h"
#include "infer/spec_stats.h"
#include "text/tokenizer.h"
#include "train/run_dir.h"

/* The first n prompts of set, tokenized. */
static int tokenize_prompts(DfTrainEval *e, const DfPromptSet *set, const char *target_dir, DfError *err) {
    DfTokenizer *tok = df_tokenizer_load(target_dir, err);
    if (!tok) return df_context(err, "--eval-data: the target's tokenizer");
    int rc = 0;
    e->prompts = df_xcalloc((size_t)e->n_prompts, sizeof *e->prompts, "eval prompts");
    for (int i = 0; rc == 0 && i < e->n_prompts; i++) {
        const DfPrompt *p = &set->items[i];
        rc = df_tokenizer_encode(tok, p->text, strlen(p->text), &e->prompts[i], err);
        if (rc == 0 && e->prompts[i].len == 0)
            rc = df_fail(err, "--eval-data %s:%lld (id %s): an empty prompt", e->data, (long long)p->line_no,
                         p->id_json);
        if (rc == 0 && (int64_t)e->prompts[i].len > e->max_prompt) e->max_prompt = (int64_t)e->prompts[i].len;
    }
    df_tokenizer_free(tok);
    return rc;
}

int df_train_eval_read(DfTrainEval *e, const char *target_dir, const DfModelConfig *tcfg, const char *data,
                       const DfChatOptions *chat, int n_prompts, int max_new_tokens, int block_size, DfError *err) {
    memset(e, 0, sizeof *e);
    e->data = data;
    e->best_step = e->last_step = -1;
    DfPromptSet set = {0};
    int rc = df_prompts_read_any(data, &set, err) || df_chat_render_last_turns(&set, target_dir, chat, data, err);
    if (rc == 0 && set.n == 0) rc = df_fail(err, "--eval-data %s holds no prompt", data);
    if (rc == 0) {
        e->n_prompts = n_prompts < set.n ? n_prompts : set.n;
        rc = tokenize_prompts(e, &set, target_dir, err);
    }
    df_prompts_free(&set);
    if (rc) return df_context(err, "--eval-data");
    e->spec.block_size = block_size;
    e->spec.max_new_tokens = e->greedy.max_new_tokens = max_new_tokens;
    e->greedy.top_p = 1;
    if (df_generation_eos_ids(target_dir, tcfg, e->greedy.eos_ids, &e->greedy.n_eos, err)) return -1;
    memcpy(e->spec.eos_ids, e->greedy.eos_ids, sizeof e->spec.eos_ids);
    e->spec.n_eos = e->greedy.n_eos;
    e->slot_rows = e->max_prompt + max_new_tokens + block_size;
    return 0;
}

/* The best and last eval of the lines kept in the log (a resumed run). */
static void remember(DfTrainEval *e, int64_t step, double tau) {
    e->evals++;
    e->last_step = step, e->last_tau = tau;
    if (e->best_step < 0 || tau > e->best_tau) e->best_step = step, e->best_tau = tau;
}

static void read_kept_lines(DfTrainEval *e) {
    FILE *fp = fopen(e->path, "r");
    if (!fp) return;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, fp) > 0) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(j, "step"), *tau = cJSON_GetObjectItemCaseSensitive(j, "tau");
        if (cJSON_IsNumber(step) && cJSON_IsNumber(tau)) remember(e, (int64_t)step->valuedouble, tau->valuedouble);
        cJSON_Delete(j);
    }
    free(line);
    fclose(fp);
}

int df_train_eval_open_log(DfTrainEval *e, const char *output_dir, int64_t resume_step, DfError *err) {
    snprintf(e->path, sizeof e->path, "%s/eval.jsonl", output_dir);
    double unused;
    if (resume_step >= 0) {
        if (df_run_dir_truncate_jsonl(e->path, resume_step, &unused, err)) return -1;
        read_kept_lines(e);
    }
    if (!(e->fp = fopen(e->path, resume_step >= 0 ? "a" : "w"))) return df_fail_errno(err, "cannot open %s", e->path);
    return 0;
}

int df_train_eval_attach(DfTrainEval *e, DfTargetModel *target, const DfDrafterConfig *dcfg, DfBuffer params,
                         DfError *err) {
    int rows = (int)e->slot_rows;
    if (df_target_decoder_init(&e->dec, target, 1, rows, dcfg->target_layer_ids, dcfg->n_taps, err))
        return df_context(err, "--eval-data: the target decoder");
    DfBuffer head = target->lm_head_tied ? target->embed : target->lm_head;
    if (df_drafter_runner_init_on(&e->runner, target->be, dcfg, params, target->embed, head, 1, rows, err)) {
        df_target_decoder_free(&e->dec);
        return df_context(err, "--eval-data: the drafter");
    }
    e->attached = 1;
    return 0;
}

/* The target's plain greedy decoding of every prompt: the lossless check's
 * reference (the target does not train, so once per call). */
static int make_reference(DfTrainEval *e, DfError *err) {
    e->reference = df_xcalloc((size_t)e->n_prompts, sizeof *e->reference, "eval references");
    for (int i = 0; i < e->n_prompts; i++) {
        const int32_t *prompt = e->prompts[i].data;
        int len = (int)e->prompts[i].len, steps = 0;
        if (df_generate_batch(&e->dec, 1, &prompt, &len, &e->greedy, &e->reference[i], &steps, err))
            return df_context(err, "--eval-data: greedy decoding of prompt %d", i + 1);
        e->reference_passes += steps;
    }
    e->have_reference = 1;
    return 0;
}

static int same_tokens(const DfI32Vec *a, const DfI32Vec *b) {
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len * sizeof *a->data) == 0);
}

static int decode_all(DfTrainEval *e, DfEvalTotals *t, DfError *err) {
    for (int i = 0; i < e->n_prompts; i++) {
        DfSpecResult r = {0};
        int rc = df_speculative_generate(&e->dec, &e->runner, 0, e->prompts[i].data, (int)e->prompts[i].len, &e->spec,
                                         &r, err);
        if (rc == 0) {
            df_eval_totals_add(t, &r);
            if (!same_tokens(&r.tokens, &e->reference[i])) {
                fprintf(stderr, "train: eval: prompt %d of %s: speculative output differs from greedy (BUG)\n", i + 1,
                        e->data);
                t->mismatches++;
            }
        }
        df_spec_result_free(&r);
        if (rc) return df_context(err, "--eval-data: prompt %d", i + 1);
    }
    return 0;
}

static int write_line(DfTrainEval *e, int64_t step, double elapsed_s, const DfEvalTotals *t, DfError *err) {
    int B = e->spec.block_size;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "step", (double)step);
    cJSON_AddNumberToObject(j, "tau", df_eval_tau(t));
    cJSON_AddNumberToObject(j, "tau_prompt_mean", df_eval_tau_prompt_mean(t));
    cJSON *reach = cJSON_AddArrayToObject(j, "accept_by_position");
    for (int k = 1; k < B; k++) cJSON_AddItemToArray(reach, cJSON_CreateNumber(df_eval_reach_fraction(t, k)));
    cJSON *hist = cJSON_AddArrayToObject(j, "accepted_hist");
    for (int n = 0; n < B; n++) cJSON_AddItemToArray(hist, cJSON_CreateNumber((double)t->hist[n]));
    cJSON_AddBoolToObject(j, "lossless", t->mismatches == 0);
    cJSON_AddNumberToObject(j, "mismatches", (double)t->mismatches);
    cJSON_AddNumberToObject(j, "prompts", e->n_prompts);
    cJSON_AddNumberToObject(j, "tokens", (double)t->tokens);
    cJSON_AddNumberToObject(j, "cycles", (double)t->cycles);
    cJSON_AddNumberToObject(j, "target_passes", (double)t->spec_passes);
    cJSON_AddNumberToObject(j, "greedy_passes", (double)t->greedy_passes);
    cJSON_AddNumberToObject(j, "seconds", t->spec_s);
    cJSON_AddNumberToObject(j, "tokens_per_s", t->spec_s > 0 ? (double)t->tokens / t->spec_s : 0);
    cJSON_AddNumberToObject(j, "elapsed_s", elapsed_s);
    cJSON_AddNumberToObject(j, "best_step", (double)e->best_step); /* OUTPUT/best/ holds its drafter */
    cJSON_AddNumberToObject(j, "best_tau", e->best_tau);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    int rc = fprintf(e->fp, "%s\n", text) < 0 || fflush(e->fp) ? df_fail_errno(err, "writing %s", e->path) : 0;
    cJSON_free(text);
    return rc;
}

int df_train_eval_run(DfTrainEval *e, int64_t step, double elapsed_s, DfTrainEvalResult *res, DfError *err) {
    DfEvalTotals t = {0};
    if (!e->have_reference && make_reference(e, err)) return -1;
    t.greedy_passes = e->reference_passes;
    t.hist = df_xcalloc((size_t)e->spec.block_size, sizeof *t.hist, "eval histogram");
    double t0 = df_now_seconds();
    int rc = decode_all(e, &t, err);
    t.spec_s = df_now_seconds() - t0;
    if (rc == 0) remember(e, step, df_eval_tau(&t)); /* the line names the best so far */
    if (rc == 0) rc = write_line(e, step, elapsed_s, &t, err);
    if (rc == 0) {
        *res = (DfTrainEvalResult){.tau = df_eval_tau(&t), .seconds = t.spec_s, .tokens = t.tokens,
                                   .mismatches = t.mismatches, .tau_prompt_mean = df_eval_tau_prompt_mean(&t)};
        for (int k = 1; k < e->spec.block_size && k <= DF_TRAIN_EVAL_MAX_POSITIONS; k++)
            res->accept_by_position[res->n_positions++] = df_eval_reach_fraction(&t, k);
    }
    free(t.hist);
    return rc;
}

void df_train_eval_free(DfTrainEval *e) {
    if (e->fp) fclose(e->fp);
    if (e->attached) {
        df_drafter_runner_free(&e->runner);
        df_target_decoder_free(&e->dec);
    }
    for (int i = 0; e->prompts && i < e->n_prompts; i++) df_i32vec_free(&e->prompts[i]);
    for (int i = 0; e->reference && i < e->n_prompts; i++) df_i32vec_free(&e->reference[i]);
    free(e->prompts);
    free(e->reference);
    memset(e, 0, sizeof *e);
}
