/* Loading and validating tokenizer.json (cJSON). Everything that would make
 * us encode differently from `tokenizers` is refused with the file and the
 * field named; post_processor is ignored (it only adds tokens when
 * add_special_tokens=True, which this encoder does not do). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "text/tokenizer_internal.h"
#include "json/json_fields.h"
#include "json/json_parse.h"

#define MAX_IDS (1 << 26) /* refuses absurd ids before allocating tables for them */

typedef struct Ctx {
    DfTokenizer *tok;
    const char *path;
    DfError *err;
    uint64_t fp; /* running fingerprint of what decides the encoding */
} Ctx;

static int field_fail(Ctx *c, const char *field, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int field_fail(Ctx *c, const char *field, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return df_fail(c->err, "%s: field '%s': %s", c->path, field, msg);
}

static void fp_mix(Ctx *c, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) c->fp = (c->fp ^ p[i]) * 0x100000001b3ull;
}
static void fp_str(Ctx *c, const char *s) {
    fp_mix(c, s, strlen(s) + 1);
}
static void fp_u32(Ctx *c, uint32_t x) {
    fp_mix(c, &x, sizeof x);
}

static int is_null(const cJSON *j) {
    return !j || cJSON_IsNull(j);
}

/* Optional boolean member; absent or null gives def. */
static int get_bool(Ctx *c, const cJSON *obj, const char *name, const char *field, int def, int *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (is_null(j)) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(j)) return field_fail(c, field, "expected true or false");
    *out = cJSON_IsTrue(j);
    return 0;
}

static const char *get_type(Ctx *c, const cJSON *obj, const char *field) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "type");
    if (!cJSON_IsObject(obj) || !cJSON_IsString(t)) {
        field_fail(c, field, "expected an object with a string \"type\"");
        return NULL;
    }
    return t->valuestring;
}

static int get_id(Ctx *c, const cJSON *j, const char *field, int32_t *out) {
    double v = cJSON_IsNumber(j) ? j->valuedouble : -1;
    if (!cJSON_IsNumber(j) || v < 0 || v >= MAX_IDS || v != floor(v))
        return field_fail(c, field, "expected a token id, an integer in [0, %d)", MAX_IDS);
    *out = (int32_t)v;
    return 0;
}

/* ---- model ---- */

static int parse_vocab(Ctx *c, const cJSON *vocab) {
    if (!cJSON_IsObject(vocab)) return field_fail(c, "model.vocab", "missing, or not an object of token -> id");
    DfBpe *bpe = &c->tok->bpe;
    uint64_t sum = 0; /* order-independent: the JSON object's order does not matter */
    for (const cJSON *e = vocab->child; e; e = e->next) {
        int32_t id = 0;
        char field[160];
        snprintf(field, sizeof field, "model.vocab[\"%.100s\"]", e->string);
        if (get_id(c, e, field, &id) < 0) return -1;
        df_str_map_put(&bpe->vocab, e->string, strlen(e->string), id);
        if (id >= c->tok->n_ids) c->tok->n_ids = id + 1;
        sum += df_str_hash(e->string, strlen(e->string)) * (2 * (uint64_t)id + 1);
    }
    if (bpe->vocab.count == 0) return field_fail(c, "model.vocab", "the vocabulary is empty");
    fp_mix(c, &sum, sizeof sum);
    return 0;
}

static int32_t vocab_id(Ctx *c, const char *token, size_t len, int index, const char *what) {
    int32_t id = df_str_map_get(&c->tok->bpe.vocab, token, len);
    if (id < 0) {
        char field[64];
        snprintf(field, sizeof field, "model.merges[%d]", index);
        field_fail(c, field, "%s token '%.*s' is not in model.vocab", what, (int)(len > 200 ? 200 : len), token);
    }
    return id;
}

static int parse_merge(Ctx *c, const cJSON *m, int rank, DfByteBuf *joined) {
    const char *a, *b;
    size_t alen, blen;
    if (cJSON_IsString(m)) { /* "left right" */
        a = m->valuestring;
        const char *space = strchr(a, ' ');
        if (!space || strchr(space + 1, ' ')) goto bad;
        alen = (size_t)(space - a);
        b = space + 1;
        blen = strlen(b);
    } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
               cJSON_IsString(m->child->next)) { /* ["left", "right"] */
        a = m->child->valuestring;
        b = m->child->next->valuestring;
        alen = strlen(a);
        blen = strlen(b);
    } else {
        goto bad;
    }
    int32_t left = vocab_id(c, a, alen, rank, "left"), right = left < 0 ? -1 : vocab_id(c, b, blen, rank, "right");
    if (right < 0) return -1;
    joined->len = 0;
    df_bytebuf_append(joined, a, alen);
    df_bytebuf_append(joined, b, blen);
    int32_t merged = vocab_id(c, joined->data, joined->len, rank, "merged");
    if (merged < 0) return -1;
    df_bpe_add_merge(&c->tok->bpe, left, right, merged, (uint32_t)rank);
    fp_u32(c, (uint32_t)left);
    fp_u32(c, (uint32_t)right);
    return 0;
