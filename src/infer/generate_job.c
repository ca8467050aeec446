/* The generate job (see generate_job.h). */
#include "infer/generate_job.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/select.h"
#include "base/atomic_file.h"
#include "base/clock.h"
#include "base/output_lock.h"
#include "base/paths_apart.h"
#include "base/progress.h"
#include "base/signals.h"
#include "infer/chat_turns.h"
#include "infer/generate.h"
#include "infer/generate_plan.h"
#include "infer/generate_settings.h"
#include "infer/prompts.h"
#include "infer/resume.h"
#include "target/target_random.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

typedef struct GenerateRun {
    const DfGenerateJobOptions *args;
    DfPromptSet prompts;
    DfTokenizer *tok;
    DfChatTemplate *chat; /* loaded when the input has conversations (or --chat-date is given) */
    DfBackend *be;
    DfTargetModel model;
    DfTargetDecoder dec;
    DfGenerateOptions opt;
    int max_positions; /* the target's max_position_embeddings */
    FILE *out;
    int64_t tokens;
} GenerateRun;

/* What a record has produced so far. A prompt record is one generation; a
 * conversation is several (its turns, in order, in the same cache slot). */
typedef struct RecordState {
    DfI32Vec ids;     /* prompt record: its response tokens */
    char **responses; /* conversation: the texts of turns [0, turn) */
    int n_turns, turn;
    int64_t tokens;   /* generated, all turns */
    int finished;
} RecordState;

static void record_state_reset(RecordState *r) {
    for (int t = 0; t < r->turn; t++) free(r->responses[t]);
    r->turn = 0;
    r->ids.len = 0;
    r->tokens = 0;
    r->finished = 0;
}

static void record_state_free(RecordState *r) {
    record_state_reset(r);
    free(r->responses);
    r->responses = NULL;
    df_i32vec_free(&r->ids);
}

/* A response's text. A target of random weights may choose ids of its
 * vocabulary that the tokenizer has no text for (a padded vocabulary: Qwen3's
 * 151936 ids against its tokenizer's 151669); they are left out, as Hugging
 * Face's tokenizers decode them. A real target's unknown id is an error. */
static int decode_response(const GenerateRun *g, const int32_t *ids, size_t n, DfByteBuf *text, DfError *err) {
    if (!g->args->random_target_weights) return df_tokenizer_decode(g->tok, ids, n, text, err);
    int32_t *known = df_xmalloc((n ? n : 1) * sizeof *known, "response ids");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (df_tokenizer_has_id(g->tok, ids[i])) known[k++] = ids[i];
    int rc = df_tokenizer_decode(g->tok, known, k, text, err);
    free(known);
    return rc;
}

static int write_record(GenerateRun *g, const DfPrompt *p, const RecordState *r, DfError *err) {
    cJSON *rec;
    if (p->text) {
        DfByteBuf text = {0};
        if (decode_response(g, r->ids.data, r->ids.len, &text, err)) return -1;
        rec = cJSON_CreateObject();
        cJSON_AddItemToObject(rec, "id", cJSON_Parse(p->id_json));
        cJSON_AddStringToObject(rec, "prompt", p->text);
        cJSON_AddStringToObject(rec, "response", text.data ? text.data : "");
        df_bytebuf_free(&text);
    } else {
        rec = df_chat_turns_record(p, (const char *const *)r->responses);
    }
    char *line = cJSON_PrintUnformatted(rec);
    int rc = fprintf(g->out, "%s\n", line) < 0 ? df_fail_errno(err, "writing %s", g->args->output) : 0;
    cJSON_free(line);
    cJSON_Delete(rec);
    return rc;
}

/* Records finish out of order (continuous batching); they are written in
 * input order: a finished record waits in `records` until those before it
 * are written. Indices are relative to `first`, the first record this run
 * generates; one stream covers records [base, n). */
typedef struct Writer {
    GenerateRun *g;
    int first;            /* input index of record 0 */
    int n;                /* records to generate */
    int base;             /* record of stream index 0 */
    RecordState *records; /* [n] */
    int next;             /* next record to write */
    int need_capacity;    /* set when a prompt outgrew the cache: the stream is rerun larger */
    int mean_need;        /* the records' mean slot_tokens: the pages a sequence holds, for the plan */
    double last_sync_s;
    DfProgress progress;
    double start_s;
} Writer;

