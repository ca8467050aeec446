#include "infer/chat_turns.h"

#include <stdlib.h>
#include <string.h>

static int first_user(const DfPrompt *p) {
    for (int i = 0; i < p->n_turns; i++)
        if (p->turns[i].parsed == DF_ROLE_USER) return i;
    return p->n_turns;
}

static int is_generated(const DfPrompt *p, int i, int first) {
    return i > first && p->turns[i].parsed == DF_ROLE_ASSISTANT;
}

static int ends_with_user(const DfPrompt *p) {
    return p->n_turns > 0 && p->turns[p->n_turns - 1].parsed == DF_ROLE_USER;
}

int df_chat_turns_count(const DfPrompt *p) {
    int first = first_user(p), n = ends_with_user(p);
    for (int i = 0; i < p->n_turns; i++) n += is_generated(p, i, first);
    return n;
}

int df_chat_turn_prompt(const DfChatTemplate *t, const DfPrompt *p, int k, const char *const *responses, DfByteBuf *text,
                        DfError *err) {
    int first = first_user(p), turn = 0, n = 0;
    DfChatMessage *msgs = df_xmalloc((size_t)(p->n_turns > 0 ? p->n_turns : 1) * sizeof *msgs, "chat turn");
    for (int i = 0; i < p->n_turns; i++) {
        const char *content = p->turns[i].content;
        if (is_generated(p, i, first)) {
            if (turn == k) break;
            content = responses[turn++];
        }
        msgs[n++] = (DfChatMessage){p->turns[i].parsed, content, strlen(content)};
    }
    int rc = turn == k ? df_chat_render_prompt(t, msgs, n, text, err)
                       : df_fail(err, "conversation: no generated turn %d", k);
    free(msgs);
    return rc;
}

int df_chat_last_turn_prompt(const DfChatTemplate *t, const DfPrompt *p, DfByteBuf *text, DfError *err) {
    int count = df_chat_turns_count(p), first = first_user(p), n = 0;
    const char **given = df_xmalloc((size_t)count * sizeof *given, "chat turns");
    for (int i = 0; i < p->n_turns && n < count; i++)
        if (is_generated(p, i, first)) given[n++] = p->turns[i].content;
    int rc = df_chat_turn_prompt(t, p, count - 1, given, text, err);
    free(given);
    return rc;
}

/* The name the output gives an appended assistant turn: that of the
 * conversation's other assistant turns, else the form's own. */
static const char *assistant_name(const DfPrompt *p) {
    for (int i = 0; i < p->n_turns; i++)
        if (p->turns[i].parsed == DF_ROLE_ASSISTANT) return p->turns[i].role;
    return p->sharegpt ? "gpt" : "assistant";
}

static void add_message(cJSON *array, const DfPrompt *p, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, p->sharegpt ? "from" : "role", role);
    cJSON_AddStringToObject(m, p->sharegpt ? "value" : "content", content);
    cJSON_AddItemToArray(array, m);
}

cJSON *df_chat_turns_record(const DfPrompt *p, const char *const *responses) {
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddItemToObject(rec, "id", cJSON_Parse(p->id_json));
    cJSON *array = cJSON_AddArrayToObject(rec, p->sharegpt ? "conversations" : "messages");
    int first = first_user(p), turn = 0;
    for (int i = 0; i < p->n_turns; i++)
        add_message(array, p, p->turns[i].role, is_generated(p, i, first) ? responses[turn++] : p->turns[i].content);
    if (ends_with_user(p)) add_message(array, p, assistant_name(p), responses[turn]);
    return rec;
}

int df_chat_end_of_turn_id(const DfChatTemplate *t, const DfTokenizer *tok, int32_t *id, DfError *err) {
    return df_chat_template_end_of_turn(t, tok, id, err);
}

DfChatTemplate *df_chat_open(const char *target_dir, const DfChatOptions *opt, DfError *err) {
    DfChatOptions none = {0};
    if (!opt) opt = &none;
    DfChatTemplate *t = df_chat_template_open(target_dir, opt->template_file, opt->kwargs, err);
    if (t && opt->date && df_chat_template_set_date(t, opt->date, err)) {
        df_context(err, "--chat-date");
        df_chat_template_free(t);
        return NULL;
    }
    return t;
}

int df_chat_render_last_turns(DfPromptSet *set, const char *target_dir, const DfChatOptions *opt, const char *input,
                              DfError *err) {
    if (!set->n_chat) return 0;
    DfError why;
    DfChatTemplate *t = df_chat_open(target_dir, opt, &why);
    if (!t)
        return df_fail(err, "%s has %d conversations, rendered with the target's chat template: %s", input,
                       set->n_chat, why.msg);
    int rc = 0;
    for (int i = 0; rc == 0 && i < set->n; i++) {
        DfPrompt *p = &set->items[i];
        if (p->text) continue;
        DfByteBuf text = {0};
        if (df_chat_last_turn_prompt(t, p, &text, &why))
            rc = df_fail(err, "%s:%lld (id %s): %s", input, (long long)p->line_no, p->id_json, why.msg);
        else p->text = df_xstrdup(text.data ? text.data : "");
        df_bytebuf_free(&text);
    }
    df_chat_template_free(t);
    return rc;
}
