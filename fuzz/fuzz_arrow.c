/* libFuzzer target: the Arrow IPC reader (src/formats/arrow_*.c), both
 * formats. Every batch handed out is read whole through the accessors the
 * reader promises to be in bounds: every int, string and list range of every
 * column and nested child, nulls included. */
#include "fuzz_file.h"

#include "formats/arrow.h"

static unsigned touch(const DfArrowArray *a) {
    unsigned sum = 0;
    for (int64_t i = 0; i < a->length; i++) {
        if (df_arrow_is_null(a, i)) continue;
        switch (a->field->kind) {
        case DF_ARROW_INT: sum += (unsigned)df_arrow_int(a, i); break;
        case DF_ARROW_STRING: {
            size_t len;
            const char *s = df_arrow_string(a, i, &len);
            for (size_t k = 0; k < len; k++) sum += (unsigned char)s[k];
            break;
        }
        case DF_ARROW_LIST: {
            int64_t start, end;
            df_arrow_list_range(a, i, &start, &end);
            if (start < 0 || end < start || end > a->children[0].length) abort();
            break;
        }
        default: break;
        }
    }
    if (a->field->kind == DF_ARROW_LIST || a->field->kind == DF_ARROW_STRUCT)
        for (int c = 0; c < a->field->n_children; c++) sum += touch(&a->children[c]);
    return sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzFile f;
    fuzz_file_make(&f, data, size);
    DfError err = {{0}};
    DfArrowReader *r = df_arrow_open(f.path, &err);
    if (r) {
        char type[256];
        const DfArrowSchema *s = df_arrow_schema(r);
        for (int i = 0; i < s->n_fields; i++) df_arrow_type_string(&s->fields[i], type, sizeof type);
        const DfArrowBatch *b;
        int rc;
        unsigned sum = 0;
        while ((rc = df_arrow_next_batch(r, &b, &err)) == 1)
            for (int c = 0; c < b->n_columns; c++) sum += touch(&b->columns[c]);
        if (rc < 0 && err.msg[0] == '\0') abort();
        (void)sum;
        df_arrow_close(r);
    } else if (err.msg[0] == '\0') {
        abort();
    }
    fuzz_file_drop(&f);
    return 0;
}
