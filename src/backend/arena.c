/* Arenas over a backend's alloc (see arena.h). */
#include "backend/arena.h"

#include <stdio.h>
#include <string.h>

static size_t round_up(size_t bytes) {
    return (bytes + DF_ARENA_ALIGN - 1) / DF_ARENA_ALIGN * DF_ARENA_ALIGN;
}

size_t df_arena_bytes_for(DfBackend *be, DfBufKind kind, size_t count) {
    return round_up(count * (size_t)df_backend_elem_size(be, kind));
}

int df_arena_init(DfArena *a, DfBackend *be, const char *role, size_t capacity, DfError *err) {
    memset(a, 0, sizeof *a);
    a->be = be;
    snprintf(a->role, sizeof a->role, "%s", role);
    if (capacity > SIZE_MAX - DF_ARENA_ALIGN) return df_fail(err, "arena '%s': %zu bytes is too large", role, capacity);
    capacity = round_up(capacity);
    if (capacity && df_buffer_alloc(be, &a->block, DF_BUF_F32, capacity / sizeof(float), err))
        return df_context(err, "arena '%s' (%.3f GiB)", role, (double)capacity / (1 << 30));
    a->capacity = capacity;
    return 0;
}

int df_arena_alloc(DfArena *a, DfBuffer *out, DfBufKind kind, size_t count, DfError *err) {
    memset(out, 0, sizeof *out);
    int es = df_backend_elem_size(a->be, kind);
    size_t free_bytes = a->capacity - a->used;
    if (count > free_bytes / (size_t)es || round_up(count * (size_t)es) > free_bytes)
        return df_fail(err, "arena '%s' is full: a buffer of %zu elements (%zu bytes each) does not fit in the %zu bytes "
                       "left of %zu",
                       a->role, count, (size_t)es, free_bytes, a->capacity);
    out->kind = kind;
    out->elem_size = es;
    out->count = count;
    out->ptr = count ? (char *)a->block.ptr + a->used : NULL;
    a->used += round_up(count * (size_t)es);
    if (a->used > a->peak) a->peak = a->used;
    return 0;
}

void df_arena_reset(DfArena *a) {
    a->used = 0;
}

void df_arena_free(DfArena *a) {
    if (a->be) df_buffer_free(a->be, &a->block);
    a->capacity = a->used = 0;
}
