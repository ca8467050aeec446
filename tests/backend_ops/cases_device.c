/* test_backend_ops: memory, the errors an op leaves for sync, and the
 * device queries (checked on each backend that has them). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"

/* ---- memory ---------------------------------------------------------------- */

static void run_memory(Run *r, const void *shape) {
    (void)shape;
    enum { N = 37 };
    ops_label(r, "%d values", N);
    float *x = ops_inputs(r, N, 1, 2.0f);
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = i * 7919 - 100000;
    DfBuffer f = ops_up(r, x, N, DF_BUF_F32), a = ops_up(r, x, N, DF_BUF_ACT), i32 = ops_up_i32(r, ids, N);
    float *fo = ops_result(r, "f32", f);
    ops_result(r, "act", a);
    float *io = ops_result_i32(r, "i32", i32);
    /* every backend: an F32 buffer is not downloaded as int32 */
    DfError err;
    int32_t back[N];
    assert_int_equal(r->be->ops->download_i32(r->be, back, f, &err), -1);
    if (!r->reference) return;
    for (int i = 0; i < N; i++) {
        assert_true(fo[i] == x[i]); /* F32 is exact everywhere */
        assert_true(io[i] == (float)ids[i]);
    }
}

const OpCase CASE_MEMORY = {"memory", "alloc free upload_f32 download_f32 upload_i32 download_i32 sync destroy",
                            run_memory, OPS_NO_SHAPES, 1e-2, OPS_NO_VARIANTS};

/* ---- errors reported by sync ------------------------------------------------------ */

/* The op runs; the next sync returns -1 with a message holding `want`, the one after 0 (reported once). */
static void expect_sync_error(Run *r, const char *op, const char *want) {
    DfError err = {{0}};
    const char *be = r->be->ops->name;
    if (r->be->ops->sync(r->be, &err) != -1) fail_msg("%s on the %s backend: sync did not report the error", op, be);
    if (!strstr(err.msg, want)) fail_msg("%s on the %s backend: \"%s\" does not say \"%s\"", op, be, err.msg, want);
    if (r->be->ops->sync(r->be, &err))
        fail_msg("%s on the %s backend: the error was reported twice: %s", op, be, err.msg);
}

static void run_sync_errors(Run *r, const void *shape) {
    (void)shape;
    ops_label(r, "an id past the vocabulary, a position past the rope table, a label past the vocabulary");
    /* embedding: vocab 11, an id of 11 */
    float *table = ops_inputs(r, 11 * 4, 5, 1);
    int32_t ids[3] = {0, 11, 3};
    df_op_embedding(r->be, ops_poisoned(r, 3 * 4, DF_BUF_ACT), ops_up(r, table, 11 * 4, DF_BUF_ACT),
                    ops_up_i32(r, ids, 3), 3, 4);
    expect_sync_error(r, "embedding", "outside the vocabulary");
    /* rope: a table of 8 positions, position 8 */
    float *cs = ops_inputs(r, 8 * 3, 6, 1);
    int32_t pos[2] = {7, 8};
    DfBuffer x = ops_up(r, ops_inputs(r, 2 * 6, 7, 1), 2 * 6, DF_BUF_ACT);
    DfBuffer c = ops_up(r, cs, 8 * 3, DF_BUF_F32);
    df_op_rope(r->be, x, ops_up_i32(r, pos, 2), c, c, 2, 1, 6);
    expect_sync_error(r, "rope", "outside the table");
    /* lm_head_ce: vocab 10, label 10 in row 2 */
    int rows = 4, hidden = 8, vocab = 10;
    int32_t labels[4] = {1, 2, 10, -1};
    float ones[4] = {1, 1, 1, 1};
    DfLmHeadCeArgs a = {.x = ops_up(r, ops_inputs(r, 32, 8, 1), 32, DF_BUF_ACT),
                        .head = ops_up(r, ops_inputs(r, 80, 9, 1), 80, DF_BUF_ACT),
                        .labels = ops_up_i32(r, labels, 4), .weights = ops_up(r, ones, 4, DF_BUF_F32),
                        .ce = ops_poisoned(r, 4, DF_BUF_F32), .argmax = ops_poisoned(r, 4, DF_BUF_I32),
                        .rows = rows, .hidden = hidden, .vocab = vocab, .grad_scale = 1};
    df_op_lm_head_ce(r->be, &a);
    expect_sync_error(r, "lm_head_ce", "label 10 of row 2");
}

const OpCase CASE_SYNC_ERRORS = {"errors reported by sync", "embedding rope lm_head_ce", run_sync_errors,
                                 OPS_NO_SHAPES, -1, OPS_NO_VARIANTS};

/* ---- device queries ---------------------------------------------------------- */

