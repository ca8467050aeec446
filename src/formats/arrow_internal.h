/* Shared by the files of the Arrow reader (not a public API). */
#ifndef DF_FORMATS_ARROW_INTERNAL_H
#define DF_FORMATS_ARROW_INTERNAL_H

#include "formats/arrow.h"
#include "formats/flatbuf.h"

/* Arrow Type union tags (Schema.fbs). */
enum {
    DF_ARROW_T_NULL = 1, DF_ARROW_T_INT = 2, DF_ARROW_T_FLOAT = 3, DF_ARROW_T_BINARY = 4, DF_ARROW_T_UTF8 = 5,
    DF_ARROW_T_BOOL = 6, DF_ARROW_T_DECIMAL = 7, DF_ARROW_T_DATE = 8, DF_ARROW_T_TIME = 9, DF_ARROW_T_TIMESTAMP = 10,
    DF_ARROW_T_INTERVAL = 11, DF_ARROW_T_LIST = 12, DF_ARROW_T_STRUCT = 13, DF_ARROW_T_UNION = 14,
    DF_ARROW_T_FIXED_BINARY = 15, DF_ARROW_T_FIXED_LIST = 16, DF_ARROW_T_MAP = 17, DF_ARROW_T_DURATION = 18,
    DF_ARROW_T_LARGE_BINARY = 19, DF_ARROW_T_LARGE_UTF8 = 20, DF_ARROW_T_LARGE_LIST = 21, DF_ARROW_T_TYPE_MAX = 21
};

/* Deepest nesting of fields accepted (a guard against hostile metadata). */
#define DF_ARROW_MAX_DEPTH 32

/* Schema table (Schema.fbs) -> out. Messages are without the file name. */
int df_arrow_parse_schema(const DfFbTable *schema, DfArrowSchema *out, DfError *err);
void df_arrow_schema_free(DfArrowSchema *s);

/* Memory a decoded batch owns: array nodes and decompressed buffers. */
typedef struct DfArrowBatchMemory {
    void **blocks;
    size_t n, cap;
} DfArrowBatchMemory;
void *df_arrow_memory_alloc(DfArrowBatchMemory *m, size_t bytes);
void df_arrow_memory_release(DfArrowBatchMemory *m); /* frees the blocks, keeps the list */
void df_arrow_memory_free(DfArrowBatchMemory *m);

/* RecordBatch table + its body -> out (arrays validated). *codec_out: -1
 * none, 0 LZ4 frame, 1 ZSTD. Messages are without the file name. */
int df_arrow_decode_batch(const DfFbTable *record_batch, const uint8_t *body, size_t body_size,
                          const DfArrowSchema *schema, DfArrowBatchMemory *mem, DfArrowBatch *out, int *codec_out,
                          DfError *err);

#endif
