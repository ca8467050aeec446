#include "model/export_dir.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static const char *const EXPORT_FILES[] = {"config.json", "model.safetensors", "dflash.py"};
#define N_EXPORT_FILES 3
#define N_REQUIRED 2 /* config.json and model.safetensors */
#define NAMED_MAX 4  /* entries named in the message */

/* The index of name in EXPORT_FILES when it is a regular file there, else -1. */
static int export_file_index(const char *dir, const char *name) {
    for (int i = 0; i < N_EXPORT_FILES; i++) {
        if (strcmp(name, EXPORT_FILES[i]) != 0) continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        struct stat st;
        return lstat(path, &st) == 0 && S_ISREG(st.st_mode) ? i : -1;
    }
    return -1;
}

static void name_entry(char *list, size_t cap, int n_named, const char *name) {
    size_t at = strlen(list);
    if (n_named < NAMED_MAX) snprintf(list + at, cap - at, "%s%s", n_named ? ", " : "", name);
    else if (n_named == NAMED_MAX) snprintf(list + at, cap - at, ", ...");
}

int df_export_dir_check(const char *dir, DfError *err) {
    struct stat st;
    if (lstat(dir, &st) != 0) return errno == ENOENT ? 0 : df_fail_errno(err, "%s: cannot stat", dir);
    if (!S_ISDIR(st.st_mode)) return 0; /* the export refuses it by kind */
    DIR *d = opendir(dir);
    if (!d) return df_fail_errno(err, "%s: cannot list", dir);
    int seen[N_EXPORT_FILES] = {0}, n_entries = 0, n_other = 0;
    char others[512] = "";
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        n_entries++;
        int k = export_file_index(dir, e->d_name);
        if (k >= 0) seen[k] = 1;
        else name_entry(others, sizeof others, n_other++, e->d_name);
    }
    closedir(d);
    int n_required = 0;
    for (int i = 0; i < N_REQUIRED; i++) n_required += seen[i];
    if (n_entries == 0 || (n_other == 0 && n_required == N_REQUIRED)) return 0;
    if (n_other > 0)
        return df_fail(err, "%s holds %s (%d entr%s besides a drafter's files): export replaces the directory whole, "
                            "so it writes only over an empty directory or a previous export; give a new or empty "
                            "--output", dir, others, n_other, n_other == 1 ? "y" : "ies");
    return df_fail(err, "%s holds only part of a drafter export (no %s): not replacing it; give a new or empty --output",
                   dir, seen[0] ? "model.safetensors" : "config.json");
}
