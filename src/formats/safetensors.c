/* safetensors reading (one file or a sharded set) and writing.
 *
 * File layout: 8-byte little-endian header length N, N bytes of JSON header
 * ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
 * {...}}), then the data section; offsets are relative to the data section.
 * Nothing in the header is trusted: every number is checked before any
 * pointer into the mapping is formed. */
#include "formats/safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/atomic_file.h"
#include "base/buffer.h"
#include "base/numeric.h"
#include "json/json_parse.h"

/* The safetensors library refuses headers above 100 MB; so do we. */
#define DF_ST_MAX_HEADER ((uint64_t)100000000)
/* Integers above 2^53 cannot be represented exactly by cJSON's doubles. */
#define DF_ST_MAX_JSON_INT 9007199254740992.0
/* Below this many elements a conversion is not worth starting threads. */
#define DF_ST_PARALLEL_MIN ((int64_t)1 << 16)

static const struct {
    const char *name;
    DfDtype dtype;
    size_t size;
} DTYPES[] = {
    {"F32", DF_DTYPE_F32, 4}, {"F16", DF_DTYPE_F16, 2}, {"BF16", DF_DTYPE_BF16, 2}, {"F64", DF_DTYPE_F64, 8},
    {"I64", DF_DTYPE_I64, 8}, {"I32", DF_DTYPE_I32, 4}, {"I16", DF_DTYPE_I16, 2},  {"I8", DF_DTYPE_I8, 1},
    {"U8", DF_DTYPE_U8, 1},   {"BOOL", DF_DTYPE_BOOL, 1},
};
#define N_DTYPES (sizeof DTYPES / sizeof DTYPES[0])

const char *df_dtype_name(DfDtype t) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (DTYPES[i].dtype == t) return DTYPES[i].name;
    return "?";
}

size_t df_dtype_size(DfDtype t) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (DTYPES[i].dtype == t) return DTYPES[i].size;
    return 0;
}

static int dtype_from_name(const char *name, DfDtype *out) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (strcmp(DTYPES[i].name, name) == 0) {
            *out = DTYPES[i].dtype;
            return 0;
        }
    return -1;
}

/* "[2, 3, 4]" into buf. */
static void format_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Element count of a shape, or -1 when it overflows int64. Dims are >= 0. */
static int64_t shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] != 0 && n > INT64_MAX / shape[i]) return -1;
        n *= shape[i];
    }
    return n;
}

/* ---------------------------------------------------------------- parsing */

/* A JSON number that is an exact non-negative integer below 2^53. */
static int json_to_count(const cJSON *item, int64_t *out) {
    if (!cJSON_IsNumber(item)) return -1;
    double d = item->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < 0 || d > DF_ST_MAX_JSON_INT) return -1;
    *out = (int64_t)d;
    return 0;
}

/* Context for the tensors of one mapped file being validated. */
typedef struct FileScan {
    const DfMappedFile *file;
    const unsigned char *data; /* start of the data section */
    uint64_t data_size;
} FileScan;

static int parse_shape(const FileScan *fs, const char *name, const cJSON *shape, DfTensorInfo *t, DfError *err) {
    const char *path = fs->file->path;
    if (!cJSON_IsArray(shape)) return df_fail(err, "%s: tensor '%s': \"shape\" is missing or not an array", path, name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > DF_MAX_DIMS)
        return df_fail(err, "%s: tensor '%s': %d dims, at most %d supported", path, name, ndim, DF_MAX_DIMS);
    int i = 0;
    for (const cJSON *d = shape->child; d; d = d->next, i++) {
        if (cJSON_IsNumber(d) && d->valuedouble < 0)
            return df_fail(err, "%s: tensor '%s': negative dim %g in shape", path, name, d->valuedouble);
        if (json_to_count(d, &t->shape[i]) != 0)
            return df_fail(err, "%s: tensor '%s': shape dim %d is not a non-negative integer", path, name, i);
    }
    t->ndim = ndim;
    return 0;
}

