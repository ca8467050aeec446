/* Hugging Face safetensors: memory-mapped reading of one file or of a sharded
 * set (model.safetensors.index.json), and writing (bf16/fp32 checkpoints).
 * Every header offset and shape is checked against the file before use. */
#ifndef DF_FORMATS_SAFETENSORS_H
#define DF_FORMATS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/mapped_file.h"

typedef enum DfDtype {
    DF_DTYPE_F32,
    DF_DTYPE_F16,
    DF_DTYPE_BF16,
    DF_DTYPE_F64,
    DF_DTYPE_I64,
    DF_DTYPE_I32,
    DF_DTYPE_I16,
    DF_DTYPE_I8,
    DF_DTYPE_U8,
    DF_DTYPE_BOOL,
} DfDtype;

#define DF_MAX_DIMS 8

typedef struct DfTensorInfo {
    char *name;
    DfDtype dtype;
    int ndim;
    int64_t shape[DF_MAX_DIMS];
    const void *data; /* inside the mapped file */
    size_t nbytes;
    const char *file; /* path of the file that holds it */
} DfTensorInfo;

typedef struct DfSafetensors {
    DfMappedFile *files;
    int n_files;
    DfTensorInfo *tensors;
    int n_tensors;
} DfSafetensors;

/* path: a .safetensors file, a model.safetensors.index.json, or a directory
 * holding model.safetensors or model.safetensors.index.json. */
int df_safetensors_open(DfSafetensors *st, const char *path, DfError *err);
void df_safetensors_close(DfSafetensors *st);

const DfTensorInfo *df_safetensors_find(const DfSafetensors *st, const char *name);

const char *df_dtype_name(DfDtype t);
size_t df_dtype_size(DfDtype t);

/* Looks up `name`, checks its shape equals `shape[0..ndim-1]` and that its
 * dtype is a float type (f32, f16, bf16), and converts it to a new fp32
 * array. Errors name the file and the tensor. */
float *df_safetensors_load_f32(const DfSafetensors *st, const char *name, int ndim, const int64_t *shape, DfError *err);

/* One tensor to write: data is in `dtype` already. */
typedef struct DfTensorOut {
    const char *name;
    DfDtype dtype;
    int ndim;
    int64_t shape[DF_MAX_DIMS];
    const void *data;
} DfTensorOut;

/* Writes a safetensors file atomically (temporary name, fsync, rename).
 * metadata_json: optional JSON object of string values for "__metadata__". */
int df_safetensors_write(const char *path, const DfTensorOut *tensors, int n, const char *metadata_json, DfError *err);

#endif
