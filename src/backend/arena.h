/* A memory arena over a backend's alloc: one allocation per role (the
 * drafter's weights, its gradients, the optimizer state, the step's
 * activations), sized up front and cut into buffers by offset. Every buffer
 * starts at a multiple of DF_ARENA_ALIGN bytes from the allocation's start,
 * which is itself 256-byte aligned on CUDA (cudaMalloc) and 64-byte aligned
 * on the CPU: 16-byte vector accesses always work. Taking more than the arena holds fails with
 * a message naming the role; the arena records its peak use.
 *
 * Buffers from an arena are views: they are never passed to df_buffer_free.
 * df_arena_reset gives all of them back at once (e.g. a step's activations),
 * df_arena_free returns the one allocation to the backend. */
#ifndef DF_BACKEND_ARENA_H
#define DF_BACKEND_ARENA_H

#include <stddef.h>

#include "backend/backend.h"

#define DF_ARENA_ALIGN 256

typedef struct DfArena {
    DfBackend *be;
    char role[48];    /* "weights", "gradients", ...: named in errors and reports */
    DfBuffer block;   /* the one allocation (F32 elements covering capacity bytes) */
    size_t capacity;  /* bytes */
    size_t used;      /* bytes taken, alignment padding included */
    size_t peak;      /* the most `used` has been */
} DfArena;

/* Bytes an arena needs for a buffer of `count` elements of `kind` on this
 * backend (rounded up to the alignment); sum these to size an arena. */
size_t df_arena_bytes_for(DfBackend *be, DfBufKind kind, size_t count);

/* Allocates capacity bytes (rounded up to the alignment) on the backend;
 * fails naming the role. A zero capacity makes an empty arena. */
int df_arena_init(DfArena *a, DfBackend *be, const char *role, size_t capacity, DfError *err);

/* A buffer of count elements of kind, cut from the arena; fails naming the
 * role, the request and the free space when it does not fit. */
int df_arena_alloc(DfArena *a, DfBuffer *out, DfBufKind kind, size_t count, DfError *err);

/* Gives every buffer back (used = 0); the peak is kept. */
void df_arena_reset(DfArena *a);

void df_arena_free(DfArena *a);

#endif
