#include "infer/generate.h"
#include "json/json_fields.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/input_file.h"
#include "infer/sampling.h"
#include "json/json_parse.h"

static char *read_small_file(const char *path, DfError *err) {
    struct stat st;
    if (stat(path, &st) != 0) return NULL; /* absent: not an error */
    FILE *fp = df_fopen_regular(path, err);
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
    cJSON *root = NULL;
    int parsed = df_json_parse(text, strlen(text), path, 0, &root, err);
    free(text);
    if (parsed != DF_JSON_OK) return -1;
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

/* One cache slot of the stream: the record it serves, if any. */
typedef struct Slot {
    int record;         /* -1: free */
    int loaded;         /* its current prompt is in `prompt` (a continuing record's is not yet) */
    int held;           /* its KV cache pages are held: it runs (a loaded one waits for pages until then) */
    size_t prompt_done; /* of its prompt's tokens, those that have run */
    DfI32Vec prompt, out;
    DfRng rng;
} Slot;

typedef struct Stream {
    DfTargetDecoder *d;
    const DfGenerateOptions *opt;
    Slot *slots;
    int n_slots;
    int32_t *step_slots, *starts, *slot_of_row;
    uint8_t *sampled; /* [row]: the row's token is the record's next one (not a slice inside its prompt) */
    size_t *take;     /* [slot]: prompt tokens it runs this step */
    int *pending;     /* slots still prefilling, oldest record first */
    DfI32Vec ids;
    float *logits;   /* [n_slots, V] when sampling; NULL when greedy */
    int32_t *chosen; /* [n_slots]: greedy choices, made on the backend */
    DfSampler sampler;
} Stream;

/* The slot's record's next prompt from source, into an empty cache row. */
static int load_prompt(Stream *st, int s, DfGenerateSource source, void *ctx, DfError *err) {
    Slot *sl = &st->slots[s];
    sl->prompt.len = 0;
    sl->out.len = 0;
    if (source(ctx, sl->record, &sl->prompt, err)) return -1;
    if (sl->prompt.len == 0) return df_fail(err, "generate: record %d has an empty prompt", sl->record + 1);
    if ((long)sl->prompt.len + st->opt->max_new_tokens > st->d->cache.capacity)
        return df_fail(err, "generate: record %d has %zu prompt tokens; with %d new ones it exceeds the %d-token cache",
                       sl->record + 1, sl->prompt.len, st->opt->max_new_tokens, st->d->cache.capacity);
    sl->loaded = 1;
    sl->held = 0;
    sl->prompt_done = 0;
    df_target_decoder_reset_slot(st->d, s);
    return 0;
}

/* The loaded slot of the oldest record still waiting for pages; -1: none. */
static int oldest_waiting(const Stream *st) {
    int best = -1;
    for (int s = 0; s < st->n_slots; s++) {
        const Slot *sl = &st->slots[s];
        if (sl->record >= 0 && sl->loaded && !sl->held && (best < 0 || sl->record < st->slots[best].record)) best = s;
    }
    return best;
}

/* Hands the waiting slots the KV cache pages of their prompt and max new
 * tokens, the oldest record first, until the pool is short (the rest wait
 * for a running record to finish: a paged cache smaller than every slot's
 * worst case; generate_plan.h). */
static void admit_waiting(Stream *st) {
    for (int s; (s = oldest_waiting(st)) >= 0;) {
        Slot *sl = &st->slots[s];
        if (df_target_decoder_hold(st->d, s, (int)sl->prompt.len + st->opt->max_new_tokens)) return;
        sl->held = 1;
    }
}

/* Gives free slots the next records and continuing records their next
 * prompt, then the pages they need; returns -1 on a source error. */
static int fill_slots(Stream *st, int n_records, int *next, DfGenerateSource source, void *ctx, DfError *err) {
    for (int s = 0; s < st->n_slots; s++) {
        Slot *sl = &st->slots[s];
        if (sl->record < 0) {
            if (*next >= n_records) continue;
            sl->record = (*next)++;
            sl->loaded = 0;
            sl->rng = df_sampler_rng(st->opt->seed, st->opt->record_offset + (uint64_t)sl->record);
        }
        if (!sl->loaded && load_prompt(st, s, source, ctx, err)) return -1;
    }
    admit_waiting(st);
    return 0;
}

/* A step with no rows while records wait: the pool cannot hold the oldest. */
static int fail_waiting(const Stream *st, DfError *err) {
    int s = oldest_waiting(st);
    if (s < 0) return 0;
    const DfKvCache *c = &st->d->cache;
    int rows = (int)st->slots[s].prompt.len + st->opt->max_new_tokens;
    return df_fail(err, "generate: record %d needs %d KV cache pages for %d tokens; the cache has %d pages",
                   st->slots[s].record + 1, df_kv_pages_for(rows), rows, c->n_pages);
}

/* The prompt tokens of sl this step takes with `budget` left: the rest of
 * its prompt if that fits, else whole slices (so that each later slice
 * starts on a slice boundary); 0: none this step. */
static size_t prompt_take(const Slot *sl, size_t budget, size_t slice) {
    size_t left = sl->prompt.len - sl->prompt_done;
    return left <= budget ? left : budget / slice * slice;
}

/* Hands the step's prompt budget to the slots still prefilling, the oldest
 * record first (none waits behind newer ones): st->take[s]. Records are
 * given to slots in increasing order, so the oldest has the smallest index. */
static void share_prompt_budget(Stream *st) {
    size_t budget = st->opt->step_prompt_tokens > 0 ? (size_t)st->opt->step_prompt_tokens : DF_GENERATE_STEP_PROMPT_TOKENS;
    size_t slice = budget < DF_GENERATE_PROMPT_SLICE ? 1 : DF_GENERATE_PROMPT_SLICE; /* finer: a test's budget */
    int n = 0;
    for (int s = 0; s < st->n_slots; s++) {
        const Slot *sl = &st->slots[s];
        st->take[s] = 0;
        if (sl->record < 0 || !sl->held || sl->prompt_done == sl->prompt.len) continue;
        int at = n++; /* insertion by record: the pending slots are few */
        while (at > 0 && st->slots[st->pending[at - 1]].record > sl->record) st->pending[at] = st->pending[at - 1], at--;
        st->pending[at] = s;
    }
    for (int i = 0; i < n && budget > 0; i++) {
        int s = st->pending[i];
        st->take[s] = prompt_take(&st->slots[s], budget, slice);
        budget -= st->take[s];
    }
}

/* Packs one step, a row per running slot in slot order: its last token once
 * its prompt has run, else the next slice of its prompt that the budget gave
 * it (a slot given none sits this step out). A row is sampled when it is a
 * decoded token or ends its prompt. */
static int build_step(Stream *st) {
    int rows = 0;
    share_prompt_budget(st);
    st->ids.len = 0;
    st->starts[0] = 0;
    for (int s = 0; s < st->n_slots; s++) {
        Slot *sl = &st->slots[s];
        if (sl->record < 0 || !sl->held) continue;
        if (sl->prompt_done == sl->prompt.len) {
            df_i32vec_push(&st->ids, sl->out.data[sl->out.len - 1]);
            st->sampled[rows] = 1;
        } else {
            size_t n = st->take[s];
            if (n == 0) continue;
            for (size_t i = 0; i < n; i++) df_i32vec_push(&st->ids, sl->prompt.data[sl->prompt_done + i]);
            sl->prompt_done += n;
            st->sampled[rows] = sl->prompt_done == sl->prompt.len;
        }
        st->step_slots[rows] = s;
        st->slot_of_row[rows] = s;
        st->starts[++rows] = (int32_t)st->ids.len;
    }
    return rows;
}

/* Takes the sampled token of a slot; returns 1 when its record is finished
 * (an EOS, not kept, or the length limit). */
static int take_token(Stream *st, Slot *sl, int32_t tok) {
    if (df_is_eos(st->opt, tok)) return 1;
    df_i32vec_push(&sl->out, tok);
    return (int)sl->out.len >= st->opt->max_new_tokens;
}

/* name_records: a decode error names the record (its index past
 * opt->record_offset); df_generate_batch's callers name their prompts. */
static int run_stream(DfTargetDecoder *d, int n_records, DfGenerateSource source, DfGenerateSink sink, void *ctx,
                      const DfGenerateOptions *opt, int name_records, int *steps, DfError *err) {
    Stream st = {0};
    st.d = d;
    st.opt = opt;
    st.n_slots = d->cache.n_slots;
    st.slots = df_xcalloc((size_t)st.n_slots, sizeof *st.slots, "generate slots");
    for (int s = 0; s < st.n_slots; s++) st.slots[s].record = -1;
    st.step_slots = df_xmalloc((size_t)st.n_slots * sizeof *st.step_slots, "generate step");
    st.slot_of_row = df_xmalloc((size_t)st.n_slots * sizeof *st.slot_of_row, "generate step");
    st.starts = df_xmalloc((size_t)(st.n_slots + 1) * sizeof *st.starts, "generate step");
    st.sampled = df_xmalloc((size_t)st.n_slots * sizeof *st.sampled, "generate step");
    st.take = df_xmalloc((size_t)st.n_slots * sizeof *st.take, "generate step");
    st.pending = df_xmalloc((size_t)st.n_slots * sizeof *st.pending, "generate step");
    int vocab = d->model->cfg.vocab_size;
    /* greedy needs only each row's argmax, which the backend finds (no logits download) */
    int greedy = opt->temperature <= 0;
    if (!greedy) st.logits = df_xmalloc((size_t)st.n_slots * vocab * sizeof *st.logits, "generate logits");
    st.chosen = df_xmalloc((size_t)st.n_slots * sizeof *st.chosen, "generate tokens");
    df_sampler_init(&st.sampler, vocab, opt->temperature, opt->top_p);
    int rc = -1, next = 0, n_steps = 0;
    if (opt->max_new_tokens <= 0) {
        df_fail(err, "generate: --max-new-tokens is %d (at least 1)", opt->max_new_tokens);
        goto done;
    }
    for (;;) {
        if (fill_slots(&st, n_records, &next, source, ctx, err)) goto done;
        int rows = build_step(&st);
        if (rows == 0) {
            if (fail_waiting(&st, err)) goto done;
            break;
        }
        DfDecodeStep step = {rows, st.step_slots, st.ids.data, st.starts, DF_LOGITS_LAST, st.logits,
                             greedy ? st.chosen : NULL, NULL, 0};
        if (df_target_decode(d, &step, err)) {
            if (name_records && d->nonfinite_slot >= 0)
                df_context(err, "record %llu",
                           (unsigned long long)(opt->record_offset + (uint64_t)st.slots[d->nonfinite_slot].record + 1));
            goto done;
        }
        n_steps++;
        for (int r = 0; r < rows; r++) {
            if (!st.sampled[r]) continue; /* a slice inside a prompt: its logits are not a next token */
            int s = st.slot_of_row[r];
            Slot *sl = &st.slots[s];
            int32_t tok = greedy ? st.chosen[r] : df_sample_token(&st.sampler, st.logits + (size_t)r * vocab, &sl->rng);
            if (!take_token(&st, sl, tok)) continue;
            int more = sink(ctx, sl->record, &sl->out, err);
            if (more < 0) goto done;
            if (more) sl->loaded = 0; /* its next turn: a new prompt in the same slot */
            else sl->record = -1;
            sl->held = 0;
            df_target_decoder_reset_slot(d, s); /* its pages back to the pool */
        }
    }
    rc = 0;
done:
    if (steps) *steps = n_steps;
    for (int s = 0; s < st.n_slots; s++) df_i32vec_free(&st.slots[s].prompt), df_i32vec_free(&st.slots[s].out);
    free(st.slots);
    free(st.step_slots);
    free(st.slot_of_row);
    free(st.starts);
    free(st.sampled);
    free(st.take);
    free(st.pending);
    df_i32vec_free(&st.ids);
    free(st.logits);
    free(st.chosen);
    df_sampler_free(&st.sampler);
    return rc;
}

int df_generate_stream(DfTargetDecoder *d, int n_records, DfGenerateSource source, DfGenerateSink sink, void *ctx,
                       const DfGenerateOptions *opt, int *steps, DfError *err) {
    return run_stream(d, n_records, source, sink, ctx, opt, 1, steps, err);
}

/* df_generate_batch over the stream: prompts from arrays, outputs into them. */
typedef struct ArrayIo {
    const int32_t *const *prompts;
    const int *lens;
    DfI32Vec *outputs;
} ArrayIo;

static int array_source(void *ctx, int index, DfI32Vec *ids, DfError *err) {
    const ArrayIo *io = ctx;
    (void)err;
    for (int i = 0; i < io->lens[index]; i++) df_i32vec_push(ids, io->prompts[index][i]);
    return 0;
}

static int array_sink(void *ctx, int index, const DfI32Vec *out, DfError *err) {
    ArrayIo *io = ctx;
    (void)err;
    io->outputs[index].len = 0;
    for (size_t i = 0; i < out->len; i++) df_i32vec_push(&io->outputs[index], out->data[i]);
    return 0;
}

int df_generate_batch(DfTargetDecoder *d, int n, const int32_t *const *prompts, const int *prompt_lens,
                      const DfGenerateOptions *opt, DfI32Vec *outputs, int *steps, DfError *err) {
    ArrayIo io = {prompts, prompt_lens, outputs};
    for (int i = 0; i < n; i++) outputs[i].len = 0;
    return run_stream(d, n, array_source, array_sink, &io, opt, 0, steps, err);
}
