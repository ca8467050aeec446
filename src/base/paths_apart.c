#define _GNU_SOURCE
#include "base/paths_apart.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* How far into a directory its files are looked for: a model directory is flat, a run directory holds
 * checkpoints/ and final/ one level down. */
#define WALK_DEPTH 2
#define WALK_MAX_FILES 20000

typedef struct Known {
    dev_t dev;
    ino_t ino;
    const char *option;
    char *path; /* the input as given, or the file found inside it */
} Known;

typedef struct KnownSet {
    Known *items;
    int n, cap;
} KnownSet;

static void add_known(KnownSet *s, const struct stat *st, const char *option, const char *path) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->items = df_xrealloc(s->items, (size_t)s->cap * sizeof *s->items, "input files");
    }
    s->items[s->n++] = (Known){st->st_dev, st->st_ino, option, df_xstrdup(path)};
}

static void free_known(KnownSet *s) {
    for (int i = 0; i < s->n; i++) free(s->items[i].path);
    free(s->items);
}

/* Every entry of dir (following links), down to depth levels, added to s. */
static void walk(KnownSet *s, const char *dir, const char *option, int depth) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && s->n < WALK_MAX_FILES) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0) continue;
        add_known(s, &st, option, path);
        if (S_ISDIR(st.st_mode) && depth > 1) walk(s, path, option, depth - 1);
    }
    closedir(d);
}

static const Known *find(const KnownSet *s, const struct stat *st) {
    for (int i = 0; i < s->n; i++)
        if (s->items[i].dev == st->st_dev && s->items[i].ino == st->st_ino) return &s->items[i];
    return NULL;
}

static int clash(const DfPathArg *out, const char *inside, const Known *in, DfError *err) {
    if (inside)
        return df_fail(err, "%s %s holds %s, which is the same file as %s %s: give another %s", out->option,
                       out->path, inside, in->option, in->path, out->option);
    return df_fail(err, "%s %s is the same file as %s %s: give another %s", out->option, out->path, in->option,
                   in->path, out->option);
}

static int check_output(const KnownSet *inputs, const DfPathArg *out, DfError *err) {
    struct stat st;
    if (!out->path || stat(out->path, &st) != 0) return 0;
    const Known *hit = find(inputs, &st);
    if (hit) return clash(out, NULL, hit, err);
    if (!S_ISDIR(st.st_mode) || out->kind != DF_OUTPUT_WHOLE_DIR) return 0;
    KnownSet inside = {0};
    walk(&inside, out->path, out->option, WALK_DEPTH + 1);
    int rc = 0;
    for (int i = 0; rc == 0 && i < inside.n; i++) {
        struct stat f = {.st_dev = inside.items[i].dev, .st_ino = inside.items[i].ino};
        hit = find(inputs, &f);
        if (hit) rc = clash(out, inside.items[i].path, hit, err);
    }
    free_known(&inside);
    return rc;
}

int df_paths_apart(const DfPathArg *inputs, int n_inputs, const DfPathArg *outputs, int n_outputs, DfError *err) {
    KnownSet known = {0};
    for (int i = 0; i < n_inputs; i++) {
        struct stat st;
        if (!inputs[i].path || stat(inputs[i].path, &st) != 0) continue;
        add_known(&known, &st, inputs[i].option, inputs[i].path);
        if (S_ISDIR(st.st_mode)) walk(&known, inputs[i].path, inputs[i].option, WALK_DEPTH);
    }
    int rc = 0;
    for (int i = 0; rc == 0 && i < n_outputs; i++) rc = check_output(&known, &outputs[i], err);
    free_known(&known);
    return rc;
}

int df_paths_apart_or_usage(const char *command, const DfPathArg *inputs, int n_inputs, const DfPathArg *outputs,
                            int n_outputs) {
    DfError err;
    if (df_paths_apart(inputs, n_inputs, outputs, n_outputs, &err) == 0) return 0;
    fprintf(stderr, "dflash %s: %s\n", command, err.msg);
    return 2;
}
