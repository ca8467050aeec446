#define _XOPEN_SOURCE 700 /* realpath */
#include "train/train_data.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/atomic_file.h"
#include "base/hash64.h"
#include "base/input_file.h"
#include "data/prepare.h"
#include "formats/json_diff.h"
#include "formats/token_store.h"
#include "target/model_config.h"
#include "text/tokenizer.h"
#include "train/run_dir.h"

/* ---- data: a token store as it is, or JSONL prepared into a cache ------- */

static int is_token_store(const char *path, int *yes, DfError *err) {
    FILE *fp = df_fopen_regular(path, err);
    if (!fp) return df_context(err, "--data");
    char magic[8] = {0};
    size_t got = fread(magic, 1, sizeof magic, fp);
    fclose(fp);
    *yes = got == sizeof magic && memcmp(magic, DF_TOKEN_STORE_MAGIC, sizeof magic) == 0;
    return 0;
}

/* df_hash64 of the file's bytes (read in 1 MiB chunks); option names the file in errors. */
static int content_hash(const char *path, const char *option, uint64_t *out, DfError *err) {
    FILE *fp = df_fopen_regular(path, err);
    if (!fp) return df_context(err, "%s", option);
    DfHash64 h;
    df_hash64_init(&h);
    size_t cap = 1 << 20, n;
    char *buf = df_xmalloc(cap, "data hash buffer");
    while ((n = fread(buf, 1, cap, fp)) > 0) df_hash64_update(&h, buf, n);
    int bad = ferror(fp);
    fclose(fp);
    free(buf);
    if (bad) return df_fail(err, "%s %s: read error", option, path);
    *out = df_hash64_final(&h);
    return 0;
}

/* The chat options the data was rendered with, only when given (a key
 * without them is that of a rendering with the target's template and no
 * variables): the template's path and content hash, the variables as
 * normalized JSON. */
static void add_chat_key(cJSON *j, const DfTrainOptions *o, uint64_t template_hash) {
    if (o->chat_template) {
        char *abs = realpath(o->chat_template, NULL), text[32];
        cJSON_AddStringToObject(j, "chat_template", abs ? abs : o->chat_template);
        free(abs);
        snprintf(text, sizeof text, "%016llx", (unsigned long long)template_hash);
        cJSON_AddStringToObject(j, "chat_template_hash", text);
    }
    if (!o->chat_kwargs) return;
    cJSON *kwargs = cJSON_Parse(o->chat_kwargs);
    if (kwargs) cJSON_AddItemToObject(j, "chat_template_kwargs", kwargs);
    else cJSON_AddStringToObject(j, "chat_template_kwargs", o->chat_kwargs);
}

/* What the cache was made from: the source's path, size and content hash,
 * the tokenizer's fingerprint, the length limit and the chat options. */
static char *cache_key(const DfTrainOptions *o, const struct stat *st, uint64_t hash, uint64_t fingerprint,
                       uint64_t template_hash) {
    const char *source = o->data_source;
    int max_length = (int)o->max_length;
    char *abs = realpath(source, NULL);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "source", abs ? abs : source);
    cJSON_AddNumberToObject(j, "size", (double)st->st_size);
    char text[64];
    snprintf(text, sizeof text, "%016llx", (unsigned long long)hash);
    cJSON_AddStringToObject(j, "content_hash", text);
    snprintf(text, sizeof text, "%016llx", (unsigned long long)fingerprint);
    cJSON_AddStringToObject(j, "tokenizer_fingerprint", text);
    cJSON_AddNumberToObject(j, "max_length", max_length);
    add_chat_key(j, o, template_hash);
    char *out = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    free(abs);
    return out;
}

/* The key of earlier versions (path, size, mtime; no content hash): still
 * current when the source's path, size and mtime are unchanged. */
