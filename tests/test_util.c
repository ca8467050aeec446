#define _GNU_SOURCE
#include "test_util.h"

#include "base/clock.h"
#include "base/numeric.h"
#include "formats/safetensors.h"
#include "target/target_decode.h"
#include "target/rope.h"
#ifdef DF_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

#include <cjson/cJSON.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

const char *df_test_path(const char *relative) {
    static char bufs[8][4096];
    static int next;
    char *b = bufs[next++ % 8];
    const char *root = getenv("DFLASH_SOURCE_DIR"); /* a tree moved elsewhere (e.g. the GPU machine) */
    snprintf(b, sizeof bufs[0], "%s/%s", root && *root ? root : DF_SOURCE_DIR, relative);
    return b;
}

char *df_test_tmpdir(const char *tag) {
    char tmpl[256];
    snprintf(tmpl, sizeof tmpl, "/tmp/dflash-test-%s-XXXXXX", tag);
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    return strdup(d);
}

void df_test_rmtree(const char *dir) {
    char cmd[4352];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
}

int df_test_run(const char *cmd, char *out, size_t cap) {
    char full[8192];
    snprintf(full, sizeof full, "(%s) 2>&1", cmd);
    FILE *p = popen(full, "r");
    assert_non_null(p);
    size_t n = 0;
    char tmp[4096];
    size_t got;
    while ((got = fread(tmp, 1, sizeof tmp, p)) > 0) {
        if (out && n + 1 < cap) {
            size_t take = got < cap - 1 - n ? got : cap - 1 - n;
            memcpy(out + n, tmp, take);
            n += take;
        }
    }
    if (out && cap) out[n] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

pid_t df_test_spawn(const char *cmd, const char *log, const DfTestSpawn *how) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | (how->append ? O_APPEND : O_TRUNC), 0644);
        if (fd < 0) _exit(120);
        dup2(fd, 1), dup2(fd, 2), close(fd);
        signal(SIGXFSZ, how->ignore_sigxfsz ? SIG_IGN : SIG_DFL);
        if (how->resource >= 0) {
            struct rlimit rl = {(rlim_t)how->limit, (rlim_t)how->limit};
            if (setrlimit(how->resource, &rl) != 0) _exit(121);
        }
        char full[8192];
        snprintf(full, sizeof full, "exec env %s", cmd);
        execl("/bin/sh", "sh", "-c", full, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static int exit_status(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st); }

int df_test_wait(pid_t pid, double timeout_s) {
    int st;
    if (timeout_s < 0) {
        while (waitpid(pid, &st, 0) < 0) assert_int_equal(errno, EINTR);
        return exit_status(st);
    }
    for (double until = df_now_seconds() + timeout_s;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return exit_status(st);
        assert_true(r == 0 || errno == EINTR);
        if (df_now_seconds() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return DF_TEST_TIMED_OUT;
        }
        df_sleep_seconds(0.05);
    }
}

int df_test_load_config_text(DfModelConfig *c, const char *json, DfError *err) {
    char *tmp = df_test_tmpdir("config");
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", tmp);
    df_test_write_file(path, json);
    int rc = df_model_config_load(c, tmp, err);
    df_test_rmtree(tmp);
    free(tmp);
    return rc;
}