/* The text of the record's next prompt: the prompt itself, or the
 * conversation's next turn rendered with the chat template. */
static int prompt_text(GenerateRun *g, const DfPrompt *p, const RecordState *r, DfByteBuf *text, DfError *err) {
    if (p->text) {
        df_bytebuf_append(text, p->text, strlen(p->text));
        return 0;
    }
    return df_chat_turn_prompt(g->chat, p, r->turn, (const char *const *)r->responses, text, err);
}

static int source_prompt(void *ctx, int index, DfI32Vec *ids, DfError *err) {
    Writer *w = ctx;
    GenerateRun *g = w->g;
    int at = w->base + index;
    const DfPrompt *p = &g->prompts.items[w->first + at];
    DfByteBuf text = {0};
    DfError why;
    int rc = prompt_text(g, p, &w->records[at], &text, &why);
    if (rc == 0) rc = df_tokenizer_encode(g->tok, text.data ? text.data : "", text.len, ids, &why);
    df_bytebuf_free(&text);
    if (rc) return df_fail(err, "%s:%lld: %s", g->args->input, (long long)p->line_no, why.msg);
    if (ids->len == 0)
        return df_fail(err, "%s:%lld: record %d (id %s) has an empty prompt", g->args->input, (long long)p->line_no,
                       w->first + at + 1, p->id_json);
    if ((long)ids->len + g->opt.max_new_tokens > g->dec.cache.capacity) {
        w->need_capacity = (int)ids->len + g->opt.max_new_tokens;
        return df_fail(err, "%s:%lld: turn %d's prompt has %zu tokens, more than the cache was sized for",
                       g->args->input, (long long)p->line_no, w->records[at].turn + 1, ids->len);
    }
    return 0;
}

/* Writes the finished records that are next in input order. */
static int write_ready(Writer *w, DfError *err) {
    GenerateRun *g = w->g;
    int wrote = 0;
    for (; w->next < w->n && w->records[w->next].finished; w->next++, wrote++) {
        RecordState *r = &w->records[w->next];
        if (write_record(g, &g->prompts.items[w->first + w->next], r, err)) return -1;
        g->tokens += r->tokens;
        record_state_free(r);
    }
    /* set only where a caller installed the handler (train --prompts): stop
     * when a record finishes, those before it in order written complete (the
     * ones that finished ahead of them are made again by a rerun) */
    int sig = df_stop_requested();
    if (sig && w->next < w->n) {
        if (fflush(g->out) != 0) return df_fail_errno(err, "writing %s", g->args->output);
        return df_fail(err, "%s received: stopped after %d of %d records in %s (run again to continue)",
                       df_signal_name(sig), w->first + w->next, w->first + w->n, g->args->output);
    }
    if (!wrote) return 0;
    /* every complete line reaches the file at once (a restart continues after
     * it); fsync at most once a second */
    if (fflush(g->out) != 0) return df_fail_errno(err, "writing %s", g->args->output);
    double now = df_now_seconds();
    if (now - w->last_sync_s >= 1.0) {
        if (fsync(fileno(g->out)) != 0) return df_fail_errno(err, "writing %s", g->args->output);
        w->last_sync_s = now;
    }
    /* the paged KV cache's pages held (the finishing record's still among them): how full the batch runs */
    const DfKvCache *kv = &g->dec.cache;
    int held = kv->n_pages ? (int)(100.0 * (kv->n_pages - kv->n_free) / kv->n_pages + 0.5) : 0;
    char extra[128];
    snprintf(extra, sizeof extra, "%lld tokens, %.1f tokens/s, KV cache %d%% in use", (long long)g->tokens,
             (double)g->tokens / (now - w->start_s), held);
    df_progress_update(&w->progress, w->next, extra);
    return 0;
}

/* A turn is done: a conversation with more turns continues (returns 1),
 * else the record is finished and written when its turn in order comes. */
static int sink_output(void *ctx, int index, const DfI32Vec *out, DfError *err) {
    Writer *w = ctx;
    GenerateRun *g = w->g;
    RecordState *r = &w->records[w->base + index];
    r->tokens += (int64_t)out->len;
    if (g->prompts.items[w->first + w->base + index].text) {
        for (size_t i = 0; i < out->len; i++) df_i32vec_push(&r->ids, out->data[i]);
    } else {
        DfByteBuf text = {0};
        if (decode_response(g, out->data, out->len, &text, err)) return -1;
        df_bytebuf_append(&text, "", 1); /* the NUL */
        r->responses[r->turn++] = text.data;
        if (r->turn < r->n_turns) return 1;
    }
    r->finished = 1;
    return write_ready(w, err);
}

