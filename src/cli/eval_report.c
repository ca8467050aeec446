/* eval's report on stdout and its JSON summary. */
#include "cli/eval_report.h"

#include <cjson/cJSON.h>
#include <stdio.h>

#include "base/atomic_file.h"

/* Wall time per target pass, in ms: of speculative decoding (a cycle: one
 * proposal and its verification) and of greedy decoding (one step); the
 * prompts' prefill passes are counted in both. */
static double cycle_ms_of(const DfEvalTotals *t) {
    return t->spec_passes ? 1e3 * t->spec_s / (double)t->spec_passes : 0.0;
}

static double greedy_step_ms_of(const DfEvalTotals *t) {
    return t->greedy_passes ? 1e3 * t->greedy_s / (double)t->greedy_passes : 0.0;
}

void df_eval_print_report(const DfEvalTotals *t, const DfEvalInfo *info) {
    int b = info->block_size;
    printf("prompts %d, new tokens %lld, cycles %lld, block size %d\n", info->prompts, (long long)t->tokens,
           (long long)t->cycles, b);
    printf("tau %.3f (mean over cycles), %.3f (mean of per-prompt tau)\n", df_eval_tau(t), df_eval_tau_prompt_mean(t));
    printf("accepted drafts per cycle (n; tau counts n + 1):\n");
    for (int n = 0; n < b; n++)
        printf("  n=%-3d %8lld  %5.1f%%\n", n, (long long)t->hist[n], t->cycles ? 100.0 * t->hist[n] / t->cycles : 0.0);
    printf("acceptance by block position (cycles whose draft was right up to k):\n");
    for (int k = 1; k < b; k++) printf("  k=%-3d %5.1f%%\n", k, 100.0 * df_eval_reach_fraction(t, k));
    printf("target forward passes: %lld speculative vs %lld greedy (%lld saved, %.2fx fewer)\n",
           (long long)t->spec_passes, (long long)t->greedy_passes, (long long)(t->greedy_passes - t->spec_passes),
           t->spec_passes ? (double)t->greedy_passes / t->spec_passes : 0.0);
    printf("speed: speculative %.1f tokens/s, greedy %.1f tokens/s (%.2fx)\n", t->tokens / t->spec_s,
           t->tokens / t->greedy_s, t->greedy_s / t->spec_s);
    /* speedup = tau * step / cycle, roughly (the prefills aside) */
    double cycle_ms = cycle_ms_of(t), step_ms = greedy_step_ms_of(t);
    printf("time: one speculative cycle %.3f ms (drafter proposal + target verification), one greedy step %.3f ms "
           "(%.2fx)\n", cycle_ms, step_ms, step_ms > 0 ? cycle_ms / step_ms : 0.0);
    if (t->mismatches) printf("LOSSLESSNESS VIOLATED on %lld prompts\n", (long long)t->mismatches);
}

static void add_pair(cJSON *j, const char *key, double speculative, double greedy) {
    cJSON *o = cJSON_AddObjectToObject(j, key);
    cJSON_AddNumberToObject(o, "speculative", speculative);
    cJSON_AddNumberToObject(o, "greedy", greedy);
}

static cJSON *summary_json(const DfEvalTotals *t, const DfEvalInfo *info) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "target", info->target);
    cJSON_AddStringToObject(j, "draft", info->draft);
    cJSON_AddStringToObject(j, "input", info->input);
    cJSON_AddNumberToObject(j, "prompts", info->prompts);
    cJSON_AddNumberToObject(j, "conversations", info->conversations);
    cJSON_AddNumberToObject(j, "max_new_tokens", info->max_new_tokens);
    cJSON_AddNumberToObject(j, "block_size", info->block_size);
    cJSON_AddNumberToObject(j, "tau", df_eval_tau(t));
    cJSON_AddNumberToObject(j, "tau_prompt_mean", df_eval_tau_prompt_mean(t));
    cJSON_AddNumberToObject(j, "new_tokens", (double)t->tokens);
    cJSON_AddNumberToObject(j, "cycles", (double)t->cycles);
    cJSON *hist = cJSON_AddArrayToObject(j, "accepted_hist");
    for (int n = 0; n < info->block_size; n++) cJSON_AddItemToArray(hist, cJSON_CreateNumber((double)t->hist[n]));
    cJSON *reach = cJSON_AddArrayToObject(j, "acceptance_by_position");
    for (int k = 1; k < info->block_size; k++) cJSON_AddItemToArray(reach, cJSON_CreateNumber(df_eval_reach_fraction(t, k)));
    add_pair(j, "target_passes", (double)t->spec_passes, (double)t->greedy_passes);
    add_pair(j, "tokens_per_s", t->spec_s > 0 ? t->tokens / t->spec_s : 0, t->greedy_s > 0 ? t->tokens / t->greedy_s : 0);
    cJSON_AddNumberToObject(j, "cycle_ms", cycle_ms_of(t));
    cJSON_AddNumberToObject(j, "greedy_step_ms", greedy_step_ms_of(t));
    cJSON_AddNumberToObject(j, "speedup", t->spec_s > 0 ? t->greedy_s / t->spec_s : 0);
    cJSON_AddBoolToObject(j, "lossless", t->mismatches == 0);
    cJSON_AddNumberToObject(j, "mismatches", (double)t->mismatches);
    return j;
}

int df_eval_write_json(const char *path, const DfEvalTotals *t, const DfEvalInfo *info, DfError *err) {
    cJSON *j = summary_json(t, info);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text) return df_fail(err, "%s: cannot build the summary (out of memory)", path);
    int rc = df_atomic_write_text(path, text, 1, err);
    cJSON_free(text);
    return rc;
}
