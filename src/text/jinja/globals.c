/* Global functions of the chat-template environment: range, namespace,
 * dict, raise_exception and strftime_now (transformers' additions). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "text/jinja/interp.h"

enum { G_RANGE, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME, G_COUNT };
static const char *const NAMES[G_COUNT] = {"range", "namespace", "dict", "raise_exception", "strftime_now"};

int jx_builtin_id(const char *name, size_t n) {
    for (int i = 0; i < G_COUNT; i++)
        if (strlen(NAMES[i]) == n && memcmp(NAMES[i], name, n) == 0) return i;
    return -1;
}

static int range(JCtx *c, const JNode *at, JArgs *args, JVal *out) {
    int64_t v[3] = {0, 0, 1};
    for (size_t i = 0; i < args->npos; i++)
        if (args->pos[i].type != JV_INT) return jx_fail(c, at, "range needs integers");
    if (args->npos == 1) v[1] = args->pos[0].u.i;
    else if (args->npos >= 2) {
        v[0] = args->pos[0].u.i;
        v[1] = args->pos[1].u.i;
        if (args->npos == 3) v[2] = args->pos[2].u.i;
    } else return jx_fail(c, at, "range needs 1 to 3 arguments");
    if (v[2] == 0) return jx_fail(c, at, "range() step must not be zero");
    int64_t count = v[2] > 0 ? (v[1] - v[0] + v[2] - 1) / v[2] : (v[0] - v[1] - v[2] - 1) / -v[2];
    if (count > 100000) return jx_fail(c, at, "range of more than 100000 items");
    c->steps += count > 0 ? count : 0;
    if (jx_step(c, at)) return -1;
    *out = jv_list(c->a);
    for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) jv_list_push(c->a, out->u.l, jv_int(i));
    return 0;
}

static int make_dict(JCtx *c, JArgs *args, int ns, JVal *out) {
    *out = jv_dict(c->a);
    if (ns) out->type = JV_NS;
    if (args->npos && args->pos[0].type == JV_DICT)
        for (size_t i = 0; i < args->pos[0].u.d->n; i++)
            jv_dict_set(c->a, out->u.d, args->pos[0].u.d->k[i], args->pos[0].u.d->v[i]);
    for (size_t k = 0; k < args->nkw; k++) jv_dict_set(c->a, out->u.d, jv_str(args->kwn[k], args->kwl[k], -1), args->kwv[k]);
    return 0;
}

static int strftime_now(JCtx *c, const JNode *at, JArgs *args, JVal *out) {
    const JVal *fmt = jx_arg(args, 0, NULL);
    if (!fmt || fmt->type != JV_STR) return jx_fail(c, at, "strftime_now needs a format string");
    char f[256], s[512];
    snprintf(f, sizeof f, "%.*s", (int)(fmt->u.s.n < 255 ? fmt->u.s.n : 255), fmt->u.s.p);
    time_t now = c->opt->now ? c->opt->now : time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    size_t n = strftime(s, sizeof s, f, &tm);
    *out = jv_str_copy(c->a, s, n);
    return 0;
}

int jx_builtin(JCtx *c, const JNode *at, int id, JArgs *args, JVal *out) {
    switch (id) {
    case G_RANGE: return range(c, at, args, out);
    case G_NAMESPACE: return make_dict(c, args, 1, out);
    case G_DICT: return make_dict(c, args, 0, out);
    case G_RAISE: {
        const JVal *m = jx_arg(args, 0, NULL);
        JVal s = m ? jv_stringify(c->a, *m) : jv_cstr("");
        c->raised = 1;
        return df_fail(c->err, "%.*s", (int)(s.u.s.n < 900 ? s.u.s.n : 900), s.u.s.p);
    }
    case G_STRFTIME: return strftime_now(c, at, args, out);
    default: return jx_fail(c, at, "unknown function");
    }
}
