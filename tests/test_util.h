/* Shared helpers for the cmocka test programs. Tests run from any directory:
 * paths are resolved against the source tree (DF_SOURCE_DIR). */
#ifndef DF_TEST_UTIL_H
#define DF_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "base/buffer.h"
#include "target/model_config.h"
#include "formats/safetensors.h"
#include "model/drafter.h"
#include "target/target.h"

/* Absolute path of a file in the source tree (DFLASH_SOURCE_DIR overrides the
 * build-time location), in a static rotating buffer. */
const char *df_test_path(const char *relative);

/* A fresh empty directory under /tmp for this test; removed by df_test_rmtree. */
char *df_test_tmpdir(const char *tag);
void df_test_rmtree(const char *dir);

/* Runs a shell command; returns its exit status and captures up to cap-1
 * bytes of combined stdout+stderr into out (may be NULL). */
int df_test_run(const char *cmd, char *out, size_t cap);
/* How df_test_spawn starts a command. */
typedef struct DfTestSpawn {
    int append;         /* 1: the output is appended to the log; 0: the log is truncated first */
    int resource;       /* an RLIMIT_* set to `limit` in the child, or -1 for none */
    long long limit;
    int ignore_sigxfsz; /* 1: a write past RLIMIT_FSIZE fails with EFBIG; 0: SIGXFSZ ends the
                           process, as in a user's shell */
} DfTestSpawn;
/* Starts `sh -c 'exec env CMD'` in a process of its own (env: CMD may begin
 * with VAR=value assignments; the pid is the command's), its stdout and
 * stderr to log, under the limit `how` names. */
pid_t df_test_spawn(const char *cmd, const char *log, const DfTestSpawn *how);
/* Waits for pid, up to timeout_s (< 0: for as long as it runs): its exit
 * status, 1000 + the signal when killed, or DF_TEST_TIMED_OUT (the process
 * is then killed). */
enum { DF_TEST_TIMED_OUT = -1 };
int df_test_wait(pid_t pid, double timeout_s);
/* Loads a config.json whose text is json (written to a fresh directory,
 * removed after); df_model_config_load's result. */
int df_test_load_config_text(DfModelConfig *c, const char *json, DfError *err);
/* The first n records of assets/data/code-dev.jsonl written to path. */
void df_test_write_data_slice(const char *path, int n);
/* That slice (dir/slice.jsonl) prepared with coder-tiny's tokenizer into
 * dir/data.store, whose path goes to store[cap]; fails the test on error. */
void df_test_prepare_data_slice(const char *dir, int n, char *store, size_t cap);
/* A TCP port on the loopback that was free a moment ago. */
int df_test_free_port(void);

/* max |a-b| / max |b| over n elements (the relative error used by parity tests). */
double df_rel_error(const float *a, const float *b, size_t n);

/* Fills x with uniform values in [-scale, scale] from a simple seeded generator. */
void df_test_fill_random(float *x, size_t n, uint64_t seed, float scale);

/* Writes text to a file, asserting success. */
void df_test_write_file(const char *path, const char *text);

/* A whole file as a NUL-terminated heap string (its length in *len when
 * len is not NULL), or NULL when it cannot be opened. */
char *df_test_read_file(const char *path, size_t *len);

/* The JSON document at df_test_path(rel) (caller frees with cJSON_Delete);
 * fails the test naming the file when it cannot be read or parsed. */
struct cJSON *df_test_load_json(const char *rel);

/* A heap array of n values from df_test_fill_random. */
float *df_test_random_array(size_t n, uint64_t seed, float scale);

/* tests/fixtures/generate/greedy.jsonl (transformers' greedy generate for
 * coder-tiny, made by tests/ref/generate_ref.py): one prompt and its greedy
 * continuation per record. */
typedef struct DfGreedyFixture {
    char id[64];
    DfI32Vec prompt, output;
    int max_new_tokens;
} DfGreedyFixture;

/* Loads up to max records (asserting at least 4); returns how many. */
int df_test_load_greedy_fixtures(DfGreedyFixture *f, int max);
void df_test_free_greedy_fixtures(DfGreedyFixture *f, int n);

/* cmocka group setup/teardown giving each test a CPU backend in *state. */
typedef struct DfTestBackendFixture {
    DfBackend *be;
} DfTestBackendFixture;
int df_test_cpu_backend_setup(void **state);
int df_test_cpu_backend_teardown(void **state);

