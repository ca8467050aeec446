/* libFuzzer target: src/text/tokenizer_json.c (tokenizer.json). A tokenizer
 * that parses is used: a fixed text (with an added-token spelling, digits,
 * spaces and non-ASCII) is encoded and the ids decoded again. */
#include "fuzz_file.h"

#include <string.h>

#include "text/tokenizer.h"

static const char SAMPLE[] = "Hello  world 123\n<|endoftext|> caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd def f(x):\treturn x";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzFile f;
    fuzz_file_make(&f, data, size);
    DfError err = {{0}};
    DfTokenizer *tok = df_tokenizer_load(f.path, &err);
    if (tok) {
        DfI32Vec ids = {0};
        if (df_tokenizer_encode(tok, SAMPLE, strlen(SAMPLE), &ids, &err) == 0) {
            DfByteBuf text = {0};
            df_tokenizer_decode(tok, ids.data, ids.len, &text, &err);
            df_bytebuf_free(&text);
        }
        df_i32vec_free(&ids);
        df_tokenizer_free(tok);
    } else if (err.msg[0] == '\0') {
        abort();
    }
    fuzz_file_drop(&f);
    return 0;
}
