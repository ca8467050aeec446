/* cJSON -> template values, without copying strings (they point into the
 * cJSON tree, which must outlive the rendering). */
#include <math.h>

#include "text/jinja/from_json.h"

JVal jv_from_cjson(JArena *a, const cJSON *j, int tag) {
    if (!j || cJSON_IsNull(j)) return jv_none();
    if (cJSON_IsBool(j)) return jv_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        /* cJSON keeps no int/float distinction: an integral number is an int (1.0 reads as 1) */
        if (d == floor(d) && fabs(d) < 9.0e15) return jv_int((int64_t)d);
        return jv_float(d);
    }
    if (cJSON_IsString(j)) {
        const char *s = j->valuestring;
        size_t n = 0;
        while (s[n]) n++;
        return jv_str(s, n, tag);
    }
    if (cJSON_IsArray(j)) {
        JVal l = jv_list(a);
        for (const cJSON *x = j->child; x; x = x->next) jv_list_push(a, l.u.l, jv_from_cjson(a, x, tag));
        return l;
    }
    JVal d = jv_dict(a);
    for (const cJSON *x = j->child; x; x = x->next) {
        const char *k = x->string;
        size_t n = 0;
        while (k[n]) n++;
        jv_dict_set(a, d.u.d, jv_str(k, n, -1), jv_from_cjson(a, x, tag));
    }
    return d;
}