static int parse_offsets(const FileScan *fs, const char *name, const cJSON *offs, uint64_t *begin, uint64_t *end,
                         DfError *err) {
    const char *path = fs->file->path;
    int64_t b, e;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || json_to_count(offs->child, &b) != 0 ||
        json_to_count(offs->child->next, &e) != 0)
        return df_fail(err, "%s: tensor '%s': \"data_offsets\" must be [begin, end] of non-negative integers", path,
                       name);
    if (b > e)
        return df_fail(err, "%s: tensor '%s': data_offsets [%lld, %lld] begin after end", path, name, (long long)b,
                       (long long)e);
    if ((uint64_t)e > fs->data_size)
        return df_fail(err, "%s: tensor '%s': data_offsets [%lld, %lld] past the end of the data (%llu bytes)", path,
                       name, (long long)b, (long long)e, (unsigned long long)fs->data_size);
    *begin = (uint64_t)b;
    *end = (uint64_t)e;
    return 0;
}

/* Validates one header entry into *t (name owned by t on success). */
static int parse_tensor(const FileScan *fs, const cJSON *entry, DfTensorInfo *t, uint64_t *begin, DfError *err) {
    const char *path = fs->file->path, *name = entry->string;
    memset(t, 0, sizeof *t);
    if (!cJSON_IsObject(entry)) return df_fail(err, "%s: tensor '%s': entry is not a JSON object", path, name);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
    if (!cJSON_IsString(dtype)) return df_fail(err, "%s: tensor '%s': \"dtype\" is missing or not a string", path, name);
    if (dtype_from_name(dtype->valuestring, &t->dtype) != 0)
        return df_fail(err, "%s: tensor '%s': unknown dtype '%s' (known: F32 F16 BF16 F64 I64 I32 I16 I8 U8 BOOL)",
                       path, name, dtype->valuestring);
    if (parse_shape(fs, name, cJSON_GetObjectItemCaseSensitive(entry, "shape"), t, err) != 0) return -1;
    uint64_t end = 0;
    if (parse_offsets(fs, name, cJSON_GetObjectItemCaseSensitive(entry, "data_offsets"), begin, &end, err) != 0)
        return -1;
    int64_t numel = shape_numel(t->ndim, t->shape);
    uint64_t esize = df_dtype_size(t->dtype);
    char shp[160];
    format_shape(shp, sizeof shp, t->ndim, t->shape);
    if (numel < 0 || (uint64_t)numel > UINT64_MAX / esize)
        return df_fail(err, "%s: tensor '%s': shape %s overflows", path, name, shp);
    if (end - *begin != (uint64_t)numel * esize)
        return df_fail(err, "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, but shape %s of %s needs %llu",
                       path, name, (unsigned long long)*begin, (unsigned long long)end,
                       (unsigned long long)(end - *begin), shp, dtype->valuestring,
                       (unsigned long long)numel * esize);
    t->name = df_xstrdup(name);
    t->data = fs->data + *begin;
    t->nbytes = (size_t)(end - *begin);
    t->file = fs->file->path;
    return 0;
}

static int compare_by_name(const void *a, const void *b) {
    return strcmp(((const DfTensorInfo *)a)->name, ((const DfTensorInfo *)b)->name);
}

