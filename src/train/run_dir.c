#define _XOPEN_SOURCE 700 /* kill */
#include "train/run_dir.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "train/trainer.h"

int df_run_dir_make(const char *path, DfError *err) {
    if (mkdir(path, 0777) == 0 || errno == EEXIST) {
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
        return df_fail(err, "%s exists and is not a directory", path);
    }
    return df_fail_errno(err, "cannot create directory %s", path);
}

/* Only those of processes that no longer exist go (another process may be
 * writing its own). */
void df_run_dir_remove_stale_temporaries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        const char *tmp = strstr(e->d_name, ".tmp.");
        if (!tmp || !tmp[5]) continue;
        char *end;
        long pid = strtol(tmp + 5, &end, 10);
        if (*end || pid <= 0) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* its writer is alive (or not ours to judge) */
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) == 0) fprintf(stderr, "train: removed %s, left by an interrupted run\n", path);
    }
    closedir(d);
}

int df_run_dir_truncate_jsonl(const char *path, int64_t last_step, double *elapsed, DfError *err) {
    *elapsed = 0;
    FILE *in = fopen(path, "r");
    if (!in) return errno == ENOENT ? 0 : df_fail_errno(err, "cannot open %s", path);
    DfAtomicFile out;
    if (df_atomic_open(&out, path, err)) {
        fclose(in);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, in)) > 0) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *step = j ? cJSON_GetObjectItemCaseSensitive(j, "step") : NULL;
        if (cJSON_IsNumber(step) && step->valuedouble <= (double)last_step && line[n - 1] == '\n') {
            fputs(line, out.fp);
            const cJSON *el = cJSON_GetObjectItemCaseSensitive(j, "elapsed_s");
            if (step->valuedouble == (double)last_step && cJSON_IsNumber(el)) *elapsed = el->valuedouble;
        }
        cJSON_Delete(j);
    }
    free(line);
    fclose(in);
    return df_atomic_commit(&out, err);
}

int df_run_dir_has_checkpoint(const char *dir) {
    DIR *d = opendir(dir);
    int found = 0;
    for (struct dirent *e; d && !found && (e = readdir(d));)
        found = strncmp(e->d_name, "step-", 5) == 0 && strstr(e->d_name, ".safetensors") && !strstr(e->d_name, ".tmp.");
    if (d) closedir(d);
    return found;
}

int df_run_dir_make_all(const char *path, DfError *err) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return df_fail(err, "path too long: %s", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) return df_fail_errno(err, "cannot create directory %s", buf);
        *p = c;
        if (!c) return 0;
    }
}
char *df_run_dir_first_missing(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0) return NULL;
    char *p = df_xstrdup(path), *missing = df_xstrdup(path);
    for (char *slash; (slash = strrchr(p, '/')) && slash != p;) {
        *slash = '\0';
        if (stat(p, &st) == 0) break;
        free(missing);
        missing = df_xstrdup(p);
    }
    free(p);
    return missing;
}

int df_run_dir_start_log(const DfTrainOptions *o, DfTeeOutput *tee, DfError *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/train.log", o->output_dir);
    return df_tee_output_start(tee, path, err);
}

/* Whether dir holds nothing but its train.log. */
static int only_a_log(const char *dir) {
    DIR *d = opendir(dir);
    int other = !d;
    for (struct dirent *e; d && !other && (e = readdir(d));)
        other = strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 && strcmp(e->d_name, "train.log") != 0;
    if (d) closedir(d);
    return !other;
}

void df_run_dir_remove_created(const char *output_dir, const char *top) {
    char log[4200];
    snprintf(log, sizeof log, "%s/train.log", output_dir);
    if (only_a_log(output_dir)) unlink(log);
    char *p = df_xstrdup(output_dir);
    while (rmdir(p) == 0 && strcmp(p, top) != 0) {
        char *slash = strrchr(p, '/');
        if (!slash) break;
        *slash = '\0';
    }
    free(p);
}

int df_run_dir_lock(const DfTrainOptions *o, DfOutputLock *lock, DfError *err) {
    int writer = o->layout == DF_LAYOUT_SPLIT ? o->target_ranks : 0;
    if (o->dist && o->dist->world_size > 1 && o->dist->rank != writer) return 0;
    if (df_run_dir_make_all(o->output_dir, err)) return df_context(err, "--output");
    char path[4200];
    snprintf(path, sizeof path, "%s/train.lock", o->output_dir);
    if (df_output_lock(lock, path, o->output_dir, err)) return df_context(err, "--output");
    return 0;
}

