#include "model/drafter_config.h"

#include <stdlib.h>
#include <string.h>

#include "model/anchors.h"
#include "target/target_family.h"

void df_drafter_default_attention(const DfModelConfig *t, int *num_heads, int *num_kv_heads, int *head_dim) {
    const DfTargetFamily *family = df_target_family(t);
    if (family->drafter_heads) {
        *num_heads = family->drafter_heads, *num_kv_heads = family->drafter_kv_heads, *head_dim = family->drafter_head_dim;
        return;
    }
    *num_heads = t->num_heads, *num_kv_heads = t->num_kv_heads, *head_dim = t->head_dim;
}

/* One field of the attention shape: a given value (non-zero) must lie in
 * 1..max; 0 takes the default. */
static int pick_shape_value(int given, int fallback, int max, const char *option, int *out, DfError *err) {
    if (given < 0 || given > max) return df_fail(err, "drafter: %s must be in 1..%d, got %d", option, max, given);
    *out = given ? given : fallback;
    return 0;
}

/* The attention shape from the options and the target's defaults; a default
 * that does not fit a given value (e.g. --draft-heads 4 with the default 8 KV
 * heads) is reported as the default it is. */
static int pick_attention(DfDrafterConfig *c, const DfModelConfig *t, const DfDrafterOptions *o, DfError *err) {
    int heads, kv, hd;
    df_drafter_default_attention(t, &heads, &kv, &hd);
    if (pick_shape_value(o->num_heads, heads, DF_MAX_DRAFT_HEADS, "--draft-heads", &c->num_heads, err) ||
        pick_shape_value(o->num_kv_heads, kv, DF_MAX_DRAFT_HEADS, "--draft-kv-heads", &c->num_kv_heads, err) ||
        pick_shape_value(o->head_dim, hd, DF_MAX_DRAFT_HEAD_DIM, "--draft-head-dim", &c->head_dim, err))
        return -1;
    if (c->num_heads % c->num_kv_heads != 0)
        return df_fail(err, "drafter: --draft-heads %d%s must be a multiple of --draft-kv-heads %d%s (each KV head serves "
                       "a whole group of query heads)", c->num_heads, o->num_heads ? "" : " (the default)",
                       c->num_kv_heads, o->num_kv_heads ? "" : " (the default)");
    if (c->head_dim % 2 != 0)
        return df_fail(err, "drafter: --draft-head-dim must be even (RoPE turns pairs), in 2..%d, got %d",
                       DF_MAX_DRAFT_HEAD_DIM, c->head_dim);
    return 0;
}

int df_drafter_max_taps(const DfModelConfig *t) {
    /* round(1 + i*(L-4)/(n-1)) steps by less than one layer once n - 1 > L - 4 */
    int most = t->num_layers > 4 ? t->num_layers - 3 : 1;
    return most < DF_MAX_TAPS ? most : DF_MAX_TAPS;
}

int df_drafter_check_num_taps(const DfModelConfig *t, int n_taps, DfError *err) {
    int most = df_drafter_max_taps(t);
    if (n_taps >= 1 && n_taps <= most) return 0;
    if (most == DF_MAX_TAPS && t->num_layers - 3 > DF_MAX_TAPS)
        return df_fail(err, "--num-taps must be in 1..%d (the most taps supported), got %d", most, n_taps);
    return df_fail(err, "--num-taps must be in 1..%d for this %d-layer target (more would tap one layer twice), got %d",
                   most, t->num_layers, n_taps);
}