static int compare_by_data(const void *a, const void *b) {
    const DfTensorInfo *x = a, *y = b;
    if (x->data != y->data) return (const unsigned char *)x->data < (const unsigned char *)y->data ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* Tensors of one file: no two share bytes. Sorts t[0..n-1] by position and
 * compares each with the furthest-reaching earlier one (empty tensors own no
 * bytes and must not hide an overlap between their neighbours). */
static int check_no_overlap(const FileScan *fs, DfTensorInfo *t, int n, DfError *err) {
    qsort(t, (size_t)n, sizeof *t, compare_by_data);
    const DfTensorInfo *reach = NULL;
    for (int i = 0; i < n; i++) {
        const DfTensorInfo *b = &t[i];
        if (b->nbytes == 0) continue;
        const unsigned char *b_start = b->data;
        if (reach && b_start < (const unsigned char *)reach->data + reach->nbytes)
            return df_fail(err, "%s: tensors '%s' [%td, %td] and '%s' [%td, %td] overlap", fs->file->path, reach->name,
                           (const unsigned char *)reach->data - fs->data,
                           (const unsigned char *)reach->data + reach->nbytes - fs->data, b->name, b_start - fs->data,
                           b_start + b->nbytes - fs->data);
        if (!reach || b_start + b->nbytes > (const unsigned char *)reach->data + reach->nbytes) reach = b;
    }
    return 0;
}

static void free_tensors(DfTensorInfo *t, int n) {
    for (int i = 0; i < n; i++) free(t[i].name);
    free(t);
}

/* Reads the header JSON of a mapped file; fills fs. */
static cJSON *parse_header(const DfMappedFile *f, FileScan *fs, DfError *err) {
    if (f->size < 8) {
        df_fail(err, "%s: file is %zu bytes, too short for the 8-byte header length (truncated?)", f->path, f->size);
        return NULL;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | f->data[i];
    if (hlen > (uint64_t)f->size - 8) {
        df_fail(err, "%s: header length %llu past the end of the file (%zu bytes)", f->path, (unsigned long long)hlen,
                f->size);
        return NULL;
    }
    if (hlen > DF_ST_MAX_HEADER) {
        df_fail(err, "%s: header length %llu above the 100 MB limit", f->path, (unsigned long long)hlen);
        return NULL;
    }
    /* A NUL-terminated copy, so that the parser can never run off the header. */
    char *text = df_xmalloc((size_t)hlen + 1, "safetensors header");
    memcpy(text, f->data + 8, (size_t)hlen);
    text[hlen] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)hlen, &end, 0);
    if (root) /* padding after the JSON must be whitespace */
        for (const char *p = end; p < text + hlen; p++)
            if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
                cJSON_Delete(root);
                root = NULL;
                end = p;
                break;
            }
    if (!root) {
        size_t at = end ? (size_t)(end - text) : 0;
        df_fail(err, "%s: header is not valid JSON (error near byte %zu of the %llu-byte header, file offset %zu)",
                f->path, at, (unsigned long long)hlen, 8 + at);
        free(text);
        return NULL;
    }
    /* a tensor name or metadata value cut at a NUL would name another tensor or value */
    char field[256];
    int is_key = 0;
    long line = 0;
    if (df_json_find_nul(text, (size_t)hlen, field, sizeof field, &is_key, &line)) {
        cJSON_Delete(root);
        free(text);
        df_fail(err, "%s: header %s '%s' holds a NUL character (\\u0000)", f->path, is_key ? "key" : "field", field);
        return NULL;
    }
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        df_fail(err, "%s: header is not a JSON object", f->path);
        return NULL;
    }
    fs->file = f;
    fs->data = f->data + 8 + hlen;
    fs->data_size = (uint64_t)f->size - 8 - hlen;
    return root;
}

/* Validates every tensor of a mapped file; returns a new array of them. */
static int scan_file(const DfMappedFile *f, DfTensorInfo **out, int *n_out, DfError *err) {
    FileScan fs;
    cJSON *root = parse_header(f, &fs, err);
    if (!root) return -1;
    int cap = cJSON_GetArraySize(root), n = 0;
    DfTensorInfo *t = df_xcalloc((size_t)(cap > 0 ? cap : 1), sizeof *t, "tensor table");
    int rc = 0;
    for (const cJSON *e = root->child; e && rc == 0; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        uint64_t begin = 0;
        if (parse_tensor(&fs, e, &t[n], &begin, err) != 0) rc = -1;
        else n++;
    }
    cJSON_Delete(root);
    if (rc == 0) { /* cJSON keeps duplicate keys: find them by sorting */
        qsort(t, (size_t)n, sizeof *t, compare_by_name);
        for (int i = 1; i < n && rc == 0; i++)
            if (strcmp(t[i - 1].name, t[i].name) == 0)
                rc = df_fail(err, "%s: tensor '%s' appears twice in the header", f->path, t[i].name);
    }
    if (rc == 0) rc = check_no_overlap(&fs, t, n, err);
    if (rc != 0) {
        free_tensors(t, n);
        return -1;
    }
    *out = t;
    *n_out = n;
    return 0;
}

