/* The drafter backward's grad_ready hook (model/drafter.h), on a tiny random
 * CPU drafter of three layers:
 * - the reported ranges tile [0, total) exactly, without overlap, in the
 *   order the backward makes them final: the last layer with the final norm,
 *   each layer below down to layer 0 (edges at each layer's
 *   input_layernorm, found by name in the layout), then fc and hidden_norm;
 * - at the moment a range is reported, its gradient (downloaded inside the
 *   callback) already equals the final gradient of the same call and of a
 *   call without a hook (nothing writes it afterwards), and is not zero;
 * - a second call reports the same ranges again; a forward without backward
 *   (grad_scale 0) and a cleared hook report nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "model/drafter.h"

enum { B = DF_TINY_B, LAYERS = 3, MAX_RANGES = 16 };

typedef struct Recorder {
    DfDrafter *d;
    int n;
    size_t offset[MAX_RANGES], count[MAX_RANGES];
    float *snapshot; /* [total]: each range's gradient when it was reported */
    int failed;
} Recorder;

static void record_range(void *ctx, size_t offset, size_t count) {
    Recorder *r = ctx;
    DfError err;
    DfBackend *be = r->d->be;
    if (r->n == MAX_RANGES || offset + count > r->d->layout.total) {
        r->failed = 1;
        return;
    }
    r->offset[r->n] = offset;
    r->count[r->n] = count;
    r->n++;
    if (be->ops->sync(be, &err) ||
        be->ops->download_f32(be, r->snapshot + offset, df_buffer_view(r->d->grads, offset, count), &err))
        r->failed = 1;
}

/* The shared tiny drafter (test_util.h), 3 layers, with 3 + 2 anchors in its two sequences. */
typedef struct Tiny {
    DfTestTinyDrafter t;
    int64_t anchors[5], anchor_starts[3];
    DfDrafterBatch batch;
} Tiny;

static void tiny_init(Tiny *f) {
    memset(f, 0, sizeof *f);
    df_test_tiny_drafter_init(&f->t, LAYERS);
    const int64_t anchors[5] = {2, 5, 8, 1, 4};
    memcpy(f->anchors, anchors, sizeof anchors);
    f->anchor_starts[0] = 0, f->anchor_starts[1] = 3, f->anchor_starts[2] = 5;
    f->batch = (DfDrafterBatch){.n_seqs = 2, .seq_starts = f->t.seq_starts, .ids = f->t.ids, .loss_mask = f->t.mask,
                                .features = f->t.features, .anchor_starts = f->anchor_starts, .anchors = f->anchors};
}

static void tiny_free(Tiny *f) { df_test_tiny_drafter_free(&f->t); }

/* One zeroed forward_backward; the final gradient into grads. */
static void step(Tiny *f, double grad_scale, float *grads) {
    DfError err;
    df_drafter_zero_grads(&f->t.d);
    if (df_drafter_forward_backward(&f->t.d, &f->batch, grad_scale, NULL, &err)) fail_msg("%s", err.msg);
    assert_int_equal(df_drafter_get_grads(&f->t.d, grads, &err), 0);
}

/* The range edges the backward must report, from the layout by name:
 * total, then each layer's input_layernorm from the last layer down, then 0. */
static int expected_edges(const DfDrafterLayout *l, size_t *edges) {
    int n = 0;
    edges[n++] = l->total;
    for (int layer = LAYERS - 1; layer >= 0; layer--) {
        char name[96];
        snprintf(name, sizeof name, "layers.%d.input_layernorm.weight", layer);
        int idx = df_drafter_layout_find(l, name);
        assert_true(idx >= 0);
        edges[n++] = l->params[idx].offset;
    }
    edges[n++] = 0;
    return n;
}

