/* The drafter's forward and backward:
 * - parity with tests/fixtures/drafter/step.safetensors (tests/ref/drafter_ref.py:
 *   PyTorch autograd over the spec's drafter on coder-tiny features): block
 *   inputs, loss, argmax, metrics and the gradient of every parameter, on
 *   the CPU backend (fp32) and, where a GPU is present, on the CUDA backend
 *   (bf16 weights and activations: looser bounds, stated at the checks);
 * - central finite differences of the loss on a tiny random configuration
 *   against the analytic gradient of every parameter tensor;
 * - gradients accumulate over calls;
 * - micro-batches (df_drafter_set_max_block_rows) give the whole batch's
 *   loss, metrics, argmax and gradients, also when a sequence's blocks are
 *   spread over several of them (model/drafter_split.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend/backend.h"
#include "backend/select.h"
#include "formats/safetensors.h"
#include "model/drafter.h"
#include "model/drafter_rows.h"
#include "model/drafter_split.h"
#include "target/target.h"
#include "model/anchors.h"

/* drafter_ref.py's det_uniform: splitmix64 of (seed << 32) + i, top 24 bits
 * to [0, 1), mapped to [-1, 1). */
static double det_uniform(uint64_t seed, uint64_t i) {
    uint64_t z = (seed << 32) + i + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return 2.0 * ((double)(z >> 40) / (double)(1 << 24)) - 1.0;
}

/* drafter_ref.py's make_params: tensor idx (layout order) seeded 1000 + idx;
 * linear u * sqrt(3) * scale, norms 1 + 0.1 u. */
static float *ref_params(const DfDrafterLayout *layout, double linear_scale) {
    float *flat = malloc(layout->total * sizeof *flat);
    for (int p = 0; p < layout->n_params; p++) {
        const DfParamInfo *info = &layout->params[p];
        for (size_t i = 0; i < info->count; i++) {
            double u = (float)det_uniform(1000 + (uint64_t)p, i); /* the reference rounds u to fp32 first */
            flat[info->offset + i] = info->kind == DF_PARAM_LINEAR ? (float)((float)u * (float)(sqrt(3.0) * linear_scale))
                                                                   : (float)(1.0f + 0.1f * (float)u);
        }
    }
    return flat;
}

static DfBuffer upload(DfBackend *be, const float *host, size_t n) {
    DfError err;
    DfBuffer b;
    assert_int_equal(df_buffer_alloc(be, &b, DF_BUF_ACT, n, &err), 0);
    assert_int_equal(be->ops->upload_f32(be, b, host, &err), 0);
    return b;
}

/* --------------------------------------------------------- the fixture */

static void *load_tensor(const DfSafetensors *st, const char *name, DfDtype dtype, int64_t *count) {
    const DfTensorInfo *t = df_safetensors_find(st, name);
    if (!t) fail_msg("fixture has no tensor %s", name);
    assert_int_equal(t->dtype, dtype);
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    if (count) *count = n;
    void *out = malloc(t->nbytes ? t->nbytes : 1);
    memcpy(out, t->data, t->nbytes);
    return out;
}

typedef struct Parity {
    DfBackend *be;
    int bf16; /* the backend computes in bf16 (CUDA) */
    DfTargetModel target;
    DfDrafter drafter;
    DfSafetensors st;
    int32_t *ids, *seq_starts;
    uint8_t *mask;
    int64_t *anchors, *anchor_starts;
    int64_t n_tok, n_seqs, n_anchors;
    DfBuffer features;
    DfDrafterBatch batch;
} Parity;

/* The parity fixture on the named backend; *state stays NULL (the tests
 * skip) where that backend cannot be created (no GPU). */
