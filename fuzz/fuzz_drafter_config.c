/* libFuzzer target: src/model/drafter_io.c's config.json parser (ours or
 * another trainer's drafter). A config that parses must describe a drafter
 * that can be laid out: its ranges hold, its JSON round-trips to the same
 * drafter, and its layout's size is what its fields say. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/drafter_io.h"
#include "model/drafter_layout.h"

static void check(const DfDrafterConfig *c) {
    if (c->hidden_size < 1 || c->num_heads < 1 || c->num_kv_heads < 1 || c->num_heads % c->num_kv_heads != 0 ||
        c->head_dim < 2 || c->head_dim % 2 != 0 || c->num_layers < 1 || c->block_size < 2 || c->n_taps < 1 ||
        c->mask_token_id < -1 || c->mask_token_id >= c->vocab_size) /* -1: left out, derived from the tokenizer */
        abort();
    char *again = df_drafter_config_json(c);
    DfDrafterConfig d;
    DfError err = {{0}};
    char what[256];
    if (df_drafter_config_parse(again, "round trip", &d, &err) != 0 || df_drafter_config_differs(c, &d, what, sizeof what))
        abort();
    free(again);
    /* the layout of a parsed drafter, only where it is small enough to count cheaply */
    if ((double)c->hidden_size * c->hidden_size * c->num_layers < 1e9) {
        DfDrafterLayout layout;
        df_drafter_layout_build(&layout, c);
        if (layout.n_params != 3 + 11 * c->num_layers) abort();
        df_drafter_layout_free(&layout);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    DfDrafterConfig cfg;
    DfError err = {{0}};
    if (df_drafter_config_parse(text, "fuzz", &cfg, &err) == 0) check(&cfg);
    else if (err.msg[0] == '\0') abort();
    free(text);
    return 0;
}
