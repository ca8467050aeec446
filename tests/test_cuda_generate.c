/* Inference on the CUDA backend end to end: bf16 greedy generation on
 * coder-tiny against transformers' fp32 greedy fixture and `dflash generate
 * --device cuda` against the CPU, both equal up to near ties (see
 * check_near_ties), and with --no-graphs equal to its recorded steps;
 * `dflash eval --device cuda` lossless against the GPU's own greedy decoding.
 * The KV-cache ops and the greedy op one by one against the CPU are
 * test_backend_ops' cases. Everything GPU skips when no GPU is present (or
 * CUDA was not built in). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend/backend.h"
#include "infer/generate.h"
#include "model/drafter_io.h"
#include "target/target.h"
#include "text/tokenizer.h"

#define MAX_FIXTURES 16

/* the CPU and CUDA backends (test_util.h); gpu NULL without a GPU */
typedef DfTestBackendPair Fixture;

/* --- end to end: bf16 greedy against fp32 greedy ----------------------------- */

/* bf16 greedy decoding cannot equal fp32 greedy token for token: where the
 * two largest fp32 logits are closer than the bf16 forward's error, the GPU
 * may pick the other one, and from there the continuations differ. What must
 * hold instead: at every generated position, the token the GPU chose is,
 * under the CPU's fp32 forward of prompt + the GPU's own tokens (teacher
 * forcing), within a near-tie margin of the fp32 maximum; and such flips are
 * rare (NEAR_TIE_FLIPS_PER_TOKEN).
 *
 * The margin, for a row whose largest fp32 logit is L, with ulp(L) the bf16
 * spacing at |L| (2^(floor(log2 |L|) - 7), i.e. 2^-8 to 2^-7 of |L|):
 *   - the GPU stores logits in bf16: each is rounded by at most ulp/2, so
 *     the order of two logits can swap when their gap is below 1 ulp;
 *   - the head's inputs (final hidden state, lm head weights) are bf16, each
 *     factor off by at most 2^-9 relative: about 1 ulp on the logit where its
 *     terms do not cancel;
 *   - the error carried in by the hidden state through every bf16 layer:
 *     test_cuda_target bounds the whole forward's logits at 3e-2 of the largest
 *     logit (a worst case over the matrix); 2 ulp (0.8% to 1.6% of |L|) per
 *     pair of logits is allowed here.
 * Total 4 ulp(L) (1.6% to 3.1% of |L|), with |L| taken as at least 1. A
 * token far from the top (a wrong kernel, a stale cache row) misses it by
 * orders of magnitude. */
#define NEAR_TIE_ULPS 4
/* At most one flip (GPU token not the fp32 argmax) per this many generated
 * positions, and never more than 3 in a run of fewer positions. */
#define NEAR_TIE_FLIPS_PER_TOKEN 25

static double near_tie_margin(float l_max) {
    double a = fabs((double)l_max) > 1 ? fabs((double)l_max) : 1;
    int e;
    frexp(a, &e); /* a = m 2^e, m in [0.5, 1): floor(log2 a) = e - 1 */
    return NEAR_TIE_ULPS * ldexp(1.0, e - 1 - 7);
}

typedef struct TieStats {
    int positions, flips;
    double worst; /* largest gap / margin seen */
} TieStats;

/* The CPU fp32 target over prompt + out in one step; checks every generated
 * position (and, when the output stopped before the limit, the EOS that
 * ended it). Returns the flips of this sequence. */
static int check_near_ties(DfTargetModel *cpu, const char *what, const int32_t *prompt, int np, const int32_t *out,
                           int n_out, const DfGenerateOptions *opt, TieStats *ts) {
    int n = np + n_out, vocab = cpu->cfg.vocab_size, stopped = n_out < opt->max_new_tokens, flips = 0;
    DfError err;
    DfTargetDecoder d;
    if (df_target_decoder_init(&d, cpu, 1, n + 1, NULL, 0, &err)) fail_msg("%s", err.msg);
    int32_t *ids = malloc((size_t)n * sizeof *ids), slot = 0, starts[2] = {0, n};
    memcpy(ids, prompt, (size_t)np * sizeof *ids);
    memcpy(ids + np, out, (size_t)n_out * sizeof *ids);
    float *logits = malloc((size_t)n * vocab * sizeof *logits);
    DfDecodeStep step = {1, &slot, ids, starts, DF_LOGITS_ALL, logits, NULL, NULL, 0};
    if (df_target_decode(&d, &step, &err)) fail_msg("%s", err.msg);
    for (int j = 0; j < n_out + stopped; j++) {
        const float *row = logits + (size_t)(np - 1 + j) * vocab;
        int best = df_argmax_f32(row, vocab), chosen = j < n_out ? out[j] : -1;
        if (chosen < 0) /* the stop: the best of the EOS ids */
            for (int e = 0; e < opt->n_eos; e++)
                if (chosen < 0 || row[opt->eos_ids[e]] > row[chosen]) chosen = opt->eos_ids[e];
        double gap = (double)row[best] - row[chosen], margin = near_tie_margin(row[best]);
        int flip = j < n_out ? chosen != best : !df_is_eos(opt, best);
        flips += flip;
        ts->positions++;
        if (gap / margin > ts->worst) ts->worst = gap / margin;
        if (!(gap <= margin))
            fail_msg("%s: generated position %d: the GPU chose %s%d, whose fp32 logit %.6g is %.4g below the "
                     "maximum %.6g (token %d); a bf16 near tie allows %.4g",
                     what, j, j < n_out ? "token " : "EOS ", chosen, row[chosen], gap, row[best], best, margin);
    }
    ts->flips += flips;
    free(ids), free(logits);
    df_target_decoder_free(&d);
    return flips;
}

