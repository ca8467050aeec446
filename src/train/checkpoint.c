/* Resumable training checkpoints: one safetensors file per checkpoint,
 * written atomically, verified by a checksum before anything in it is used,
 * rotated only after the new one is durable. */
#include "train/checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/checksum.h"
#include "base/hash64.h"
#include "formats/safetensors.h"
#include "model/drafter_io.h"

#define CKPT_FORMAT "dflash-checkpoint"
#define CKPT_VERSION "2"
#define CKPT_VERSION_LEGACY "1" /* df_hash64 folds; still read */
#define CKPT_PREFIX "step-"
#define CKPT_SUFFIX ".safetensors"

/* --------------------------------------------------------------- checksum */

/* The checksum over a sequence of byte ranges. Version 2: XXH3-64 of the
 * ranges concatenated. Version 1: each range's df_hash64_chunked folded in
 * order with df_hash64_mix from a fixed start value. */
typedef struct CkptSum {
    int legacy;
    DfChecksum *xxh3;
    uint64_t folded;
} CkptSum;

#define LEGACY_CHECKSUM_START 0x165667B19E3779F9ull

static void sum_begin(CkptSum *c, int legacy) {
    c->legacy = legacy;
    c->xxh3 = legacy ? NULL : df_checksum_new();
    c->folded = LEGACY_CHECKSUM_START;
}

static void sum_add(CkptSum *c, const void *data, size_t n) {
    if (c->legacy) c->folded = df_hash64_mix(c->folded ^ df_hash64_chunked(data, n));
    else df_checksum_update(c->xxh3, data, n);
}

static uint64_t sum_end(CkptSum *c) {
    if (c->legacy) return c->folded;
    uint64_t h = df_checksum_final(c->xxh3);
    df_checksum_free(c->xxh3);
    return h;
}

/* The metadata strings the checksum covers, in order. */
static const char *const HASHED_METADATA[] = {"drafter_config", "loss_gamma", "options"};
#define N_HASHED_METADATA 3

/* ------------------------------------------------------------ file names */

static char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = df_xmalloc(n, "path");
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static char *checkpoint_path(const char *dir, int64_t step) {
    char name[64];
    snprintf(name, sizeof name, CKPT_PREFIX "%08" PRId64 CKPT_SUFFIX, step);
    return path_join(dir, name);
}

/* The step of "step-<digits>.safetensors", else -1 (temporaries such as
 * "step-00000010.safetensors.tmp.123" and anything else are not checkpoints). */
static int64_t checkpoint_step(const char *name) {
    size_t np = strlen(CKPT_PREFIX), ns = strlen(CKPT_SUFFIX), n = strlen(name);
    if (n <= np + ns || strncmp(name, CKPT_PREFIX, np) != 0 || strcmp(name + n - ns, CKPT_SUFFIX) != 0) return -1;
    size_t digits = n - np - ns;
    if (digits > 18) return -1;
    int64_t step = 0;
    for (size_t i = np; i < np + digits; i++) {
        if (name[i] < '0' || name[i] > '9') return -1;
        step = step * 10 + (name[i] - '0');
    }
    return step;
}

typedef struct CkptEntry {
    int64_t step;
    char *path;
} CkptEntry;

static int compare_entries(const void *a, const void *b) {
    int64_t x = ((const CkptEntry *)a)->step, y = ((const CkptEntry *)b)->step;
    return x < y ? -1 : x > y;
}

static void free_entries(CkptEntry *e, int n) {
    for (int i = 0; i < n; i++) free(e[i].path);
    free(e);
}

/* The checkpoints in dir, by ascending step; none when dir does not exist. */
static int list_checkpoints(const char *dir, CkptEntry **out, int *n_out, DfError *err) {
    *out = NULL;
    *n_out = 0;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : df_fail_errno(err, "%s: cannot list the checkpoints", dir);
    int n = 0, cap = 0;
    CkptEntry *e = NULL;
    for (struct dirent *de; (de = readdir(d));) {
        int64_t step = checkpoint_step(de->d_name);
        if (step < 0) continue;
        char *path = path_join(dir, de->d_name);
        struct stat sb;
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            free(path);
            continue;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            e = df_xrealloc(e, (size_t)cap * sizeof *e, "checkpoint list");
        }
        e[n++] = (CkptEntry){step, path};
    }
    closedir(d);
    if (n > 1) qsort(e, (size_t)n, sizeof *e, compare_entries);
    *out = e;
    *n_out = n;
    return 0;
}