bad:;
    char field[64];
    snprintf(field, sizeof field, "model.merges[%d]", rank);
    return field_fail(c, field, "expected \"left right\" or [\"left\", \"right\"]");
}

static int check_unsupported_model_options(Ctx *c, const cJSON *model) {
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (!is_null(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        return field_fail(c, "model.dropout", "BPE dropout is not supported (it makes encoding random)");
    int byte_fallback;
    if (get_bool(c, model, "byte_fallback", "model.byte_fallback", 0, &byte_fallback) < 0) return -1;
    if (byte_fallback) return field_fail(c, "model.byte_fallback", "byte_fallback=true is not supported");
    const char *affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *j = cJSON_GetObjectItemCaseSensitive(model, affixes[i]);
        char field[64];
        snprintf(field, sizeof field, "model.%s", affixes[i]);
        if (!is_null(j) && !(cJSON_IsString(j) && j->valuestring[0] == '\0'))
            return field_fail(c, field, "only null or \"\" is supported");
    }
    return 0;
}

static int parse_model(Ctx *c, const cJSON *root) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) return field_fail(c, "model", "missing, or not an object");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!is_null(type) && !(cJSON_IsString(type) && strcmp(type->valuestring, "BPE") == 0))
        return field_fail(c, "model.type", "unsupported model '%s' (only BPE is supported)",
                          cJSON_IsString(type) ? type->valuestring : "?");
    if (check_unsupported_model_options(c, model) < 0) return -1;
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsArray(merges)) return field_fail(c, "model.merges", "missing, or not an array");
    DfBpe *bpe = &c->tok->bpe;
    df_bpe_init(bpe, cJSON_IsObject(vocab) ? (size_t)cJSON_GetArraySize(vocab) : 0, (size_t)cJSON_GetArraySize(merges));
    if (parse_vocab(c, vocab) < 0) return -1;
    if (get_bool(c, model, "ignore_merges", "model.ignore_merges", 0, &bpe->ignore_merges) < 0) return -1;
    if (get_bool(c, model, "fuse_unk", "model.fuse_unk", 0, &bpe->fuse_unk) < 0) return -1;
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    if (!is_null(unk)) {
        if (!cJSON_IsString(unk)) return field_fail(c, "model.unk_token", "expected a string or null");
        bpe->unk_id = df_str_map_get(&bpe->vocab, unk->valuestring, strlen(unk->valuestring));
        if (bpe->unk_id < 0) return field_fail(c, "model.unk_token", "'%s' is not in model.vocab", unk->valuestring);
    }
    fp_u32(c, (uint32_t)bpe->ignore_merges);
    fp_u32(c, (uint32_t)bpe->fuse_unk);
    fp_u32(c, (uint32_t)bpe->unk_id);
    DfByteBuf joined = {0};
    int rank = 0, rc = 0;
    for (const cJSON *m = merges->child; m && rc == 0; m = m->next, rank++) rc = parse_merge(c, m, rank, &joined);
    df_bytebuf_free(&joined);
    if (rc < 0) return -1;
    df_bpe_finish(bpe);
    return 0;
}

/* ---- normalizer, pre-tokenizer, decoder ---- */

static int parse_normalizer(Ctx *c, const cJSON *root) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    c->tok->normalizer = DF_NORMALIZER_NONE;
    if (is_null(n)) return 0;
    const char *type = get_type(c, n, "normalizer");
    if (!type) return -1;
    if (strcmp(type, "NFC") == 0) {
        c->tok->normalizer = DF_NORMALIZER_NFC;
    } else if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
        if (!cJSON_IsArray(list)) return field_fail(c, "normalizer.normalizers", "missing, or not an array");
        int i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            char field[64];
            snprintf(field, sizeof field, "normalizer.normalizers[%d].type", i);
            const char *t = get_type(c, e, field);
            if (!t) return -1;
            if (strcmp(t, "NFC") != 0)
                return field_fail(c, field, "unsupported normalizer '%s' (supported: NFC)", t);
            c->tok->normalizer = DF_NORMALIZER_NFC;
        }
    } else {
        return field_fail(c, "normalizer.type", "unsupported normalizer '%s' (supported: NFC, a Sequence of NFC)",
                          type);
    }
    fp_u32(c, (uint32_t)c->tok->normalizer);
    return 0;
}

