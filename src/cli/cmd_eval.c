/* dflash eval: greedy speculative decoding with a drafter (spec section 6)
 * over a prompt set; reports tau, the accepted-length histogram, acceptance
 * by block position, target passes saved and speed against plain greedy
 * decoding of the same prompts, and checks that both commit the same text. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/select.h"
#include "base/atomic_file.h"
#include "base/clock.h"
#include "base/paths_apart.h"
#include "base/progress.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/eval_report.h"
#include "infer/chat_turns.h"
#include "infer/prompts.h"
#include "infer/speculative.h"
#include "model/drafter_io.h"
#include "text/tokenizer.h"
#include "train/drafter_source.h"

typedef struct EvalArgs {
    const char *target, *draft, *input, *output, *device, *json;
    DfChatOptions chat;
    int max_new_tokens, block_size;
    int no_graphs; /* --no-graphs: every op of every target step and proposal queued, none replayed */
    int quiet;     /* --quiet: no drafter note, no progress; the report alone */
} EvalArgs;

typedef DfEvalTotals EvalTotals;

typedef struct EvalRun {
    const EvalArgs *args;
    DfPromptSet prompts;
    DfTokenizer *tok;
    DfBackend *be;
    DfTargetModel model;
    DfTargetDecoder dec;
    DfDrafterRunner drafter;
    DfSpecOptions spec;
    DfGenerateOptions greedy;
    DfAtomicFile out;
    int have_out;
} EvalRun;

static int load_models(EvalRun *e, DfError *err) {
    const EvalArgs *a = e->args;
    DfModelConfig cfg;
    DfDrafterConfig dcfg;
    DfDrafterLayout layout = {0};
    float *params = NULL;
    if (df_model_config_load(&cfg, a->target, err) || !(e->tok = df_tokenizer_load(a->target, err)) ||
        df_drafter_source_load(a->draft, &dcfg, &layout, &params, NULL, err))
        return -1;
    df_drafter_layout_free(&layout);
    int rc = -1, cap = 0;
    if (df_drafter_fit_target(&dcfg, &cfg, df_tokenizer_vocab_size(e->tok), a->draft, err)) goto done;
    e->spec.block_size = a->block_size ? a->block_size : dcfg.block_size;
    e->spec.max_new_tokens = e->greedy.max_new_tokens = a->max_new_tokens;
    e->greedy.top_p = 1;
    if (df_generation_eos_ids(a->target, &cfg, e->greedy.eos_ids, &e->greedy.n_eos, err)) goto done;
    memcpy(e->spec.eos_ids, e->greedy.eos_ids, sizeof e->spec.eos_ids);
    e->spec.n_eos = e->greedy.n_eos;
    for (int i = 0; i < e->prompts.n; i++) {
        DfI32Vec ids = {0};
        if (df_tokenizer_encode(e->tok, e->prompts.items[i].text, strlen(e->prompts.items[i].text), &ids, err)) goto done;
        if ((int)ids.len > cap) cap = (int)ids.len;
        df_i32vec_free(&ids);
    }
    cap += a->max_new_tokens + e->spec.block_size;
    if (!(e->be = df_backend_create(a->device, err)) || df_target_load(&e->model, e->be, a->target, cfg.num_layers, 1, err) ||
        df_target_decoder_init(&e->dec, &e->model, 1, cap, dcfg.target_layer_ids, dcfg.n_taps, err) ||
        df_drafter_runner_init(&e->drafter, e->be, &dcfg, params, e->model.embed, e->model.lm_head, 1, cap, err))
        goto done;
    if (a->no_graphs) {
        df_target_decoder_set_graphs(&e->dec, 0);
        df_drafter_runner_set_graphs(&e->drafter, 0);
    }
    if (!a->quiet) {
        fprintf(stderr, "eval: drafter %s: %d layers, %d heads of %d (%d kv heads), block size %d (running %d), taps",
                a->draft, dcfg.num_layers, dcfg.num_heads, dcfg.head_dim, dcfg.num_kv_heads, dcfg.block_size,
                e->spec.block_size);
        for (int i = 0; i < dcfg.n_taps; i++) fprintf(stderr, "%s%d", i ? "," : " ", dcfg.target_layer_ids[i]);
        fprintf(stderr, ", mask token %d\n", dcfg.mask_token_id);
    }
    rc = 0;
done:
    free(params);
    return rc;
}