/* ------------------------------------------------------------ open/close */

static void append_tensors(DfSafetensors *st, DfTensorInfo *t, int n) {
    st->tensors = df_xrealloc(st->tensors, (size_t)(st->n_tensors + n) * sizeof *t, "tensor table");
    memcpy(st->tensors + st->n_tensors, t, (size_t)n * sizeof *t);
    st->n_tensors += n;
    free(t);
}

/* Sorts the table by name (for binary search) and refuses a name held by two files. */
static int finish_table(DfSafetensors *st, DfError *err) {
    qsort(st->tensors, (size_t)st->n_tensors, sizeof *st->tensors, compare_by_name);
    for (int i = 1; i < st->n_tensors; i++)
        if (strcmp(st->tensors[i - 1].name, st->tensors[i].name) == 0)
            return df_fail(err, "tensor '%s' appears in both %s and %s", st->tensors[i].name, st->tensors[i - 1].file,
                           st->tensors[i].file);
    return 0;
}

static int open_single(DfSafetensors *st, const char *path, DfError *err) {
    st->files = df_xcalloc(1, sizeof *st->files, "safetensors files");
    if (df_mapped_file_open(&st->files[0], path, err) != 0) return -1;
    st->n_files = 1;
    DfTensorInfo *t;
    int n;
    if (scan_file(&st->files[0], &t, &n, err) != 0) return -1;
    append_tensors(st, t, n);
    return finish_table(st, err);
}

static int compare_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Shard names come from a file we do not trust: keep them inside the index's directory. */
static int check_shard_name(const char *index_path, const char *tensor, const char *shard, DfError *err) {
    if (shard[0] == '\0' || shard[0] == '/')
        return df_fail(err, "%s: tensor '%s': shard name '%s' is empty or absolute", index_path, tensor, shard);
    for (const char *p = shard; *p;) {
        size_t len = strcspn(p, "/");
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return df_fail(err, "%s: tensor '%s': shard name '%s' leaves the index's directory", index_path, tensor,
                           shard);
        p += len;
        if (*p == '/') p++;
    }
    return 0;
}

static char *join_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = df_xmalloc(n, "path");
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return df_xstrdup(".");
    if (slash == path) return df_xstrdup("/");
    size_t n = (size_t)(slash - path);
    char *d = df_xmalloc(n + 1, "path");
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

/* Index entries each name a tensor that their shard really holds. */
static int check_index_entries(const DfSafetensors *st, const char *index_path, const cJSON *map, const char *dir,
                               DfError *err) {
    for (const cJSON *e = map->child; e; e = e->next) {
        char *shard_path = join_path(dir, e->valuestring);
        const DfTensorInfo *t = df_safetensors_find(st, e->string);
        int ok = t && strcmp(t->file, shard_path) == 0;
        if (!ok) {
            if (t)
                df_fail(err, "%s: tensor '%s' is listed in shard %s but found in %s", index_path, e->string,
                        shard_path, t->file);
            else
                df_fail(err, "%s: tensor '%s' is listed in shard %s, which does not contain it", index_path, e->string,
                        shard_path);
        }
        free(shard_path);
        if (!ok) return -1;
    }
    return 0;
}

/* Distinct shard names of the weight map, sorted; entries are validated. */
static const char **distinct_shards(const char *index_path, const cJSON *map, int *n_out, DfError *err) {
    int n = cJSON_GetArraySize(map), k = 0;
    const char **names = df_xcalloc((size_t)(n > 0 ? n : 1), sizeof *names, "shard names");
    for (const cJSON *e = map->child; e; e = e->next) {
        int bad = !cJSON_IsString(e) ? df_fail(err, "%s: weight_map entry '%s' is not a string", index_path, e->string)
                                     : check_shard_name(index_path, e->string, e->valuestring, err);
        if (bad) {
            free(names);
            return NULL;
        }
        names[k++] = e->valuestring;
    }
    qsort(names, (size_t)k, sizeof *names, compare_str_ptr);
    int m = 0;
    for (int i = 0; i < k; i++)
        if (m == 0 || strcmp(names[m - 1], names[i]) != 0) names[m++] = names[i];
    *n_out = m;
    return names;
}