static int parity_setup_on(void **state, const char *device) {
    DfError err;
    *state = NULL;
    DfBackend *be = df_backend_create(device, &err);
    if (!be) {
        print_message("%s backend not available (%s): its parity tests skip\n", device, err.msg);
        return 0;
    }
    Parity *p = calloc(1, sizeof *p);
    p->be = be;
    p->bf16 = strcmp(device, "cpu") != 0;
    /* the embedding is all the drafter needs of the target; coder-tiny ties lm_head to it */
    if (df_target_load(&p->target, p->be, df_test_path("assets/coder-tiny"), 1, 0, &err)) fail_msg("%s", err.msg);
    assert_true(p->target.cfg.tie_word_embeddings);
    DfDrafterConfig cfg;
    DfDrafterOptions dopt = {.num_layers = 2, .intermediate_size = 128,
                             .block_size = 8, .n_taps = 3, .mask_token_id = 8190};
    if (df_drafter_config_from_target(&cfg, &p->target.cfg, &dopt, &err)) fail_msg("%s", err.msg);
    assert_int_equal(cfg.target_layer_ids[0], 1);
    assert_int_equal(cfg.target_layer_ids[2], 5);
    assert_true(cfg.gamma == 4.0);
    if (df_drafter_create(&p->drafter, p->be, &cfg, p->target.embed, p->target.embed, &err)) fail_msg("%s", err.msg);
    if (df_safetensors_open(&p->st, df_test_path("tests/fixtures/drafter/step.safetensors"), &err))
        fail_msg("%s", err.msg);
    int64_t n, n_feat;
    p->ids = load_tensor(&p->st, "input_ids", DF_DTYPE_I32, &p->n_tok);
    int32_t *mask32 = load_tensor(&p->st, "loss_mask", DF_DTYPE_I32, &n);
    p->seq_starts = load_tensor(&p->st, "seq_starts", DF_DTYPE_I32, &n);
    p->n_seqs = n - 1;
    int32_t *anchors32 = load_tensor(&p->st, "anchors", DF_DTYPE_I32, &p->n_anchors);
    int32_t *astarts32 = load_tensor(&p->st, "anchor_starts", DF_DTYPE_I32, &n);
    float *features = load_tensor(&p->st, "features", DF_DTYPE_F32, &n_feat);
    assert_int_equal(n_feat, p->n_tok * 3 * cfg.hidden_size);
    p->mask = malloc((size_t)p->n_tok);
    for (int64_t i = 0; i < p->n_tok; i++) p->mask[i] = (uint8_t)mask32[i];
    p->anchors = malloc((size_t)p->n_anchors * sizeof *p->anchors);
    for (int64_t i = 0; i < p->n_anchors; i++) p->anchors[i] = anchors32[i];
    p->anchor_starts = malloc((size_t)(p->n_seqs + 1) * sizeof *p->anchor_starts);
    for (int64_t i = 0; i <= p->n_seqs; i++) p->anchor_starts[i] = astarts32[i];
    p->features = upload(p->be, features, (size_t)n_feat);
    free(mask32), free(anchors32), free(astarts32), free(features);
    p->batch = (DfDrafterBatch){.n_seqs = (int)p->n_seqs, .seq_starts = p->seq_starts, .ids = p->ids,
                                .loss_mask = p->mask, .features = p->features, .anchor_starts = p->anchor_starts,
                                .anchors = p->anchors};
    float *params = ref_params(&p->drafter.layout, 0.05);
    assert_int_equal(df_drafter_set_params(&p->drafter, params, &err), 0);
    free(params);
    *state = p;
    return 0;
}

static int parity_setup_cpu(void **state) { return parity_setup_on(state, "cpu"); }
static int parity_setup_cuda(void **state) { return parity_setup_on(state, "cuda"); }

static int parity_teardown(void **state) {
    Parity *p = *state;
    if (!p) return 0;
    df_buffer_free(p->be, &p->features);
    df_drafter_free(&p->drafter);
    df_target_free(&p->target);
    df_safetensors_close(&p->st);
    free(p->ids), free(p->seq_starts), free(p->mask), free(p->anchors), free(p->anchor_starts);
    df_backend_destroy(p->be);
    free(p);
    return 0;
}

/* Block ids and positions as the drafter builds them (model/anchors.h) equal the reference's. */
static void test_fixture_blocks(void **state) {
    Parity *p = *state;
    if (!p) skip();
    int B = p->drafter.cfg.block_size;
    int64_t nq;
    int32_t *ref_ids = load_tensor(&p->st, "block_ids", DF_DTYPE_I32, &nq);
    int32_t *ref_pos = load_tensor(&p->st, "block_pos", DF_DTYPE_I32, NULL);
    assert_int_equal(nq, p->n_anchors * B);
    int32_t ids[64], pos[64];
    for (int s = 0; s < p->n_seqs; s++)
        for (int64_t j = p->anchor_starts[s]; j < p->anchor_starts[s + 1]; j++) {
            df_block_inputs(p->ids + p->seq_starts[s], p->anchors[j], B, p->drafter.cfg.mask_token_id, ids, pos);
            assert_memory_equal(ids, ref_ids + j * B, (size_t)B * sizeof *ids);
            assert_memory_equal(pos, ref_pos + j * B, (size_t)B * sizeof *pos);
        }
    free(ref_ids), free(ref_pos);
}

