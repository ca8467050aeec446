/* Records -> sample pieces (see records.h). */
#include <string.h>

#include "data/records.h"
#include "text/chat_template.h"

void df_chat_messages_free(DfChatMessages *m) {
    free(m->items);
    memset(m, 0, sizeof *m);
}

static void push_message(DfChatMessages *m, DfChatMessage msg) {
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 8;
        m->items = df_xrealloc(m->items, (size_t)m->cap * sizeof *m->items, "chat messages");
    }
    m->items[m->n++] = msg;
}

int df_records_json_messages(const cJSON *array, int sharegpt, DfChatMessages *out, DfError *err) {
    const char *role_key = sharegpt ? "from" : "role", *text_key = sharegpt ? "value" : "content";
    const char *field = sharegpt ? "conversations" : "messages";
    out->n = 0;
    if (!cJSON_IsArray(array)) return df_fail(err, "field \"%s\" is not an array", field);
    int k = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, array) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, role_key);
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(m, text_key);
        if (!cJSON_IsString(role) || !cJSON_IsString(text))
            return df_fail(err, "%s[%d]: \"%s\" and \"%s\" must be strings", field, k, role_key, text_key);
        int r = df_chat_role_parse(role->valuestring, strlen(role->valuestring));
        if (r < 0) return df_fail(err, "%s[%d]: unknown role \"%.40s\"", field, k, role->valuestring);
        push_message(out, (DfChatMessage){(DfChatRole)r, text->valuestring, strlen(text->valuestring), m});
        k++;
    }
    return 0;
}

const char *df_records_layout_name(DfRecordLayoutKind kind) {
    static const char *const NAMES[] = {"input_ids + loss_mask", "input_ids + labels", "messages", "conversations",
                                        "prompt + response"};
    return NAMES[kind];
}

static int is_int_list(const DfArrowField *f) {
    return f->kind == DF_ARROW_LIST && f->children[0].kind == DF_ARROW_INT;
}

static int find_checked(const DfArrowSchema *s, const char *name, int (*ok)(const DfArrowField *), const char *want,
                        int *col, DfError *err) {
    *col = df_arrow_schema_find(s, name);
    if (*col < 0) return df_fail(err, "no column \"%s\"", name);
    if (!ok(&s->fields[*col])) {
        char type[256];
        df_arrow_type_string(&s->fields[*col], type, sizeof type);
        return df_fail(err, "column \"%s\" is %s, not %s", name, type, want);
    }
    return 0;
}

static int is_string(const DfArrowField *f) { return f->kind == DF_ARROW_STRING; }

static int chat_layout(const DfArrowSchema *s, const char *name, const char *role, const char *text,
                       DfRecordLayout *out, DfError *err) {
    const DfArrowField *f = &s->fields[out->col[0]];
    const DfArrowField *item = f->kind == DF_ARROW_LIST ? &f->children[0] : NULL;
    int r = item && item->kind == DF_ARROW_STRUCT ? df_arrow_field_find_child(item, role) : -1;
    int t = item && item->kind == DF_ARROW_STRUCT ? df_arrow_field_find_child(item, text) : -1;
    if (r < 0 || t < 0 || !is_string(&item->children[r]) || !is_string(&item->children[t]))
        return df_fail(err, "column \"%s\" is not list<struct<%s: string, %s: string>>", name, role, text);
    out->field[0] = r, out->field[1] = t;
    return 0;
}

int df_records_arrow_layout(const DfArrowSchema *s, DfRecordLayout *out, DfError *err) {
    memset(out, 0, sizeof *out);
    if (df_arrow_schema_find(s, "input_ids") >= 0) {
        int has_mask = df_arrow_schema_find(s, "loss_mask") >= 0;
        out->kind = has_mask ? DF_LAYOUT_PRETOKENIZED : DF_LAYOUT_LABELS;
        if (find_checked(s, "input_ids", is_int_list, "a list of integers", &out->col[0], err) < 0) return -1;
        return find_checked(s, has_mask ? "loss_mask" : "labels", is_int_list, "a list of integers", &out->col[1], err);
    }
    if ((out->col[0] = df_arrow_schema_find(s, "messages")) >= 0) {
        out->kind = DF_LAYOUT_MESSAGES;
        return chat_layout(s, "messages", "role", "content", out, err);
    }
    if ((out->col[0] = df_arrow_schema_find(s, "conversations")) >= 0) {
        out->kind = DF_LAYOUT_CONVERSATIONS;
        return chat_layout(s, "conversations", "from", "value", out, err);
    }
    if (df_arrow_schema_find(s, "prompt") >= 0 || df_arrow_schema_find(s, "response") >= 0) {
        out->kind = DF_LAYOUT_PROMPT_RESPONSE;
        if (find_checked(s, "prompt", is_string, "a string", &out->col[0], err) < 0) return -1;
        return find_checked(s, "response", is_string, "a string", &out->col[1], err);
    }
    return df_fail(err, "no usable columns: expected input_ids with loss_mask or labels, messages, conversations, "
                        "or prompt and response");
}