void df_test_write_data_slice(const char *path, int n) {
    FILE *in = fopen(df_test_path("assets/data/code-dev.jsonl"), "r"), *out = fopen(path, "w");
    assert_non_null(in);
    assert_non_null(out);
    char *line = NULL;
    size_t cap = 0;
    for (int i = 0; i < n && getline(&line, &cap, in) > 0; i++) fputs(line, out);
    free(line);
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

void df_test_prepare_data_slice(const char *dir, int n, char *store, size_t cap) {
    char slice[512], cmd[4096], out[8192];
    snprintf(slice, sizeof slice, "%s/slice.jsonl", dir);
    df_test_write_data_slice(slice, n);
    snprintf(store, cap, "%s/data.store", dir);
    snprintf(cmd, sizeof cmd, "'%s' prepare --tokenizer '%s' --input '%s' --output '%s'", df_test_path("dflash"),
             df_test_path("assets/coder-tiny"), slice, store);
    int rc = df_test_run(cmd, out, sizeof out);
    if (rc != 0) fprintf(stderr, "%s\n", out);
    assert_int_equal(rc, 0);
}

int df_test_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

double df_rel_error(const float *a, const float *b, size_t n) {
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d != d) return INFINITY; /* NaN never passes */
        if (d > max_diff) max_diff = d;
        if (fabs((double)b[i]) > max_ref) max_ref = fabs((double)b[i]);
    }
    return max_ref > 0 ? max_diff / max_ref : max_diff;
}

void df_test_fill_random(float *x, size_t n, uint64_t seed, float scale) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = scale * (float)(((double)(s >> 11) / 9007199254740992.0) * 2.0 - 1.0);
    }
}

void df_test_write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

int df_test_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

char *df_test_read_file(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
    buf[n] = '\0';
    fclose(fp);
    if (len) *len = (size_t)n;
    return buf;
}

float *df_test_random_array(size_t n, uint64_t seed, float scale) {
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    df_test_fill_random(x, n, seed, scale);
    return x;
}

DfBuffer df_test_upload(DfBackend *be, const float *host, size_t n, DfBufKind kind) {
    DfError err;
    DfBuffer b;
    if (df_buffer_alloc(be, &b, kind, n, &err) || be->ops->upload_f32(be, b, host, &err)) fail_msg("%s", err.msg);
    return b;
}

DfBuffer df_test_upload_i32(DfBackend *be, const int32_t *host, size_t n) {
    DfError err;
    DfBuffer b;
    if (df_buffer_alloc(be, &b, DF_BUF_I32, n, &err) || be->ops->upload_i32(be, b, host, &err)) fail_msg("%s", err.msg);
    return b;
}

DfBuffer df_test_upload_poisoned(DfBackend *be, size_t n, DfBufKind kind) {
    float *nan = malloc(n * sizeof *nan);
    assert_non_null(nan);
    for (size_t i = 0; i < n; i++) nan[i] = NAN;
    DfBuffer b = df_test_upload(be, nan, n, kind);
    free(nan);
    return b;
}

float *df_test_download(DfBackend *be, DfBuffer b) {
    DfError err;
    if (be->ops->sync(be, &err)) fail_msg("sync: %s", err.msg);
    float *x = malloc(b.count * sizeof *x);
    assert_non_null(x);
    if (be->ops->download_f32(be, x, b, &err)) fail_msg("%s", err.msg);
    return x;
}

int df_test_load_greedy_fixtures(DfGreedyFixture *f, int max) {
    FILE *fp = fopen(df_test_path("tests/fixtures/generate/greedy.jsonl"), "r");
    assert_non_null(fp);
    char *line = NULL;
    size_t cap = 0;
    int n = 0;
    while (getline(&line, &cap, fp) > 0 && n < max) {
        cJSON *rec = cJSON_Parse(line);
        assert_non_null(rec);
        DfGreedyFixture *x = &f[n++];
        memset(x, 0, sizeof *x);
        snprintf(x->id, sizeof x->id, "%s", cJSON_GetObjectItem(rec, "id")->valuestring);
        const cJSON *v;
        cJSON_ArrayForEach(v, cJSON_GetObjectItem(rec, "prompt_ids")) df_i32vec_push(&x->prompt, (int32_t)v->valueint);
        cJSON_ArrayForEach(v, cJSON_GetObjectItem(rec, "output_ids")) df_i32vec_push(&x->output, (int32_t)v->valueint);
        x->max_new_tokens = cJSON_GetObjectItem(rec, "max_new_tokens")->valueint;
        cJSON_Delete(rec);
    }
    free(line);
    fclose(fp);
    assert_true(n >= 4);
    return n;
}