/* Which block rows carry a loss weight, from the fixture's tokens, mask and anchors (model/anchors.h). */
static uint8_t *row_validity(const Parity *p) {
    int B = p->drafter.cfg.block_size;
    uint8_t *valid = calloc((size_t)p->n_anchors * B, 1);
    float decay[DF_MAX_BLOCK_SIZE];
    df_block_decay(p->drafter.cfg.gamma, B, decay);
    for (int s = 0; s < p->n_seqs; s++) {
        int64_t t0 = p->seq_starts[s], len = p->seq_starts[s + 1] - t0;
        for (int64_t j = p->anchor_starts[s]; j < p->anchor_starts[s + 1]; j++)
            df_block_targets(p->ids + t0, p->mask + t0, len, p->anchors[j], B, decay, NULL,
                             valid + j * B, NULL);
    }
    return valid;
}

static void test_fixture_step(void **state) {
    Parity *p = *state;
    if (!p) skip();
    DfDrafter *d = &p->drafter;
    DfError err;
    DfMetrics m;
    assert_int_equal(df_metrics_init(&m, d->cfg.block_size, &err), 0);
    double wsum = df_drafter_batch_weight_sum(&d->cfg, &p->batch);
    df_drafter_zero_grads(d);
    if (df_drafter_forward_backward(d, &p->batch, 1.0 / wsum, &m, &err)) fail_msg("%s", err.msg);

    /* fp32 (CPU): the reference's own precision. bf16 (CUDA): weights,
     * features and activations rounded to 8 bits of mantissa (2^-9 relative
     * each) through two layers and the lm head, with fp32 accumulation: the
     * loss within 1e-2 and each gradient tensor within 5e-2 (max error over
     * max value); argmax may flip where two logits are within bf16 noise, so
     * at least 90% of the rows must agree and the metrics follow the argmax. */
    double loss_tol = p->bf16 ? 1e-2 : 1e-4, grad_tol = p->bf16 ? 5e-2 : 1e-3;
    float *ref_loss = load_tensor(&p->st, "loss", DF_DTYPE_F32, NULL);
    double loss = df_metrics_loss(&m);
    if (!(fabs(loss - ref_loss[0]) <= loss_tol * fabs(ref_loss[0])))
        fail_msg("loss %.7f, reference %.7f", loss, ref_loss[0]);
    assert_true(fabs(m.values[DF_METRICS_WEIGHT_SUM] - wsum) < 1e-9 * wsum);

    /* the lm head runs on the rows with a loss weight only: their argmax is
     * the reference's, the other rows' -1 */
    int n_rows;
    const int32_t *argmax = df_drafter_last_argmax(d, &n_rows);
    int64_t nq, n_weighted = 0, same = 0;
    int32_t *ref_arg = load_tensor(&p->st, "argmax", DF_DTYPE_I32, &nq);
    assert_int_equal(n_rows, nq);
    uint8_t *valid = row_validity(p);
    for (int64_t r = 0; r < nq; r++) {
        if (!valid[r]) {
            if (argmax[r] != -1) fail_msg("row %lld has no loss weight but argmax %d", (long long)r, argmax[r]);
            continue;
        }
        n_weighted++;
        same += argmax[r] == ref_arg[r];
    }
    free(valid);
    assert_true(n_weighted > 0 && n_weighted < nq); /* both kinds of row */
    if (p->bf16) {
        if (!(same >= 0.9 * (double)n_weighted))
            fail_msg("argmax agrees on %lld of %lld weighted rows", (long long)same, (long long)n_weighted);
    } else {
        if (same != n_weighted) fail_msg("argmax agrees on %lld of %lld weighted rows", (long long)same, (long long)n_weighted);
        float *ref_acc = load_tensor(&p->st, "accuracy", DF_DTYPE_F32, NULL);
        float *ref_tau = load_tensor(&p->st, "train_tau", DF_DTYPE_F32, NULL);
        for (int k = 0; k < d->cfg.block_size; k++) assert_true(fabs(df_metrics_accuracy(&m, k) - ref_acc[k]) < 1e-6);
        assert_true(fabs(df_metrics_train_tau(&m) - ref_tau[0]) < 1e-6);
        free(ref_acc), free(ref_tau);
    }

    float *grads = malloc(d->layout.total * sizeof *grads);
    assert_int_equal(df_drafter_get_grads(d, grads, &err), 0);
    double worst = 0;
    for (int i = 0; i < d->layout.n_params; i++) {
        const DfParamInfo *info = &d->layout.params[i];
        char name[128];
        snprintf(name, sizeof name, "grad.%s", info->name);
        int64_t n;
        float *ref = load_tensor(&p->st, name, DF_DTYPE_F32, &n);
        assert_int_equal(n, (int64_t)info->count);
        double e = df_rel_error(grads + info->offset, ref, info->count);
        if (e > worst) worst = e;
        if (!(e < grad_tol)) fail_msg("%s: relative error %g", name, e);
        free(ref);
    }
    print_message("fixture on %s: loss %.6f (ref %.6f), argmax agrees on %lld of %lld weighted rows, worst gradient relative "
                  "error %.2e\n", p->be->ops->name, loss, ref_loss[0], (long long)same, (long long)n_weighted, worst);
    free(grads), free(ref_loss), free(ref_arg);
}

