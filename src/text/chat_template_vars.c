/* Template variables from parsed messages (see chat_template_vars.h). */
#include "text/chat_template_vars.h"

#include <string.h>

#include "text/jinja/from_json.h"
#include "text/tokenizer_offsets.h"
#include "text/utf8.h"

static const char *const ROLE_NAMES[] = {"system", "user", "assistant", "tool"};

static void set(JArena *a, JDict *d, const char *key, JVal v) { jv_dict_set(a, d, jv_cstr(key), v); }

/* The content as the tokenizer's normalizer leaves it, copied into the arena. */
static int content_value(JArena *a, const DfChatMessage *m, const DfTokenizer *tok, int tag, JVal *out,
                         DfError *err) {
    if (!tok) {
        *out = jv_str(m->content, m->content_len, tag);
        return 0;
    }
    DfByteBuf norm = {0};
    int rc = df_tokenizer_normalize(tok, m->content, m->content_len, &norm, err);
    if (rc == 0) {
        *out = jv_str_copy(a, norm.data ? norm.data : "", norm.len);
        out->tag = tag;
    }
    df_bytebuf_free(&norm);
    return rc;
}

static int message_value(JArena *a, const DfChatMessage *m, int i, const DfTokenizer *tok, JVal *out, DfError *err) {
    size_t bad = df_utf8_first_invalid((const unsigned char *)m->content, m->content_len);
    if (bad < m->content_len) return df_fail(err, "message %d: the content is not valid UTF-8 (byte %zu)", i, bad);
    int tag = i; /* assistant messages: their spans; the others: where those spans end */
    JVal content, d = jv_dict(a);
    if (content_value(a, m, tok, tag, &content, err)) return -1;
    set(a, d.u.d, "role", jv_cstr(ROLE_NAMES[m->role]));
    set(a, d.u.d, "content", content);
    for (const cJSON *f = m->json ? m->json->child : NULL; f; f = f->next) {
        static const char *const skip[] = {"role", "content", "from", "value"};
        int known = 0;
        for (int k = 0; k < 4; k++) known |= strcmp(f->string, skip[k]) == 0;
        if (!known) set(a, d.u.d, f->string, jv_from_cjson(a, f, tag));
    }
    *out = d;
    return 0;
}

int df_chat_vars(JArena *a, const DfChatVarsIn *in, JDict **out, DfError *err) {
    JVal vars = jv_dict(a), msgs = jv_list(a);
    for (int i = 0; i < in->n; i++) {
        JVal m;
        if (message_value(a, &in->msgs[i], i, in->normalize_with, &m, err)) return -1;
        jv_list_push(a, msgs.u.l, m);
    }
    set(a, vars.u.d, "messages", msgs);
    set(a, vars.u.d, "add_generation_prompt", jv_bool(in->generation_prompt));
    for (int i = 0; i < 4; i++)
        if (in->special[i]) set(a, vars.u.d, in->special_names[i], jv_cstr(in->special[i]));
    if (in->date) set(a, vars.u.d, "date_string", jv_cstr(in->date));
    for (const cJSON *k = in->kwargs ? in->kwargs->child : NULL; k; k = k->next)
        set(a, vars.u.d, k->string, jv_from_cjson(a, k, -1));
    *out = vars.u.d;
    return 0;
}