void df_test_free_greedy_fixtures(DfGreedyFixture *f, int n) {
    for (int i = 0; i < n; i++) df_i32vec_free(&f[i].prompt), df_i32vec_free(&f[i].output);
}

int df_test_cpu_backend_setup(void **state) {
    DfError err;
    DfTestBackendFixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->be = df_backend_cpu_create(&err);
    assert_non_null(f->be);
    *state = f;
    return 0;
}

int df_test_cpu_backend_teardown(void **state) {
    DfTestBackendFixture *f = *state;
    df_backend_destroy(f->be);
    free(f);
    return 0;
}

int df_test_backend_pair_setup(void **state) {
    DfError err = {{0}};
    DfTestBackendPair *f = calloc(1, sizeof *f);
    f->cpu = df_backend_cpu_create(&err);
    if (!f->cpu) fail_msg("CPU backend: %s", err.msg);
#ifdef DF_HAVE_CUDA
    if (df_cuda_device_count() > 0 && !(f->gpu = df_backend_cuda_create(0, &err)))
        fail_msg("a GPU is present but the CUDA backend failed: %s", err.msg);
#endif
    *state = f;
    return 0;
}

DfTestBackendPair *df_test_gpu_or_skip(void **state) {
    DfTestBackendPair *f = *state;
    if (!f->gpu) skip();
    return f;
}

DfTestAdamWState df_test_adamw_state_new(DfBackend *be, const float *init, size_t n) {
    DfTestAdamWState s;
    float *zeros = calloc(n, sizeof *zeros);
    assert_non_null(zeros);
    s.master = df_test_upload(be, init, n, DF_BUF_F32);
    s.params = df_test_upload(be, init, n, DF_BUF_ACT);
    s.m = df_test_upload(be, zeros, n, DF_BUF_F32);
    s.v = df_test_upload(be, zeros, n, DF_BUF_F32);
    s.grads = df_test_upload(be, zeros, n, DF_BUF_F32);
    free(zeros);
    return s;
}

void df_test_adamw_state_free(DfBackend *be, DfTestAdamWState *s) {
    df_buffer_free(be, &s->master), df_buffer_free(be, &s->m), df_buffer_free(be, &s->v);
    df_buffer_free(be, &s->grads), df_buffer_free(be, &s->params);
}

int df_test_backend_pair_teardown(void **state) {
    DfTestBackendPair *f = *state;
    df_backend_destroy(f->cpu);
    df_backend_destroy(f->gpu);
    free(f);
    return 0;
}

float *df_test_random_bf16(size_t n, uint64_t seed, float scale) {
    float *x = df_test_random_array(n, seed, scale);
    for (size_t i = 0; i < n; i++) x[i] = df_bf16_to_f32(df_f32_to_bf16(x[i]));
    return x;
}

int32_t *df_test_copy_i32(const DfSafetensors *st, const char *name, int *count) {
    const DfTensorInfo *t = df_safetensors_find(st, name);
    assert_non_null(t);
    assert_int_equal(t->dtype, DF_DTYPE_I32);
    assert_int_equal(t->ndim, 1);
    *count = (int)t->shape[0];
    int32_t *out = malloc(t->nbytes);
    memcpy(out, t->data, t->nbytes);
    return out;
}