/* mkdir -p; the new directory's entry made durable in its parent. */
static int make_dirs(const char *dir, DfError *err) {
    if (!dir[0]) return df_fail(err, "empty checkpoint directory name");
    struct stat sb;
    if (stat(dir, &sb) == 0) return S_ISDIR(sb.st_mode) ? 0 : df_fail(err, "%s: exists and is not a directory", dir);
    char *p = df_xstrdup(dir);
    int rc = 0;
    for (char *s = p + 1; rc == 0; s++) {
        if (*s != '/' && *s != '\0') continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) rc = df_fail_errno(err, "%s: cannot create directory", p);
        *s = c;
        if (c == '\0') break;
    }
    free(p);
    return rc == 0 ? df_fsync_parent_dir(dir, err) : -1;
}

/* ------------------------------------------------------------------ save */

typedef struct ProgressField {
    const char *name;
    int64_t value;
} ProgressField;

#define N_PROGRESS 6

static void progress_fields(const DfTrainProgress *p, ProgressField *f) {
    f[0] = (ProgressField){"progress.step", p->step};
    f[1] = (ProgressField){"progress.total_steps", p->total_steps};
    f[2] = (ProgressField){"progress.epoch", p->epoch};
    f[3] = (ProgressField){"progress.batch_in_epoch", p->batch_in_epoch};
    f[4] = (ProgressField){"progress.seed", (int64_t)p->seed}; /* the bit pattern */
    f[5] = (ProgressField){"progress.tokens_seen", p->tokens_seen};
}

static int compare_out_ptr(const void *a, const void *b) {
    return strcmp((*(const DfTensorOut *const *)a)->name, (*(const DfTensorOut *const *)b)->name);
}

static size_t out_nbytes(const DfTensorOut *t) {
    size_t n = df_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

static uint64_t checksum_of_outputs(const DfTensorOut *t, int n, const char *const *meta_values) {
    const DfTensorOut **order = df_xcalloc((size_t)n, sizeof *order, "checksum order");
    for (int i = 0; i < n; i++) order[i] = &t[i];
    qsort(order, (size_t)n, sizeof *order, compare_out_ptr);
    CkptSum c;
    sum_begin(&c, 0);
    for (int i = 0; i < n; i++) {
        sum_add(&c, order[i]->name, strlen(order[i]->name));
        sum_add(&c, order[i]->data, out_nbytes(order[i]));
    }
    for (int i = 0; i < N_HASHED_METADATA; i++) sum_add(&c, meta_values[i], strlen(meta_values[i]));
    free(order);
    return sum_end(&c);
}

static DfTensorOut vector_out(const char *name, DfDtype dtype, int64_t len, const void *data) {
    DfTensorOut t = {.name = name, .dtype = dtype, .ndim = 1, .data = data};
    t.shape[0] = len;
    return t;
}

static char *build_metadata(const char *const *meta_values, uint64_t checksum) {
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, checksum);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "format", CKPT_FORMAT);
    cJSON_AddStringToObject(m, "version", CKPT_VERSION);
    for (int i = 0; i < N_HASHED_METADATA; i++) cJSON_AddStringToObject(m, HASHED_METADATA[i], meta_values[i]);
    cJSON_AddStringToObject(m, "checksum", hex);
    char *text = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    return text;
}

/* Removes the oldest checkpoints beyond keep_last, never the one at
 * keep_step; the one at keep_also (-1: none) is kept besides the keep_last. */
static int rotate(const char *dir, int keep_last, int64_t keep_step, int64_t keep_also, DfError *err) {
    if (keep_last <= 0) return 0;
    CkptEntry *e;
    int n;
    if (list_checkpoints(dir, &e, &n, err) != 0) return -1;
    int excess = n - keep_last, removed = 0, rc = 0;
    for (int i = 0; i < n; i++) excess -= e[i].step == keep_also && keep_also != keep_step;
    for (int i = 0; i < n && removed < excess; i++) {
        if (e[i].step == keep_step || e[i].step == keep_also) continue;
        if (unlink(e[i].path) != 0 && errno != ENOENT) {
            rc = df_fail_errno(err, "%s: cannot remove an old checkpoint", e[i].path);
            break;
        }
        removed++;
    }
    if (rc == 0 && removed > 0) rc = df_fsync_parent_dir(e[0].path, err);
    free_entries(e, n);
    return rc;
}