/* Tokens a slot needs for record i: its prompt plus max_new_tokens; for a
 * conversation, its last turn's prompt with every earlier generated turn
 * counted as max_new_tokens plus a margin (a response re-tokenized from its
 * text may take a few more tokens than were generated). An estimate: a
 * prompt that outgrows it reruns the stream with a larger cache. */
static int slot_tokens(GenerateRun *g, const DfPrompt *p, int n_turns, DfI32Vec *ids, int *need, DfError *err) {
    DfByteBuf text = {0};
    DfError why;
    int rc = 0, max_new = g->opt.max_new_tokens;
    if (p->text) {
        df_bytebuf_append(&text, p->text, strlen(p->text));
    } else {
        const char **empty = df_xmalloc((size_t)n_turns * sizeof *empty, "turns");
        for (int t = 0; t < n_turns; t++) empty[t] = "";
        rc = df_chat_turn_prompt(g->chat, p, n_turns - 1, empty, &text, &why);
        free(empty);
    }
    ids->len = 0;
    if (rc == 0) rc = df_tokenizer_encode(g->tok, text.data ? text.data : "", text.len, ids, &why);
    df_bytebuf_free(&text);
    if (rc) return df_fail(err, "%s:%lld: %s", g->args->input, (long long)p->line_no, why.msg);
    long tokens = (long)ids->len + max_new + (long)(n_turns - 1) * (max_new + max_new / 4 + 16);
    *need = tokens > INT_MAX / 2 ? INT_MAX / 2 : (int)tokens;
    return 0;
}

static int writer_init(Writer *w, GenerateRun *g, int first, int *capacity, DfError *err) {
    memset(w, 0, sizeof *w);
    w->g = g;
    w->first = first;
    w->n = g->prompts.n - first;
    w->records = df_xcalloc((size_t)w->n, sizeof *w->records, "record states");
    DfI32Vec ids = {0};
    int64_t sum = 0;
    *capacity = 0;
    for (int i = 0; i < w->n; i++) {
        const DfPrompt *p = &g->prompts.items[first + i];
        RecordState *r = &w->records[i];
        r->n_turns = p->text ? 1 : df_chat_turns_count(p);
        if (!p->text) r->responses = df_xcalloc((size_t)r->n_turns, sizeof *r->responses, "responses");
        int need = 0;
        if (slot_tokens(g, p, r->n_turns, &ids, &need, err)) {
            df_i32vec_free(&ids);
            return -1;
        }
        if (need > *capacity) *capacity = need;
        sum += need;
    }
    w->mean_need = w->n > 0 ? (int)(sum / w->n) : 0;
    df_i32vec_free(&ids);
    return 0;
}

static void writer_free(Writer *w) {
    for (int i = 0; w->records && i < w->n; i++) record_state_free(&w->records[i]);
    free(w->records);
}

/* The batch and the KV cache's pages for sequences of up to `capacity` tokens and the records not yet
 * written: --batch, or sized by the device's memory now (infer/generate_plan.h). */
static int plan_batch(Writer *w, int capacity, DfGeneratePlan *plan, DfError *err) {
    GenerateRun *g = w->g;
    const DfGenerateJobOptions *a = g->args;
    DfGeneratePlanInput in = {&g->model.cfg, a->device, (size_t)df_backend_elem_size(g->be, DF_BUF_ACT), capacity,
                              g->opt.max_new_tokens, w->n - w->next, a->batch};
    in.mean_rows = w->mean_need;
    df_backend_memory_info(g->be, &in.memory);
    if (df_generate_plan_make(&in, plan, err)) return -1;
    if (!a->quiet) df_generate_plan_print(plan, a->device, stderr);
    return 0;
}

/* Streams records [w->next, n) through a decoder of `capacity`-token slots;
 * when a conversation's prompt outgrows it, the records not yet written run
 * again with a larger one (each record's output depends only on the record,
 * so the rerun is what one run would have given). */
