/* dflash generate: the target's own responses to prompts (the recipe's
 * regenerated training data), with a KV cache, in batches, resumable. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/progress.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "infer/generate.h"
#include "infer/prompts.h"
#include "infer/resume.h"
#include "text/tokenizer.h"

typedef struct GenerateArgs {
    const char *target, *input, *output;
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
    int dec_capacity;
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

/* A decoder whose slots hold `need` tokens, re-made when a batch needs more. */
static int ensure_decoder(GenerateRun *g, int need, DfError *err) {
    if (g->dec_capacity >= need) return 0;
    int cap = g->dec_capacity ? g->dec_capacity : 256;
    while (cap < need) cap *= 2;
    df_target_decoder_free(&g->dec);
    g->dec_capacity = 0;
    if (df_target_decoder_init(&g->dec, &g->model, g->args->batch, cap, NULL, 0, err)) return -1;
    g->dec_capacity = cap;
    return 0;
}

/* Records first .. first+n-1: tokenize, generate, append their lines. */
static int run_batch(GenerateRun *g, int first, int n, DfError *err) {
    DfI32Vec ids[n], outs[n];
    const int32_t *prompts[n];
    int lens[n], need = 0, rc = -1;
    uint64_t index[n];
    memset(ids, 0, sizeof ids);
    memset(outs, 0, sizeof outs);
    for (int i = 0; i < n; i++) {
        const DfPrompt *p = &g->prompts.items[first + i];
        if (df_tokenizer_encode(g->tok, p->text, strlen(p->text), &ids[i], err)) goto done;
        if (ids[i].len == 0) {
            df_fail(err, "%s: record %d (id %s) has an empty prompt", g->args->input, first + i + 1, p->id_json);
            goto done;
        }
        prompts[i] = ids[i].data;
        lens[i] = (int)ids[i].len;
        index[i] = (uint64_t)(first + i);
        if (lens[i] + g->opt.max_new_tokens > need) need = lens[i] + g->opt.max_new_tokens;
    }
    if (ensure_decoder(g, need, err) || df_generate_batch(&g->dec, n, prompts, lens, index, &g->opt, outs, NULL, err))
        goto done;
    for (int i = 0; i < n; i++) {
        if (write_record(g, &g->prompts.items[first + i], &outs[i], err)) goto done;
        g->tokens += (int64_t)outs[i].len;
    }
    /* durable record by record: a restart continues after the last line */
    if (fflush(g->out) != 0 || fsync(fileno(g->out)) != 0) {
        df_fail_errno(err, "writing %s", g->args->output);
        goto done;
    }
    rc = 0;
done:
    for (int i = 0; i < n; i++) df_i32vec_free(&ids[i]), df_i32vec_free(&outs[i]);
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
    if (!(g.tok = df_tokenizer_load(a->target, err)) || !(g.be = df_backend_cpu_create(err)) ||
        df_target_load(&g.model, g.be, a->target, cfg.num_layers, 1, err))
        goto out;
    if (!(g.out = fopen(a->output, "ab"))) {
        df_fail_errno(err, "cannot open %s", a->output);
        goto out;
    }
    DfProgress progress;
    df_progress_start(&progress, "generate", "records", g.prompts.n - done);
    double t0 = df_now_seconds();
    char extra[96];
    for (int first = done; first < g.prompts.n; first += a->batch) {
        int n = g.prompts.n - first < a->batch ? g.prompts.n - first : a->batch;
        if (run_batch(&g, first, n, err)) goto out;
        snprintf(extra, sizeof extra, "%lld tokens, %.1f tokens/s", (long long)g.tokens,
                 (double)g.tokens / (df_now_seconds() - t0));
        df_progress_update(&progress, first + n - done, extra);
    }
    df_progress_finish(&progress, g.prompts.n - done, extra);
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
    GenerateArgs a = {NULL, NULL, NULL, 256, 8, 0.0, 1.0, 0};
    const DfOption options[] = {
        {"target", DF_OPT_STRING, &a.target, "DIR", "Hugging Face model directory (config, weights, tokenizer.json)", 1},
        {"input", DF_OPT_STRING, &a.input, "FILE", "JSONL prompts: {\"id\"?, \"prompt\"} (a \"response\" is ignored)", 1},
        {"output", DF_OPT_STRING, &a.output, "FILE", "JSONL {\"id\", \"prompt\", \"response\"}, appended to when resuming", 1},
        {"max-new-tokens", DF_OPT_INT, &a.max_new_tokens, "N", "tokens to generate at most per prompt (default 256)", 0},
        {"temperature", DF_OPT_DOUBLE, &a.temperature, "T", "sampling temperature; 0 = greedy (default)", 0},
        {"top-p", DF_OPT_DOUBLE, &a.top_p, "P", "nucleus sampling mass in (0, 1] (default 1: off)", 0},
        {"seed", DF_OPT_INT, &a.seed, "S", "sampling seed (default 0); with the record index it keys each draw", 0},
        {"batch", DF_OPT_INT, &a.batch, "N", "prompts generated together (default 8)", 0},
    };
    const DfCommandSpec spec = {
        "generate", "the target's responses to prompts (regenerated training data)", NULL,
        "Each response stops at an EOS id (generation_config.json's eos_token_id, else config.json's; the EOS is\n"
        "not written) or after --max-new-tokens. Records are written in input order and flushed one batch at a\n"
        "time; running the same command again after an interruption continues after the last complete record.\n"
        "Sampling draws depend only on (seed, record index), so --batch does not change the output.",
        options, DF_COUNT(options)};
    DfParsedArgs args;
    DfError err;
    if (df_parse_args(&spec, argc, argv, &args, &err)) {
        fprintf(stderr, "dflash: %s\n", err.msg);
        return 2;
    }
    if (args.help_shown) return 0;
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
