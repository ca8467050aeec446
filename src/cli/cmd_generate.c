/* dflash generate: the target's own responses to prompts (the recipe's
 * regenerated training data), with a KV cache and continuous batching,
 * resumable. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/select.h"
#include "base/clock.h"
#include "base/progress.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "infer/generate.h"
#include "infer/prompts.h"
#include "infer/resume.h"
#include "text/tokenizer.h"

typedef struct GenerateArgs {
    const char *target, *input, *output, *device;
    int max_new_tokens, batch;
    double temperature, top_p;
    int seed;
} GenerateArgs;

typedef struct GenerateRun {
    const GenerateArgs *args;
    DfPromptSet prompts;
    DfTokenizer *tok;
    DfBackend *be;
    DfTargetModel model;
    DfTargetDecoder dec;
    DfGenerateOptions opt;
    FILE *out;
    int64_t tokens;
} GenerateRun;

static int write_record(GenerateRun *g, const DfPrompt *p, const DfI32Vec *ids, DfError *err) {
    DfByteBuf text = {0};
    if (df_tokenizer_decode(g->tok, ids->data, ids->len, &text, err)) return -1;
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddItemToObject(rec, "id", cJSON_Parse(p->id_json));
    cJSON_AddStringToObject(rec, "prompt", p->text);
    cJSON_AddStringToObject(rec, "response", text.data ? text.data : "");
    char *line = cJSON_PrintUnformatted(rec);
    int rc = fprintf(g->out, "%s\n", line) < 0 ? df_fail_errno(err, "writing %s", g->args->output) : 0;
    cJSON_free(line);
    cJSON_Delete(rec);
    df_bytebuf_free(&text);
    return rc;
}

/* Records finish out of order (continuous batching); they are written in
 * input order: a finished record waits in `pending` until those before it
 * are written. */
typedef struct Writer {
    GenerateRun *g;
    int first;          /* record index of stream index 0 */
    int n;              /* records in the stream */
    DfI32Vec *pending;  /* [n] */
    uint8_t *finished;  /* [n] */
    int next;           /* next stream index to write */
    double last_sync_s;
    DfProgress progress;
    double start_s;
} Writer;

static int source_prompt(void *ctx, int index, DfI32Vec *ids, DfError *err) {
    Writer *w = ctx;
    const DfPrompt *p = &w->g->prompts.items[w->first + index];
    if (df_tokenizer_encode(w->g->tok, p->text, strlen(p->text), ids, err)) return -1;
    if (ids->len == 0)
        return df_fail(err, "%s: record %d (id %s) has an empty prompt", w->g->args->input, w->first + index + 1,
                       p->id_json);
    return 0;
}