void df_test_target_reference_load(DfTargetReference *r, const char *path, const DfModelConfig *cfg) {
    DfSafetensors st;
    DfError err;
    if (df_safetensors_open(&st, df_test_path(path), &err)) fail_msg("%s", err.msg);
    int n_starts;
    r->ids = df_test_copy_i32(&st, "input_ids", &r->n_tokens);
    r->starts = df_test_copy_i32(&st, "seq_starts", &n_starts);
    r->n_seqs = n_starts - 1;
    assert_int_equal(r->starts[r->n_seqs], r->n_tokens);
    r->n_layers = cfg->num_layers, r->hidden = cfg->hidden_size, r->vocab = cfg->vocab_size;
    int64_t lo[3] = {r->n_layers, r->n_tokens, r->hidden}, lg[2] = {r->n_tokens, r->vocab};
    r->layer_out = df_safetensors_load_f32(&st, "layer_out", 3, lo, &err);
    if (!r->layer_out) fail_msg("%s", err.msg);
    r->logits = df_safetensors_load_f32(&st, "logits", 2, lg, &err);
    if (!r->logits) fail_msg("%s", err.msg);
    df_safetensors_close(&st);
}

void df_test_target_reference_free(DfTargetReference *r) {
    free(r->ids), free(r->starts), free(r->layer_out), free(r->logits);
}

double df_test_tap_error(const float *features, int n_taps, int j, const DfTargetReference *r, int layer) {
    size_t th = (size_t)r->n_tokens * r->hidden;
    float *tap = malloc(th * sizeof *tap);
    for (int t = 0; t < r->n_tokens; t++)
        memcpy(tap + (size_t)t * r->hidden, features + ((size_t)t * n_taps + j) * r->hidden, r->hidden * sizeof *tap);
    double e = df_rel_error(tap, r->layer_out + (size_t)layer * th, th);
    free(tap);
    return e;
}

void df_test_load_cpu_target(DfTargetModel *m, DfBackend **be, const char *dir, int n_layers, int with_head) {
    DfError err;
    *be = df_backend_cpu_create(&err);
    assert_non_null(*be);
    if (df_target_load(m, *be, df_test_path(dir), n_layers, with_head, &err)) fail_msg("%s", err.msg);
}

/* --- a dense layer's fused ops (qkv_rope_cache, swiglu_packed) ----------- */

static int qkv_case_rows(const DfTestQkvCase *c, int32_t *starts) {
    starts[0] = 0;
    for (int i = 0; i < c->n_seqs; i++) starts[i + 1] = starts[i] + c->n_new[i];
    return starts[c->n_seqs];
}

/* The separate ops on a copy of qkv: copy2d out q, k, v, then norm, rope, cache writes. */
static void qkv_unfused(DfBackend *be, const DfQkvRopeCacheArgs *a) {
    int rows = a->batch->n_rows, nh = a->heads, nkv = a->kv_heads, hd = a->head_dim, width = (nh + 2 * nkv) * hd;
    DfBuffer k, v;
    DfError err;
    if (df_buffer_alloc(be, &k, DF_BUF_ACT, (size_t)rows * nkv * hd, &err) ||
        df_buffer_alloc(be, &v, DF_BUF_ACT, (size_t)rows * nkv * hd, &err))
        fail_msg("%s", err.msg);
    df_op_copy2d(be, a->q_out, nh * hd, a->qkv, width, rows, nh * hd);
    df_op_copy2d(be, k, nkv * hd, df_buffer_view(a->qkv, (size_t)nh * hd, a->qkv.count - (size_t)nh * hd), width,
                 rows, nkv * hd);
    df_op_copy2d(be, v, nkv * hd,
                 df_buffer_view(a->qkv, (size_t)(nh + nkv) * hd, a->qkv.count - (size_t)(nh + nkv) * hd), width, rows,
                 nkv * hd);
    if (a->q_norm.ptr) {
        df_op_rmsnorm(be, a->q_out, a->q_out, a->q_norm, rows * nh, hd, a->eps);
        df_op_rmsnorm(be, k, k, a->k_norm, rows * nkv, hd, a->eps);
    }
    df_op_rope(be, a->q_out, a->batch->positions, a->cos_table, a->sin_table, rows, nh, hd);
    df_op_rope(be, k, a->batch->positions, a->cos_table, a->sin_table, rows, nkv, hd);
    df_op_kv_cache_write(be, a->k_cache, k, a->batch, nkv * hd);
    df_op_kv_cache_write(be, a->v_cache, v, a->batch, nkv * hd);
    if (be->ops->sync(be, &err)) fail_msg("%s", err.msg);
    df_buffer_free(be, &k);
    df_buffer_free(be, &v);
}