/* Two calls add their gradients: (g at scale 1) + (g at scale 0.5) = 1.5 g. */
static void test_gradients_accumulate(void **state) {
    Parity *p = *state;
    if (!p) skip();
    DfDrafter *d = &p->drafter;
    DfError err;
    size_t n = d->layout.total;
    float *once = malloc(n * sizeof *once), *twice = malloc(n * sizeof *twice);
    df_drafter_zero_grads(d);
    assert_int_equal(df_drafter_forward_backward(d, &p->batch, 1.0, NULL, &err), 0);
    assert_int_equal(df_drafter_get_grads(d, once, &err), 0);
    assert_int_equal(df_drafter_forward_backward(d, &p->batch, 0.5, NULL, &err), 0);
    assert_int_equal(df_drafter_get_grads(d, twice, &err), 0);
    for (size_t i = 0; i < n; i++) once[i] *= 1.5f;
    assert_true(df_rel_error(twice, once, n) < 1e-5);
    /* a forward without gradient leaves them alone */
    assert_int_equal(df_drafter_forward_backward(d, &p->batch, 0.0, NULL, &err), 0);
    assert_int_equal(df_drafter_get_grads(d, once, &err), 0);
    assert_memory_equal(once, twice, n * sizeof *once);
    free(once), free(twice);
}

/* One zeroed step at grad_scale 1 / weight sum: the gradient and the metrics. */
static void whole_step(Parity *p, float *grads, DfMetrics *m) {
    DfDrafter *d = &p->drafter;
    DfError err;
    assert_int_equal(df_metrics_init(m, d->cfg.block_size, &err), 0);
    df_drafter_zero_grads(d);
    double wsum = df_drafter_batch_weight_sum(&d->cfg, &p->batch);
    if (df_drafter_forward_backward(d, &p->batch, 1.0 / wsum, m, &err)) fail_msg("%s", err.msg);
    assert_int_equal(df_drafter_get_grads(d, grads, &err), 0);
}

/* Whether some sequence has blocks in two parts of the split. */
static int splits_a_sequence(const DfDrafterSplit *s, const DfDrafterBatch *b) {
    for (int p = 1; p < s->n_parts; p++)
        for (int q = 0; q < b->n_seqs; q++)
            if (b->anchor_starts[q] < s->block_starts[p] && s->block_starts[p] < b->anchor_starts[q + 1]) return 1;
    return 0;
}

/* The fixture's reference gradient (fp32 PyTorch) as one flat array in layout order. */
static float *reference_grads(Parity *p) {
    const DfDrafterLayout *l = &p->drafter.layout;
    float *flat = malloc(l->total * sizeof *flat);
    for (int i = 0; i < l->n_params; i++) {
        char name[128];
        snprintf(name, sizeof name, "grad.%s", l->params[i].name);
        float *ref = load_tensor(&p->st, name, DF_DTYPE_F32, NULL);
        memcpy(flat + l->params[i].offset, ref, l->params[i].count * sizeof *ref);
        free(ref);
    }
    return flat;
}