static int add_split(Ctx *c, const char *pattern, const char *field) {
    if (df_pretokenizer_add_split(&c->tok->pre, pattern, field, c->err) < 0)
        return df_context(c->err, "%s: field '%s'", c->path, field);
    fp_str(c, pattern);
    return 0;
}

static int parse_split(Ctx *c, const cJSON *step, const char *field) {
    char f[96];
    const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(step, "pattern");
    const cJSON *regex = cJSON_GetObjectItemCaseSensitive(pattern, "Regex");
    snprintf(f, sizeof f, "%s.pattern", field);
    if (!cJSON_IsString(regex)) return field_fail(c, f, "only {\"Regex\": \"...\"} patterns are supported");
    const cJSON *behavior = cJSON_GetObjectItemCaseSensitive(step, "behavior");
    snprintf(f, sizeof f, "%s.behavior", field);
    if (!cJSON_IsString(behavior) || strcmp(behavior->valuestring, "Isolated") != 0)
        return field_fail(c, f, "unsupported split behavior '%s' (only Isolated is supported)",
                          cJSON_IsString(behavior) ? behavior->valuestring : "?");
    int invert;
    snprintf(f, sizeof f, "%s.invert", field);
    if (get_bool(c, step, "invert", f, 0, &invert) < 0) return -1;
    if (invert) return field_fail(c, f, "invert=true is not supported");
    snprintf(f, sizeof f, "%s.pattern.Regex", field);
    return add_split(c, regex->valuestring, f);
}

static int parse_byte_level(Ctx *c, const cJSON *step, const char *field) {
    char f[96];
    int add_prefix_space, use_regex;
    snprintf(f, sizeof f, "%s.add_prefix_space", field);
    if (get_bool(c, step, "add_prefix_space", f, 1, &add_prefix_space) < 0) return -1;
    if (add_prefix_space) return field_fail(c, f, "add_prefix_space=true is not supported");
    snprintf(f, sizeof f, "%s.use_regex", field);
    if (get_bool(c, step, "use_regex", f, 1, &use_regex) < 0) return -1;
    return use_regex ? add_split(c, DF_GPT2_SPLIT_PATTERN, f) : 0;
}

/* One step; *byte_level is set once the ByteLevel step is seen (it must come last). */
static int parse_pretok_step(Ctx *c, const cJSON *step, const char *field, int *byte_level) {
    char f[96];
    snprintf(f, sizeof f, "%s.type", field);
    const char *type = get_type(c, step, field);
    if (!type) return -1;
    if (*byte_level) return field_fail(c, f, "a step after ByteLevel is not supported");
    if (strcmp(type, "Split") == 0) return parse_split(c, step, field);
    if (strcmp(type, "ByteLevel") == 0) {
        *byte_level = 1;
        return parse_byte_level(c, step, field);
    }
    return field_fail(c, f, "unsupported pre-tokenizer '%s' (supported: Split, ByteLevel, a Sequence of them)", type);
}

static int parse_pre_tokenizer(Ctx *c, const cJSON *root) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (is_null(p)) return field_fail(c, "pre_tokenizer", "missing (a byte-level BPE needs a ByteLevel pre-tokenizer)");
    const char *type = get_type(c, p, "pre_tokenizer");
    if (!type) return -1;
    int byte_level = 0;
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
        if (!cJSON_IsArray(list)) return field_fail(c, "pre_tokenizer.pretokenizers", "missing, or not an array");
        int i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            char field[64];
            snprintf(field, sizeof field, "pre_tokenizer.pretokenizers[%d]", i);
            if (parse_pretok_step(c, e, field, &byte_level) < 0) return -1;
        }
    } else if (parse_pretok_step(c, p, "pre_tokenizer", &byte_level) < 0) {
        return -1;
    }
    if (!byte_level) return field_fail(c, "pre_tokenizer", "no ByteLevel step (only byte-level BPE is supported)");
    return 0;
}

static int parse_decoder(Ctx *c, const cJSON *root) {
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if (is_null(d)) return field_fail(c, "decoder", "missing (only the ByteLevel decoder is supported)");
    const char *type = get_type(c, d, "decoder");
    if (!type) return -1;
    if (strcmp(type, "ByteLevel") != 0)
        return field_fail(c, "decoder.type", "unsupported decoder '%s' (only ByteLevel is supported)", type);
    return 0;
}

/* ---- added tokens ---- */