/* Rope tables of a Qwen3-like theta over the case's capacity. */
static void qkv_rope_tables(DfBackend *be, const DfTestQkvCase *c, DfBuffer *cs, DfBuffer *sn) {
    size_t n = (size_t)c->capacity * (c->head_dim / 2);
    float *hc = malloc(n * sizeof *hc), *hs = malloc(n * sizeof *hs);
    DfRopeConfig rope = {.theta = 1000000.0, .type = DF_ROPE_DEFAULT};
    df_rope_tables(&rope, c->head_dim, c->capacity, hc, hs);
    *cs = df_test_upload(be, hc, n, DF_BUF_F32);
    *sn = df_test_upload(be, hs, n, DF_BUF_F32);
    free(hc), free(hs);
}

static int reversed_pages(DfTestKvLayout l) {
    return l.n_slots * df_kv_pages_for(l.capacity);
}

size_t df_test_kv_row(DfTestKvLayout l, int slot, int r) {
    if (!l.paged) return (size_t)slot * l.capacity + (size_t)r;
    int page = reversed_pages(l) - 1 - (slot * df_kv_pages_for(l.capacity) + r / DF_KV_PAGE_ROWS);
    return (size_t)page * DF_KV_PAGE_ROWS + (size_t)(r % DF_KV_PAGE_ROWS);
}

size_t df_test_kv_rows(DfTestKvLayout l) {
    return l.paged ? (size_t)reversed_pages(l) * DF_KV_PAGE_ROWS : (size_t)l.n_slots * l.capacity;
}

int df_test_kv_batch_set(DfKvBatch *kb, DfBackend *be, DfTestKvLayout l, int n_seqs, const int32_t *slots,
                         const int32_t *cache_lens, const int32_t *row_starts, DfError *err) {
    int n_pages = reversed_pages(l);
    int32_t *table = malloc((size_t)n_pages * sizeof *table);
    assert_non_null(table);
    for (int i = 0; i < n_pages; i++) table[i] = n_pages - 1 - i;
    DfKvPageTable pages = {table, n_pages};
    int rc = df_kv_batch_set_paged(kb, be, n_seqs, slots, cache_lens, row_starts, l.n_slots, l.capacity,
                                   l.paged ? &pages : NULL, err);
    free(table);
    return rc;
}

static DfTestKvLayout qkv_layout(const DfTestQkvCase *c) {
    return (DfTestKvLayout){c->n_slots, c->capacity, c->paged};
}