static cJSON *read_weight_map(const char *index_path, cJSON **root_out, DfError *err) {
    char *text = df_read_text_file(index_path, NULL, err);
    if (!text) return NULL;
    cJSON *root = NULL;
    int parsed = df_json_parse(text, strlen(text), index_path, 0, &root, err);
    free(text);
    if (parsed != DF_JSON_OK) return NULL;
    cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(map)) {
        cJSON_Delete(root);
        df_fail(err, "%s: no \"weight_map\" object", index_path);
        return NULL;
    }
    *root_out = root;
    return map;
}

/* A tensor that the weight map places in `shard`, to name in errors. */
static const char *first_tensor_of(const cJSON *map, const char *shard) {
    for (const cJSON *e = map->child; e; e = e->next)
        if (strcmp(e->valuestring, shard) == 0) return e->string;
    return "?";
}

static int open_index(DfSafetensors *st, const char *index_path, DfError *err) {
    cJSON *root;
    cJSON *map = read_weight_map(index_path, &root, err);
    if (!map) return -1;
    int n_shards, rc = 0;
    const char **shards = distinct_shards(index_path, map, &n_shards, err);
    if (!shards) {
        cJSON_Delete(root);
        return -1;
    }
    char *dir = dir_of(index_path);
    /* Allocated whole before any tensor points at a file's path. */
    st->files = df_xcalloc((size_t)(n_shards > 0 ? n_shards : 1), sizeof *st->files, "safetensors files");
    for (int i = 0; i < n_shards && rc == 0; i++) {
        char *shard_path = join_path(dir, shards[i]);
        rc = df_mapped_file_open(&st->files[i], shard_path, err);
        if (rc != 0) df_context(err, "%s: tensor '%s' is in shard %s", index_path, first_tensor_of(map, shards[i]),
                                shards[i]);
        free(shard_path);
        if (rc != 0) break;
        st->n_files++;
        DfTensorInfo *t;
        int n;
        rc = scan_file(&st->files[i], &t, &n, err);
        if (rc == 0) append_tensors(st, t, n);
    }
    if (rc == 0) rc = finish_table(st, err);
    if (rc == 0) rc = check_index_entries(st, index_path, map, dir, err);
    free(dir);
    free(shards);
    cJSON_Delete(root);
    return rc;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int is_directory(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* A directory holds model.safetensors or model.safetensors.index.json. */
static int open_directory(DfSafetensors *st, const char *dir, DfError *err) {
    char *single = join_path(dir, "model.safetensors");
    char *index = join_path(dir, "model.safetensors.index.json");
    int rc;
    if (file_exists(single)) rc = open_single(st, single, err);
    else if (file_exists(index)) rc = open_index(st, index, err);
    else rc = df_fail(err, "%s: neither model.safetensors nor model.safetensors.index.json exists", dir);
    free(single);
    free(index);
    return rc;
}

int df_safetensors_open(DfSafetensors *st, const char *path, DfError *err) {
    memset(st, 0, sizeof *st);
    int rc;
    if (is_directory(path)) rc = open_directory(st, path, err);
    else if (ends_with(path, ".json")) rc = open_index(st, path, err);
    else rc = open_single(st, path, err);
    if (rc != 0) df_safetensors_close(st);
    return rc;
}

void df_safetensors_close(DfSafetensors *st) {
    for (int i = 0; i < st->n_tensors; i++) free(st->tensors[i].name);
    free(st->tensors);
    for (int i = 0; i < st->n_files; i++) df_mapped_file_close(&st->files[i]);
    free(st->files);
    memset(st, 0, sizeof *st);
}

const DfTensorInfo *df_safetensors_find(const DfSafetensors *st, const char *name) {
    int lo = 0, hi = st->n_tensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(name, st->tensors[mid].name);
        if (c == 0) return &st->tensors[mid];
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

/* ------------------------------------------------------------- loading */

static void convert_to_f32(const DfTensorInfo *t, float *out, int64_t n) {
    const unsigned char *src = t->data;
    if (t->dtype == DF_DTYPE_F32) {
        memcpy(out, src, (size_t)n * sizeof(float));
        return;
    }
    int bf16 = t->dtype == DF_DTYPE_BF16;
    /* memcpy per element: the data section need not be 2-byte aligned. */
#pragma omp parallel for schedule(static) if (n >= DF_ST_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        out[i] = bf16 ? df_bf16_to_f32(h) : df_f16_to_f32(h);
    }
}

static int same_shape(const DfTensorInfo *t, int ndim, const int64_t *shape) {
    if (t->ndim != ndim) return 0;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != shape[i]) return 0;
    return 1;
}

float *df_safetensors_load_f32(const DfSafetensors *st, const char *name, int ndim, const int64_t *shape,
                               DfError *err) {
    const DfTensorInfo *t = df_safetensors_find(st, name);
    if (!t) {
        if (st->n_files == 1)
            df_fail(err, "%s: no tensor '%s'", st->files[0].path, name);
        else
            df_fail(err, "tensor '%s' is in none of the %d shards (first: %s)", name, st->n_files,
                    st->n_files ? st->files[0].path : "none");
        return NULL;
    }
    if (ndim < 0 || ndim > DF_MAX_DIMS || !same_shape(t, ndim, shape)) {
        char want[160], have[160];
        format_shape(want, sizeof want, ndim < 0 ? 0 : ndim > DF_MAX_DIMS ? DF_MAX_DIMS : ndim, shape);
        format_shape(have, sizeof have, t->ndim, t->shape);
        df_fail(err, "%s: tensor '%s': expected %s, file has %s", t->file, name, want, have);
        return NULL;
    }
    if (t->dtype != DF_DTYPE_F32 && t->dtype != DF_DTYPE_F16 && t->dtype != DF_DTYPE_BF16) {
        df_fail(err, "%s: tensor '%s': dtype %s is not a float type (F32, F16 or BF16)", t->file, name,
                df_dtype_name(t->dtype));
        return NULL;
    }
    int64_t n = shape_numel(t->ndim, t->shape); /* validated at open */
    float *out = malloc((size_t)n * sizeof(float));
    if (!out) {
        df_fail(err, "%s: out of memory reading tensor '%s' (%zu bytes as fp32)", t->file, name,
                (size_t)n * sizeof(float));
        return NULL;
    }
    convert_to_f32(t, out, n);
    return out;
}

/* ------------------------------------------------------------- writing */

static void append_str(DfByteBuf *b, const char *s) { df_bytebuf_append(b, s, strlen(s)); }

static void append_json_string(DfByteBuf *b, const char *s) {
    append_str(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            df_bytebuf_append(b, esc, 2);
        } else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            append_str(b, esc);
        } else {
            df_bytebuf_append(b, (const char *)p, 1);
        }
    }
    append_str(b, "\"");
}

