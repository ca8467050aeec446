/* Hugging Face `datasets` folders: state.json -> the shard files. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/mapped_file.h"
#include "json/json_fields.h"
#include "formats/arrow_dataset.h"
#include "json/json_parse.h"

struct DfArrowDataset {
    char **files;
    int n_files, current, has_info;
    DfArrowReader *reader; /* of files[current] */
    DfArrowReader *first;  /* of files[0]: its schema is the dataset's */
};

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int df_arrow_is_arrow_path(const char *path) {
    size_t n = strlen(path);
    return is_dir(path) || (n > 6 && strcmp(path + n - 6, ".arrow") == 0);
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = df_xmalloc(n, "path");
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static cJSON *read_json(const char *path, DfError *err) {
    size_t size;
    char *text = df_read_text_file(path, &size, err);
    if (!text) return NULL;
    cJSON *root = NULL;
    df_json_parse(text, size, path, 0, &root, err);
    free(text);
    return root;
}

/* A shard name must stay inside the folder. */
static int safe_name(const char *name) {
    return name[0] && !strchr(name, '/') && strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

static int list_shards(DfArrowDataset *ds, const char *dir, DfError *err) {
    char *state_path = join(dir, "state.json");
    cJSON *state = read_json(state_path, err);
    int rc = 0;
    if (!state) {
        char *dict = join(dir, "dataset_dict.json");
        struct stat st;
        if (stat(dict, &st) == 0)
            df_fail(err, "%s is a DatasetDict: pass one split's folder (e.g. %s/train)", dir, dir);
        free(dict);
        free(state_path);
        return -1;
    }
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(state, "_data_files");
    int n = cJSON_IsArray(files) ? cJSON_GetArraySize(files) : -1;
    if (n <= 0) rc = df_fail(err, "%s: \"_data_files\" is missing or empty", state_path);
    ds->files = rc == 0 ? df_xcalloc((size_t)n, sizeof *ds->files, "shard list") : NULL;
    const cJSON *f = rc == 0 ? files->child : NULL;
    for (int i = 0; rc == 0 && i < n; i++, f = f->next) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "filename");
        if (!cJSON_IsString(name) || !safe_name(name->valuestring))
            rc = df_fail(err, "%s: \"_data_files\"[%d] has no usable \"filename\"", state_path, i);
        else ds->files[ds->n_files++] = join(dir, name->valuestring);
    }
    cJSON_Delete(state);
    free(state_path);
    return rc;
}

/* dataset_info.json, when present: valid JSON whose "features" are columns. */
static int check_info(DfArrowDataset *ds, const char *dir, DfError *err) {
    char *path = join(dir, "dataset_info.json");
    struct stat st;
    int rc = 0;
    if (stat(path, &st) == 0) {
        cJSON *info = read_json(path, err);
        if (!info) rc = -1;
        const cJSON *features = info ? cJSON_GetObjectItemCaseSensitive(info, "features") : NULL;
        for (const cJSON *c = cJSON_IsObject(features) ? features->child : NULL; rc == 0 && c; c = c->next)
            if (df_arrow_schema_find(df_arrow_schema(ds->first), c->string) < 0)
                rc = df_fail(err, "%s: feature \"%s\" is not a column of %s", path, c->string, ds->files[0]);
        ds->has_info = rc == 0;
        cJSON_Delete(info);
    }
    free(path);
    return rc;
}

DfArrowDataset *df_arrow_dataset_open(const char *path, DfError *err) {
    DfArrowDataset *ds = df_xcalloc(1, sizeof *ds, "arrow dataset");
    int rc = 0;
    if (is_dir(path)) {
        rc = list_shards(ds, path, err);
    } else {
        ds->files = df_xcalloc(1, sizeof *ds->files, "shard list");
        ds->files[ds->n_files++] = df_xstrdup(path);
    }
    if (rc == 0) ds->first = ds->reader = df_arrow_open(ds->files[0], err);
    if (rc == 0 && !ds->first) rc = -1;
    if (rc == 0 && is_dir(path)) rc = check_info(ds, path, err);
    if (rc < 0) {
        df_arrow_dataset_close(ds);
        return NULL;
    }
    return ds;
}

void df_arrow_dataset_close(DfArrowDataset *ds) {
    if (!ds) return;
    if (ds->reader != ds->first) df_arrow_close(ds->reader);
    df_arrow_close(ds->first);
    for (int i = 0; i < ds->n_files; i++) free(ds->files[i]);
    free(ds->files);
    free(ds);
}

const DfArrowSchema *df_arrow_dataset_schema(const DfArrowDataset *ds) { return df_arrow_schema(ds->first); }
int df_arrow_dataset_num_files(const DfArrowDataset *ds) { return ds->n_files; }
const char *df_arrow_dataset_file(const DfArrowDataset *ds, int i) { return ds->files[i]; }
int df_arrow_dataset_has_info(const DfArrowDataset *ds) { return ds->has_info; }

static int same_schema(const DfArrowSchema *a, const DfArrowSchema *b) {
    if (a->n_fields != b->n_fields) return 0;
    for (int i = 0; i < a->n_fields; i++) {
        char ta[512], tb[512];
        df_arrow_type_string(&a->fields[i], ta, sizeof ta);
        df_arrow_type_string(&b->fields[i], tb, sizeof tb);
        if (strcmp(a->fields[i].name, b->fields[i].name) != 0 || strcmp(ta, tb) != 0) return 0;
    }
    return 1;
}

static int open_next_shard(DfArrowDataset *ds, DfError *err) {
    if (ds->reader != ds->first) df_arrow_close(ds->reader);
    ds->reader = NULL;
    ds->current++;
    DfArrowReader *r = df_arrow_open(ds->files[ds->current], err);
    if (!r) return -1;
    ds->reader = r;
    if (!same_schema(df_arrow_schema(r), df_arrow_schema(ds->first)))
        return df_fail(err, "%s: its columns differ from those of %s", ds->files[ds->current], ds->files[0]);
    return 0;
}

int df_arrow_dataset_next_batch(DfArrowDataset *ds, const DfArrowBatch **batch, const DfArrowReader **shard,
                                DfError *err) {
    for (;;) {
        if (!ds->reader) return -1; /* a shard failed to open earlier */
        int rc = df_arrow_next_batch(ds->reader, batch, err);
        if (rc != 0) {
            if (shard) *shard = ds->reader;
            return rc;
        }
        if (ds->current + 1 >= ds->n_files) return 0;
        if (open_next_shard(ds, err) < 0) return -1;
    }
}