static void check_flip_rate(const char *what, const TieStats *ts) {
    int allowed = ts->positions / NEAR_TIE_FLIPS_PER_TOKEN > 3 ? ts->positions / NEAR_TIE_FLIPS_PER_TOKEN : 3;
    fprintf(stderr, "%s: %d generated positions, %d near-tie flips (at most %d), largest gap %.2f of the margin\n", what,
            ts->positions, ts->flips, allowed, ts->worst);
    if (ts->flips > allowed) fail_msg("%s: %d flips in %d positions (at most %d)", what, ts->flips, ts->positions, allowed);
}

static void load_coder_tiny(DfTargetModel *m, DfBackend *be) {
    DfError err;
    DfModelConfig cfg;
    const char *dir = df_test_path("assets/coder-tiny");
    if (df_model_config_load(&cfg, dir, &err) || df_target_load(m, be, dir, cfg.num_layers, 1, &err))
        fail_msg("%s", err.msg);
}

/* Greedy generation on coder-tiny in bf16 on the GPU, batch 4 (continuous
 * batching), against transformers' fp32 greedy output: equal up to the
 * first divergence, and every GPU choice a near tie in fp32. */
static void test_greedy_generate_matches_transformers(void **state) {
    Fixture *f = df_test_gpu_or_skip(state);
    DfGreedyFixture fx[MAX_FIXTURES];
    int n = df_test_load_greedy_fixtures(fx, MAX_FIXTURES);
    DfError err;
    DfTargetModel m, cm;
    load_coder_tiny(&m, f->gpu);
    load_coder_tiny(&cm, f->cpu);
    DfGenerateOptions opt = {0};
    opt.top_p = 1.0;
    opt.max_new_tokens = fx[0].max_new_tokens;
    if (df_generation_eos_ids(df_test_path("assets/coder-tiny"), &m.cfg, opt.eos_ids, &opt.n_eos, &err))
        fail_msg("%s", err.msg);
    const int32_t *prompts[MAX_FIXTURES];
    int lens[MAX_FIXTURES], cap = 0;
    for (int i = 0; i < n; i++) {
        prompts[i] = fx[i].prompt.data;
        lens[i] = (int)fx[i].prompt.len;
        if (lens[i] + opt.max_new_tokens > cap) cap = lens[i] + opt.max_new_tokens;
    }
    DfTargetDecoder d;
    if (df_target_decoder_init(&d, &m, 4, cap, NULL, 0, &err)) fail_msg("%s", err.msg);
    DfI32Vec out[MAX_FIXTURES] = {{0}};
    if (df_generate_batch(&d, n, prompts, lens, &opt, out, NULL, &err)) fail_msg("%s", err.msg);
    TieStats ts = {0};
    int equal = 0;
    for (int i = 0; i < n; i++) {
        size_t k = 0;
        while (k < out[i].len && k < fx[i].output.len && out[i].data[k] == fx[i].output.data[k]) k++;
        int same = k == out[i].len && k == fx[i].output.len;
        equal += same;
        if (!same)
            fprintf(stderr, "prompt %s: first difference from transformers at token %zu of %zu\n", fx[i].id, k,
                    fx[i].output.len);
        char what[160];
        snprintf(what, sizeof what, "prompt %.63s", fx[i].id);
        check_near_ties(&cm, what, prompts[i], lens[i], out[i].data, (int)out[i].len, &opt, &ts);
    }
    fprintf(stderr, "%d of %d prompts equal transformers' greedy output token for token\n", equal, n);
    check_flip_rate("greedy generate on the GPU", &ts);
    for (int i = 0; i < n; i++) df_i32vec_free(&out[i]);
    df_target_decoder_free(&d);
    df_target_free(&m);
    df_target_free(&cm);
    df_test_free_greedy_fixtures(fx, n);
}

