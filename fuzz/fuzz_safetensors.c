/* libFuzzer target: src/formats/safetensors.c on one .safetensors file.
 * A header that parses must give tensors whose data lies inside the file:
 * every byte of every tensor is read (ASan catches a read outside), and the
 * F32 loader is run on the first tensor. */
#include "fuzz_file.h"

#include "formats/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzFile f;
    fuzz_file_make(&f, data, size);
    DfSafetensors st;
    DfError err = {{0}};
    if (df_safetensors_open(&st, f.path, &err) == 0) {
        unsigned sum = 0;
        for (int i = 0; i < st.n_tensors; i++) {
            const DfTensorInfo *t = &st.tensors[i];
            if (df_safetensors_find(&st, t->name) == NULL) abort();
            for (size_t k = 0; k < t->nbytes; k++) sum += ((const uint8_t *)t->data)[k];
        }
        if (st.n_tensors > 0) {
            const DfTensorInfo *t = &st.tensors[0];
            float *x = df_safetensors_load_f32(&st, t->name, t->ndim, t->shape, &err);
            free(x);
        }
        (void)sum;
        df_safetensors_close(&st);
    } else if (err.msg[0] == '\0') {
        abort(); /* a failure must say why */
    }
    fuzz_file_drop(&f);
    return 0;
}