static int compare_out_by_name(const void *a, const void *b) {
    return strcmp((*(const DfTensorOut *const *)a)->name, (*(const DfTensorOut *const *)b)->name);
}

static int check_out_tensor(const char *path, const DfTensorOut *t, uint64_t *nbytes, DfError *err) {
    if (!t->name || !t->name[0] || strcmp(t->name, "__metadata__") == 0)
        return df_fail(err, "%s: cannot write a tensor named '%s'", path, t->name ? t->name : "(null)");
    if (df_dtype_size(t->dtype) == 0)
        return df_fail(err, "%s: tensor '%s': unknown dtype %d", path, t->name, (int)t->dtype);
    if (t->ndim < 0 || t->ndim > DF_MAX_DIMS)
        return df_fail(err, "%s: tensor '%s': %d dims", path, t->name, t->ndim);
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0) return df_fail(err, "%s: tensor '%s': negative dim", path, t->name);
    int64_t numel = shape_numel(t->ndim, t->shape);
    if (numel < 0 || (uint64_t)numel > UINT64_MAX / 8)
        return df_fail(err, "%s: tensor '%s': shape overflows", path, t->name);
    *nbytes = (uint64_t)numel * df_dtype_size(t->dtype);
    if (*nbytes > 0 && !t->data) return df_fail(err, "%s: tensor '%s': no data", path, t->name);
    return 0;
}