DfTestQkvRun df_test_qkv_run(DfBackend *be, const DfTestQkvCase *c, uint64_t seed, int fused) {
    int32_t starts[257];
    assert_true(c->n_seqs <= 256);
    int rows = qkv_case_rows(c, starts), hd = c->head_dim, kvd = c->kv_heads * hd;
    size_t width = (size_t)(c->heads + 2 * c->kv_heads) * hd, cache_n = df_test_kv_rows(qkv_layout(c)) * kvd;
    DfKvBatch kb = {0};
    DfError err;
    if (df_test_kv_batch_set(&kb, be, qkv_layout(c), c->n_seqs, c->slots, c->cache_lens, starts, &err))
        fail_msg("%s", err.msg);
    float *qkv = df_test_random_bf16((size_t)rows * width, seed, 2.0f);
    float *qn = df_test_random_bf16((size_t)hd, seed + 1, 0.5f), *kn = df_test_random_bf16((size_t)hd, seed + 2, 0.5f);
    for (int i = 0; i < hd; i++) qn[i] = df_bf16_to_f32(df_f32_to_bf16(1.0f + qn[i])), kn[i] = df_bf16_to_f32(df_f32_to_bf16(1.0f + kn[i]));
    DfQkvRopeCacheArgs a = {
        .batch = &kb,
        .qkv = df_test_upload(be, qkv, (size_t)rows * width, DF_BUF_ACT),
        .q_norm = c->qk_norm ? df_test_upload(be, qn, (size_t)hd, DF_BUF_ACT) : (DfBuffer){0},
        .k_norm = c->qk_norm ? df_test_upload(be, kn, (size_t)hd, DF_BUF_ACT) : (DfBuffer){0},
        .eps = 1e-6f,
        .q_out = df_test_upload_poisoned(be, (size_t)rows * c->heads * hd, DF_BUF_ACT),
        .k_cache = df_test_upload_poisoned(be, cache_n, DF_BUF_ACT),
        .v_cache = df_test_upload_poisoned(be, cache_n, DF_BUF_ACT),
        .heads = c->heads,
        .kv_heads = c->kv_heads,
        .head_dim = hd,
    };
    qkv_rope_tables(be, c, &a.cos_table, &a.sin_table);
    if (fused) df_op_qkv_rope_cache(be, &a);
    else qkv_unfused(be, &a);
    DfTestQkvRun r = {df_test_download(be, a.q_out), df_test_download(be, a.k_cache), df_test_download(be, a.v_cache),
                      a.q_out.count, cache_n};
    DfBuffer *bufs[] = {&a.qkv, &a.q_norm, &a.k_norm, &a.q_out, &a.k_cache, &a.v_cache, &a.cos_table, &a.sin_table};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) df_buffer_free(be, bufs[i]);
    df_kv_batch_free(&kb, be);
    free(qkv), free(qn), free(kn);
    return r;
}

void df_test_qkv_run_free(DfTestQkvRun *r) {
    free(r->q), free(r->k_cache), free(r->v_cache);
    memset(r, 0, sizeof *r);
}

/* Whether cache row `row` is one the case writes. */
static int qkv_row_written(const DfTestQkvCase *c, size_t row) {
    for (int i = 0; i < c->n_seqs; i++)
        for (int j = 0; j < c->n_new[i]; j++)
            if (df_test_kv_row(qkv_layout(c), c->slots[i], c->cache_lens[i] + j) == row) return 1;
    return 0;
}

/* The written rows of a cache packed (asserting they are written and the
 * others untouched); heap, their count in *n. */
static float *qkv_written_rows(const DfTestQkvCase *c, const float *cache, const char *what, size_t *n) {
    size_t kvd = (size_t)c->kv_heads * c->head_dim, rows = df_test_kv_rows(qkv_layout(c));
    float *out = malloc(rows * kvd * sizeof *out);
    *n = 0;
    for (size_t r = 0; r < rows; r++) {
        int written = qkv_row_written(c, r);
        for (size_t j = 0; j < kvd; j++) {
            float x = cache[r * kvd + j];
            if (written ? isnan(x) : !isnan(x))
                fail_msg("%s: %s row %zu value %zu is %g (%s)", c->name, what, r, j, x,
                         written ? "never written" : "written outside the new rows");
            if (written) out[(*n)++] = x;
        }
    }
    return out;
}

static void qkv_check(const DfTestQkvCase *c, const char *what, const float *a, const float *b, size_t n, double tol) {
    double e = df_rel_error(a, b, n);
    if (!(e <= tol)) fail_msg("%s: %s relative error %g over %zu values (tolerance %g)", c->name, what, e, n, tol);
}

