/* libFuzzer target: the JSONL record parser of dflash prepare
 * (src/data/prepare_record.c) with the bundled target's tokenizer and chat
 * template (assets/coder-tiny, found through DFLASH_SOURCE_DIR or the
 * build-time source directory), so chat records are rendered too. The input is one line, as the JSONL reader hands it
 * over: NUL-terminated, without its newline. A good record must be a
 * consistent sample: ids inside the vocabulary, a 0/1 mask of the same
 * length with a loss token, no longer than the limit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/prepare_record.h"

#ifndef DF_SOURCE_DIR
#define DF_SOURCE_DIR "."
#endif

enum { MAX_LENGTH = 256 };

/* loaded once by LLVMFuzzerInitialize, read-only after */
static DfTokenizer *g_tok;
static DfChatTemplate *g_chat;
static char g_chat_error[DF_ERROR_MAX];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *dir = getenv("DFLASH_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/assets/coder-tiny", dir ? dir : DF_SOURCE_DIR);
    DfError err = {{0}};
    if (!(g_tok = df_tokenizer_load(path, &err))) {
        fprintf(stderr, "fuzz_jsonl_record: %s\n", err.msg);
        exit(1);
    }
    if (!(g_chat = df_chat_template_load(path, &err))) snprintf(g_chat_error, sizeof g_chat_error, "%s", err.msg);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *line = malloc(size + 1);
    memcpy(line, data, size);
    line[size] = '\0';
    DfRecordRules rules = {.tok = g_tok, .vocab_size = df_tokenizer_vocab_size(g_tok), .max_length = MAX_LENGTH,
                           .chat = g_chat, .chat_error = g_chat_error};
    DfPreparedRecord r = {0};
    df_prepare_record(&rules, line, size, &r);
    if (r.bad == DF_RECORD_OK) {
        size_t loss = 0;
        if (r.ids.len == 0 || r.ids.len > MAX_LENGTH || r.mask.len != r.ids.len) abort();
        for (size_t i = 0; i < r.ids.len; i++) {
            if (r.ids.data[i] < 0 || r.ids.data[i] >= rules.vocab_size || (uint8_t)r.mask.data[i] > 1) abort();
            loss += (uint8_t)r.mask.data[i];
        }
        if (loss == 0) abort();
    } else if (r.msg[0] == '\0' || r.bad >= DF_BAD_KIND_COUNT) {
        abort();
    }
    df_prepared_record_free(&r);
    free(line);
    return 0;
}
