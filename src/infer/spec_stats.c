#include "infer/spec_stats.h"

void df_eval_totals_add(DfEvalTotals *t, const DfSpecResult *r) {
    for (size_t c = 0; c < r->accepted.len; c++) {
        t->hist[r->accepted.data[c]]++;
        t->accepted_sum += r->accepted.data[c];
    }
    t->cycles += (int64_t)r->accepted.len;
    if (r->accepted.len) t->tau_prompt_sum += df_spec_tau(r), t->prompts_with_cycles++;
    t->tokens += (int64_t)r->tokens.len;
    t->spec_passes += r->target_passes;
}

double df_eval_tau(const DfEvalTotals *t) {
    return t->cycles ? (double)(t->accepted_sum + t->cycles) / (double)t->cycles : 0;
}

double df_eval_tau_prompt_mean(const DfEvalTotals *t) {
    return t->prompts_with_cycles ? t->tau_prompt_sum / t->prompts_with_cycles : 0.0;
}

double df_eval_reach_fraction(const DfEvalTotals *t, int k) {
    int64_t reach = t->cycles;
    for (int n = 0; n < k; n++) reach -= t->hist[n];
    return t->cycles ? (double)reach / (double)t->cycles : 0;
}