static int parse_added_token(Ctx *c, const cJSON *e, int index, int32_t *next_id) {
    char field[64], f[96];
    snprintf(field, sizeof field, "added_tokens[%d]", index);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
    snprintf(f, sizeof f, "%s.content", field);
    if (!cJSON_IsObject(e) || !cJSON_IsString(content)) return field_fail(c, f, "missing, or not a string");
    if (content->valuestring[0] == '\0') return 0; /* `tokenizers` ignores an empty added token */
    int flags[5];
    const char *names[5] = {"single_word", "lstrip", "rstrip", "normalized", "special"};
    const int defaults[5] = {0, 0, 0, 1, 0};
    for (int i = 0; i < 5; i++) {
        snprintf(f, sizeof f, "%s.%s", field, names[i]);
        if (get_bool(c, e, names[i], f, defaults[i], &flags[i]) < 0) return -1;
    }
    /* The id, as `tokenizers` assigns it: the id the content already has (as
     * an added token or in the vocabulary), else the next free one. */
    DfAddedTokens *a = &c->tok->added;
    size_t len = strlen(content->valuestring);
    int32_t existing = df_added_tokens_find(a, content->valuestring, len);
    DfAddedToken t = {.content = df_xstrdup(content->valuestring), .content_len = len};
    t.id = existing >= 0 ? a->tokens[existing].id : df_str_map_get(&c->tok->bpe.vocab, t.content, len);
    if (t.id < 0) t.id = (*next_id)++;
    t.single_word = (uint8_t)flags[0], t.lstrip = (uint8_t)flags[1], t.rstrip = (uint8_t)flags[2];
    t.normalized = (uint8_t)flags[3], t.special = (uint8_t)flags[4];
    t.pattern = t.content;
    t.pattern_len = len;
    if (t.normalized) {
        size_t norm_len;
        char *norm = df_normalize(c->tok->normalizer, t.content, len, &norm_len, c->err);
        if (!norm && norm_len == SIZE_MAX) {
            free(t.content);
            return df_context(c->err, "%s: field '%s'", c->path, f);
        }
        if (norm) t.pattern = norm, t.pattern_len = norm_len;
    }
    if (existing >= 0) { /* a repeated content updates the earlier entry */
        DfAddedToken *old = &a->tokens[existing];
        if (old->pattern != old->content) free(old->pattern);
        free(old->content);
        *old = t;
    } else {
        df_added_tokens_add(a, t);
    }
    if (t.id >= c->tok->n_ids) c->tok->n_ids = t.id + 1;
    fp_u32(c, (uint32_t)t.id);
    fp_str(c, t.content);
    fp_mix(c, flags, sizeof flags);
    return 0;
}

static int parse_added_tokens(Ctx *c, const cJSON *root) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (is_null(list)) return 0;
    if (!cJSON_IsArray(list)) return field_fail(c, "added_tokens", "not an array");
    int32_t next_id = (int32_t)c->tok->bpe.vocab.count;
    int i = 0;
    for (const cJSON *e = list->child; e; e = e->next, i++) {
        if (parse_added_token(c, e, i, &next_id) < 0) return -1;
        if (next_id >= MAX_IDS) return field_fail(c, "added_tokens", "too many tokens");
    }
    df_added_tokens_build(&c->tok->added);
    return 0;
}

static int check_not_set(Ctx *c, const cJSON *root, const char *name) {
    if (!is_null(cJSON_GetObjectItemCaseSensitive(root, name)))
        return field_fail(c, name, "must be null: %s is not supported", name);
    return 0;
}

int df_tokenizer_parse_json(DfTokenizer *tok, const char *json, size_t len, const char *path, DfError *err) {
    Ctx c = {tok, path, err, 0xcbf29ce484222325ull};
    cJSON *root = NULL;
    DfError why;
    int parsed = df_json_parse(json, len, path, 0, &root, &why);
    if (parsed == DF_JSON_NUL) return df_fail(err, "%s", why.msg);
    if (parsed != DF_JSON_OK) {
        const char *near = strstr(why.msg, " (error near");
        return df_fail(err, "%s: invalid JSON%s", path, near ? near : "");
    }
    int rc = -1;
    if (!cJSON_IsObject(root)) {
        df_fail(err, "%s: expected a JSON object at the top level", path);
    } else if (check_not_set(&c, root, "truncation") == 0 && check_not_set(&c, root, "padding") == 0 &&
               parse_normalizer(&c, root) == 0 && parse_model(&c, root) == 0 && parse_pre_tokenizer(&c, root) == 0 &&
               parse_decoder(&c, root) == 0 && parse_added_tokens(&c, root) == 0) {
        tok->fingerprint = c.fp;
        rc = 0;
    }
    cJSON_Delete(root);
    return rc;
}