/* A target's reference outputs (tests/ref/target_ref.py, hybrid_ref.py:
 * transformers, fp32): packed ids, every decoder layer's output and the
 * logits. */
typedef struct DfTargetReference {
    int n_tokens, n_seqs, n_layers, hidden, vocab;
    int32_t *ids, *starts;
    float *layer_out; /* [L, T, H] */
    float *logits;    /* [T, V] */
} DfTargetReference;
/* A copy (heap) of the 1-D int32 tensor `name`, asserting its dtype and rank. */
int32_t *df_test_copy_i32(const DfSafetensors *st, const char *name, int *count);
void df_test_target_reference_load(DfTargetReference *r, const char *path, const DfModelConfig *cfg);
void df_test_target_reference_free(DfTargetReference *r);
/* Relative error of column block j of features [T, n_taps*H] against reference layer `layer`. */
double df_test_tap_error(const float *features, int n_taps, int j, const DfTargetReference *r, int layer);
/* Loads layers 0..n_layers-1 (and the head) of the model in dir onto a new CPU backend. */
void df_test_load_cpu_target(DfTargetModel *m, DfBackend **be, const char *dir, int n_layers, int with_head);

/* A CPU backend and, when a GPU is present (and CUDA is built in), a CUDA
 * one: the cmocka group state of the tests that run on both
 * (test_backend_ops, tests/test_cuda_*.c). The GPU tests skip where gpu is
 * NULL. */
typedef struct DfTestBackendPair {
    DfBackend *cpu, *gpu;
} DfTestBackendPair;
int df_test_backend_pair_setup(void **state);
int df_test_backend_pair_teardown(void **state);
/* The pair of the group state; skips the test when there is no GPU. */
DfTestBackendPair *df_test_gpu_or_skip(void **state);

/* AdamW's buffers on a backend (the trainer's layout): fp32 master weights
 * and the ACT parameters both set from init, the moments and the gradient
 * zero; n elements each. */
typedef struct DfTestAdamWState {
    DfBuffer master, m, v, grads, params;
} DfTestAdamWState;
DfTestAdamWState df_test_adamw_state_new(DfBackend *be, const float *init, size_t n);
void df_test_adamw_state_free(DfBackend *be, DfTestAdamWState *s);

/* n values in [-scale, scale] (df_test_random_array) rounded to bf16, so
 * that a bf16 backend and the fp32 CPU see the same inputs; heap. */
float *df_test_random_bf16(size_t n, uint64_t seed, float scale);

/* Backend buffers from host arrays and back, failing the test with the
 * backend's message on error. */
DfBuffer df_test_upload(DfBackend *be, const float *host, size_t n, DfBufKind kind);
DfBuffer df_test_upload_i32(DfBackend *be, const int32_t *host, size_t n);
/* n NaNs: an op's output, so that a value the op fails to write shows. */
DfBuffer df_test_upload_poisoned(DfBackend *be, size_t n, DfBufKind kind);
float *df_test_download(DfBackend *be, DfBuffer b); /* after a sync; heap, b.count values */

/* A test's KV cache layout: n_slots contiguous slots of capacity rows, or
 * paged with every slot's pages in reverse (page j of slot s is page
 * n_pages - 1 - (s * pages a slot + j)), so that a slot's consecutive pages
 * are never adjacent. */
typedef struct DfTestKvLayout {
    int n_slots, capacity, paged;
} DfTestKvLayout;
/* The cache-buffer row holding row r of slot, and the buffer's rows. */
size_t df_test_kv_row(DfTestKvLayout l, int slot, int r);
size_t df_test_kv_rows(DfTestKvLayout l);
/* df_kv_batch_set_paged with the layout's page tables (none when contiguous). */
int df_test_kv_batch_set(DfKvBatch *kb, DfBackend *be, DfTestKvLayout l, int n_seqs, const int32_t *slots,
                         const int32_t *cache_lens, const int32_t *row_starts, DfError *err);

/* A dense layer's q/k/v step (backend.h, DfQkvRopeCacheArgs) on one
 * backend: sequence i lives in slot slots[i], has cache_lens[i] cached rows
 * and brings n_new[i] new rows. Inputs come from `seed`: the fused product
 * qkv, the q/k norm weights (when qk_norm) and rope tables, all rounded to
 * bf16 where they are ACT, so that a bf16 backend and the CPU see the same
 * values. The caches start NaN-poisoned; the op writes only the new rows. */