int df_records_arrow_ids(const DfRecordLayout *l, const DfArrowBatch *b, int64_t row, int vocab_size, DfI32Vec *ids,
                         DfByteBuf *mask, DfError *err) {
    const DfArrowArray *id_col = &b->columns[l->col[0]], *m_col = &b->columns[l->col[1]];
    const char *m_name = l->kind == DF_LAYOUT_LABELS ? "labels" : "loss_mask";
    if (df_arrow_is_null(id_col, row) || df_arrow_is_null(m_col, row))
        return df_fail(err, "%s is null", df_arrow_is_null(id_col, row) ? "input_ids" : m_name);
    int64_t i0, i1, m0, m1;
    df_arrow_list_range(id_col, row, &i0, &i1);
    df_arrow_list_range(m_col, row, &m0, &m1);
    if (i1 - i0 != m1 - m0)
        return df_fail(err, "%s has %lld entries but input_ids has %lld", m_name, (long long)(m1 - m0), (long long)(i1 - i0));
    const DfArrowArray *iv = &id_col->children[0], *mv = &m_col->children[0];
    for (int64_t k = 0; k < i1 - i0; k++) {
        if (df_arrow_is_null(iv, i0 + k) || df_arrow_is_null(mv, m0 + k))
            return df_fail(err, "%s[%lld] is null", df_arrow_is_null(iv, i0 + k) ? "input_ids" : m_name, (long long)k);
        int64_t id = df_arrow_int(iv, i0 + k), m = df_arrow_int(mv, m0 + k);
        if (id < 0 || id >= vocab_size) /* a uint64 above INT64_MAX reads as negative */
            return df_fail(err, "input_ids[%lld] = %lld is out of range (vocabulary size %d)", (long long)k, (long long)id,
                           vocab_size);
        char bit;
        if (l->kind == DF_LAYOUT_LABELS) bit = m != -100;
        else if (m == 0 || m == 1) bit = (char)m;
        else return df_fail(err, "loss_mask[%lld] is not 0 or 1", (long long)k);
        df_i32vec_push(ids, (int32_t)id);
        df_bytebuf_append(mask, &bit, 1);
    }
    return 0;
}

int df_records_arrow_messages(const DfRecordLayout *l, const DfArrowBatch *b, int64_t row, DfChatMessages *out,
                              DfError *err) {
    const char *name = l->kind == DF_LAYOUT_MESSAGES ? "messages" : "conversations";
    const DfArrowArray *list = &b->columns[l->col[0]];
    out->n = 0;
    if (df_arrow_is_null(list, row)) return df_fail(err, "%s is null", name);
    int64_t start, end;
    df_arrow_list_range(list, row, &start, &end);
    const DfArrowArray *item = &list->children[0];
    const DfArrowArray *role = &item->children[l->field[0]], *text = &item->children[l->field[1]];
    for (int64_t k = start; k < end; k++) {
        if (df_arrow_is_null(item, k) || df_arrow_is_null(role, k) || df_arrow_is_null(text, k))
            return df_fail(err, "%s[%lld] or one of its fields is null", name, (long long)(k - start));
        size_t role_len, text_len;
        const char *r = df_arrow_string(role, k, &role_len), *t = df_arrow_string(text, k, &text_len);
        int parsed = df_chat_role_parse(r, role_len);
        if (parsed < 0) return df_fail(err, "%s[%lld]: unknown role \"%.*s\"", name, (long long)(k - start),
                                       (int)(role_len < 40 ? role_len : 40), r);
        push_message(out, (DfChatMessage){(DfChatRole)parsed, t, text_len});
    }
    return 0;
}

int df_records_arrow_strings(const DfRecordLayout *l, const DfArrowBatch *b, int64_t row, const char *text[2],
                             size_t len[2], DfError *err) {
    static const char *const NAMES[2] = {"prompt", "response"};
    for (int k = 0; k < 2; k++) {
        const DfArrowArray *a = &b->columns[l->col[k]];
        if (df_arrow_is_null(a, row)) return df_fail(err, "%s is null", NAMES[k]);
        text[k] = df_arrow_string(a, row, &len[k]);
    }
    return 0;
}
