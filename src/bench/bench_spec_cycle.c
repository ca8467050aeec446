#include "bench/bench_spec_cycle.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "infer/drafter_infer.h"
#include "infer/speculative.h"
#include "target/target_decode.h"
#include "model/drafter_config.h"
#include "model/drafter_layout.h"

typedef struct SpecRig {
    DfTargetDecoder dec;
    DfDrafterRunner drafter;
    int32_t *prompt;
    int prompt_len, block_size;
} SpecRig;

static double timed_generate(SpecRig *g, int new_tokens, int *cycles, DfError *err) {
    DfSpecOptions o;
    memset(&o, 0, sizeof o); /* no EOS: every run makes new_tokens tokens */
    o.max_new_tokens = new_tokens;
    o.block_size = g->block_size;
    DfSpecResult res = {0};
    double t0 = df_now_seconds();
    int rc = df_speculative_generate(&g->dec, &g->drafter, 0, g->prompt, g->prompt_len, &o, &res, err);
    double s = df_now_seconds() - t0;
    *cycles = (int)res.accepted.len;
    df_spec_result_free(&res);
    return rc ? -1 : s;
}

static int rig_init(SpecRig *g, DfTargetModel *m, int prompt_len, int new_tokens, int block_size, int draft_layers,
                    DfError *err) {
    memset(g, 0, sizeof *g);
    DfDrafterConfig cfg;
    DfDrafterOptions opt = {.num_layers = draft_layers, .block_size = block_size, .mask_token_id = m->cfg.vocab_size - 1};
    if (df_drafter_config_from_target(&cfg, &m->cfg, &opt, err)) return -1;
    DfDrafterLayout layout;
    df_drafter_layout_build(&layout, &cfg);
    float *params = df_xmalloc(layout.total * sizeof *params, "bench drafter weights");
    df_drafter_init_params(&layout, params, 1);
    int cap = prompt_len + new_tokens + block_size;
    int rc = df_target_decoder_init(&g->dec, m, 1, cap, cfg.target_layer_ids, cfg.n_taps, err);
    if (rc == 0 &&
        df_drafter_runner_init(&g->drafter, m->be, &cfg, params, m->embed, m->lm_head, 1, cap, err)) {
        df_target_decoder_free(&g->dec);
        rc = -1;
    }
    free(params);
    df_drafter_layout_free(&layout);
    if (rc) return -1;
    g->prompt = df_xmalloc((size_t)prompt_len * sizeof *g->prompt, "bench prompt");
    for (int i = 0; i < prompt_len; i++) g->prompt[i] = (int32_t)((i * 7919u + 13u) % (unsigned)(m->cfg.vocab_size - 2));
    g->prompt_len = prompt_len, g->block_size = block_size;
    return 0;
}

static void rig_free(SpecRig *g) {
    df_drafter_runner_free(&g->drafter);
    df_target_decoder_free(&g->dec);
    free(g->prompt);
}

int df_bench_spec_cycle(DfTargetModel *m, int prompt_len, int new_tokens, int block_size, int draft_layers,
                        DfSpecCycleResult *r, DfError *err) {
    memset(r, 0, sizeof *r);
    SpecRig g;
    if (rig_init(&g, m, prompt_len, new_tokens, block_size, draft_layers, err)) return -1;
    int cycles = 0, none = 0;
    /* the warm-up records the graphs of every step shape the timed run meets */
    double full = timed_generate(&g, new_tokens, &cycles, err), first = -1;
    if (full >= 0) full = timed_generate(&g, new_tokens, &cycles, err);
    if (full >= 0) first = timed_generate(&g, 1, &none, err);
    rig_free(&g);
    if (full < 0 || first < 0) return -1;
    if (cycles < 1) return df_fail(err, "speculative cycle bench: no cycle in %d new tokens", new_tokens);
    r->block_size = block_size, r->draft_layers = draft_layers, r->cycles = cycles;
    r->cycle_ms = (full - first) / cycles * 1e3;
    return 0;
}