static int legacy_key_matches(const char *stored, const char *source, const struct stat *st, uint64_t fingerprint,
                              int max_length) {
    if (!strstr(stored, "\"mtime\"") || strstr(stored, "\"content_hash\"")) return 0;
    char *abs = realpath(source, NULL);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "source", abs ? abs : source);
    cJSON_AddNumberToObject(j, "size", (double)st->st_size);
    char text[64];
    snprintf(text, sizeof text, "%lld.%09ld", (long long)st->st_mtim.tv_sec, (long)st->st_mtim.tv_nsec);
    cJSON_AddStringToObject(j, "mtime", text);
    snprintf(text, sizeof text, "%016llx", (unsigned long long)fingerprint);
    cJSON_AddStringToObject(j, "tokenizer_fingerprint", text);
    cJSON_AddNumberToObject(j, "max_length", max_length);
    char *legacy = cJSON_PrintUnformatted(j);
    int same = strcmp(legacy, stored) == 0;
    cJSON_free(legacy);
    cJSON_Delete(j);
    free(abs);
    return same;
}

/* The key file's text ("" when absent). */
static void read_key(const char *key_path, char *stored, size_t cap) {
    stored[0] = '\0';
    DfError ignored;
    FILE *fp = df_fopen_regular(key_path, &ignored);
    if (!fp) return;
    size_t n = fread(stored, 1, cap - 1, fp);
    fclose(fp);
    stored[n] = '\0';
}

static int cache_is_current(const char *store_path, const char *stored, const char *key, uint64_t fingerprint) {
    if (strcmp(stored, key) != 0) return 0;
    DfError ignored = {{0}};
    DfTokenStore *s = df_token_store_open(store_path, 0, &ignored);
    int ok = s && df_token_store_fingerprint(s) == fingerprint;
    if (s) df_token_store_close(s);
    return ok;
}

/* Whether OUTPUT/checkpoints holds a checkpoint: a --resume would continue it. */
static int has_checkpoints(const char *output_dir) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/checkpoints", output_dir);
    DIR *d = opendir(dir);
    int found = 0;
    for (struct dirent *e; d && !found && (e = readdir(d));)
        found = strncmp(e->d_name, "step-", 5) == 0 && !strstr(e->d_name, ".tmp.");
    if (d) closedir(d);
    return found;
}

/* --resume over checkpoints trained on the prepared data: preparing it again
 * from a changed source would break the resume (and replace the data the
 * checkpoints were trained on), so it is refused before anything is touched. */
static int check_resume_source(const DfTrainOptions *o, const char *stored, const char *key, const char *key_path,
                               DfError *err) {
    if (!o->resume || !has_checkpoints(o->output_dir)) return 0;
    char what[4400];
    if (!stored[0])
        snprintf(what, sizeof what, "%s, which says what the data was made from, is missing", key_path);
    else if (!df_json_diff(stored, key, what, sizeof what))
        return 0;
    return df_fail(err,
                   "--resume: --data %s is not what %s/data.store was prepared from (%s); the checkpoints in "
                   "%s/checkpoints were trained on that data, and preparing it again would break the resume: "
                   "restore the source, or start a new run in another --output (nothing was changed)",
                   o->data_source, o->output_dir, what, o->output_dir);
}

/* mkdir -p: creates the directory and any missing parents. */
/* --data prepared into store_path as `dflash prepare` would (the same
 * pipeline and report); its errors say so and where ("--data X: ..."). */
static int prepare_data(const DfTrainOptions *o, const char *store_path, DfError *err) {
    const char *inputs[] = {o->data_source};
    /* bad records skipped, every core, the template's date */
    DfPrepareOptions p = {.tokenizer = o->target_dir, .inputs = inputs, .n_inputs = 1, .output = store_path,
                          .max_length = (int)o->max_length, .chat_template = o->chat_template,
                          .chat_kwargs = o->chat_kwargs, .quiet = o->quiet};
    DfPrepareSummary summary;
    if (df_prepare(&p, &summary, err) != 0) return df_context(err, "--data %s", o->data_source);
    df_prepare_summary_print(&p, &summary);
    return 0;
}

/* Prepares the JSONL file into OUTPUT/data.store (prepare_data), unless the
 * cache is current. */