int df_checkpoint_save(const char *checkpoints_dir, const DfDrafterConfig *cfg, const DfDrafterLayout *layout,
                       const float *params, const DfAdamW *opt, const DfTrainProgress *progress,
                       const char *options_json, int keep_last, DfError *err) {
    return df_checkpoint_save_keeping(checkpoints_dir, cfg, layout, params, opt, progress, options_json, keep_last, -1,
                                      err);
}

int df_checkpoint_save_keeping(const char *checkpoints_dir, const DfDrafterConfig *cfg, const DfDrafterLayout *layout,
                               const float *params, const DfAdamW *opt, const DfTrainProgress *progress,
                               const char *options_json, int keep_last, int64_t keep_also, DfError *err) {
    if (opt->total != layout->total)
        return df_fail(err, "%s: optimizer state has %zu values, the parameters %zu", checkpoints_dir, opt->total,
                       layout->total);
    if (progress->step < 0) return df_fail(err, "%s: negative step %" PRId64, checkpoints_dir, progress->step);
    if (make_dirs(checkpoints_dir, err) != 0) return -1;

    ProgressField pf[N_PROGRESS];
    progress_fields(progress, pf);
    DfTensorOut t[4 + N_PROGRESS];
    int64_t total = (int64_t)layout->total;
    t[0] = vector_out("params", DF_DTYPE_F32, total, params);
    t[1] = vector_out("adam.exp_avg", DF_DTYPE_F32, total, opt->exp_avg);
    t[2] = vector_out("adam.exp_avg_sq", DF_DTYPE_F32, total, opt->exp_avg_sq);
    t[3] = vector_out("adam.step", DF_DTYPE_I64, 1, &opt->step);
    for (int i = 0; i < N_PROGRESS; i++) t[4 + i] = vector_out(pf[i].name, DF_DTYPE_I64, 1, &pf[i].value);

    char *config = df_drafter_config_json(cfg), gamma[40];
    snprintf(gamma, sizeof gamma, "%.17g", cfg->gamma);
    const char *meta_values[N_HASHED_METADATA] = {config ? config : "", gamma, options_json ? options_json : "{}"};
    char *metadata = build_metadata(meta_values, checksum_of_outputs(t, 4 + N_PROGRESS, meta_values));
    char *path = checkpoint_path(checkpoints_dir, progress->step);
    int rc = config && metadata ? 0 : df_fail(err, "%s: cannot build the metadata (out of memory)", path);
    /* Atomic: temporary name, fsync, rename, fsync of the directory. */
    if (rc == 0) rc = df_safetensors_write(path, t, 4 + N_PROGRESS, metadata, err);
    if (rc == 0) rc = rotate(checkpoints_dir, keep_last, progress->step, keep_also, err);
    free(path);
    cJSON_free(metadata);
    free(config);
    return rc;
}

/* ---------------------------------------------------------------- latest */

char *df_checkpoint_latest(const char *checkpoints_dir, DfError *err) {
    df_error_clear(err);
    CkptEntry *e;
    int n;
    if (list_checkpoints(checkpoints_dir, &e, &n, err) != 0) return NULL;
    char *path = NULL;
    if (n > 0) {
        path = e[n - 1].path;
        e[n - 1].path = NULL;
    }
    free_entries(e, n);
    return path;
}

/* ------------------------------------------------------------------ load */

/* What a load failure means for a caller walking back to older checkpoints. */
typedef enum LoadFault {
    FAULT_NONE,
    FAULT_CORRUPT,  /* unreadable, malformed or checksum mismatch: try an older one */
    FAULT_MISMATCH, /* a sound checkpoint of a different drafter: stop */
} LoadFault;

/* The "__metadata__" object of a file that df_safetensors_open has already
 * validated (header length within the file). */
