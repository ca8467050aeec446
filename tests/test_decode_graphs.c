/* The recorded-step cache of the target decoder (target/decode_graphs.h)
 * over a fake backend that counts what it is asked to do: a key's first step
 * runs op by op, its second is recorded then replayed, later ones are
 * replayed; a stale recording is made again; a backend that declines
 * (profiling) gets the ops one by one; the least recently used key gives way
 * to a ninth; every recording is freed; a backend without recording always
 * runs op by op. */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "target/decode_graphs.h"

typedef struct Fake {
    int recording;
    int begins, ends, replays, frees;
    int decline;     /* record_begin answers 1 */
    int stale;       /* replays that answer 1 before the next succeeds */
    int ops_eager, ops_recorded; /* enqueue calls outside and inside a recording */
} Fake;

struct DfGraph {
    int id;
};

static Fake *fake_of(DfBackend *be) {
    return (Fake *)be->impl;
}

static int fake_record_begin(DfBackend *be, DfError *err) {
    (void)err;
    Fake *f = fake_of(be);
    if (f->decline) return 1;
    assert_false(f->recording);
    f->recording = 1;
    f->begins++;
    return 0;
}

static int fake_record_end(DfBackend *be, DfGraph **graph, DfError *err) {
    (void)err;
    Fake *f = fake_of(be);
    assert_true(f->recording);
    f->recording = 0;
    f->ends++;
    *graph = malloc(sizeof **graph);
    (*graph)->id = f->ends;
    return 0;
}

static int fake_replay(DfBackend *be, DfGraph *graph, DfError *err) {
    (void)err;
    Fake *f = fake_of(be);
    assert_non_null(graph);
    assert_false(f->recording);
    if (f->stale) {
        f->stale--;
        return 1;
    }
    f->replays++;
    return 0;
}

static void fake_free(DfBackend *be, DfGraph *graph) {
    fake_of(be)->frees++;
    free(graph);
}

static void enqueue(void *ctx) {
    Fake *f = ctx;
    if (f->recording) f->ops_recorded++;
    else f->ops_eager++;
}

static const DfBackendOps FAKE_OPS = {.name = "fake",
                                      .record_begin = fake_record_begin,
                                      .record_end = fake_record_end,
                                      .graph_replay = fake_replay,
                                      .graph_free = fake_free};

static DfDecodeGraphKey key_of(int n_seqs) {
    DfDecodeGraphKey k;
    df_decode_graph_key_clear(&k);
    k.n_seqs = n_seqs;
    k.n_rows = n_seqs;
    k.visible_bound = 256;
    return k;
}

static void run(DfDecodeGraphs *g, Fake *f, int n_seqs) {
    DfError err;
    DfDecodeGraphKey k = key_of(n_seqs);
    if (df_decode_graphs_run(g, &k, enqueue, f, &err)) fail_msg("%s", err.msg);
}

static void test_first_eager_then_recorded_then_replayed(void **state) {
    (void)state;
    Fake f = {0};
    DfBackend be = {&FAKE_OPS, &f};
    DfDecodeGraphs g;
    df_decode_graphs_init(&g, &be, 1);
    assert_true(g.enabled);
    run(&g, &f, 1);
    assert_int_equal(f.ops_eager, 1);
    assert_int_equal(f.begins, 0);
    run(&g, &f, 1);
    assert_int_equal(f.begins, 1);
    assert_int_equal(f.ops_recorded, 1);
    assert_int_equal(f.replays, 1);
    assert_int_equal(f.ops_eager, 1);
    for (int i = 0; i < 5; i++) run(&g, &f, 1);
    assert_int_equal(f.replays, 6);
    assert_int_equal(f.begins, 1);
    assert_int_equal(f.ops_eager + f.ops_recorded, 2);
    assert_int_equal((int)g.replays, 6);
    /* another key: its own first step op by op */
    run(&g, &f, 2);
    assert_int_equal(f.ops_eager, 2);
    df_decode_graphs_free(&g);
    assert_int_equal(f.frees, f.ends);
}

static void test_stale_recording_is_made_again(void **state) {
    (void)state;
    Fake f = {0};
    DfBackend be = {&FAKE_OPS, &f};
    DfDecodeGraphs g;
    df_decode_graphs_init(&g, &be, 1);
    run(&g, &f, 3);
    run(&g, &f, 3);
    f.stale = 1;
    run(&g, &f, 3);
    assert_int_equal(f.frees, 1);     /* the stale one */
    assert_int_equal(f.begins, 2);    /* recorded again */
    assert_int_equal(f.replays, 2);   /* and replayed */
    assert_int_equal(f.ops_eager, 1); /* never op by op again */
    df_decode_graphs_free(&g);
    assert_int_equal(f.frees, f.ends);
}

static void test_declined_recording_runs_op_by_op(void **state) {
    (void)state;
    Fake f = {.decline = 1};
    DfBackend be = {&FAKE_OPS, &f};
    DfDecodeGraphs g;
    df_decode_graphs_init(&g, &be, 1);
    for (int i = 0; i < 4; i++) run(&g, &f, 1);
    assert_int_equal(f.ops_eager, 4);
    assert_int_equal(f.ends, 0);
    f.decline = 0; /* profiling over: recorded at the next step */
    run(&g, &f, 1);
    assert_int_equal(f.ops_recorded, 1);
    assert_int_equal(f.replays, 1);
    df_decode_graphs_free(&g);
}

static void test_least_recently_used_key_gives_way(void **state) {
    (void)state;
    Fake f = {0};
    DfBackend be = {&FAKE_OPS, &f};
    DfDecodeGraphs g;
    df_decode_graphs_init(&g, &be, 1);
    for (int k = 1; k <= DF_DECODE_GRAPH_SLOTS; k++) run(&g, &f, k), run(&g, &f, k); /* each recorded */
    assert_int_equal(f.ends, DF_DECODE_GRAPH_SLOTS);
    run(&g, &f, 1); /* key 1 used last: key 2 is now the oldest */
    int eager = f.ops_eager;
    run(&g, &f, 100); /* a ninth key takes key 2's place */
    assert_int_equal(f.frees, 1);
    run(&g, &f, 1); /* still recorded */
    assert_int_equal(f.ops_eager, eager + 1);
    run(&g, &f, 2); /* forgotten: op by op again */
    assert_int_equal(f.ops_eager, eager + 2);
    df_decode_graphs_free(&g);
    assert_int_equal(f.frees, f.ends);
}

static void test_backend_without_recording_runs_op_by_op(void **state) {
    (void)state;
    static const DfBackendOps plain = {.name = "plain"};
    Fake f = {0};
    DfBackend be = {&plain, &f};
    DfDecodeGraphs g;
    df_decode_graphs_init(&g, &be, 1);
    assert_false(g.enabled);
    for (int i = 0; i < 3; i++) run(&g, &f, 1);
    assert_int_equal(f.ops_eager, 3);
    df_decode_graphs_free(&g);
    /* and a caller that asks for none */
    DfBackend be2 = {&FAKE_OPS, &f};
    df_decode_graphs_init(&g, &be2, 0);
    for (int i = 0; i < 3; i++) run(&g, &f, 1);
    assert_int_equal(f.ops_eager, 6);
    assert_int_equal(f.begins, 0);
    df_decode_graphs_free(&g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_eager_then_recorded_then_replayed),
        cmocka_unit_test(test_stale_recording_is_made_again),
        cmocka_unit_test(test_declined_recording_runs_op_by_op),
        cmocka_unit_test(test_least_recently_used_key_gives_way),
        cmocka_unit_test(test_backend_without_recording_runs_op_by_op),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
