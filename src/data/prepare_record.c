#include "data/prepare_record.h"
#include "json/json_fields.h"
#include "json/json_parse.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const BAD_KIND_NAMES[DF_BAD_KIND_COUNT] = {
    "invalid JSON", "missing field",  "wrong type", "id out of range", "bad loss mask",
    "empty sample", "no loss tokens", "too long",   "tokenizer error",
};

const char *df_bad_record_name(DfBadRecord kind) {
    return kind >= 0 && kind < DF_BAD_KIND_COUNT ? BAD_KIND_NAMES[kind] : "ok";
}

void df_prepared_record_reset(DfPreparedRecord *r) {
    r->ids.len = r->mask.len = 0;
    r->bad = DF_RECORD_OK;
    r->msg[0] = '\0';
}

void df_prepared_record_free(DfPreparedRecord *r) {
    df_i32vec_free(&r->ids);
    df_bytebuf_free(&r->mask);
    df_chat_messages_free(&r->messages);
}

static void mask_push(DfByteBuf *m, char bit, size_t count) {
    for (size_t i = 0; i < count; i++) df_bytebuf_append(m, &bit, 1);
}

void df_prepared_record_bad(DfPreparedRecord *r, DfBadRecord kind, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
    r->bad = kind;
}

void df_prepare_record_texts(const DfRecordRules *rules, DfPreparedRecord *r, const char *const texts[2], const size_t lens[2]) {
    DfError err = {{0}};
    for (int part = 0; part < 2; part++) { /* encoded separately: the boundary is exact */
        size_t before = r->ids.len;
        if (df_tokenizer_encode(rules->tok, texts[part], lens[part], &r->ids, &err) != 0) {
            df_prepared_record_bad(r, DF_BAD_TOKENIZE, "cannot tokenize the %s: %s", part ? "response" : "prompt", err.msg);
            return;
        }
        mask_push(&r->mask, (char)part, r->ids.len - before);
    }
}

static void encode_prompt_response(const DfRecordRules *rules, DfPreparedRecord *r, const cJSON *prompt, const cJSON *response) {
    if (!prompt || !response) {
        df_prepared_record_bad(r, DF_BAD_MISSING_FIELD, "missing field \"%s\"", prompt ? "response" : "prompt");
        return;
    }
    if (!cJSON_IsString(prompt) || !cJSON_IsString(response)) {
        df_prepared_record_bad(r, DF_BAD_WRONG_TYPE, "field \"%s\" is not a string", cJSON_IsString(prompt) ? "response" : "prompt");
        return;
    }
    const char *texts[2] = {prompt->valuestring, response->valuestring};
    size_t lens[2] = {strlen(texts[0]), strlen(texts[1])};
    df_prepare_record_texts(rules, r, texts, lens);
}

/* Plain text ({"text": ...}, as pretraining and continuation data come):
 * every token is trained on. */
static void encode_text(const DfRecordRules *rules, DfPreparedRecord *r, const cJSON *text) {
    if (!cJSON_IsString(text)) {
        df_prepared_record_bad(r, DF_BAD_WRONG_TYPE, "field \"text\" is not a string");
        return;
    }
    DfError err = {{0}};
    if (df_tokenizer_encode(rules->tok, text->valuestring, strlen(text->valuestring), &r->ids, &err) != 0) {
        df_prepared_record_bad(r, DF_BAD_TOKENIZE, "cannot tokenize the text: %s", err.msg);
        return;
    }
    mask_push(&r->mask, 1, r->ids.len);
}

void df_prepare_record_chat(const DfRecordRules *rules, DfPreparedRecord *r) {
    if (!rules->chat) {
        df_prepared_record_bad(r, DF_BAD_TOKENIZE, "chat record, but %s", rules->chat_error);
        return;
    }
    DfError err = {{0}};
    if (df_chat_tokenize(rules->chat, rules->tok, r->messages.items, r->messages.n, &r->ids, &r->mask, &err) != 0)
        df_prepared_record_bad(r, DF_BAD_TOKENIZE, "cannot render or tokenize the conversation: %s", err.msg);
}

static void encode_chat_json(const DfRecordRules *rules, DfPreparedRecord *r, const cJSON *array, int sharegpt) {
    DfError err = {{0}};
    if (df_records_json_messages(array, sharegpt, &r->messages, &err) != 0) df_prepared_record_bad(r, DF_BAD_WRONG_TYPE, "%s", err.msg);
    else df_prepare_record_chat(rules, r);
}

/* An element of input_ids / loss_mask as an integer, or -1 with *ok = 0. */
static double json_integer(const cJSON *item, int *ok) {
    if (cJSON_IsBool(item)) return *ok = 1, cJSON_IsTrue(item) ? 1.0 : 0.0;
    *ok = cJSON_IsNumber(item) && item->valuedouble == floor(item->valuedouble);
    return *ok ? item->valuedouble : -1;
}