static cJSON *read_metadata(const DfMappedFile *f, DfError *err) {
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | f->data[i];
    cJSON *root = cJSON_ParseWithLength((const char *)f->data + 8, (size_t)hlen);
    cJSON *meta = root ? cJSON_DetachItemFromObjectCaseSensitive(root, "__metadata__") : NULL;
    cJSON_Delete(root);
    if (!cJSON_IsObject(meta)) {
        cJSON_Delete(meta);
        df_fail(err, "%s: no \"__metadata__\" object: not a dflash checkpoint", f->path);
        return NULL;
    }
    return meta;
}

static const char *meta_string(const cJSON *meta, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(meta, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A tensor of the expected dtype and rank 1; len: its length. */
static const DfTensorInfo *find_vector(const DfSafetensors *st, const char *path, const char *name, DfDtype dtype,
                                       DfError *err) {
    const DfTensorInfo *t = df_safetensors_find(st, name);
    if (!t) df_fail(err, "%s: no tensor '%s'", path, name);
    else if (t->dtype != dtype || t->ndim != 1)
        df_fail(err, "%s: tensor '%s' is %s with %d dims, expected a %s vector", path, name, df_dtype_name(t->dtype),
                t->ndim, df_dtype_name(dtype));
    else return t;
    return NULL;
}

/* The structure, metadata presence and checksum: everything that says the
 * file is what df_checkpoint_save wrote, before any of it is interpreted. */
static int verify_file(const DfSafetensors *st, const char *path, const cJSON *meta, DfError *err) {
    const char *format = meta_string(meta, "format"), *version = meta_string(meta, "version");
    if (!format || strcmp(format, CKPT_FORMAT) != 0)
        return df_fail(err, "%s: metadata \"format\" is not \"%s\": not a dflash checkpoint", path, CKPT_FORMAT);
    if (!version || (strcmp(version, CKPT_VERSION) != 0 && strcmp(version, CKPT_VERSION_LEGACY) != 0))
        return df_fail(err, "%s: checkpoint version '%s' is not supported (this build reads versions %s and %s)", path,
                       version ? version : "(none)", CKPT_VERSION_LEGACY, CKPT_VERSION);
    const char *stored = meta_string(meta, "checksum");
    const char *values[N_HASHED_METADATA];
    for (int i = 0; i < N_HASHED_METADATA; i++)
        if (!(values[i] = meta_string(meta, HASHED_METADATA[i])))
            return df_fail(err, "%s: metadata \"%s\" is missing", path, HASHED_METADATA[i]);
    if (!stored) return df_fail(err, "%s: metadata \"checksum\" is missing", path);
    CkptSum c; /* st->tensors is sorted by name, the order the checksum uses */
    sum_begin(&c, strcmp(version, CKPT_VERSION_LEGACY) == 0);
    for (int i = 0; i < st->n_tensors; i++) {
        sum_add(&c, st->tensors[i].name, strlen(st->tensors[i].name));
        sum_add(&c, st->tensors[i].data, st->tensors[i].nbytes);
    }
    for (int i = 0; i < N_HASHED_METADATA; i++) sum_add(&c, values[i], strlen(values[i]));
    uint64_t h = sum_end(&c);
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, h);
    if (strcmp(hex, stored) != 0)
        return df_fail(err, "%s: checksum mismatch (stored %s, computed %s): the checkpoint is corrupt", path, stored,
                       hex);
    return 0;
}

/* The train option that sets the drafter_config field a mismatch `what`
 * starts with ("" when none does: it comes from the target). */
const char *df_train_option_of_field(const char *what) {
    static const struct {
        const char *field, *option;
    } map[] = {
        {"intermediate_size:", "--intermediate-size"},     {"num_hidden_layers:", "--draft-layers"},
        {"num_attention_heads:", "--draft-heads"},         {"num_key_value_heads:", "--draft-kv-heads"},
        {"head_dim:", "--draft-head-dim"},                 {"block_size:", "--block-size"},
        {"dflash_config.mask_token_id:", "--mask-token-id"}, {"dflash_config.target_layer_ids:", "--num-taps"},
        {"sliding_window:", "--sliding-window"},           {"layer_types[", "--sliding-layers"},
        {"gamma", "--gamma"},
    };
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (strncmp(what, map[i].field, strlen(map[i].field)) == 0) return map[i].option;
    return "";
}

static int check_config(const char *path, const cJSON *meta, const DfDrafterConfig *cfg, DfError *err) {
    char source[4200];
    snprintf(source, sizeof source, "%s: metadata drafter_config", path);
    DfDrafterConfig saved;
    if (df_drafter_config_parse(meta_string(meta, "drafter_config"), source, &saved, err) != 0) return -1;
    saved.gamma = strtod(meta_string(meta, "loss_gamma"), NULL);
    char what[512];
    if (!df_drafter_config_differs(&saved, cfg, what, sizeof what)) return 0;
    const char *option = df_train_option_of_field(what);
    return df_fail(err, "%s: the checkpoint's drafter differs from this run's: %s (checkpoint vs run%s%s)", path, what,
                   *option ? "; set by " : "", option);
}

static int64_t read_i64(const DfTensorInfo *t) {
    int64_t v;
    memcpy(&v, t->data, sizeof v);
    return v;
}

/* The vectors of a checkpoint, found and size-checked. */
typedef struct CkptTensors {
    const DfTensorInfo *params, *exp_avg, *exp_avg_sq, *adam_step, *progress[N_PROGRESS];
} CkptTensors;

static int find_tensors(const DfSafetensors *st, const char *path, CkptTensors *ct, DfError *err) {
    ProgressField pf[N_PROGRESS];
    progress_fields(&(DfTrainProgress){0}, pf);
    if (!(ct->params = find_vector(st, path, "params", DF_DTYPE_F32, err)) ||
        !(ct->exp_avg = find_vector(st, path, "adam.exp_avg", DF_DTYPE_F32, err)) ||
        !(ct->exp_avg_sq = find_vector(st, path, "adam.exp_avg_sq", DF_DTYPE_F32, err)) ||
        !(ct->adam_step = find_vector(st, path, "adam.step", DF_DTYPE_I64, err)))
        return -1;
    for (int i = 0; i < N_PROGRESS; i++)
        if (!(ct->progress[i] = find_vector(st, path, pf[i].name, DF_DTYPE_I64, err))) return -1;
    const DfTensorInfo *scalars[1 + N_PROGRESS] = {ct->adam_step};
    memcpy(scalars + 1, ct->progress, sizeof ct->progress);
    for (int i = 0; i < 1 + N_PROGRESS; i++)
        if (scalars[i]->shape[0] != 1)
            return df_fail(err, "%s: tensor '%s' has %" PRId64 " values, expected 1", path, scalars[i]->name,
                           scalars[i]->shape[0]);
    if (ct->exp_avg->shape[0] != ct->params->shape[0] || ct->exp_avg_sq->shape[0] != ct->params->shape[0])
        return df_fail(err, "%s: the moments (%" PRId64 ", %" PRId64 " values) and params (%" PRId64
                            ") differ in length", path, ct->exp_avg->shape[0], ct->exp_avg_sq->shape[0],
                       ct->params->shape[0]);
    return 0;
}

/* Everything is checked before any output is touched. */
static int load_checkpoint(const char *path, const DfDrafterConfig *cfg, const DfDrafterLayout *layout,
                           float **params, DfAdamW *opt, DfTrainProgress *progress, char **options_json,
                           LoadFault *fault, DfError *err) {
    *fault = FAULT_CORRUPT;
    DfSafetensors st;
    if (df_safetensors_open(&st, path, err) != 0) return -1;
    CkptTensors ct;
    cJSON *meta = NULL;
    int rc = find_tensors(&st, path, &ct, err);
    if (rc == 0) rc = (meta = read_metadata(&st.files[0], err)) ? 0 : -1;
    if (rc == 0) rc = verify_file(&st, path, meta, err);
    if (rc == 0 && check_config(path, meta, cfg, err) != 0) {
        *fault = FAULT_MISMATCH;
        rc = -1;
    }
    if (rc == 0 && ((size_t)ct.params->shape[0] != layout->total || opt->total != layout->total)) {
        rc = df_fail(err, "%s: %" PRId64 " parameters saved; the layout has %zu, the optimizer %zu", path,
                     ct.params->shape[0], layout->total, opt->total);
        *fault = FAULT_MISMATCH;
    }
    if (rc == 0) rc = df_adamw_set_state(opt, read_i64(ct.adam_step), ct.exp_avg->data, ct.exp_avg_sq->data,
                                         (size_t)ct.exp_avg->shape[0], err);
    if (rc == 0) {
        *fault = FAULT_NONE;
        *params = df_xmalloc((layout->total ? layout->total : 1) * sizeof(float), "checkpoint params");
        memcpy(*params, ct.params->data, layout->total * sizeof(float));
        int64_t v[N_PROGRESS];
        for (int i = 0; i < N_PROGRESS; i++) v[i] = read_i64(ct.progress[i]);
        *progress = (DfTrainProgress){.step = v[0], .total_steps = v[1], .epoch = v[2], .batch_in_epoch = v[3],
                                      .seed = (uint64_t)v[4], .tokens_seen = v[5]};
        *options_json = df_xstrdup(meta_string(meta, "options"));
    }
    cJSON_Delete(meta);
    df_safetensors_close(&st);
    return rc;
}

int df_checkpoint_load(const char *path, const DfDrafterConfig *cfg, const DfDrafterLayout *layout, float **params,
                       DfAdamW *opt, DfTrainProgress *progress, char **options_json, DfError *err) {
    LoadFault fault;
    return load_checkpoint(path, cfg, layout, params, opt, progress, options_json, &fault, err);
}

int df_checkpoint_latest_valid(const char *checkpoints_dir, const DfDrafterConfig *cfg, const DfDrafterLayout *layout,
                               float **params, DfAdamW *opt, DfTrainProgress *progress, char **options_json,
                               char **loaded_path, DfError *err) {
    *loaded_path = NULL;
    CkptEntry *e;
    int n;
    if (list_checkpoints(checkpoints_dir, &e, &n, err) != 0) return -1;
    if (n == 0) {
        free_entries(e, n);
        return 1;
    }
    DfError first = {{0}};
    int rc = -1;
    for (int i = n - 1; i >= 0; i--) {
        LoadFault fault;
        DfError attempt = {{0}};
        if (load_checkpoint(e[i].path, cfg, layout, params, opt, progress, options_json, &fault, &attempt) == 0) {
            *loaded_path = e[i].path;
            e[i].path = NULL;
            rc = 0;
            break;
        }
        if (i == n - 1) first = attempt;
        if (fault == FAULT_MISMATCH) {
            df_fail(err, "%s", attempt.msg);
            break;
        }
        fprintf(stderr, "warning: skipping checkpoint %s\n", attempt.msg);
        if (i == 0) df_fail(err, "%s: none of the %d checkpoints is usable; the newest: %s", checkpoints_dir, n, first.msg);
    }
    free_entries(e, n);
    return rc;
}

/* ------------------------------------------------------- the drafter alone */

static int read_drafter_config(const char *path, const cJSON *meta, DfDrafterConfig *cfg, DfError *err) {
    char source[4200];
    snprintf(source, sizeof source, "%s: metadata drafter_config", path);
    if (df_drafter_config_parse(meta_string(meta, "drafter_config"), source, cfg, err) != 0) return -1;
    cfg->gamma = strtod(meta_string(meta, "loss_gamma"), NULL);
    return 0;
}

int df_checkpoint_read_drafter(const char *path, DfDrafterConfig *cfg, DfDrafterLayout *layout, float **params,
                               int64_t *step, DfError *err) {
    *params = NULL;
    memset(layout, 0, sizeof *layout);
    DfSafetensors st;
    if (df_safetensors_open(&st, path, err) != 0) return -1;
    CkptTensors ct;
    cJSON *meta = NULL;
    int rc = find_tensors(&st, path, &ct, err);
    if (rc == 0) rc = (meta = read_metadata(&st.files[0], err)) ? 0 : -1;
    if (rc == 0) rc = verify_file(&st, path, meta, err);
    if (rc == 0) rc = read_drafter_config(path, meta, cfg, err);
    if (rc == 0) {
        df_drafter_layout_build(layout, cfg);
        if ((size_t)ct.params->shape[0] != layout->total) {
            rc = df_fail(err, "%s: %" PRId64 " parameters saved; its drafter_config implies %zu", path,
                         ct.params->shape[0], layout->total);
            df_drafter_layout_free(layout);
        }
    }
    if (rc == 0) {
        *params = df_xmalloc((layout->total ? layout->total : 1) * sizeof(float), "checkpoint params");
        memcpy(*params, ct.params->data, layout->total * sizeof(float));
        if (step) *step = read_i64(ct.progress[0]);
    }
    cJSON_Delete(meta);
    df_safetensors_close(&st);
    return rc;
}