static void check_ranges(const Recorder *r, const DfDrafterLayout *l) {
    size_t edges[LAYERS + 2];
    int n_edges = expected_edges(l, edges);
    assert_false(r->failed);
    assert_int_equal(r->n, n_edges - 1);
    for (int i = 0; i < r->n; i++) { /* contiguous from the end down: exact tiling, no overlap, backward order */
        assert_int_equal(r->offset[i] + r->count[i], edges[i]);
        assert_int_equal(r->offset[i], edges[i + 1]);
        assert_true(r->count[i] > 0);
    }
    /* fc and hidden_norm come last; the final norm with the last layer, first */
    const DfParamInfo *fc = &l->params[l->fc], *hn = &l->params[l->hidden_norm], *norm = &l->params[l->norm];
    assert_true(fc->offset + fc->count <= r->offset[r->n - 1] + r->count[r->n - 1]);
    assert_true(hn->offset + hn->count <= r->offset[r->n - 1] + r->count[r->n - 1]);
    assert_true(norm->offset >= r->offset[0]);
}

/* Every element's snapshot equals the final value; every range got gradient. */
static void check_snapshots(const Recorder *r, const float *final, const char *what) {
    for (int i = 0; i < r->n; i++) {
        double largest = 0;
        for (size_t j = r->offset[i]; j < r->offset[i] + r->count[i]; j++) {
            if (memcmp(&r->snapshot[j], &final[j], sizeof(float)) != 0)
                fail_msg("range %d [%zu, +%zu): element %zu was %g when reported, %g at the end (%s)", i,
                         r->offset[i], r->count[i], j, r->snapshot[j], final[j], what);
            if (fabsf(final[j]) > largest) largest = fabsf(final[j]);
        }
        assert_true(largest > 1e-6);
    }
}

static void test_hook_ranges_and_values(void **state) {
    (void)state;
    Tiny *f = malloc(sizeof *f);
    tiny_init(f);
    size_t total = f->t.d.layout.total;
    float *plain = malloc(total * sizeof *plain), *hooked = malloc(total * sizeof *hooked);
    step(f, 0.5, plain); /* no hook */

    Recorder r = {.d = &f->t.d, .snapshot = malloc(total * sizeof(float))};
    for (size_t i = 0; i < total; i++) r.snapshot[i] = NAN;
    df_drafter_set_grad_ready(&f->t.d, record_range, &r);
    step(f, 0.5, hooked);
    check_ranges(&r, &f->t.d.layout);
    check_snapshots(&r, hooked, "same call");
    check_snapshots(&r, plain, "a call without hook");

    /* again: the same ranges, the same values */
    Recorder again = {.d = &f->t.d, .snapshot = malloc(total * sizeof(float))};
    df_drafter_set_grad_ready(&f->t.d, record_range, &again);
    step(f, 0.5, hooked);
    check_ranges(&again, &f->t.d.layout);
    check_snapshots(&again, plain, "second call");

    /* no backward, or no hook: no report */
    again.n = 0;
    step(f, 0.0, hooked);
    assert_int_equal(again.n, 0);
    df_drafter_set_grad_ready(&f->t.d, NULL, &again);
    step(f, 0.5, hooked);
    assert_int_equal(again.n, 0);
    assert_memory_equal(hooked, plain, total * sizeof *plain);

    free(r.snapshot), free(again.snapshot), free(plain), free(hooked);
    tiny_free(f);
    free(f);
}

static void test_hook_with_micro_batches(void **state) {
    (void)state;
    Tiny *f = malloc(sizeof *f);
    tiny_init(f);
    size_t total = f->t.d.layout.total;
    float *plain = malloc(total * sizeof *plain), *hooked = malloc(total * sizeof *hooked);
    df_drafter_set_max_block_rows(&f->t.d, 2 * B); /* 5 blocks: parts of 2, 2 and 1 (rounded even: 1, 2, 2) */
    step(f, 0.5, plain);
    Recorder r = {.d = &f->t.d, .snapshot = malloc(total * sizeof(float))};
    for (size_t i = 0; i < total; i++) r.snapshot[i] = NAN;
    df_drafter_set_grad_ready(&f->t.d, record_range, &r);
    step(f, 0.5, hooked);
    check_ranges(&r, &f->t.d.layout);
    check_snapshots(&r, hooked, "micro-batches");
    check_snapshots(&r, plain, "micro-batches without hook");
    free(r.snapshot), free(plain), free(hooked);
    tiny_free(f);
    free(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hook_ranges_and_values),
        cmocka_unit_test(test_hook_with_micro_batches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
