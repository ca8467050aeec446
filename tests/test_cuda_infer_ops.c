/* The CUDA KV-cache ops (kv_cache_write, kv_attention) against the CPU ops,
 * and inference on the CUDA backend end to end. Op inputs are random (never
 * zero) and rounded to bf16, so both backends see the same values; caches and
 * outputs start NaN-poisoned, so a row read past a slot's length or an
 * unwritten output fails. Tolerance: max|a-b| / max|b| <= 1e-2. Cases: several
 * sequences with different cache lengths (0 included), slots not in order,
 * 1 and 16 new rows, GQA ratios 1 and 4, head_dim 64 and 128, causal and
 * non-causal, with and without split-K. End to end: greedy generation on
 * coder-tiny against transformers' greedy fixture, and `dflash generate` /
 * `dflash eval` with --device cuda against the same commands on the CPU.
 * Everything GPU skips when no GPU is present (or CUDA was not built in). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend/backend.h"
#include "base/numeric.h"
#include "infer/generate.h"
#include "model/drafter_io.h"
#include "model/target.h"
#ifdef DF_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

#define OP_TOL 1e-2
#define MAX_FIXTURES 16

typedef struct Fixture {
    DfBackend *cpu, *gpu; /* gpu NULL when there is none */
} Fixture;

static int setup(void **state) {
    DfError err;
    Fixture *f = calloc(1, sizeof *f);
    f->cpu = df_backend_cpu_create(&err);
    assert_non_null(f->cpu);
#ifdef DF_HAVE_CUDA
    if (df_cuda_device_count() > 0) {
        f->gpu = df_backend_cuda_create(0, &err);
        if (!f->gpu) fail_msg("a GPU is present but the CUDA backend failed: %s", err.msg);
    }
#endif
    *state = f;
    return 0;
}

static int teardown(void **state) {
    Fixture *f = *state;
    df_backend_destroy(f->cpu);
    df_backend_destroy(f->gpu);
    free(f);
    return 0;
}

static Fixture *gpu_or_skip(void **state) {
    Fixture *f = *state;
    if (!f->gpu) skip();
    return f;
}

static float *random_bf16(size_t n, uint64_t seed, float scale) {
    float *x = df_test_random_array(n, seed, scale);
    for (size_t i = 0; i < n; i++) x[i] = df_bf16_to_f32(df_f32_to_bf16(x[i]));
    return x;
}

static DfBuffer poisoned(DfBackend *be, size_t n) {
    float *nan = malloc(n * sizeof *nan);
    for (size_t i = 0; i < n; i++) nan[i] = NAN;
    DfBuffer b = df_test_upload(be, nan, n, DF_BUF_ACT);
    free(nan);
    return b;
}

/* --- the ops ---------------------------------------------------------------- */

typedef struct KvCase {
    const char *name;
    int heads, kv_heads, head_dim, causal;
    int n_seqs, n_slots, capacity;
    const int32_t *slots, *cache_lens, *n_new;
} KvCase;

/* One backend's run of a case: caches filled to cache_lens by a prefill
 * step (sequences with cached rows only), then the step's K/V written and
 * its queries attended. Returns the output and the caches on the host. */
typedef struct KvRun {
    float *out, *k, *v;
} KvRun;

static void kv_batch(DfBackend *be, DfKvBatch *kb, const KvCase *c, int n, const int32_t *slots, const int32_t *lens,
                     const int32_t *counts) {
    int32_t starts[256];
    assert_true(n < 256);
    starts[0] = 0;
    for (int i = 0; i < n; i++) starts[i + 1] = starts[i] + counts[i];
    DfError err;
    if (df_kv_batch_init(kb, be, n, slots, lens, starts, c->n_slots, c->capacity, &err)) fail_msg("%s", err.msg);
}