static void test_micro_batches(void **state) {
    Parity *p = *state;
    if (!p) skip();
    DfDrafter *d = &p->drafter;
    int B = d->cfg.block_size;
    size_t n = d->layout.total;
    float *whole = malloc(n * sizeof *whole), *split = malloc(n * sizeof *split);
    DfMetrics mw, ms;
    whole_step(p, whole, &mw);
    int rows_whole;
    const int32_t *arg = df_drafter_last_argmax(d, &rows_whole);
    int32_t *arg_whole = malloc((size_t)rows_whole * sizeof *arg_whole);
    memcpy(arg_whole, arg, (size_t)rows_whole * sizeof *arg_whole);
    /* fp32 (CPU): only the summation order differs, 1e-6. bf16 (CUDA): the
     * parts' products are other shapes, so cuBLASLt may pick other
     * algorithms and round the bf16 activations differently; the split may
     * then differ from the whole step by as much as the whole step differs
     * from the fp32 reference (bf16's own error), no more. */
    double tol = 1e-6, tol_loss = 1e-6;
    if (p->bf16) {
        float *ref = reference_grads(p);
        tol = df_rel_error(whole, ref, n);
        free(ref);
        float *ref_loss = load_tensor(&p->st, "loss", DF_DTYPE_F32, NULL);
        tol_loss = fabs(df_metrics_loss(&mw) - ref_loss[0]) / fabs(ref_loss[0]) + 1e-6;
        free(ref_loss);
        print_message("bf16: the whole step's gradient is within %.2e of the fp32 reference, its loss within %.2e\n",
                      tol, tol_loss);
    }
    for (int blocks = 1; blocks <= 4; blocks++) {
        DfDrafterSplit plan = {0};
        df_drafter_split_plan(&plan, &p->batch, blocks);
        assert_true(plan.n_parts > 1);
        if (blocks > 1) assert_true(splits_a_sequence(&plan, &p->batch));
        df_drafter_split_free(&plan);
        df_drafter_set_max_block_rows(d, blocks * B + B / 2); /* rounded down to whole blocks */
        assert_int_equal(d->max_block_rows, blocks * B);
        whole_step(p, split, &ms);
        double e = df_rel_error(split, whole, n);
        if (!(e <= tol)) fail_msg("%d blocks per micro-batch: gradient relative error %g (bound %g)", blocks, e, tol);
        print_message("%d blocks per micro-batch (%d of them): gradient relative error %.2e\n", blocks,
                      (int)((p->n_anchors + blocks - 1) / blocks), e);
        double lw = df_metrics_loss(&mw), ls = df_metrics_loss(&ms);
        if (!(fabs(ls - lw) <= tol_loss * fabs(lw))) fail_msg("%d blocks: loss %.9g, whole batch %.9g", blocks, ls, lw);
        assert_true(ms.values[DF_METRICS_WEIGHT_SUM] == mw.values[DF_METRICS_WEIGHT_SUM]);
        int rows;
        arg = df_drafter_last_argmax(d, &rows);
        assert_int_equal(rows, rows_whole);
        if (!p->bf16) {
            assert_memory_equal(arg, arg_whole, (size_t)rows * sizeof *arg);
            assert_true(fabs(df_metrics_train_tau(&ms) - df_metrics_train_tau(&mw)) < 1e-12);
        }
    }
    df_drafter_set_max_block_rows(d, 0);
    free(whole), free(split), free(arg_whole);
}

/* The gradient buffer filled with NaN: what compute_grads must never read. */
static void poison_grads(DfDrafter *d) {
    DfError err;
    size_t n = d->layout.total;
    float *nan = malloc(n * sizeof *nan);
    for (size_t i = 0; i < n; i++) nan[i] = NAN;
    assert_int_equal(d->be->ops->upload_f32(d->be, d->grads, nan, &err), 0);
    free(nan);
}

/* compute_grads gives zero_grads + forward_backward's gradient whatever the
 * buffer held, whole and in micro-batches (the first writes, the others
 * add), and zeros at grad_scale 0. On the CPU the same bits (a product
 * written is the product added to zeros); on a bf16 backend within 1e-6:
 * cuBLASLt may run another kernel for a product that does not read C. */
