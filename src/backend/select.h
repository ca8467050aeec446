/* Backend selection by name, for the commands' --device option: the one
 * place that knows which backends exist and what their names are. Code
 * elsewhere asks the backend it was given (caps, device queries:
 * backend/backend.h), never its name. */
#ifndef DF_BACKEND_SELECT_H
#define DF_BACKEND_SELECT_H

#include <stddef.h>
#include <stdio.h>

#include "backend/backend.h"

/* device: "cpu", "cuda" (GPU 0), "cuda:N", or NULL (cpu). NULL with a
 * message when the name is unknown, CUDA was not built in, the GPU is
 * missing, or the backend lacks an op backend_ops.def marks as needed. */
DfBackend *df_backend_create(const char *device, DfError *err);

typedef enum DfDeviceKind {
    DF_DEVICE_UNKNOWN,     /* not a device name */
    DF_DEVICE_HOST,        /* NULL or "cpu": the CPU backend */
    DF_DEVICE_ACCELERATOR, /* "cuda" or "cuda:N" (whether or not built in) */
} DfDeviceKind;
DfDeviceKind df_device_kind(const char *device);

/* The backends this dflash was built with, e.g. "cpu cuda" (dflash --version, run records). */
const char *df_backends_built_in(void);

/* The devices the built-in backends see, one line each (for CUDA: the GPU
 * code built in, each GPU's kernel tier or why it cannot be used). */
void df_print_devices(FILE *fp);

/* 1 when the name asks for a CUDA backend ("cuda" or "cuda:N"). */
int df_device_is_cuda(const char *device);

/* The device of a data-parallel rank: an accelerator named without its
 * number ("cuda") becomes the rank's own (cuda:LOCAL_RANK); any other name
 * is kept. Written into out[cap]. */
void df_device_for_local_rank(const char *device, int local_rank, char *out, size_t cap);

/* Refuses, before anything is loaded, a drafter head size the named
 * device's attention kernels are not built for (-1 with a message naming
 * the option); 0 where it takes any. */
int df_device_check_drafter_head_dim(const char *device, int head_dim, DfError *err);

#endif