int df_drafter_config_from_target(DfDrafterConfig *c, const DfModelConfig *t, const DfDrafterOptions *o,
                                  DfError *err) {
    memset(c, 0, sizeof *c);
    int num_layers = o->num_layers, block_size = o->block_size, n_taps = o->n_taps;
    if (num_layers < 1 || num_layers > 64) return df_fail(err, "drafter: --draft-layers must be in 1..64, got %d", num_layers);
    if (block_size < 2 || block_size > 64) return df_fail(err, "drafter: --block-size must be in 2..64, got %d", block_size);
    if (o->intermediate_size < 0)
        return df_fail(err, "drafter: --intermediate-size must be positive, got %d", o->intermediate_size);
    if (n_taps == 0) {
        n_taps = num_layers < df_drafter_max_taps(t) ? num_layers : df_drafter_max_taps(t);
    } else if (df_drafter_check_num_taps(t, n_taps, err)) {
        return -1;
    }
    if (o->mask_token_id < 0 || o->mask_token_id >= t->vocab_size)
        return df_fail(err, "drafter: mask token id %d is outside the target's embedding (%d rows)", o->mask_token_id,
                       t->vocab_size);
    if (pick_attention(c, t, o, err)) return -1;
    c->hidden_size = t->hidden_size;
    c->intermediate_size = o->intermediate_size ? o->intermediate_size : t->intermediate_size;
    c->num_layers = num_layers;
    c->vocab_size = t->vocab_size;
    c->block_size = block_size;
    c->mask_token_id = o->mask_token_id;
    c->num_target_layers = t->num_layers;
    c->n_taps = n_taps;
    df_default_target_layer_ids(t->num_layers, n_taps, c->target_layer_ids);
    c->rms_norm_eps = t->rms_norm_eps;
    /* the target's base and scaling; DfRopeConfig has no rotary_dim: the
     * drafter's rope turns its whole head_dim (a hybrid target's partial
     * rotary is not inherited) */
    c->rope = t->rope;
    c->max_position_embeddings = t->max_position_embeddings;
    c->gamma = df_default_gamma(block_size);
    return 0;
}

int df_drafter_layer_window(const DfDrafterConfig *c, int layer) {
    return layer >= 0 && layer < c->num_layers && c->sliding[layer] ? c->sliding_window : 0;
}

/* One item of a --sliding-layers list: "i" or "i-j", indices possibly negative. */
static int parse_layer_item(const char *item, int n, int *lo, int *hi, DfError *err) {
    char *end;
    long a = strtol(item, &end, 10), b = a;
    if (end == item) goto bad;
    if (*end == '-' && end != item) {
        const char *second = end + 1;
        b = strtol(second, &end, 10);
        if (end == second) goto bad;
    }
    if (*end) goto bad;
    if (a < 0) a += n;
    if (b < 0) b += n;
    if (a < 0 || b < a || b >= n)
        return df_fail(err, "drafter: --sliding-layers item '%s' is outside the %d layers (0..%d)", item, n, n - 1);
    *lo = (int)a, *hi = (int)b;
    return 0;
bad:
    return df_fail(err, "drafter: --sliding-layers item '%s' is not a layer index or range (e.g. 0,2 or 0-3)", item);
}

int df_drafter_set_sliding(DfDrafterConfig *c, int window, const char *pattern, DfError *err) {
    int n = c->num_layers;
    memset(c->sliding, 0, sizeof c->sliding);
    c->sliding_window = 0;
    int none = pattern && strcmp(pattern, "none") == 0;
    if (window < 0) return df_fail(err, "drafter: --sliding-window must be positive, got %d", window);
    if (window == 0 || none) {
        if (pattern && *pattern && !none)
            return df_fail(err, "drafter: --sliding-layers '%s' needs a --sliding-window", pattern);
        return 0;
    }
    if (n < 1 || n > DF_MAX_DRAFT_LAYERS) return df_fail(err, "drafter: %d layers", n);
    if (!pattern || !*pattern) {
        for (int i = 0; i < n - 1; i++) c->sliding[i] = 1;
    } else if (strcmp(pattern, "all") == 0) {
        for (int i = 0; i < n; i++) c->sliding[i] = 1;
    } else {
        char item[32];
        if (pattern[strlen(pattern) - 1] == ',')
            return df_fail(err, "drafter: --sliding-layers '%s' ends with a comma", pattern);
        for (const char *p = pattern; *p;) {
            size_t len = strcspn(p, ",");
            if (len == 0 || len >= sizeof item)
                return df_fail(err, "drafter: --sliding-layers '%s' has an empty or overlong item", pattern);
            memcpy(item, p, len);
            item[len] = '\0';
            int lo = 0, hi = -1;
            if (parse_layer_item(item, n, &lo, &hi, err)) return -1;
            for (int i = lo; i <= hi; i++) c->sliding[i] = 1;
            p += len + (p[len] == ',');
        }
    }
    int any = 0;
    for (int i = 0; i < n; i++) any |= c->sliding[i];
    c->sliding_window = any ? window : 0;
    return 0;
}