static void test_compute_grads(void **state) {
    Parity *p = *state;
    if (!p) skip();
    DfDrafter *d = &p->drafter;
    DfError err;
    size_t n = d->layout.total;
    float *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    double wsum = df_drafter_batch_weight_sum(&d->cfg, &p->batch);
    int B = d->cfg.block_size;
    for (int blocks = 0; blocks <= 2; blocks++) { /* 0: the whole batch in one pass */
        df_drafter_set_max_block_rows(d, blocks * B);
        DfMetrics m;
        whole_step(p, want, &m);
        poison_grads(d);
        assert_int_equal(df_drafter_compute_grads(d, &p->batch, 1.0 / wsum, NULL, &err), 0);
        assert_int_equal(df_drafter_get_grads(d, got, &err), 0);
        if (p->bf16) {
            double e = df_rel_error(got, want, n);
            if (!(e <= 1e-6)) fail_msg("%d blocks a pass: compute_grads %.3g from zero_grads + forward_backward", blocks, e);
        } else {
            assert_memory_equal(got, want, n * sizeof *got);
        }
    }
    df_drafter_set_max_block_rows(d, 0);
    poison_grads(d);
    assert_int_equal(df_drafter_compute_grads(d, &p->batch, 0.0, NULL, &err), 0);
    assert_int_equal(df_drafter_get_grads(d, got, &err), 0);
    for (size_t i = 0; i < n; i++)
        if (got[i] != 0.0f) fail_msg("grad_scale 0: gradient %zu is %g, not 0", i, got[i]);
    free(want), free(got);
}

/* The block rows against the definitions of model/anchors.h, row by row. */
static void check_rows(const DfDrafterRows *r, const DfDrafterBatch *b, const DfDrafterConfig *c) {
    int B = c->block_size, T = b->seq_starts[b->n_seqs];
    assert_int_equal(r->n_ctx, T);
    assert_int_equal(r->n_q, r->n_blocks * B);
    float decay[DF_MAX_BLOCK_SIZE];
    df_block_decay(c->gamma, B, decay);
    int n_loss = 0, max_pos = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        int t0 = b->seq_starts[s], len = b->seq_starts[s + 1] - t0;
        for (int i = 0; i < len; i++) assert_int_equal(r->kpos[t0 + i], i);
        if (len > max_pos) max_pos = len;
        for (int64_t j = b->anchor_starts[s]; j < b->anchor_starts[s + 1]; j++) {
            int32_t ids[DF_MAX_BLOCK_SIZE], pos[DF_MAX_BLOCK_SIZE], labels[DF_MAX_BLOCK_SIZE];
            uint8_t valid[DF_MAX_BLOCK_SIZE];
            float w[DF_MAX_BLOCK_SIZE];
            df_block_inputs(b->ids + t0, b->anchors[j], B, c->mask_token_id, ids, pos);
            df_block_targets(b->ids + t0, b->loss_mask + t0, len, b->anchors[j], B, decay, labels, valid, w);
            size_t row = (size_t)j * B;
            assert_int_equal(r->anchors[j], b->anchors[j]);
            assert_memory_equal(r->block_ids + row, ids, (size_t)B * sizeof *ids);
            assert_memory_equal(r->kpos + T + row, pos, (size_t)B * sizeof *pos);
            assert_memory_equal(r->labels + row, labels, (size_t)B * sizeof *labels);
            assert_memory_equal(r->valid + row, valid, (size_t)B);
            assert_memory_equal(r->weights + row, w, (size_t)B * sizeof *w);
            if (b->anchors[j] + B > max_pos) max_pos = (int)b->anchors[j] + B;
            for (int k = 0; k < B; k++) {
                int slot = r->loss_slot[row + (size_t)k];
                if (w[k] > 0) {
                    assert_int_equal(slot, n_loss);
                    assert_int_equal(r->loss_rows[n_loss], (int)(row + (size_t)k));
                    assert_int_equal(r->loss_labels[n_loss], labels[k]);
                    assert_true(r->loss_weights[n_loss] == w[k]);
                    n_loss++;
                }
            }
        }
    }
    assert_int_equal(r->n_loss, n_loss);
    for (int i = 0; i < r->n_q; i++)
        if (!(r->weights[i] > 0)) assert_int_equal(r->loss_slot[i], n_loss);
    assert_int_equal(r->max_pos, max_pos);
}