static char *read_text(const char *path) {
    char *t = df_test_read_file(path, NULL);
    if (!t) fail_msg("cannot read %s", path);
    return t;
}

/* The "response" of each line of a JSONL output file, in order. */
static int read_responses(const char *path, char **resp, int max) {
    char *text = read_text(path), *line = text;
    int n = 0;
    while (*line) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        if (*line) {
            cJSON *rec = cJSON_Parse(line);
            const cJSON *r = rec ? cJSON_GetObjectItemCaseSensitive(rec, "response") : NULL;
            if (!cJSON_IsString(r) || n == max) fail_msg("%s: line %d has no \"response\" string", path, n + 1);
            resp[n++] = strdup(r->valuestring);
            cJSON_Delete(rec);
        }
        if (!nl) break;
        line = nl + 1;
    }
    free(text);
    return n;
}

static void run_ok(const char *cmd, const char *what) {
    char log[16384];
    if (df_test_run(cmd, log, sizeof log) != 0) fail_msg("%s failed: %s\n%s", what, cmd, log);
    fprintf(stderr, "--- %s:\n%s", what, log);
}

enum { CMD_PROMPTS = 3, CMD_NEW = 40, CMD_BATCH = 2 };
static const char *const CMD_PROMPT_TEXT[CMD_PROMPTS] = {
    "def add(a, b):\n", "import os\nimport sys\n\ndef main():\n", "class Stack:\n    def __init__(self):\n"};

/* `dflash generate --device cuda` against the CPU: its responses are the
 * GPU's greedy tokens (the same generation in this process, batch 2 like the
 * command, decoded), every one a near tie in fp32; a response differs from
 * the CPU's only for a prompt where the GPU made a near-tie flip. */
static void check_generate_command(Fixture *f, const char *dir, const char *input) {
    char cmd[4096], out[3][600];
    /* the third run queues every op of every step: the same kernels, so the same text as the second */
    const char *dev[3] = {"cpu", "cuda", "cuda --no-graphs"};
    char *resp[3][CMD_PROMPTS];
    for (int i = 0; i < 3; i++) {
        snprintf(out[i], sizeof out[i], "%s/gen-%d.jsonl", dir, i);
        snprintf(cmd, sizeof cmd, "%s generate --target %s --input %s --output %s --max-new-tokens %d --batch %d --device %s",
                 df_test_path("dflash"), df_test_path("assets/coder-tiny"), input, out[i], CMD_NEW, CMD_BATCH, dev[i]);
        run_ok(cmd, dev[i]);
        if (read_responses(out[i], resp[i], CMD_PROMPTS) != CMD_PROMPTS) fail_msg("%s: not %d records", out[i], CMD_PROMPTS);
    }
    for (int i = 0; i < CMD_PROMPTS; i++)
        if (strcmp(resp[2][i], resp[1][i]) != 0)
            fail_msg("prompt %d: generate --device cuda wrote %s with recorded steps, %s with --no-graphs", i,
                     resp[1][i], resp[2][i]);
    DfError err;
    const char *target = df_test_path("assets/coder-tiny");
    DfTokenizer *tok = df_tokenizer_load(target, &err);
    if (!tok) fail_msg("%s", err.msg);
    DfTargetModel m, cm;
    load_coder_tiny(&m, f->gpu);
    load_coder_tiny(&cm, f->cpu);
    DfGenerateOptions opt = {0};
    opt.top_p = 1.0;
    opt.max_new_tokens = CMD_NEW;
    if (df_generation_eos_ids(target, &m.cfg, opt.eos_ids, &opt.n_eos, &err)) fail_msg("%s", err.msg);
    DfI32Vec ids[CMD_PROMPTS] = {{0}}, gen[CMD_PROMPTS] = {{0}};
    const int32_t *prompts[CMD_PROMPTS];
    int lens[CMD_PROMPTS], cap = 0;
    for (int i = 0; i < CMD_PROMPTS; i++) {
        if (df_tokenizer_encode(tok, CMD_PROMPT_TEXT[i], strlen(CMD_PROMPT_TEXT[i]), &ids[i], &err)) fail_msg("%s", err.msg);
        prompts[i] = ids[i].data;
        lens[i] = (int)ids[i].len;
        cap = lens[i] + CMD_NEW > cap ? lens[i] + CMD_NEW : cap;
    }
    DfTargetDecoder d;
    if (df_target_decoder_init(&d, &m, CMD_BATCH, cap, NULL, 0, &err) ||
        df_generate_batch(&d, CMD_PROMPTS, prompts, lens, &opt, gen, NULL, &err))
        fail_msg("%s", err.msg);
    TieStats ts = {0};
    for (int i = 0; i < CMD_PROMPTS; i++) {
        DfByteBuf text = {0};
        if (df_tokenizer_decode(tok, gen[i].data, gen[i].len, &text, &err)) fail_msg("%s", err.msg);
        const char *t = text.data ? text.data : "";
        if (strcmp(t, resp[1][i]) != 0)
            fail_msg("prompt %d: generate --device cuda wrote %s, the same greedy generation here gives %s", i,
                     resp[1][i], t);
        df_bytebuf_free(&text);
        char what[64];
        snprintf(what, sizeof what, "generate --device cuda, prompt %d", i);
        int flips = check_near_ties(&cm, what, prompts[i], lens[i], gen[i].data, (int)gen[i].len, &opt, &ts);
        if (flips == 0 && strcmp(resp[0][i], resp[1][i]) != 0)
            fail_msg("prompt %d: cpu and cuda responses differ without a near-tie flip:\n%s\n---\n%s", i, resp[0][i],
                     resp[1][i]);
    }
    check_flip_rate("generate --device cuda", &ts);
    for (int i = 0; i < CMD_PROMPTS; i++) {
        df_i32vec_free(&ids[i]), df_i32vec_free(&gen[i]);
        free(resp[0][i]), free(resp[1][i]), free(resp[2][i]);
    }
    df_target_decoder_free(&d);
    df_target_free(&m);
    df_target_free(&cm);
    df_tokenizer_free(tok);
}

