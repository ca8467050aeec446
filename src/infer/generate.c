#include "infer/generate.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer/sampling.h"

static char *read_small_file(const char *path, DfError *err) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    DfByteBuf b = {0};
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, fp)) > 0) df_bytebuf_append(&b, chunk, n);
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        df_bytebuf_free(&b);
        df_fail_errno(err, "reading %s", path);
        return NULL;
    }
    if (!b.data) df_bytebuf_append(&b, "", 0);
    return b.data;
}

int df_generation_eos_ids(const char *target_dir, const DfModelConfig *cfg, int32_t *eos, int *n_eos, DfError *err) {
    *n_eos = cfg->n_eos;
    for (int i = 0; i < cfg->n_eos; i++) eos[i] = cfg->eos_token_ids[i];
    char path[4096];
    snprintf(path, sizeof path, "%s/generation_config.json", target_dir);
    DfError read_err = {{0}};
    char *text = read_small_file(path, &read_err);
    if (!text) return read_err.msg[0] ? df_fail(err, "%s", read_err.msg) : 0; /* no such file: config.json's */
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) return df_fail(err, "%s: not valid JSON", path);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
    int rc = 0, n = 0;
    int32_t ids[DF_MAX_EOS];
    if (e && !cJSON_IsNull(e)) {
        const cJSON *item = cJSON_IsArray(e) ? e->child : e;
        for (; item; item = cJSON_IsArray(e) ? item->next : NULL) {
            if (!cJSON_IsNumber(item) || item->valuedouble < 0 || item->valuedouble != (double)(int)item->valuedouble ||
                item->valuedouble >= cfg->vocab_size) {
                rc = df_fail(err, "%s: eos_token_id must be token ids in [0, %d)", path, cfg->vocab_size);
                break;
            }
            if (n == DF_MAX_EOS) {
                rc = df_fail(err, "%s: eos_token_id lists more than %d ids", path, DF_MAX_EOS);
                break;
            }
            ids[n++] = (int32_t)item->valuedouble;
        }
        if (rc == 0 && n > 0) {
            memcpy(eos, ids, (size_t)n * sizeof *ids);
            *n_eos = n;
        }
    }
    cJSON_Delete(root);
    return rc;
}

int df_is_eos(const DfGenerateOptions *opt, int32_t id) {
    for (int i = 0; i < opt->n_eos; i++)
        if (opt->eos_ids[i] == id) return 1;
    return 0;
}

typedef struct GenState {
    int n, active;
    int *done;
    int32_t *slots, *ids, *starts, *seq_of_row;
    float *logits;
    DfRng *rngs;
    DfSampler sampler;
} GenState;

/* Takes token `tok` for sequence i: stops it at EOS or at the length limit. */
static void take_token(GenState *g, const DfGenerateOptions *opt, DfI32Vec *outputs, int i, int32_t tok) {
    if (df_is_eos(opt, tok)) {
        g->done[i] = 1;
        return;
    }
    df_i32vec_push(&outputs[i], tok);
    if ((int)outputs[i].len >= opt->max_new_tokens) g->done[i] = 1;
}

int df_generate_batch(DfTargetDecoder *d, int n, const int32_t *const *prompts, const int *prompt_lens,
                      const uint64_t *record_index, const DfGenerateOptions *opt, DfI32Vec *outputs, int *steps,
                      DfError *err) {
    int vocab = d->model->cfg.vocab_size;
    if (n <= 0 || n > d->cache.n_slots) return df_fail(err, "generate: %d prompts for %d slots", n, d->cache.n_slots);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (prompt_lens[i] <= 0) return df_fail(err, "generate: prompt %d is empty", i);
        if ((long)prompt_lens[i] + opt->max_new_tokens > d->cache.capacity)
            return df_fail(err, "generate: prompt %d has %d tokens; with %d new ones it exceeds the %d-token cache", i,
                           prompt_lens[i], opt->max_new_tokens, d->cache.capacity);
        total += (size_t)prompt_lens[i];
        outputs[i].len = 0;
    }
    GenState g = {0};
    g.n = n;
    g.done = df_xcalloc((size_t)n, sizeof *g.done, "generate state");
    g.slots = df_xmalloc((size_t)n * sizeof *g.slots, "generate state");
    g.starts = df_xmalloc((size_t)(n + 1) * sizeof *g.starts, "generate state");
    g.seq_of_row = df_xmalloc((size_t)n * sizeof *g.seq_of_row, "generate state");
    g.ids = df_xmalloc((total > (size_t)n ? total : (size_t)n) * sizeof *g.ids, "generate ids");
    g.logits = df_xmalloc((size_t)n * vocab * sizeof *g.logits, "generate logits");
    g.rngs = df_xmalloc((size_t)n * sizeof *g.rngs, "generate rng");
    df_sampler_init(&g.sampler, vocab, opt->temperature, opt->top_p);
    int rc = -1, n_steps = 0;
    if (opt->max_new_tokens <= 0) {
        rc = 0;
        goto done;
    }
    /* prefill: every prompt whole, logits of its last token */
    g.starts[0] = 0;
    for (int i = 0; i < n; i++) {
        d->cache.lens[i] = 0;
        g.rngs[i] = df_sampler_rng(opt->seed, record_index[i]);
        g.slots[i] = i;
        g.seq_of_row[i] = i;
        memcpy(g.ids + g.starts[i], prompts[i], (size_t)prompt_lens[i] * sizeof *g.ids);
        g.starts[i + 1] = g.starts[i] + prompt_lens[i];
    }
    int rows = n;
    for (;;) {
        DfDecodeStep step = {rows, g.slots, g.ids, g.starts, DF_LOGITS_LAST, g.logits, NULL, NULL};
        if (df_target_decode(d, &step, err)) goto done;
        n_steps++;
        for (int r = 0; r < rows; r++) {
            int i = g.seq_of_row[r];
            take_token(&g, opt, outputs, i, df_sample_token(&g.sampler, g.logits + (size_t)r * vocab, &g.rngs[i]));
        }
        /* next step: one token for each sequence still running */
        rows = 0;
        for (int i = 0; i < n; i++)
            if (!g.done[i]) {
                g.slots[rows] = i;
                g.seq_of_row[rows] = i;
                g.ids[rows] = outputs[i].data[outputs[i].len - 1];
                g.starts[rows] = rows;
                rows++;
            }
        g.starts[rows] = rows;
        if (rows == 0) break;
    }
    rc = 0;
done:
    if (steps) *steps = n_steps;
    df_sampler_free(&g.sampler);
    free(g.done);
    free(g.slots);
    free(g.starts);
    free(g.seq_of_row);
    free(g.ids);
    free(g.logits);
    free(g.rngs);
    return rc;
}
