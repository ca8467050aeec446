/* Growable arrays of token ids and bytes. */
#ifndef DF_BASE_BUFFER_H
#define DF_BASE_BUFFER_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

typedef struct DfI32Vec {
    int32_t *data;
    size_t len, cap;
} DfI32Vec;

typedef struct DfByteBuf {
    char *data; /* kept NUL-terminated */
    size_t len, cap;
} DfByteBuf;

static inline void df_i32vec_reserve(DfI32Vec *v, size_t n) {
    if (n <= v->cap) return;
    size_t cap = v->cap ? v->cap : 16;
    while (cap < n) cap *= 2;
    v->data = df_xrealloc(v->data, cap * sizeof *v->data, "id vector");
    v->cap = cap;
}
static inline void df_i32vec_push(DfI32Vec *v, int32_t x) {
    if (v->len == v->cap) df_i32vec_reserve(v, v->len + 1);
    v->data[v->len++] = x;
}
static inline void df_i32vec_free(DfI32Vec *v) {
    free(v->data);
    memset(v, 0, sizeof *v);
}

static inline void df_bytebuf_append(DfByteBuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) cap *= 2;
        b->data = df_xrealloc(b->data, cap, "byte buffer");
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}
static inline void df_bytebuf_free(DfByteBuf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

#endif
