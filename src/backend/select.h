/* Backend selection by name, for the commands' --device option. */
#ifndef DF_BACKEND_SELECT_H
#define DF_BACKEND_SELECT_H

#include "backend/backend.h"

/* device: "cpu", "cuda" (GPU 0), "cuda:N", or NULL (cpu). NULL with a
 * message when the name is unknown, CUDA was not built in, or the GPU is
 * missing. */
DfBackend *df_backend_create(const char *device, DfError *err);

/* 1 when the name asks for a CUDA backend ("cuda" or "cuda:N"). */
int df_device_is_cuda(const char *device);

#endif