typedef struct DfTestQkvCase {
    const char *name;
    int heads, kv_heads, head_dim, qk_norm;
    int n_seqs, n_slots, capacity;
    const int32_t *slots, *cache_lens, *n_new;
    int paged; /* the caches paged (DfTestKvLayout) */
} DfTestQkvCase;
typedef struct DfTestQkvRun {
    float *q, *k_cache, *v_cache; /* host copies: [rows, heads*hd], [cache rows, kv_heads*hd] twice */
    size_t q_count, cache_count;
} DfTestQkvRun;
/* fused: one qkv_rope_cache; otherwise the ops it replaces, as the decoder
 * ran them: q, k, v copied out of qkv, rmsnorm per head, rope, kv_cache_write. */
DfTestQkvRun df_test_qkv_run(DfBackend *be, const DfTestQkvCase *c, uint64_t seed, int fused);
void df_test_qkv_run_free(DfTestQkvRun *r);
/* Fails unless every new row of the case is written (not NaN) in both runs,
 * everything else in the caches is still NaN in both, and the written values
 * differ by at most tol (max|a-b| / max|b|) for q and k, v_tol for v. */
void df_test_qkv_compare(const DfTestQkvCase *c, const DfTestQkvRun *a, const DfTestQkvRun *b, double tol,
                         double v_tol);

/* swiglu_packed on be over gate_up [rows, 2*inter] from seed (bf16-rounded),
 * fused, or as swiglu on copies of the gate and up halves; host [rows, inter]. */
float *df_test_swiglu_run(DfBackend *be, int rows, int inter, uint64_t seed, int fused);

/* The target decoder on m (all layers and the head loaded) with its fused
 * dense layers (fused 1, as it decodes by default) or the separate ops it
 * had before (fused 0): a prompt step of two sequences (one with 7 tokens,
 * one with 3) then two one-token steps; every step's logits for all new
 * rows, concatenated (heap; their count in *n). */
float *df_test_decode_logits(DfTargetModel *m, int fused, size_t *n);
int df_test_file_exists(const char *path);

/* --- runs of dflash train in a directory of their own (test_train, test_export, test_run_record) --- */

/* A drafter small enough that each run takes seconds on two cores. */
#define DF_TEST_TINY_TRAIN_OPTIONS                                                                            \
    "--draft-layers 1 --intermediate-size 256 --num-taps 2 --block-size 8 --num-anchors 12 --token-budget 1100 " \
    "--lr 3e-3 --warmup 0.1 --seed 7"
#define DF_TEST_TRAIN_SLICE 12 /* records of code-dev.jsonl trained on */
#define DF_TEST_RUN_OUT 65536

typedef struct DfTestRunDir {
    char *dir;                  /* a fresh directory (df_test_tmpdir) */
    char data[512];             /* dir/slice.jsonl: DF_TEST_TRAIN_SLICE records */
    char out[DF_TEST_RUN_OUT];  /* the output of the last df_test_dflash_in */
} DfTestRunDir;

/* cmocka setup and teardown bodies: *state becomes a DfTestRunDir under a directory named after tag. */
int df_test_run_dir_setup(void **state, const char *tag);
int df_test_run_dir_teardown(void **state);

/* Runs `dflash ARGS` in r->dir with OMP_NUM_THREADS=threads; its exit status, its output in r->out. */
int df_test_dflash_in(DfTestRunDir *r, int threads, const char *args);

/* The text of r->dir/rel (the caller frees it); the test fails when it cannot be read. */
char *df_test_read_in(const DfTestRunDir *r, const char *rel);

/* A tiny random drafter on the CPU backend (hidden 16, 2 heads of 8 with one
 * KV head, vocab 37, block 4, 2 taps), its parameters scaled up so that
 * gradients stand well above rounding, and the tokens of a two-sequence
 * batch (13 + 9 tokens, the loss mask from each sequence's position 3; 2
 * features of random [-2, 2] per token and tap). The caller adds anchors. */
enum { DF_TINY_H = 16, DF_TINY_V = 37, DF_TINY_B = 4, DF_TINY_TAPS = 2, DF_TINY_T = 22 };
typedef struct DfTestTinyDrafter {
    DfBackend *be;
    DfDrafter d;
    DfBuffer embed, head, features;
    int32_t ids[DF_TINY_T], seq_starts[3];
    uint8_t mask[DF_TINY_T];
} DfTestTinyDrafter;
void df_test_tiny_drafter_init(DfTestTinyDrafter *f, int layers);
void df_test_tiny_drafter_free(DfTestTinyDrafter *f);

#endif