static KvRun kv_run(DfBackend *be, const KvCase *c, const float *pre_k, const float *pre_v, const float *q,
                    const float *k, const float *v) {
    int kvd = c->kv_heads * c->head_dim, qd = c->heads * c->head_dim;
    size_t cache_n = (size_t)c->n_slots * c->capacity * kvd;
    DfBuffer kc = poisoned(be, cache_n), vc = poisoned(be, cache_n);
    /* prefill: the sequences that have cached rows */
    int32_t ps[256], pl[256], pc[256];
    int np = 0, pre_rows = 0;
    for (int i = 0; i < c->n_seqs; i++)
        if (c->cache_lens[i] > 0) ps[np] = c->slots[i], pl[np] = 0, pc[np++] = c->cache_lens[i], pre_rows += c->cache_lens[i];
    DfKvBatch kb;
    if (np) {
        kv_batch(be, &kb, c, np, ps, pl, pc);
        DfBuffer pk = df_test_upload(be, pre_k, (size_t)pre_rows * kvd, DF_BUF_ACT);
        DfBuffer pv = df_test_upload(be, pre_v, (size_t)pre_rows * kvd, DF_BUF_ACT);
        df_op_kv_cache_write(be, kc, pk, &kb, kvd);
        df_op_kv_cache_write(be, vc, pv, &kb, kvd);
        DfError err;
        if (be->ops->sync(be, &err)) fail_msg("%s", err.msg);
        df_buffer_free(be, &pk), df_buffer_free(be, &pv);
        df_kv_batch_free(&kb, be);
    }
    kv_batch(be, &kb, c, c->n_seqs, c->slots, c->cache_lens, c->n_new);
    int rows = kb.n_rows;
    DfBuffer qb = df_test_upload(be, q, (size_t)rows * qd, DF_BUF_ACT);
    DfBuffer kb_ = df_test_upload(be, k, (size_t)rows * kvd, DF_BUF_ACT);
    DfBuffer vb = df_test_upload(be, v, (size_t)rows * kvd, DF_BUF_ACT);
    DfBuffer out = poisoned(be, (size_t)rows * qd);
    df_op_kv_cache_write(be, kc, kb_, &kb, kvd);
    df_op_kv_cache_write(be, vc, vb, &kb, kvd);
    df_op_kv_attention(be, out, qb, kc, vc, &kb, c->heads, c->kv_heads, c->head_dim, 1.0f / sqrtf((float)c->head_dim),
                       c->causal);
    KvRun r = {df_test_download(be, out), df_test_download(be, kc), df_test_download(be, vc)};
    DfBuffer *bufs[] = {&kc, &vc, &qb, &kb_, &vb, &out};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) df_buffer_free(be, bufs[i]);
    df_kv_batch_free(&kb, be);
    return r;
}

/* The written rows of every slot of the case (cache_lens + n_new), packed. */
static float *valid_rows(const KvCase *c, const float *cache, size_t *n) {
    int kvd = c->kv_heads * c->head_dim;
    size_t total = 0;
    for (int i = 0; i < c->n_seqs; i++) total += (size_t)(c->cache_lens[i] + c->n_new[i]) * kvd;
    float *x = malloc(total * sizeof *x), *p = x;
    for (int i = 0; i < c->n_seqs; i++) {
        size_t len = (size_t)(c->cache_lens[i] + c->n_new[i]) * kvd;
        memcpy(p, cache + (size_t)c->slots[i] * c->capacity * kvd, len * sizeof *x);
        p += len;
    }
    *n = total;
    return x;
}

static void check_case(Fixture *f, const KvCase *c, uint64_t seed) {
    int kvd = c->kv_heads * c->head_dim, qd = c->heads * c->head_dim, pre = 0, rows = 0;
    for (int i = 0; i < c->n_seqs; i++) pre += c->cache_lens[i], rows += c->n_new[i];
    float *pk = random_bf16((size_t)pre * kvd + 1, seed, 1.f), *pv = random_bf16((size_t)pre * kvd + 1, seed + 1, 1.f);
    float *q = random_bf16((size_t)rows * qd, seed + 2, 1.f), *k = random_bf16((size_t)rows * kvd, seed + 3, 1.f);
    float *v = random_bf16((size_t)rows * kvd, seed + 4, 1.f);
    /* larger q so that the softmax is far from uniform */
    for (size_t i = 0; i < (size_t)rows * qd; i++) q[i] = df_bf16_to_f32(df_f32_to_bf16(q[i] * 3.f));
    KvRun g = kv_run(f->gpu, c, pk, pv, q, k, v), r = kv_run(f->cpu, c, pk, pv, q, k, v);
    char what[160];
    size_t n;
    float *gk = valid_rows(c, g.k, &n), *rk = valid_rows(c, r.k, &n);
    snprintf(what, sizeof what, "%s: k cache", c->name);
    double e = df_rel_error(gk, rk, n);
    if (!(e <= 0)) fail_msg("%s: differs (%g): a copy must be exact", what, e);
    free(gk), free(rk);
    gk = valid_rows(c, g.v, &n), rk = valid_rows(c, r.v, &n);
    e = df_rel_error(gk, rk, n);
    if (!(e <= 0)) fail_msg("%s: v cache differs (%g)", c->name, e);
    free(gk), free(rk);
    e = df_rel_error(g.out, r.out, (size_t)rows * qd);
    if (!(e <= OP_TOL)) fail_msg("%s: kv_attention relative error %g (tolerance %g)", c->name, e, OP_TOL);
    free(g.out), free(g.k), free(g.v), free(r.out), free(r.k), free(r.v);
    free(pk), free(pv), free(q), free(k), free(v);
}