static int write_prompt_record(EvalRun *e, const DfPrompt *p, const DfSpecResult *r, DfError *err) {
    DfByteBuf text = {0};
    if (df_tokenizer_decode(e->tok, r->tokens.data, r->tokens.len, &text, err)) return -1;
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddItemToObject(rec, "id", cJSON_Parse(p->id_json));
    cJSON_AddStringToObject(rec, "response", text.data ? text.data : "");
    cJSON_AddNumberToObject(rec, "tau", df_spec_tau(r));
    cJSON *acc = cJSON_AddArrayToObject(rec, "accepted");
    for (size_t c = 0; c < r->accepted.len; c++) cJSON_AddItemToArray(acc, cJSON_CreateNumber(r->accepted.data[c]));
    cJSON_AddNumberToObject(rec, "new_tokens", (double)r->tokens.len);
    cJSON_AddNumberToObject(rec, "target_passes", r->target_passes);
    char *line = cJSON_PrintUnformatted(rec);
    int rc = fprintf(e->out.fp, "%s\n", line) < 0 ? df_fail_errno(err, "writing %s", e->args->output) : 0;
    cJSON_free(line);
    cJSON_Delete(rec);
    df_bytebuf_free(&text);
    return rc;
}

/* One prompt both ways; a difference in the committed tokens is counted
 * and reported (it would be a bug: speculative decoding must be lossless). */
static int eval_prompt(EvalRun *e, int i, EvalTotals *t, DfError *err) {
    const DfPrompt *p = &e->prompts.items[i];
    DfI32Vec ids = {0}, greedy = {0};
    DfSpecResult r = {0};
    int rc = -1, steps = 0;
    if (df_tokenizer_encode(e->tok, p->text, strlen(p->text), &ids, err)) goto done;
    if (ids.len == 0) {
        df_fail(err, "%s: record %d (id %s) has an empty prompt", e->args->input, i + 1, p->id_json);
        goto done;
    }
    double t0 = df_now_seconds();
    if (df_speculative_generate(&e->dec, &e->drafter, 0, ids.data, (int)ids.len, &e->spec, &r, err)) {
        df_context(err, "%s: record %d (id %s)", e->args->input, i + 1, p->id_json);
        goto done;
    }
    double t1 = df_now_seconds();
    const int32_t *prompt = ids.data;
    int len = (int)ids.len;
    if (df_generate_batch(&e->dec, 1, &prompt, &len, &e->greedy, &greedy, &steps, err)) {
        df_context(err, "%s: record %d (id %s)", e->args->input, i + 1, p->id_json);
        goto done;
    }
    t->spec_s += t1 - t0;
    t->greedy_s += df_now_seconds() - t1;
    if (greedy.len != r.tokens.len || memcmp(greedy.data, r.tokens.data, greedy.len * sizeof *greedy.data)) {
        size_t k = 0;
        while (k < greedy.len && k < r.tokens.len && greedy.data[k] == r.tokens.data[k]) k++;
        fprintf(stderr, "eval: prompt %s: speculative output differs from greedy at token %zu (BUG)\n", p->id_json, k);
        t->mismatches++;
    }
    df_eval_totals_add(t, &r);
    t->greedy_passes += steps;
    if (e->have_out && write_prompt_record(e, p, &r, err)) goto done;
    rc = 0;
done:
    df_i32vec_free(&ids);
    df_i32vec_free(&greedy);
    df_spec_result_free(&r);
    return rc;
}

static void write_summary(const EvalRun *e, const EvalTotals *t, DfError *err, int *rc) {
    const EvalArgs *a = e->args;
    DfEvalInfo info = {a->target, a->draft, a->input, e->prompts.n, e->prompts.n_chat, e->spec.block_size,
                       a->max_new_tokens};
    df_eval_print_report(t, &info);
    if (*rc == 0 && a->json && df_eval_write_json(a->json, t, &info, err)) *rc = -1;
}