static int stream_records(Writer *w, int capacity, DfError *err) {
    GenerateRun *g = w->g;
    for (;;) {
        DfGeneratePlan plan;
        if (plan_batch(w, capacity, &plan, err) ||
            df_target_decoder_init_paged(&g->dec, &g->model, plan.batch, capacity, plan.n_pages, NULL, 0, err))
            return -1;
        if (g->args->no_graphs) df_target_decoder_set_graphs(&g->dec, 0);
        w->base = w->next;
        w->need_capacity = 0;
        g->opt.record_offset = (uint64_t)(w->first + w->base);
        int rc = df_generate_stream(&g->dec, w->n - w->base, source_prompt, sink_output, w, &g->opt, NULL, err);
        df_target_decoder_free(&g->dec);
        if (rc == 0 || !w->need_capacity) return rc;
        int grown = capacity + capacity / 2;
        capacity = w->need_capacity > grown ? w->need_capacity : grown;
        if (!g->args->quiet)
            fprintf(stderr, "\ngenerate: %s; records %d and on rerun with %d-token slots\n", err->msg,
                    w->first + w->next + 1, capacity);
        for (int i = w->next; i < w->n; i++) record_state_reset(&w->records[i]);
    }
}

static int generate_remaining(GenerateRun *g, int first, DfError *err) {
    Writer w;
    int capacity, rc = -1;
    if (writer_init(&w, g, first, &capacity, err)) goto out;
    if (capacity > g->max_positions)
        fprintf(stderr,
                "generate: warning: a record needs up to %d positions (its prompt and --max-new-tokens %d), more than "
                "the target's max_position_embeddings %d; past them the target runs beyond what it was trained for\n",
                capacity, g->opt.max_new_tokens, g->max_positions);
    w.start_s = w.last_sync_s = df_now_seconds();
    df_progress_start(&w.progress, "generate", "records", w.n);
    w.progress.quiet = g->args->quiet;
    rc = stream_records(&w, capacity, err);
    if (rc == 0 && fsync(fileno(g->out)) != 0) rc = df_fail_errno(err, "writing %s", g->args->output);
    if (rc == 0) {
        char extra[96];
        snprintf(extra, sizeof extra, "%lld tokens, %.1f tokens/s", (long long)g->tokens,
                 (double)g->tokens / (df_now_seconds() - w.start_s));
        df_progress_finish(&w.progress, w.n, extra);
        if (g->args->quiet)
            printf("generate: %d records in %s (%d new: %s)\n", g->prompts.n, g->args->output, w.n, extra);
    }
out:
    writer_free(&w);
    return rc;
}

/* The chat template, when the input has conversations or --chat-date is
 * given; its end-of-turn token then ends a generation too. */
static int load_chat(GenerateRun *g, DfError *err) {
    const DfGenerateJobOptions *a = g->args;
    int asked = a->chat.date || a->chat.template_file || a->chat.kwargs;
    if (!g->prompts.n_chat && !asked) return 0;
    DfError why;
    if (!(g->chat = df_chat_open(a->target, &a->chat, &why))) {
        if (g->prompts.n_chat)
            return df_fail(err, "%s has %d conversations, rendered with the target's chat template: %s", a->input,
                           g->prompts.n_chat, why.msg);
        return df_fail(err, "%s", why.msg);
    }
    int32_t eot;
    if (df_chat_end_of_turn_id(g->chat, g->tok, &eot, err)) return -1;
    if (df_is_eos(&g->opt, eot)) return 0;
    if (g->opt.n_eos == DF_MAX_EOS) return df_fail(err, "no room for the end-of-turn token among the EOS ids");
    g->opt.eos_ids[g->opt.n_eos++] = eot;
    return 0;
}

/* The target's weights from its safetensors, or with --random-target-weights
 * random ones of its shape (target/target_random.h), seeded as train seeds
 * its target. */
static int load_target(GenerateRun *g, const DfModelConfig *cfg, DfError *err) {
    const DfGenerateJobOptions *a = g->args;
    if (!a->random_target_weights) return df_target_load(&g->model, g->be, a->target, cfg->num_layers, 1, err);
    if (!a->quiet)
        fprintf(stderr, "generate: the target's weights are random (--random-target-weights, seed %d): %s's shape "
                        "and tokenizer, not its safetensors; the responses are no training data\n",
                a->seed, a->target);
    if (df_target_init_random(&g->model, g->be, cfg, df_target_random_weights_seed((uint64_t)a->seed), 1, err))
        return df_context(err, "random weights for the target %s", a->target);
    return 0;
}