static int sink_output(void *ctx, int index, const DfI32Vec *out, DfError *err) {
    Writer *w = ctx;
    GenerateRun *g = w->g;
    for (size_t i = 0; i < out->len; i++) df_i32vec_push(&w->pending[index], out->data[i]);
    w->finished[index] = 1;
    int wrote = 0;
    for (; w->next < w->n && w->finished[w->next]; w->next++, wrote++) {
        if (write_record(g, &g->prompts.items[w->first + w->next], &w->pending[w->next], err)) return -1;
        g->tokens += (int64_t)w->pending[w->next].len;
        df_i32vec_free(&w->pending[w->next]);
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
    char extra[96];
    snprintf(extra, sizeof extra, "%lld tokens, %.1f tokens/s", (long long)g->tokens,
             (double)g->tokens / (now - w->start_s));
    df_progress_update(&w->progress, w->next, extra);
    return 0;
}

/* Slots long enough for the longest remaining prompt plus max_new_tokens. */
static int longest_prompt(GenerateRun *g, int first, int *max_len, DfError *err) {
    DfI32Vec ids = {0};
    *max_len = 0;
    for (int i = first; i < g->prompts.n; i++) {
        ids.len = 0;
        if (df_tokenizer_encode(g->tok, g->prompts.items[i].text, strlen(g->prompts.items[i].text), &ids, err)) {
            df_i32vec_free(&ids);
            return -1;
        }
        if ((int)ids.len > *max_len) *max_len = (int)ids.len;
    }
    df_i32vec_free(&ids);
    return 0;
}

static int generate_remaining(GenerateRun *g, int first, DfError *err) {
    int max_len;
    if (longest_prompt(g, first, &max_len, err) ||
        df_target_decoder_init(&g->dec, &g->model, g->args->batch, max_len + g->opt.max_new_tokens, NULL, 0, err))
        return -1;
    Writer w = {0};
    w.g = g;
    w.first = first;
    w.n = g->prompts.n - first;
    w.pending = df_xcalloc((size_t)w.n, sizeof *w.pending, "pending outputs");
    w.finished = df_xcalloc((size_t)w.n, 1, "pending outputs");
    w.start_s = w.last_sync_s = df_now_seconds();
    df_progress_start(&w.progress, "generate", "records", w.n);
    g->opt.record_offset = (uint64_t)first;
    int rc = df_generate_stream(&g->dec, w.n, source_prompt, sink_output, &w, &g->opt, NULL, err);
    if (rc == 0 && fsync(fileno(g->out)) != 0) rc = df_fail_errno(err, "writing %s", g->args->output);
    if (rc == 0) {
        char extra[96];
        snprintf(extra, sizeof extra, "%lld tokens, %.1f tokens/s", (long long)g->tokens,
                 (double)g->tokens / (df_now_seconds() - w.start_s));
        df_progress_finish(&w.progress, w.n, extra);
    }
    for (int i = 0; i < w.n; i++) df_i32vec_free(&w.pending[i]);
    free(w.pending);
    free(w.finished);
    return rc;
}

static int run_generate(const GenerateArgs *a, DfError *err) {
    GenerateRun g = {0};
    g.args = a;
    int rc = -1, done = 0;
    DfModelConfig cfg;
    if (df_model_config_load(&cfg, a->target, err) || df_prompts_read(a->input, &g.prompts, err)) goto out;
    g.opt.max_new_tokens = a->max_new_tokens;
    g.opt.temperature = a->temperature;
    g.opt.top_p = a->top_p;
    g.opt.seed = (uint64_t)a->seed;
    if (df_generation_eos_ids(a->target, &cfg, g.opt.eos_ids, &g.opt.n_eos, err)) goto out;
    if (df_resume_scan(a->output, &g.prompts, &done, err)) goto out;
    if (done == g.prompts.n) {
        fprintf(stderr, "generate: %s already holds all %d records\n", a->output, done);
        rc = 0;
        goto out;
    }
    if (done) fprintf(stderr, "generate: resuming after %d of %d records already in %s\n", done, g.prompts.n, a->output);
    if (!(g.tok = df_tokenizer_load(a->target, err)) || !(g.be = df_backend_create(a->device, err)) ||
        df_target_load(&g.model, g.be, a->target, cfg.num_layers, 1, err))
        goto out;
    if (!(g.out = fopen(a->output, "ab"))) {
        df_fail_errno(err, "cannot open %s", a->output);
        goto out;
    }
    if (generate_remaining(&g, done, err)) goto out;
    rc = 0;
out:
    if (g.out && fclose(g.out) != 0 && rc == 0) rc = df_fail_errno(err, "closing %s", a->output);
    df_target_decoder_free(&g.dec);
    df_target_free(&g.model);
    df_backend_destroy(g.be);
    df_tokenizer_free(g.tok);
    df_prompts_free(&g.prompts);
    return rc;
}

int df_cmd_generate(int argc, char **argv) {
    GenerateArgs a = {NULL, NULL, NULL, "cpu", 256, 8, 0.0, 1.0, 0};
    const DfOption options[] = {
        {"target", DF_OPT_STRING, &a.target, "DIR", "Hugging Face model directory (config, weights, tokenizer.json)", 1},
        {"input", DF_OPT_STRING, &a.input, "FILE", "JSONL prompts: {\"id\"?, \"prompt\"} (a \"response\" is ignored)", 1},
        {"output", DF_OPT_STRING, &a.output, "FILE", "JSONL {\"id\", \"prompt\", \"response\"}, appended to when resuming", 1},
        {"max-new-tokens", DF_OPT_INT, &a.max_new_tokens, "N", "tokens to generate at most per prompt (default 256)", 0},
        {"temperature", DF_OPT_DOUBLE, &a.temperature, "T", "sampling temperature; 0 = greedy (default)", 0},
        {"top-p", DF_OPT_DOUBLE, &a.top_p, "P", "nucleus sampling mass in (0, 1] (default 1: off)", 0},
        {"seed", DF_OPT_INT, &a.seed, "S", "sampling seed (default 0); with the record index it keys each draw", 0},
        {"batch", DF_OPT_INT, &a.batch, "N", "sequences decoded together (default 8); a finished one's slot takes the next prompt", 0},
        {"device", DF_OPT_STRING, &a.device, "DEV", "cpu (default), cuda or cuda:N", 0},
    };
    const DfCommandSpec spec = {
        "generate", "the target's responses to prompts (regenerated training data)", NULL,
        "Each response stops at an EOS id (generation_config.json's eos_token_id, else config.json's; the EOS is\n"
        "not written) or after --max-new-tokens. Records are written in input order, each flushed as soon as it\n"
        "and those before it are done; running the same command again after an interruption continues after\n"
        "the last complete record.\n"
        "Sampling draws depend only on (seed, record index), so --batch does not change the output.",
        options, DF_COUNT(options)};
    DfParsedArgs args;
    DfError err;
    int exit_code;
    if (df_parse_command_line(&spec, argc, argv, &args, &exit_code)) return exit_code;
    if (a.max_new_tokens < 1 || a.batch < 1 || a.batch > 4096 || a.temperature < 0 || a.top_p <= 0 || a.top_p > 1) {
        fprintf(stderr, "dflash generate: need --max-new-tokens >= 1, --batch in 1..4096, --temperature >= 0, "
                        "--top-p in (0, 1]\n");
        return 2;
    }
    if (run_generate(&a, &err)) {
        fprintf(stderr, "dflash generate: %s\n", err.msg);
        return 1;
    }
    return 0;
}