/* A batch that brings its block rows built ahead (train's loader thread)
 * trains as one whose rows the step builds: the same weight sum to the bit,
 * the same gradient and loss (the same bits on the CPU; on a bf16 backend
 * within 1e-6, as two runs of the same step). Rows of another batch are
 * refused. */
static void test_rows_built_ahead(void **state) {
    Parity *p = *state;
    if (!p) skip();
    DfDrafter *d = &p->drafter;
    DfError err;
    DfDrafterRows rows = {0};
    df_drafter_rows_build(&rows, &d->cfg, &p->batch);
    check_rows(&rows, &p->batch, &d->cfg);
    double wsum = df_drafter_batch_weight_sum(&d->cfg, &p->batch);
    assert_true(rows.weight_sum == wsum);
    size_t n = d->layout.total;
    float *built = malloc(n * sizeof *built), *ahead = malloc(n * sizeof *ahead);
    DfMetrics mb, ma;
    whole_step(p, built, &mb);
    DfDrafterBatch with_rows = p->batch;
    with_rows.rows = &rows;
    assert_true(df_drafter_batch_weight_sum(&d->cfg, &with_rows) == wsum);
    DfDrafterBatch saved = p->batch;
    p->batch = with_rows;
    whole_step(p, ahead, &ma);
    p->batch = saved;
    if (p->bf16) {
        double e = df_rel_error(ahead, built, n);
        if (!(e <= 1e-6)) fail_msg("rows built ahead: gradient %.3g from the step's own rows", e);
        assert_true(fabs(df_metrics_loss(&ma) - df_metrics_loss(&mb)) <= 1e-6 * fabs(df_metrics_loss(&mb)));
    } else {
        assert_memory_equal(ahead, built, n * sizeof *ahead);
        assert_true(df_metrics_loss(&ma) == df_metrics_loss(&mb));
        assert_true(df_metrics_train_tau(&ma) == df_metrics_train_tau(&mb));
    }
    /* rows of a batch with one sequence fewer */
    DfDrafterBatch shorter = p->batch;
    shorter.n_seqs--;
    DfDrafterRows other = {0};
    df_drafter_rows_build(&other, &d->cfg, &shorter);
    with_rows.rows = &other;
    assert_int_equal(df_drafter_forward_backward(d, &with_rows, 1.0, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "built for another batch"));
    df_drafter_rows_free(&other);
    df_drafter_rows_free(&rows);
    free(built), free(ahead);
}

static void test_bad_batch(void **state) {
    Parity *p = *state;
    if (!p) skip();
    DfError err;
    DfDrafterBatch b = p->batch;
    int64_t anchors[16];
    memcpy(anchors, p->anchors, (size_t)p->n_anchors * sizeof *anchors);
    anchors[1] = 1000;
    b.anchors = anchors;
    assert_int_equal(df_drafter_forward_backward(&p->drafter, &b, 1.0, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "anchor 1000"));
    int32_t ids[256];
    memcpy(ids, p->ids, (size_t)p->n_tok * sizeof *ids);
    ids[5] = 9000;
    b = p->batch;
    b.ids = ids;
    assert_int_equal(df_drafter_forward_backward(&p->drafter, &b, 1.0, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "row 5"));
}

/* --------------------------------------- finite differences, tiny model */

/* The tiny drafter of test_util (2 layers) with one more token left out of
 * the loss (17) and five blocks, one running past its sequence's end. */
typedef struct FdModel {
    DfTestTinyDrafter t;
    int64_t anchors[5], anchor_starts[3];
    DfDrafterBatch batch;
} FdModel;

static void fd_model_init(FdModel *f) {
    memset(f, 0, sizeof *f);
    df_test_tiny_drafter_init(&f->t, 2);
    f->t.mask[17] = 0;
    int64_t anchors[5] = {2, 5, 10, 1, 6}; /* the block at 10 runs past the end of its 13 tokens */
    memcpy(f->anchors, anchors, sizeof anchors);
    f->anchor_starts[0] = 0, f->anchor_starts[1] = 3, f->anchor_starts[2] = 5;
    f->batch = (DfDrafterBatch){.n_seqs = 2, .seq_starts = f->t.seq_starts, .ids = f->t.ids, .loss_mask = f->t.mask,
                                .features = f->t.features, .anchor_starts = f->anchor_starts, .anchors = f->anchors};
}

