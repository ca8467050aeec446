/* Arenas (backend/arena.h) on the CPU backend: sizing, alignment of every
 * buffer, buffers that do not overlap, the overflow error naming the role,
 * reset and peak use. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend/arena.h"

static size_t offset_in(const DfArena *a, DfBuffer b) {
    return (size_t)((const char *)b.ptr - (const char *)a->block.ptr);
}

static void test_sizes_and_alignment(void **state) {
    DfBackend *be = ((DfTestBackendFixture *)*state)->be;
    DfError err = {{0}};
    assert_int_equal(df_arena_bytes_for(be, DF_BUF_F32, 1), DF_ARENA_ALIGN);
    assert_int_equal(df_arena_bytes_for(be, DF_BUF_F32, 64), DF_ARENA_ALIGN);
    assert_int_equal(df_arena_bytes_for(be, DF_BUF_F32, 65), 2 * DF_ARENA_ALIGN);
    assert_int_equal(df_arena_bytes_for(be, DF_BUF_I32, 0), 0);
    const DfBufKind kinds[] = {DF_BUF_F32, DF_BUF_ACT, DF_BUF_I32, DF_BUF_F32};
    const size_t counts[] = {3, 1000, 1, 77};
    size_t total = 0;
    for (int i = 0; i < 4; i++) total += df_arena_bytes_for(be, kinds[i], counts[i]);
    DfArena a;
    assert_int_equal(df_arena_init(&a, be, "activations", total, &err), 0);
    assert_int_equal(a.capacity, total);
    DfBuffer b[4];
    for (int i = 0; i < 4; i++) {
        assert_int_equal(df_arena_alloc(&a, &b[i], kinds[i], counts[i], &err), 0);
        assert_int_equal(b[i].count, counts[i]);
        assert_int_equal(b[i].kind, kinds[i]);
        assert_int_equal(offset_in(&a, b[i]) % DF_ARENA_ALIGN, 0);
        assert_int_equal((uintptr_t)b[i].ptr % 16, 0);
        if (i > 0) /* after the previous one, no overlap */
            assert_true(offset_in(&a, b[i]) >= offset_in(&a, b[i - 1]) + counts[i - 1] * (size_t)b[i - 1].elem_size);
    }
    assert_int_equal(a.used, total); /* sized exactly: the arena is full */
    /* the buffers are real, separate memory: write each, read back */
    for (int i = 0; i < 4; i++) {
        if (kinds[i] == DF_BUF_I32) continue;
        float *x = df_test_random_array(counts[i], 40 + i, 1.0f);
        assert_int_equal(be->ops->upload_f32(be, b[i], x, &err), 0);
        free(x);
    }
    for (int i = 0; i < 4; i++) {
        if (kinds[i] == DF_BUF_I32) continue;
        float *want = df_test_random_array(counts[i], 40 + i, 1.0f), *got = df_test_download(be, b[i]);
        assert_memory_equal(got, want, counts[i] * sizeof *got);
        free(want), free(got);
    }
    df_arena_free(&a);
    assert_null(a.block.ptr);
}

static void test_overflow_names_the_role(void **state) {
    DfBackend *be = ((DfTestBackendFixture *)*state)->be;
    DfError err = {{0}};
    DfArena a;
    assert_int_equal(df_arena_init(&a, be, "gradients", 1000 * sizeof(float), &err), 0);
    assert_int_equal(a.capacity, 1024 * sizeof(float)); /* rounded up to the alignment */
    DfBuffer x, y;
    assert_int_equal(df_arena_alloc(&a, &x, DF_BUF_F32, 1000, &err), 0);
    assert_int_equal(df_arena_alloc(&a, &y, DF_BUF_F32, 64, &err), -1);
    assert_non_null(strstr(err.msg, "arena 'gradients' is full"));
    assert_non_null(strstr(err.msg, "64 elements"));
    assert_null(y.ptr);
    /* a count whose byte size overflows size_t is refused, not wrapped */
    assert_int_equal(df_arena_alloc(&a, &y, DF_BUF_F32, SIZE_MAX / 2, &err), -1);
    assert_int_equal(a.used, 1024 * sizeof(float));
    df_arena_free(&a);
}

static void test_reset_keeps_the_peak(void **state) {
    DfBackend *be = ((DfTestBackendFixture *)*state)->be;
    DfError err = {{0}};
    DfArena a;
    assert_int_equal(df_arena_init(&a, be, "activations", 8 * DF_ARENA_ALIGN, &err), 0);
    DfBuffer x, y;
    assert_int_equal(df_arena_alloc(&a, &x, DF_BUF_F32, 200, &err), 0); /* 800 bytes: 4 blocks */
    assert_int_equal(df_arena_alloc(&a, &y, DF_BUF_I32, 1, &err), 0);   /* 1 block */
    assert_int_equal(a.peak, 5 * DF_ARENA_ALIGN);
    df_arena_reset(&a);
    assert_int_equal(a.used, 0);
    assert_int_equal(df_arena_alloc(&a, &y, DF_BUF_F32, 10, &err), 0);
    assert_ptr_equal(y.ptr, x.ptr); /* the space is reused from the start */
    assert_int_equal(a.used, DF_ARENA_ALIGN);
    assert_int_equal(a.peak, 5 * DF_ARENA_ALIGN);
    assert_int_equal(df_arena_alloc(&a, &y, DF_BUF_F32, 7 * DF_ARENA_ALIGN / 4, &err), 0); /* exactly the rest */
    assert_int_equal(a.peak, 8 * DF_ARENA_ALIGN);
    df_arena_free(&a);
}

static void test_empty_arena(void **state) {
    DfBackend *be = ((DfTestBackendFixture *)*state)->be;
    DfError err = {{0}};
    DfArena a;
    assert_int_equal(df_arena_init(&a, be, "weights", 0, &err), 0);
    DfBuffer x;
    assert_int_equal(df_arena_alloc(&a, &x, DF_BUF_F32, 0, &err), 0);
    assert_int_equal(df_arena_alloc(&a, &x, DF_BUF_F32, 1, &err), -1);
    assert_non_null(strstr(err.msg, "arena 'weights'"));
    df_arena_free(&a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_and_alignment),
        cmocka_unit_test(test_overflow_names_the_role),
        cmocka_unit_test(test_reset_keeps_the_peak),
        cmocka_unit_test(test_empty_arena),
    };
    return cmocka_run_group_tests(tests, df_test_cpu_backend_setup, df_test_cpu_backend_teardown);
}