static int prepare_cache(const DfTrainOptions *o, const DfTokenizer *tok, char *store_path, size_t cap,
                         DfError *err) {
    struct stat st;
    uint64_t hash = 0;
    if (stat(o->data_source, &st) != 0) return df_fail_errno(err, "--data %s", o->data_source);
    if (content_hash(o->data_source, "--data", &hash, err)) return -1;
    uint64_t template_hash = 0;
    if (o->chat_template && content_hash(o->chat_template, "--chat-template", &template_hash, err)) return -1;
    snprintf(store_path, cap, "%s/data.store", o->output_dir);
    char key_path[4200], stored[8192];
    snprintf(key_path, sizeof key_path, "%s.source.json", store_path);
    read_key(key_path, stored, sizeof stored);
    uint64_t fingerprint = df_tokenizer_fingerprint(tok);
    char *key = cache_key(o, &st, hash, fingerprint, template_hash);
    int plain = !o->chat_template && !o->chat_kwargs; /* earlier keys had no chat options */
    if (plain && legacy_key_matches(stored, o->data_source, &st, fingerprint, (int)o->max_length))
        snprintf(stored, sizeof stored, "%s", key);
    int rc = 0;
    if (cache_is_current(store_path, stored, key, fingerprint)) {
        if (!o->quiet) fprintf(stderr, "train: using the prepared data %s (made from %s)\n", store_path, o->data_source);
    } else if ((rc = check_resume_source(o, stored, key, key_path, err)) == 0) {
        if (!o->quiet) fprintf(stderr, "train: preparing %s into %s\n", o->data_source, store_path);
        remove(key_path);
        rc = prepare_data(o, store_path, err);
        if (rc == 0) rc = df_atomic_write_text(key_path, key, 0, err);
    }
    cJSON_free(key);
    return rc;
}

/* Spec section 7: the first id past the tokenizer's vocabulary, which must
 * still have a row in the target's embedding. */
static int default_mask_token(const DfTokenizer *tok, const DfModelConfig *cfg, const char *target, int *id,
                              DfError *err) {
    int v = df_tokenizer_vocab_size(tok);
    if (v >= cfg->vocab_size)
        return df_fail(err,
                       "%s: the tokenizer uses all %d embedding rows, so there is no spare row for the mask token; "
                       "give --mask-token-id",
                       target, cfg->vocab_size);
    *id = v;
    return 0;
}

/* A store made with another tokenizer holds ids that mean other tokens. */
static int check_store_tokenizer(const char *path, const DfTokenizer *tok, const char *target, DfError *err) {
    DfTokenStore *s = df_token_store_open(path, 0, err);
    if (!s) return df_context(err, "--data");
    uint64_t have = df_token_store_fingerprint(s), want = df_tokenizer_fingerprint(tok);
    df_token_store_close(s);
    if (have != want)
        return df_fail(err,
                       "--data %s was tokenized with another tokenizer (fingerprint %016llx) than the target %s's "
                       "(%016llx); prepare it again with --tokenizer %s",
                       path, (unsigned long long)have, target, (unsigned long long)want, target);
    return 0;
}

int df_train_resolve_data(DfTrainOptions *o, char *store_path, size_t cap, DfError *err) {
    DfModelConfig cfg;
    if (df_model_config_load(&cfg, o->target_dir, err)) return df_context(err, "--target");
    int store = 0;
    if (is_token_store(o->data_source, &store, err)) return -1;
    if (df_run_dir_make_all(o->output_dir, err)) return df_context(err, "--output");
    if (store && o->mask_token_id >= 0) {
        snprintf(store_path, cap, "%s", o->data_source);
        return 0;
    }
    DfTokenizer *tok = df_tokenizer_load(o->target_dir, err);
    if (!tok) return df_context(err, "--target");
    int rc = 0;
    if (o->mask_token_id < 0) rc = default_mask_token(tok, &cfg, o->target_dir, &o->mask_token_id, err);
    if (rc == 0) {
        if (store) {
            snprintf(store_path, cap, "%s", o->data_source);
            rc = check_store_tokenizer(store_path, tok, o->target_dir, err);
        } else {
            rc = prepare_cache(o, tok, store_path, cap, err);
        }
    }
    df_tokenizer_free(tok);
    return rc;
}