/* Five sequences, slots out of order, cache lengths 0 .. 650, one or a block
 * of 16 new rows: few blocks, so the key range is split. */
static void test_kv_ops_mixed(void **state) {
    Fixture *f = gpu_or_skip(state);
    static const int32_t slots[5] = {4, 0, 5, 2, 1}, lens[5] = {0, 37, 300, 650, 5};
    static const int32_t one[5] = {1, 1, 1, 1, 1}, block[5] = {16, 16, 3, 16, 1};
    const struct {
        int heads, kv_heads, hd;
    } shapes[] = {{4, 4, 64}, {8, 2, 128}, {8, 2, 64}, {4, 4, 128}};
    uint64_t seed = 100;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int causal = 0; causal < 2; causal++)
            for (int b = 0; b < 2; b++) {
                char name[96];
                snprintf(name, sizeof name, "%d/%d heads of %d, %s, %s", shapes[s].heads, shapes[s].kv_heads,
                         shapes[s].hd, causal ? "causal" : "block", b ? "16 new rows" : "1 new row");
                KvCase c = {name, shapes[s].heads, shapes[s].kv_heads, shapes[s].hd, causal, 5, 6, 700,
                            slots, lens, b ? block : one};
                check_case(f, &c, seed += 10);
            }
}

/* Many sequences (a decode batch): one split; and one long sequence: many. */
static void test_kv_ops_batch_and_long(void **state) {
    Fixture *f = gpu_or_skip(state);
    enum { N = 48 };
    int32_t slots[N], lens[N], one[N], block[N];
    for (int i = 0; i < N; i++) {
        slots[i] = (i * 7) % N;
        lens[i] = (i * 37) % 300;
        one[i] = 1;
        block[i] = 16;
    }
    uint64_t seed = 900;
    for (int causal = 0; causal < 2; causal++) {
        KvCase c = {"48 sequences, 32/8 heads of 128", 32, 8, 128, causal, N, N, 320, slots, lens, one};
        check_case(f, &c, seed += 10);
        KvCase d = {"48 sequences, 16/16 heads of 64, blocks", 16, 16, 64, causal, N, N, 320, slots, lens, block};
        check_case(f, &d, seed += 10);
        static const int32_t s1[1] = {1}, l1[1] = {3000}, n1[1] = {1}, n16[1] = {16};
        KvCase e = {"1 sequence of 3000, 32/8 heads of 128", 32, 8, 128, causal, 1, 2, 3100, s1, l1, n1};
        check_case(f, &e, seed += 10);
        KvCase g = {"1 sequence of 3000 + 16, 16/4 heads of 64", 16, 4, 64, causal, 1, 2, 3100, s1, l1, n16};
        check_case(f, &g, seed += 10);
    }
}

/* --- end to end -------------------------------------------------------------- */

/* Greedy generation on coder-tiny in bf16 on the GPU, batch 4 (continuous
 * batching), against transformers' fp32 greedy output. */
static void test_greedy_generate_matches_transformers(void **state) {
    Fixture *f = gpu_or_skip(state);
    DfGreedyFixture fx[MAX_FIXTURES];
    int n = df_test_load_greedy_fixtures(fx, MAX_FIXTURES);
    DfError err;
    DfTargetModel m;
    const char *dir = df_test_path("assets/coder-tiny");
    if (df_target_load(&m, f->gpu, dir, 8, 1, &err)) fail_msg("%s", err.msg);
    DfGenerateOptions opt = {0};
    opt.top_p = 1.0;
    opt.max_new_tokens = fx[0].max_new_tokens;
    if (df_generation_eos_ids(dir, &m.cfg, opt.eos_ids, &opt.n_eos, &err)) fail_msg("%s", err.msg);
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
    int total = 0, equal = 0, first_bad = -1;
    for (int i = 0; i < n; i++) {
        size_t k = 0;
        while (k < out[i].len && k < fx[i].output.len && out[i].data[k] == fx[i].output.data[k]) k++;
        int same = k == out[i].len && k == fx[i].output.len;
        equal += same;
        if (!same && first_bad < 0) first_bad = i;
        total++;
        if (!same) fprintf(stderr, "prompt %s: first difference at token %zu of %zu\n", fx[i].id, k, fx[i].output.len);
    }
    for (int i = 0; i < n; i++) df_i32vec_free(&out[i]);
    df_target_decoder_free(&d);
    df_target_free(&m);
    df_test_free_greedy_fixtures(fx, n);
    if (equal != total) fail_msg("%d of %d prompts differ from transformers' greedy output (first: %d)", total - equal,
                                 total, first_bad);
}