void df_test_qkv_compare(const DfTestQkvCase *c, const DfTestQkvRun *a, const DfTestQkvRun *b, double tol,
                         double v_tol) {
    for (size_t i = 0; i < a->q_count; i++)
        if (isnan(a->q[i]) || isnan(b->q[i])) fail_msg("%s: q value %zu never written", c->name, i);
    qkv_check(c, "q", a->q, b->q, a->q_count, tol);
    const char *names[2] = {"k cache", "v cache"};
    const float *ca[2] = {a->k_cache, a->v_cache}, *cb[2] = {b->k_cache, b->v_cache};
    for (int j = 0; j < 2; j++) {
        size_t na, nb;
        float *wa = qkv_written_rows(c, ca[j], names[j], &na), *wb = qkv_written_rows(c, cb[j], names[j], &nb);
        assert_int_equal(na, nb);
        qkv_check(c, names[j], wa, wb, na, j ? v_tol : tol);
        free(wa), free(wb);
    }
}

float *df_test_swiglu_run(DfBackend *be, int rows, int inter, uint64_t seed, int fused) {
    size_t n = (size_t)rows * inter;
    float *host = df_test_random_bf16(2 * n, seed, 4.0f);
    DfBuffer gate_up = df_test_upload(be, host, 2 * n, DF_BUF_ACT), out = df_test_upload_poisoned(be, n, DF_BUF_ACT);
    if (fused) {
        df_op_swiglu_packed(be, out, gate_up, rows, inter);
    } else {
        DfBuffer up = df_test_upload_poisoned(be, n, DF_BUF_ACT);
        df_op_copy2d(be, out, inter, gate_up, 2 * inter, rows, inter);
        df_op_copy2d(be, up, inter, df_buffer_view(gate_up, (size_t)inter, 2 * n - (size_t)inter), 2 * inter, rows,
                     inter);
        df_op_swiglu(be, out, out, up);
        float *sync_up = df_test_download(be, up); /* syncs before up goes */
        free(sync_up);
        df_buffer_free(be, &up);
    }
    float *r = df_test_download(be, out);
    df_buffer_free(be, &gate_up);
    df_buffer_free(be, &out);
    free(host);
    return r;
}

float *df_test_decode_logits(DfTargetModel *m, int fused, size_t *n) {
    DfTargetDecoder d;
    DfError err;
    if (df_target_decoder_init(&d, m, 3, 32, NULL, 0, &err)) fail_msg("%s", err.msg);
    assert_true(d.fused); /* a dense model loads with fused weights */
    d.fused = fused;      /* before the first step: the workspace follows it */
    int vocab = m->cfg.vocab_size;
    const int32_t ids[3][10] = {{11, 523, 97, 4001, 12, 8, 77, 5, 9, 2}, {300, 41, 1999, 6, 15}, {0}};
    const int32_t counts[3] = {7, 1, 1}, counts_b[3] = {3, 1, 1}, slots[2] = {2, 0};
    size_t total = (size_t)(7 + 3 + 2 + 2) * vocab, at = 0;
    float *logits = malloc(total * sizeof *logits);
    for (int s = 0, off_a = 0, off_b = 0; s < 3; off_a += counts[s], off_b += counts_b[s], s++) {
        int32_t step_ids[16], starts[3] = {0, counts[s], counts[s] + counts_b[s]};
        memcpy(step_ids, ids[0] + off_a, (size_t)counts[s] * sizeof *step_ids);
        memcpy(step_ids + counts[s], ids[1] + off_b, (size_t)counts_b[s] * sizeof *step_ids);
        DfDecodeStep step = {.n_seqs = 2, .slots = slots, .ids = step_ids, .row_starts = starts,
                             .logits_rows = DF_LOGITS_ALL, .logits = logits + at};
        if (df_target_decode(&d, &step, &err)) fail_msg("%s", err.msg);
        at += (size_t)starts[2] * vocab;
    }
    assert_true(at == total);
    df_target_decoder_free(&d);
    *n = total;
    return logits;
}

int df_test_run_dir_setup(void **state, const char *tag) {
    DfTestRunDir *r = calloc(1, sizeof *r);
    r->dir = df_test_tmpdir(tag);
    snprintf(r->data, sizeof r->data, "%s/slice.jsonl", r->dir);
    df_test_write_data_slice(r->data, DF_TEST_TRAIN_SLICE);
    *state = r;
    return 0;
}