static void read_pretokenized(const DfRecordRules *rules, DfPreparedRecord *r, const cJSON *ids, const cJSON *mask) {
    if (!ids || !mask) {
        df_prepared_record_bad(r, DF_BAD_MISSING_FIELD, "missing field \"%s\"", ids ? "loss_mask" : "input_ids");
        return;
    }
    if (!cJSON_IsArray(ids) || !cJSON_IsArray(mask)) {
        df_prepared_record_bad(r, DF_BAD_WRONG_TYPE, "field \"%s\" is not an array", cJSON_IsArray(ids) ? "loss_mask" : "input_ids");
        return;
    }
    int n_ids = cJSON_GetArraySize(ids), n_mask = cJSON_GetArraySize(mask);
    if (n_ids != n_mask) {
        df_prepared_record_bad(r, DF_BAD_MASK, "loss_mask has %d entries but input_ids has %d", n_mask, n_ids);
        return;
    }
    int k = 0, ok;
    for (const cJSON *it = ids->child; it; it = it->next, k++) {
        double v = json_integer(it, &ok);
        if (!ok || cJSON_IsBool(it)) {
            df_prepared_record_bad(r, DF_BAD_WRONG_TYPE, "input_ids[%d] is not an integer", k);
            return;
        }
        if (v < 0 || v >= rules->vocab_size) {
            df_prepared_record_bad(r, DF_BAD_ID_RANGE, "input_ids[%d] = %.0f is out of range (vocabulary size %d)", k, v,
                     rules->vocab_size);
            return;
        }
        df_i32vec_push(&r->ids, (int32_t)v);
    }
    k = 0;
    for (const cJSON *it = mask->child; it; it = it->next, k++) {
        double v = json_integer(it, &ok);
        if (!ok || (v != 0 && v != 1)) {
            df_prepared_record_bad(r, DF_BAD_MASK, "loss_mask[%d] is not 0 or 1", k);
            return;
        }
        mask_push(&r->mask, (char)v, 1);
    }
}

void df_prepare_record_check(const DfRecordRules *rules, DfPreparedRecord *r) {
    if (r->ids.len == 0) {
        df_prepared_record_bad(r, DF_BAD_EMPTY, "empty sample (no tokens)");
        return;
    }
    size_t loss = 0;
    for (size_t i = 0; i < r->mask.len; i++) loss += (size_t)r->mask.data[i];
    if (loss == 0) {
        df_prepared_record_bad(r, DF_BAD_NO_LOSS, "no loss tokens (empty response or all-zero loss_mask)");
        return;
    }
    if (r->ids.len > (size_t)rules->max_length)
        df_prepared_record_bad(r, DF_BAD_TOO_LONG, "too long: %zu tokens, more than --max-length %d", r->ids.len, rules->max_length);
}

void df_prepare_record(const DfRecordRules *rules, const char *text, size_t len, DfPreparedRecord *r) {
    df_prepared_record_reset(r);
    const char *nul = memchr(text, '\0', len);
    if (nul) {
        df_prepared_record_bad(r, DF_BAD_JSON, "invalid JSON (a NUL byte at column %zu)", (size_t)(nul - text) + 1);
        return;
    }
    cJSON *root = NULL;
    DfError why;
    if (df_json_parse(text, len, NULL, 0, &root, &why) != DF_JSON_OK) {
        df_prepared_record_bad(r, DF_BAD_JSON, "%s", why.msg);
        return;
    }
    if (!cJSON_IsObject(root)) {
        df_prepared_record_bad(r, DF_BAD_WRONG_TYPE, "the record is not a JSON object");
    } else {
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(root, "input_ids");
        const cJSON *mask = cJSON_GetObjectItemCaseSensitive(root, "loss_mask");
        const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
        const cJSON *response = cJSON_GetObjectItemCaseSensitive(root, "response");
        const cJSON *messages = cJSON_GetObjectItemCaseSensitive(root, "messages");
        const cJSON *conversations = cJSON_GetObjectItemCaseSensitive(root, "conversations");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(root, "text");
        if (ids || mask) read_pretokenized(rules, r, ids, mask);
        else if (messages) encode_chat_json(rules, r, messages, 0);
        else if (conversations) encode_chat_json(rules, r, conversations, 1);
        else if (prompt || response) encode_prompt_response(rules, r, prompt, response);
        else if (text) encode_text(rules, r, text);
        else df_prepared_record_bad(r, DF_BAD_MISSING_FIELD, "missing fields: none of \"prompt\"/\"response\", \"input_ids\"/\"loss_mask\", "
                                            "\"messages\", \"conversations\", \"text\"");
        if (r->bad == DF_RECORD_OK) df_prepare_record_check(rules, r);
    }
    cJSON_Delete(root);
}