static int run_eval(const EvalArgs *a, DfError *err) {
    EvalRun e = {0};
    e.args = a;
    EvalTotals t = {0};
    int rc = -1;
    if (df_prompts_read_any(a->input, &e.prompts, err) || df_chat_render_last_turns(&e.prompts, a->target, &a->chat, a->input, err) || load_models(&e, err))
        goto out;
    if (a->output) {
        if (df_atomic_open(&e.out, a->output, err)) goto out;
        e.have_out = 1;
    }
    t.hist = df_xcalloc((size_t)e.spec.block_size, sizeof *t.hist, "histogram");
    DfProgress progress;
    df_progress_start(&progress, "eval", "prompts", e.prompts.n);
    progress.quiet = a->quiet;
    char extra[64] = "";
    for (int i = 0; i < e.prompts.n; i++) {
        if (eval_prompt(&e, i, &t, err)) goto out;
        snprintf(extra, sizeof extra, "tau %.2f", df_eval_tau(&t));
        df_progress_update(&progress, i + 1, extra);
    }
    df_progress_finish(&progress, e.prompts.n, extra);
    if (e.have_out) {
        e.have_out = 0;
        if (df_atomic_commit(&e.out, err)) goto out;
    }
    rc = t.mismatches ? df_fail(err, "speculative output differs from greedy decoding on %lld prompts",
                                (long long)t.mismatches)
                      : 0;
    write_summary(&e, &t, err, &rc);
out:
    if (e.have_out) df_atomic_abort(&e.out);
    free(t.hist);
    df_drafter_runner_free(&e.drafter);
    df_target_decoder_free(&e.dec);
    df_target_free(&e.model);
    df_backend_destroy(e.be);
    df_tokenizer_free(e.tok);
    df_prompts_free(&e.prompts);
    return rc;
}

#define DF_OPTION(name, kind, field, ...) DF_OPTION_TYPE_CHECK(((EvalArgs *)0)->field, kind, name);
#include "cli/eval_options.def"
#undef DF_OPTION

static void eval_args_default(EvalArgs *a) {
    memset(a, 0, sizeof *a);
#define DF_OPTION(name, kind, field, value, ...) a->field = (value);
#include "cli/eval_options.def"
#undef DF_OPTION
}

int df_cmd_eval(int argc, char **argv) {
    EvalArgs a, defaults;
    eval_args_default(&a);
    eval_args_default(&defaults);
    const DfOption options[] = {
#define DF_OPTION(name, kind, field, value, metavar, help, ...) \
    DF_OPTION_ENTRY(a.field, defaults.field, name, kind, metavar, help, __VA_ARGS__),
#include "cli/eval_options.def"
#undef DF_OPTION
    };
    const DfCommandSpec spec = {
        "eval", "speculative decoding with a drafter: tau, acceptance, speed against greedy", NULL,
        "Greedy speculative decoding (spec section 6), one prompt at a time, then plain greedy decoding of the\n"
        "same prompt for the speed comparison and a token-for-token check (any difference is reported as a bug\n"
        "and makes the command fail). tau = mean over cycles of (accepted drafts + 1).",
        options, DF_COUNT(options)};
    DfParsedArgs args;
    DfError err;
    int exit_code;
    if (df_parse_command_line(&spec, argc, argv, &args, &exit_code)) return exit_code;
    a.quiet = args.quiet;
    const DfPathArg ins[] = {{"--target", a.target}, {"--draft", a.draft}, {"--input", a.input}};
    const DfPathArg outs[] = {{"--json", a.json}, {"--output", a.output}};
    if ((exit_code = df_paths_apart_or_usage("eval", ins, 3, outs, 2)) != 0) return exit_code;
    if (run_eval(&a, &err)) {
        fprintf(stderr, "dflash eval: %s\n", err.msg);
        return 1;
    }
    return 0;
}