int df_test_run_dir_teardown(void **state) {
    DfTestRunDir *r = *state;
    df_test_rmtree(r->dir);
    free(r->dir);
    free(r);
    return 0;
}

char *df_test_read_in(const DfTestRunDir *r, const char *rel) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", r->dir, rel);
    char *text = df_test_read_file(path, NULL);
    if (!text) fail_msg("cannot read %s", path);
    return text;
}

int df_test_dflash_in(DfTestRunDir *r, int threads, const char *args) {
    size_t cap = strlen(r->dir) + strlen(args) + 4096;
    char *cmd = malloc(cap);
    snprintf(cmd, cap, "cd '%s' && OMP_NUM_THREADS=%d '%s' %s", r->dir, threads, df_test_path("dflash"), args);
    int rc = df_test_run(cmd, r->out, sizeof r->out);
    free(cmd);
    return rc;
}

static DfBuffer upload_random_act(DfBackend *be, size_t n, uint64_t seed, float scale) {
    DfError err;
    DfBuffer b;
    float *host = df_test_random_array(n, seed, scale);
    if (df_buffer_alloc(be, &b, DF_BUF_ACT, n, &err) || be->ops->upload_f32(be, b, host, &err)) fail_msg("%s", err.msg);
    free(host);
    return b;
}

void df_test_tiny_drafter_init(DfTestTinyDrafter *f, int layers) {
    enum { H = DF_TINY_H, V = DF_TINY_V, T = DF_TINY_T };
    DfError err;
    memset(f, 0, sizeof *f);
    f->be = df_backend_cpu_create(&err);
    if (!f->be) fail_msg("CPU backend: %s", err.msg);
    DfDrafterConfig c = {.hidden_size = H, .num_heads = 2, .num_kv_heads = 1, .head_dim = 8, .intermediate_size = 24,
                         .num_layers = layers, .vocab_size = V, .block_size = DF_TINY_B, .mask_token_id = V - 1,
                         .num_target_layers = 4, .n_taps = DF_TINY_TAPS, .target_layer_ids = {1, 2},
                         .rms_norm_eps = 1e-6, .rope = {.theta = 10000.0, .type = DF_ROPE_DEFAULT},
                         .max_position_embeddings = 64, .gamma = 4.0};
    f->embed = upload_random_act(f->be, (size_t)V * H, 1, 1.0f);
    f->head = upload_random_act(f->be, (size_t)V * H, 2, 1.0f);
    f->features = upload_random_act(f->be, (size_t)T * DF_TINY_TAPS * H, 3, 2.0f);
    if (df_drafter_create(&f->d, f->be, &c, f->embed, f->head, &err)) fail_msg("%s", err.msg);
    float *params = malloc(f->d.layout.total * sizeof *params);
    df_drafter_init_params(&f->d.layout, params, 7);
    for (size_t i = 0; i < f->d.layout.total; i++) params[i] *= 10; /* 0.2 std: gradients well above rounding */
    if (df_drafter_set_params(&f->d, params, &err)) fail_msg("%s", err.msg);
    free(params);
    f->seq_starts[0] = 0, f->seq_starts[1] = 13, f->seq_starts[2] = T;
    for (int i = 0; i < T; i++) {
        f->ids[i] = (i * 17 + 5) % (V - 1);
        f->mask[i] = (i % 13) >= 3;
    }
}

void df_test_tiny_drafter_free(DfTestTinyDrafter *f) {
    df_drafter_free(&f->d);
    df_buffer_free(f->be, &f->embed), df_buffer_free(f->be, &f->head), df_buffer_free(f->be, &f->features);
    df_backend_destroy(f->be);
}

cJSON *df_test_load_json(const char *rel) {
    char *text = df_test_read_file(df_test_path(rel), NULL);
    if (!text) fail_msg("%s: cannot be read", rel);
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) fail_msg("%s: invalid JSON", rel);
    return j;
}
