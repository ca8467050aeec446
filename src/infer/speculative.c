#include "infer/speculative.h"

#include <stdlib.h>
#include <string.h>

#include "base/test_seam.h"

static int stop_token(const DfSpecOptions *opt, int32_t id) {
    for (int i = 0; i < opt->n_eos; i++)
        if (opt->eos_ids[i] == id) return 1;
    return 0;
}

/* Commits one generated token; returns 1 when generation ends (an EOS,
 * which is not kept, or the length limit reached). */
static int commit(const DfSpecOptions *opt, DfSpecResult *res, int32_t tok) {
    if (stop_token(opt, tok)) return 1;
    df_i32vec_push(&res->tokens, tok);
    return (int)res->tokens.len >= opt->max_new_tokens;
}

static int check_setup(const DfTargetDecoder *t, const DfDrafterRunner *d, int slot, int n_prompt,
                       const DfSpecOptions *opt, DfError *err) {
    if (opt->block_size < 2) return df_fail(err, "speculative decoding: block size %d (at least 2)", opt->block_size);
    if (n_prompt <= 0) return df_fail(err, "speculative decoding: empty prompt");
    if (t->n_taps != d->cfg.n_taps || memcmp(t->taps, d->cfg.target_layer_ids, (size_t)t->n_taps * sizeof(int)))
        return df_fail(err, "speculative decoding: the target decoder does not tap the drafter's target_layer_ids");
    long need = (long)n_prompt + opt->max_new_tokens + opt->block_size;
    if (slot < 0 || slot >= t->cache.n_slots || slot >= d->ctx.n_slots || need > t->cache.capacity ||
        need > d->ctx.capacity)
        return df_fail(err, "speculative decoding: slot %d cannot hold %ld tokens", slot, need);
    return 0;
}

int df_speculative_generate(DfTargetDecoder *target, DfDrafterRunner *drafter, int slot, const int32_t *prompt,
                            int n_prompt, const DfSpecOptions *opt, DfSpecResult *res, DfError *err) {
    res->tokens.len = 0;
    res->accepted.len = 0;
    res->target_passes = 0;
    if (check_setup(target, drafter, slot, n_prompt, opt, err) ||
        df_target_decoder_enable_rollback(target, opt->block_size, err))
        return -1;
    if (opt->max_new_tokens <= 0) return 0;
    int b = opt->block_size;
    /* the tap features stay on the backend: the drafter reads the target's
     * buffer of the step that made them (no download, no upload) */
    int32_t *block = df_xmalloc((size_t)b * sizeof *block, "block"), *draft = df_xmalloc((size_t)b * sizeof *draft, "draft");
    int32_t *verify = df_xmalloc((size_t)b * sizeof *verify, "verify");
    int32_t s = slot, tok, rc = -1;
    df_target_decoder_reset_slot(target, slot);
    drafter->ctx.lens[slot] = 0;

    /* prefill: the first token, and the prompt's features as the context */
    int32_t starts[2] = {0, n_prompt};
    DfDecodeStep pre = {1, &s, prompt, starts, DF_LOGITS_LAST, NULL, &tok, NULL, 1};
    if (df_target_decode(target, &pre, err) ||
        df_drafter_append_context_buffer(drafter, slot, df_target_features(target, 0, n_prompt), n_prompt, err))
        goto done;
    res->target_passes = 1;
    int finished = commit(opt, res, tok);
    while (!finished) {
        int start = target->cache.lens[slot];
        block[0] = tok;
        for (int k = 1; k < b; k++) block[k] = drafter->cfg.mask_token_id;
        if (df_drafter_propose(drafter, slot, block, b, draft, err)) goto done;
        for (int k = 1; k < b; k++) block[k] = draft[k];
        DfSpecDraftSeam seam = {(int)res->tokens.len, block, b};
        if (df_test_seam(DF_SEAM_SPEC_DRAFT, &seam, err)) goto done;
        int32_t bs[2] = {0, b};
        DfDecodeStep step = {1, &s, block, bs, DF_LOGITS_ALL, NULL, verify, NULL, 1};
        if (df_target_decode(target, &step, err)) goto done;
        res->target_passes++;
        int n = 0;
        while (n < b - 1 && block[n + 1] == verify[n]) n++;
        df_i32vec_push(&res->accepted, n);
        for (int k = 1; k <= n && !finished; k++) finished = commit(opt, res, block[k]);
        tok = verify[n];
        if (!finished) finished = commit(opt, res, tok);
        if (finished) break;
        /* keep t and the n accepted drafts; the bonus is the next block's first token */
        if (df_target_decoder_rollback(target, slot, start + n + 1, err) ||
            df_drafter_append_context_buffer(drafter, slot, df_target_features(target, 0, n + 1), n + 1, err))
            goto done;
    }
    rc = 0;
done:
    free(block);
    free(draft);
    free(verify);
    return rc;
}

void df_spec_result_free(DfSpecResult *res) {
    df_i32vec_free(&res->tokens);
    df_i32vec_free(&res->accepted);
}

double df_spec_tau(const DfSpecResult *res) {
    if (!res->accepted.len) return 0;
    double sum = 0;
    for (size_t i = 0; i < res->accepted.len; i++) sum += res->accepted.data[i] + 1;
    return sum / (double)res->accepted.len;
}