/* The JSON text of "__metadata__" after checking that it is an object of strings. */
static char *metadata_text(const char *path, const char *metadata_json, DfError *err) {
    cJSON *m = cJSON_Parse(metadata_json);
    int ok = cJSON_IsObject(m);
    for (const cJSON *e = ok ? m->child : NULL; e; e = e->next) ok = ok && cJSON_IsString(e);
    char *text = ok ? cJSON_PrintUnformatted(m) : NULL;
    cJSON_Delete(m);
    if (!text) df_fail(err, "%s: metadata must be a JSON object of string values", path);
    return text;
}

/* Header JSON for the tensors in `order`, padded with spaces to a multiple of 8. */
static int build_header(const char *path, const DfTensorOut **order, int n, const char *metadata_json, DfByteBuf *h,
                        DfError *err) {
    append_str(h, "{");
    if (metadata_json) {
        char *meta = metadata_text(path, metadata_json, err);
        if (!meta) return -1;
        append_str(h, "\"__metadata__\":");
        append_str(h, meta);
        free(meta);
    }
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const DfTensorOut *t = order[i];
        uint64_t nbytes = 0;
        if (check_out_tensor(path, t, &nbytes, err) != 0) return -1;
        if (i > 0 && strcmp(order[i - 1]->name, t->name) == 0)
            return df_fail(err, "%s: tensor '%s' given twice", path, t->name);
        char num[64];
        if (i > 0 || metadata_json) append_str(h, ",");
        append_json_string(h, t->name);
        append_str(h, ":{\"dtype\":\"");
        append_str(h, df_dtype_name(t->dtype));
        append_str(h, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)t->shape[d]);
            append_str(h, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                 (unsigned long long)(offset + nbytes));
        append_str(h, num);
        offset += nbytes;
    }
    append_str(h, "}");
    while (h->len % 8 != 0) append_str(h, " ");
    return 0;
}

int df_safetensors_write(const char *path, const DfTensorOut *tensors, int n, const char *metadata_json,
                         DfError *err) {
    if (n < 0) return df_fail(err, "%s: negative tensor count", path);
    const DfTensorOut **order = df_xcalloc((size_t)(n > 0 ? n : 1), sizeof *order, "tensor order");
    for (int i = 0; i < n; i++) order[i] = &tensors[i];
    qsort(order, (size_t)n, sizeof *order, compare_out_by_name);
    DfByteBuf h = {0};
    int rc = build_header(path, order, n, metadata_json, &h, err);
    DfAtomicFile f;
    if (rc == 0) rc = df_atomic_open(&f, path, err);
    if (rc == 0) {
        unsigned char len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
        int ok = fwrite(len8, 1, 8, f.fp) == 8 && fwrite(h.data, 1, h.len, f.fp) == h.len;
        for (int i = 0; i < n && ok; i++) {
            size_t nbytes = (size_t)shape_numel(order[i]->ndim, order[i]->shape) * df_dtype_size(order[i]->dtype);
            ok = nbytes == 0 || fwrite(order[i]->data, 1, nbytes, f.fp) == nbytes;
        }
        if (!ok) {
            df_atomic_abort(&f);
            rc = df_fail_errno(err, "%s: write failed", path);
        } else {
            rc = df_atomic_commit(&f, err);
        }
    }
    df_bytebuf_free(&h);
    free(order);
    return rc;
}