/* sum(w * CE) at the given parameters */
static double fd_loss(FdModel *f, const float *params) {
    DfError err;
    DfMetrics m;
    df_metrics_init(&m, DF_TINY_B, &err);
    assert_int_equal(df_drafter_set_params(&f->t.d, params, &err), 0);
    if (df_drafter_forward_backward(&f->t.d, &f->batch, 0.0, &m, &err)) fail_msg("%s", err.msg);
    return m.values[DF_METRICS_LOSS_SUM];
}

static void test_finite_differences(void **state) {
    (void)state;
    DfError err;
    FdModel *f = malloc(sizeof *f);
    fd_model_init(f);
    const DfDrafterLayout *layout = &f->t.d.layout;
    float *params = ref_params(layout, 0.3);
    float *grads = malloc(layout->total * sizeof *grads);
    assert_int_equal(df_drafter_set_params(&f->t.d, params, &err), 0);
    df_drafter_zero_grads(&f->t.d);
    DfMetrics m;
    df_metrics_init(&m, DF_TINY_B, &err);
    assert_int_equal(df_drafter_forward_backward(&f->t.d, &f->batch, 1.0, &m, &err), 0);
    assert_true(m.values[DF_METRICS_WEIGHT_SUM] > 1.0);
    assert_int_equal(df_drafter_get_grads(&f->t.d, grads, &err), 0);
    double worst = 0;
    for (int p = 0; p < layout->n_params; p++) {
        const DfParamInfo *info = &layout->params[p];
        const float *g = grads + info->offset;
        /* the 3 entries with the largest gradient and 3 spread over the tensor */
        size_t pick[6];
        for (int s = 0; s < 3; s++) {
            size_t best = 0;
            double bv = -1;
            for (size_t i = 0; i < info->count; i++) {
                int taken = 0;
                for (int t = 0; t < s; t++) taken |= pick[t] == i;
                if (!taken && fabs(g[i]) > bv) bv = fabs(g[i]), best = i;
            }
            pick[s] = best;
        }
        for (int s = 3; s < 6; s++) pick[s] = (info->count * (size_t)(2 * s - 5)) / 7;
        double max_an = 0, max_err = 0;
        for (int s = 0; s < 6; s++) {
            float *x = params + info->offset + pick[s], keep = *x;
            float h = 1e-2f * (fabsf(keep) > 0.1f ? fabsf(keep) : 0.1f);
            *x = keep + h;
            double lp = fd_loss(f, params);
            *x = keep - h;
            double lm = fd_loss(f, params);
            *x = keep;
            double fd = (lp - lm) / (2.0 * ((double)(keep + h) - (double)keep));
            double an = g[pick[s]];
            if (fabs(an) > max_an) max_an = fabs(an);
            if (fabs(fd - an) > max_err) max_err = fabs(fd - an);
        }
        if (!(max_err <= 1e-2 * max_an + 2e-4))
            fail_msg("%s: finite differences differ by %g (largest gradient checked %g)", info->name, max_err, max_an);
        assert_true(max_an > 1e-3); /* every tensor gets a real gradient */
        if (max_err / max_an > worst) worst = max_err / max_an;
    }
    print_message("finite differences: worst error / largest gradient %.2e\n", worst);
    free(params), free(grads);
    df_test_tiny_drafter_free(&f->t);
    free(f);
}

int main(void) {
    const struct CMUnitTest parity[] = {
        cmocka_unit_test(test_fixture_blocks),
        cmocka_unit_test(test_fixture_step),
        cmocka_unit_test(test_gradients_accumulate),
        cmocka_unit_test(test_micro_batches),
        cmocka_unit_test(test_compute_grads),
        cmocka_unit_test(test_rows_built_ahead),
        cmocka_unit_test(test_bad_batch),
    };
    const struct CMUnitTest fd[] = {
        cmocka_unit_test(test_finite_differences),
    };
    int failed = cmocka_run_group_tests_name("parity on the CPU", parity, parity_setup_cpu, parity_teardown);
    failed += cmocka_run_group_tests_name("parity on CUDA (skips without a GPU)", parity, parity_setup_cuda,
                                          parity_teardown);
    return failed + cmocka_run_group_tests(fd, NULL, NULL);
}