/* `dflash eval --device cuda` with a random drafter: lossless against the
 * GPU's own greedy decoding (eval compares the two token for token and fails
 * on any difference: that invariant holds exactly on any device). */
static void check_eval_command(const char *dir, const char *input) {
    DfError err;
    DfModelConfig tcfg;
    if (df_model_config_load(&tcfg, df_test_path("assets/coder-tiny"), &err)) fail_msg("%s", err.msg);
    DfDrafterConfig cfg;
    DfDrafterOptions dopt = {.num_layers = 1, .intermediate_size = 128, .block_size = 8, .mask_token_id = 8190};
    if (df_drafter_config_from_target(&cfg, &tcfg, &dopt, &err)) fail_msg("%s", err.msg);
    DfDrafterLayout layout;
    df_drafter_layout_build(&layout, &cfg);
    float *params = malloc(layout.total * sizeof *params);
    df_drafter_init_params(&layout, params, 5);
    char draft[512], cmd[4096], out[600];
    snprintf(draft, sizeof draft, "%s/draft", dir);
    if (df_drafter_export(draft, &cfg, &layout, params, &err)) fail_msg("%s", err.msg);
    free(params);
    df_drafter_layout_free(&layout);
    snprintf(out, sizeof out, "%s/eval-cuda.jsonl", dir);
    snprintf(cmd, sizeof cmd, "%s eval --target %s --draft %s --input %s --output %s --max-new-tokens %d --device cuda",
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), draft, input, out, CMD_NEW);
    run_ok(cmd, "eval --device cuda");
    char *resp[CMD_PROMPTS];
    if (read_responses(out, resp, CMD_PROMPTS) != CMD_PROMPTS) fail_msg("%s: not %d records", out, CMD_PROMPTS);
    for (int i = 0; i < CMD_PROMPTS; i++) free(resp[i]);
}

static void test_generate_and_eval_commands_on_cuda(void **state) {
    Fixture *f = df_test_gpu_or_skip(state);
    char *dir = df_test_tmpdir("cuda_infer_cmd");
    char input[512];
    snprintf(input, sizeof input, "%s/prompts.jsonl", dir);
    DfByteBuf jsonl = {0};
    for (int i = 0; i < CMD_PROMPTS; i++) {
        cJSON *rec = cJSON_CreateObject();
        cJSON_AddNumberToObject(rec, "id", i);
        cJSON_AddStringToObject(rec, "prompt", CMD_PROMPT_TEXT[i]);
        char *line = cJSON_PrintUnformatted(rec);
        df_bytebuf_append(&jsonl, line, strlen(line));
        df_bytebuf_append(&jsonl, "\n", 1);
        free(line);
        cJSON_Delete(rec);
    }
    df_test_write_file(input, jsonl.data);
    df_bytebuf_free(&jsonl);
    check_generate_command(f, dir, input);
    check_eval_command(dir, input);
    df_test_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_generate_matches_transformers),
        cmocka_unit_test(test_generate_and_eval_commands_on_cuda),
    };
    return cmocka_run_group_tests(tests, df_test_backend_pair_setup, df_test_backend_pair_teardown);
}
