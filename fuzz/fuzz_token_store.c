/* libFuzzer target: src/formats/token_store.c. The store's header and
 * payload carry checksums, which random bytes almost never match; so when the
 * first input byte is odd the target writes correct checksums into the file
 * (the rest of the input) before opening it, letting the fuzzer reach the
 * structural checks. A store that opens is read whole: every sample. */
#include "fuzz_file.h"

#include <string.h>

#include "base/checksum.h"
#include "base/hash64.h"
#include "formats/token_store.h"

enum { HEADER = 128 };

static void put_u64(uint8_t *p, uint64_t x) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(x >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int fix_checksums = data[0] & 1;
    uint8_t *file = malloc(size); /* size - 1 bytes used; malloc(0) avoided */
    memcpy(file, data + 1, size - 1);
    size_t n = size - 1;
    if (fix_checksums && n >= HEADER) {
        int legacy = file[8] == 1 && file[9] == 0 && file[10] == 0 && file[11] == 0; /* version 1: df_hash64 */
        put_u64(file + 104, legacy ? df_hash64(file + HEADER, n - HEADER) : df_checksum(file + HEADER, n - HEADER));
        put_u64(file + 120, legacy ? df_hash64(file, 120) : df_checksum(file, 120));
    }
    FuzzFile f;
    fuzz_file_make(&f, file, n);
    free(file);
    DfError err = {{0}};
    DfTokenStore *s = df_token_store_open(f.path, 1, &err);
    if (s) {
        int64_t total = 0, vocab = df_token_store_vocab_size(s);
        for (int64_t i = 0; i < df_token_store_num_samples(s); i++) {
            const int32_t *ids;
            const uint8_t *mask;
            int64_t len;
            if (df_token_store_sample(s, i, &ids, &mask, &len, &err) != 0) abort();
            if (len != df_token_store_sample_length(s, i)) abort();
            for (int64_t k = 0; k < len; k++)
                if (ids[k] < 0 || ids[k] >= vocab || mask[k] > 1) abort(); /* the open promised valid ids */
            total += len;
        }
        if (total != df_token_store_num_tokens(s)) abort();
        df_token_store_close(s);
    } else if (err.msg[0] == '\0') {
        abort();
    }
    fuzz_file_drop(&f);
    return 0;
}