static char *read_text(const char *path) {
    char *t = df_test_read_file(path, NULL);
    if (!t) fail_msg("cannot read %s", path);
    return t;
}

/* A command's output file with --device cpu and --device cuda: identical. */
static void compare_devices(const char *cmd_fmt, const char *out_fmt, const char *dir) {
    char cmd[4096], log[16384], out[2][600];
    const char *dev[2] = {"cpu", "cuda"};
    for (int i = 0; i < 2; i++) {
        snprintf(out[i], sizeof out[i], out_fmt, dir, dev[i]);
        snprintf(cmd, sizeof cmd, cmd_fmt, out[i], dev[i]);
        if (df_test_run(cmd, log, sizeof log) != 0) fail_msg("%s failed: %s", cmd, log);
        fprintf(stderr, "--- %s:\n%s", dev[i], log);
    }
    char *a = read_text(out[0]), *b = read_text(out[1]);
    if (strcmp(a, b) != 0) fail_msg("%s: cpu and cuda outputs differ:\n%s\n---\n%s", out_fmt, a, b);
    free(a), free(b);
}

static void test_generate_and_eval_commands_on_cuda(void **state) {
    gpu_or_skip(state);
    char *dir = df_test_tmpdir("cuda_infer_cmd");
    char input[512], draft[512], fmt[4096];
    snprintf(input, sizeof input, "%s/prompts.jsonl", dir);
    df_test_write_file(input, "{\"id\": \"a\", \"prompt\": \"def add(a, b):\\n\"}\n"
                              "{\"id\": 7, \"prompt\": \"import os\\nimport sys\\n\\ndef main():\\n\"}\n"
                              "{\"id\": \"c\", \"prompt\": \"class Stack:\\n    def __init__(self):\\n\"}\n");
    snprintf(fmt, sizeof fmt, "%s generate --target %s --input %s --output %%s --max-new-tokens 40 --batch 2 --device %%s",
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), input);
    compare_devices(fmt, "%s/gen-%s.jsonl", dir);

    DfError err;
    DfModelConfig tcfg;
    if (df_model_config_load(&tcfg, df_test_path("assets/coder-tiny"), &err)) fail_msg("%s", err.msg);
    DfDrafterConfig cfg;
    if (df_drafter_config_from_target(&cfg, &tcfg, 1, 128, 8, 0, 8190, &err)) fail_msg("%s", err.msg);
    DfDrafterLayout layout;
    df_drafter_layout_build(&layout, &cfg);
    float *params = malloc(layout.total * sizeof *params);
    df_drafter_init_params(&layout, params, 5);
    snprintf(draft, sizeof draft, "%s/draft", dir);
    if (df_drafter_export(draft, &cfg, &layout, params, &err)) fail_msg("%s", err.msg);
    free(params);
    df_drafter_layout_free(&layout);
    snprintf(fmt, sizeof fmt, "%s eval --target %s --draft %s --input %s --output %%s --max-new-tokens 40 --device %%s",
             df_test_path("dflash"), df_test_path("assets/coder-tiny"), draft, input);
    /* eval itself fails when speculative and greedy output differ; the
     * responses (and accepted lengths) must also equal the CPU run's */
    char cmd[4096], log[16384], out[2][600];
    const char *dev[2] = {"cpu", "cuda"};
    char *resp[2];
    for (int i = 0; i < 2; i++) {
        snprintf(out[i], sizeof out[i], "%s/eval-%s.jsonl", dir, dev[i]);
        snprintf(cmd, sizeof cmd, fmt, out[i], dev[i]);
        if (df_test_run(cmd, log, sizeof log) != 0) fail_msg("%s failed: %s", cmd, log);
        fprintf(stderr, "--- eval %s:\n%s", dev[i], log);
        resp[i] = read_text(out[i]);
    }
    /* responses must agree; the records also hold timing-free fields only */
    if (strcmp(resp[0], resp[1]) != 0) fail_msg("eval outputs differ:\n%s\n---\n%s", resp[0], resp[1]);
    free(resp[0]), free(resp[1]);
    df_test_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_ops_mixed),
        cmocka_unit_test(test_kv_ops_batch_and_long),
        cmocka_unit_test(test_greedy_generate_matches_transformers),
        cmocka_unit_test(test_generate_and_eval_commands_on_cuda),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