static void run_device_queries(Run *r, const void *shape) {
    (void)shape;
    char desc[256], var[512];
    df_backend_describe(r->be, desc, sizeof desc);
    assert_true(desc[0] != '\0');
    DfMemoryInfo before, mid, after;
    df_backend_reset_peak(r->be);
    df_backend_memory_info(r->be, &before);
    DfBuffer big = df_test_upload_poisoned(r->be, 1 << 16, DF_BUF_F32); /* freed below, not with the run */
    df_backend_memory_info(r->be, &mid);
    df_buffer_free(r->be, &big);
    df_backend_reset_peak(r->be);
    df_backend_memory_info(r->be, &after);
    if (r->be->ops->memory_info) {
        assert_true(mid.in_use >= before.in_use + ((size_t)4 << 16));
        assert_true(mid.peak >= mid.in_use);
        if (r->be->ops->reset_peak) assert_true(after.peak == after.in_use);
    }
    DfError err = {{0}};
    assert_int_equal(df_backend_set_variant(r->be, NULL, 0, &err), 0); /* every backend: all defaults */
    assert_int_equal(df_backend_set_variant(r->be, "no_such_knob", 1, &err), -1);
    assert_non_null(strstr(err.msg, "no_such_knob"));
    df_backend_variants(r->be, var, sizeof var);
    if (r->be->ops->set_variant) assert_true(var[0] != '\0');
}

const OpCase CASE_DEVICE_QUERIES = {"device queries", "describe memory_info reset_peak set_variant variants",
                                    run_device_queries, OPS_NO_SHAPES, -1, OPS_NO_VARIANTS};

/* Streams, timers, the profile and recorded graphs, where the backend has them. */
static void run_device_caps(Run *r, const void *shape) {
    (void)shape;
    DfBackend *be = r->be;
    DfError err = {{0}};
    float *x = ops_inputs(r, 64, 210, 1);
    DfBuffer y = ops_up(r, x, 64, DF_BUF_ACT), one = ops_up(r, x, 64, DF_BUF_ACT);
    int times_x = 1; /* y = times_x * x: each add_inplace run below adds one x */
    if (df_backend_has(be, DF_CAP_STREAMS)) {
        assert_non_null(df_backend_native_stream(be));
        void *side = be->ops->side_stream_create(be, &err), *ev = be->ops->event_create(be, &err);
        if (!side || !ev) fail_msg("%s", err.msg);
        assert_int_equal(be->ops->stream_wait_stream(be, side, NULL, ev, &err), 0);
        assert_int_equal(be->ops->stream_wait_stream(be, NULL, side, ev, &err), 0);
        be->ops->event_destroy(be, ev);
        be->ops->side_stream_destroy(be, side);
    } else {
        assert_null(df_backend_native_stream(be));
    }
    if (df_backend_has(be, DF_CAP_TIMING)) {
        DfTimer *t = be->ops->timer_create(be, &err);
        if (!t) fail_msg("%s", err.msg);
        be->ops->timer_start(be, t);
        df_op_add_inplace(be, y, one), times_x++;
        assert_true(be->ops->timer_stop(be, t) >= 0);
        be->ops->timer_destroy(be, t);
        double gbs = 0;
        assert_int_equal(be->ops->copy_bandwidth(be, (size_t)1 << 20, 3, &gbs, &err), 0);
        assert_true(gbs > 0);
    }
    if (df_backend_has(be, DF_CAP_PROFILE)) {
        /* two adds: the device time between them is booked to the second one's kind */
        double ms[DF_OP_COUNT] = {0}, before[DF_OP_COUNT] = {0};
        be->ops->profile_enable(be, 1);
        df_op_add_inplace(be, y, one), times_x++;
        df_op_add_inplace(be, y, one), times_x++;
        be->ops->profile_enable(be, 0);
        assert_int_equal(be->ops->profile_read(be, ms, before, &err), 0);
        for (int k = 0; k < DF_OP_COUNT; k++)
            if (k == DF_OP_ID_add_inplace) assert_true(ms[k] > 0 && before[k] >= 0);
            else assert_true(ms[k] == 0 && before[k] == 0);
    }
    if (df_backend_has(be, DF_CAP_GRAPHS)) {
        DfGraph *g = NULL;
        assert_int_equal(be->ops->record_begin(be, &err), 0);
        df_op_add_inplace(be, y, one); /* recorded, not run */
        assert_int_equal(be->ops->record_end(be, &g, &err), 0);
        assert_non_null(g);
        assert_int_equal(be->ops->graph_replay(be, g, &err), 0);
        assert_int_equal(be->ops->graph_replay(be, g, &err), 0);
        times_x += 2;
        be->ops->graph_free(be, g);
    }
    /* on every backend: exactly the adds that ran (the timer and profile checks add too; a recording runs nothing) */
    float *got = df_test_download(be, y);
    for (int i = 0; i < 64; i++)
        assert_true(fabsf(got[i] - times_x * x[i]) <= 1e-2f * times_x * fabsf(x[i]) + 1e-6f);
    free(got);
}

const OpCase CASE_DEVICE_CAPS = {
    "device capabilities",
    "native_stream side_stream_create side_stream_destroy event_create event_destroy stream_wait_stream "
    "timer_create timer_start timer_stop timer_destroy copy_bandwidth profile_enable profile_begin profile_end "
    "profile_read record_begin record_end graph_replay graph_free",
    run_device_caps, OPS_NO_SHAPES, -1, OPS_NO_VARIANTS};