/* The output must be a regular file (or a link to one); that it is no input was checked at the start. */
static int check_output(const DfGenerateJobOptions *a, DfError *err) {
    char *resolved;
    if (df_output_path_resolve(a->output, &resolved, err)) return df_context(err, "--output");
    free(resolved);
    return 0;
}

/* The settings that make this run's records: resuming must be with the same
 * ones (generate_settings.h); a new output records them before its first
 * record. */
static int check_settings(GenerateRun *g, char **text, DfError *err) {
    const DfGenerateJobOptions *a = g->args;
    DfGenerateSettings s = {a->target, df_tokenizer_fingerprint(g->tok), a->max_new_tokens, a->temperature,
                            a->top_p, a->seed, a->chat.date, a->chat.template_file, a->chat.kwargs, g->opt.eos_ids, g->opt.n_eos,
                            a->random_target_weights};
    if (!(*text = df_generate_settings_text(&s, err))) return -1;
    return df_generate_settings_check(a->output, *text, err);
}

/* Opens the output for appending; a new (or empty) one gets its settings
 * file first. */
static int open_output(GenerateRun *g, const char *settings, DfError *err) {
    const char *path = g->args->output;
    struct stat st;
    if ((stat(path, &st) != 0 || st.st_size == 0) && df_generate_settings_write(path, settings, err)) return -1;
    if (!(g->out = fopen(path, "ab"))) return df_fail_errno(err, "cannot open %s", path);
    return 0;
}

int df_generate_job(const DfGenerateJobOptions *a, DfError *err) {
    const DfPathArg ins[] = {{"--target", a->target}, {"--input", a->input}}, outs[] = {{"--output", a->output}};
    if (df_paths_apart(ins, 2, outs, 1, err)) return DF_GENERATE_BAD_OPTIONS;
    GenerateRun g = {0};
    g.args = a;
    int rc = -1, done = 0;
    DfModelConfig cfg;
    DfOutputLock lock = {-1, NULL};
    char *settings = NULL;
    char lock_path[4200];
    snprintf(lock_path, sizeof lock_path, "%s.lock", a->output);
    if (check_output(a, err) || df_output_lock(&lock, lock_path, a->output, err)) goto out;
    if (df_model_config_load(&cfg, a->target, err) || df_prompts_read_any(a->input, &g.prompts, err)) goto out;
    g.max_positions = cfg.max_position_embeddings;
    g.opt.max_new_tokens = a->max_new_tokens;
    g.opt.temperature = a->temperature;
    g.opt.top_p = a->top_p;
    g.opt.seed = (uint64_t)a->seed;
    if (df_generation_eos_ids(a->target, &cfg, g.opt.eos_ids, &g.opt.n_eos, err)) goto out;
    if (!(g.tok = df_tokenizer_load(a->target, err)) || load_chat(&g, err)) goto out;
    if (check_settings(&g, &settings, err) || df_resume_scan(a->output, &g.prompts, &done, err)) goto out;
    if (done == g.prompts.n) {
        if (a->quiet) printf("generate: %d records in %s (0 new: all were there)\n", done, a->output);
        else fprintf(stderr, "generate: %s already holds all %d records\n", a->output, done);
        rc = 0;
        goto out;
    }
    if (done && !a->quiet) fprintf(stderr, "generate: resuming after %d of %d records already in %s\n", done, g.prompts.n, a->output);
    if (!(g.be = df_backend_create(a->device, err)) || load_target(&g, &cfg, err)) goto out;
    if (open_output(&g, settings, err) || generate_remaining(&g, done, err)) goto out;
    rc = 0;
out:
    if (g.out && fclose(g.out) != 0 && rc == 0) rc = df_fail_errno(err, "closing %s", a->output);
    df_target_decoder_free(&g.dec);
    df_target_free(&g.model);
    df_backend_destroy(g.be);
    df_chat_template_free(g.chat);
    df_tokenizer_free(g.tok);
    df_prompts_free(&g.prompts);
    df_output_unlock(&lock);
    cJSON_free(settings);
    return rc;
}

