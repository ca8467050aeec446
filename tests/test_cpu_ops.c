/* Each CPU backend op against a naive double-precision reference written
 * here, on random (never zero) inputs with odd sizes. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend/backend.h"
#include "target/rope.h"

#define TOL 1e-5

typedef DfTestBackendFixture Fixture;

static void assert_close(const float *got, const double *want, size_t n, double tol) {
    float *w = malloc(n * sizeof *w);
    for (size_t i = 0; i < n; i++) w[i] = (float)want[i];
    double e = df_rel_error(got, w, n);
    if (!(e < tol)) fail_msg("relative error %g over %zu values (tolerance %g)", e, n, tol);
    free(w);
}

static void check_matmul(DfBackend *be, int m, int n, int k, int ta, int tb, int acc) {
    float *a = df_test_random_array((size_t)m * k, 1 + ta, 1.0f), *b = df_test_random_array((size_t)k * n, 3 + tb, 1.0f);
    float *c0 = df_test_random_array((size_t)m * n, 5, 1.0f);
    double *want = malloc((size_t)m * n * sizeof *want);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = acc ? c0[i * n + j] : 0.0;
            for (int p = 0; p < k; p++) {
                double av = ta ? a[p * m + i] : a[i * k + p];
                double bv = tb ? b[j * k + p] : b[p * n + j];
                s += av * bv;
            }
            want[i * n + j] = s;
        }
    DfBuffer ba = df_test_upload(be, a, (size_t)m * k, DF_BUF_ACT), bb = df_test_upload(be, b, (size_t)k * n, DF_BUF_ACT);
    DfBuffer bc = df_test_upload(be, c0, (size_t)m * n, DF_BUF_ACT);
    df_op_matmul(be, bc, ba, bb, m, n, k, ta, tb, acc ? 1.0f : 0.0f);
    float *got = df_test_download(be, bc);
    assert_close(got, want, (size_t)m * n, TOL);
    df_buffer_free(be, &ba);
    df_buffer_free(be, &bb);
    df_buffer_free(be, &bc);
    free(a), free(b), free(c0), free(want), free(got);
}

/* Shapes: one block; enough rows to be split into row blocks across
 * threads; more columns than rows (split into column blocks). */
static void test_matmul_all_transposes(void **state) {
    DfBackend *be = ((Fixture *)*state)->be;
    const int shapes[3][3] = {{37, 29, 19}, {131, 45, 23}, {40, 97, 17}};
    for (int sh = 0; sh < 3; sh++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int acc = 0; acc < 2; acc++) check_matmul(be, shapes[sh][0], shapes[sh][1], shapes[sh][2], ta, tb, acc);
}

static void test_linear(void **state) {
    DfBackend *be = ((Fixture *)*state)->be;
    const int m = 23, n = 41, k = 31;
    float *x = df_test_random_array((size_t)m * k, 11, 1.0f), *w = df_test_random_array((size_t)n * k, 12, 0.5f);
    double *want = malloc((size_t)m * n * sizeof *want);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < k; p++) s += (double)x[i * k + p] * w[j * k + p];
            want[i * n + j] = s;
        }
    DfBuffer bx = df_test_upload(be, x, (size_t)m * k, DF_BUF_ACT), bw = df_test_upload(be, w, (size_t)n * k, DF_BUF_ACT), by;
    DfError err;
    assert_int_equal(df_buffer_alloc(be, &by, DF_BUF_ACT, (size_t)m * n, &err), 0);
    df_op_linear(be, by, bx, bw, m, n, k, 0);
    float *got = df_test_download(be, by);
    assert_close(got, want, (size_t)m * n, TOL);
    df_buffer_free(be, &bx), df_buffer_free(be, &bw), df_buffer_free(be, &by);
    free(x), free(w), free(want), free(got);
}

static void test_rmsnorm(void **state) {
    DfBackend *be = ((Fixture *)*state)->be;
    const int rows = 13, dim = 67;
    const float eps = 1e-5f;
    float *x = df_test_random_array((size_t)rows * dim, 21, 2.0f), *w = df_test_random_array(dim, 22, 1.5f);
    double *want = malloc((size_t)rows * dim * sizeof *want);
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += (double)x[r * dim + i] * x[r * dim + i];
        double inv = 1.0 / sqrt(ss / dim + eps);
        for (int i = 0; i < dim; i++) want[r * dim + i] = x[r * dim + i] * inv * w[i];
    }
    DfBuffer bx = df_test_upload(be, x, (size_t)rows * dim, DF_BUF_ACT), bw = df_test_upload(be, w, dim, DF_BUF_ACT);
    df_op_rmsnorm(be, bx, bx, bw, rows, dim, eps); /* in place is allowed */
    float *got = df_test_download(be, bx);
    assert_close(got, want, (size_t)rows * dim, TOL);
    df_buffer_free(be, &bx), df_buffer_free(be, &bw);
    free(x), free(w), free(want), free(got);
}

static void test_add_and_swiglu(void **state) {
    DfBackend *be = ((Fixture *)*state)->be;
    const size_t n = 1001;
    float *a = df_test_random_array(n, 31, 3.0f), *b = df_test_random_array(n, 32, 3.0f);
    double *want_add = malloc(n * sizeof *want_add), *want_glu = malloc(n * sizeof *want_glu);
    for (size_t i = 0; i < n; i++) {
        want_add[i] = (double)a[i] + b[i];
        want_glu[i] = (double)a[i] / (1.0 + exp(-(double)a[i])) * b[i];
    }
    DfBuffer ba = df_test_upload(be, a, n, DF_BUF_ACT), bb = df_test_upload(be, b, n, DF_BUF_ACT), bo;
    DfError err;
    assert_int_equal(df_buffer_alloc(be, &bo, DF_BUF_ACT, n, &err), 0);
    df_op_swiglu(be, bo, ba, bb);
    float *glu = df_test_download(be, bo);
    assert_close(glu, want_glu, n, TOL);
    df_op_add_inplace(be, ba, bb);
    float *sum = df_test_download(be, ba);
    assert_close(sum, want_add, n, TOL);
    df_buffer_free(be, &ba), df_buffer_free(be, &bb), df_buffer_free(be, &bo);
    free(a), free(b), free(want_add), free(want_glu), free(glu), free(sum);
}

static void test_embedding(void **state) {
    DfBackend *be = ((Fixture *)*state)->be;
    const int vocab = 11, dim = 7, t = 23;
    float *table = df_test_random_array((size_t)vocab * dim, 41, 1.0f);
    int32_t ids[23];
    for (int i = 0; i < t; i++) ids[i] = (i * 7 + 3) % vocab;
    double *want = malloc((size_t)t * dim * sizeof *want);
    for (int i = 0; i < t; i++)
        for (int d = 0; d < dim; d++) want[i * dim + d] = table[ids[i] * dim + d];
    DfBuffer bt = df_test_upload(be, table, (size_t)vocab * dim, DF_BUF_ACT), bi = df_test_upload_i32(be, ids, t), bo;
    DfError err;
    assert_int_equal(df_buffer_alloc(be, &bo, DF_BUF_ACT, (size_t)t * dim, &err), 0);
    df_op_embedding(be, bo, bt, bi, t, dim);
    assert_int_equal(be->ops->sync(be, &err), 0);
    float *got = df_test_download(be, bo);
    assert_close(got, want, (size_t)t * dim, 1e-7);
    /* an id outside the table is reported by sync, not read */
    ids[5] = vocab;
    assert_int_equal(be->ops->upload_i32(be, bi, ids, &err), 0);
    df_op_embedding(be, bo, bt, bi, t, dim);
    assert_int_equal(be->ops->sync(be, &err), -1);
    assert_non_null(strstr(err.msg, "row 5"));
    assert_int_equal(be->ops->sync(be, &err), 0); /* reported once */
    df_buffer_free(be, &bt), df_buffer_free(be, &bi), df_buffer_free(be, &bo);
    free(table), free(want), free(got);
}

/* Direct formula for the llama3-scaled frequency, written from the published
 * description (Llama 3.1 reference code): it counts which of the three
 * regimes each frequency fell in, so that the test can insist on all three. */
static double reference_inv_freq(const DfRopeConfig *r, int head_dim, int i, int regimes[3]) {
    double f = pow(r->theta, -(double)(2 * i) / head_dim);
    if (r->type != DF_ROPE_LLAMA3) return f;
    double wavelen = 2 * 3.14159265358979323846 / f;
    double lo = r->original_max_position_embeddings / r->low_freq_factor;
    double hi = r->original_max_position_embeddings / r->high_freq_factor;
    if (wavelen < hi) {
        regimes[0]++;
        return f;
    }
    if (wavelen > lo) {
        regimes[2]++;
        return f / r->factor;
    }
    regimes[1]++;
    double smooth = (r->original_max_position_embeddings / wavelen - r->low_freq_factor) /
                    (r->high_freq_factor - r->low_freq_factor);
    return (1 - smooth) * f / r->factor + smooth * f;
}

static void check_rope(DfBackend *be, const DfRopeConfig *rope, int head_dim, int n_pos, int expect_all_regimes) {
    const int heads = 3;
    const int32_t starts[] = {0, 9, 10, 31}; /* three sequences: positions restart at 0 */
    const int nseq = 3, t = 31, half = head_dim / 2;
    DfError err;
    DfPackedBatch pb;
    assert_int_equal(df_packed_batch_init(&pb, be, starts, nseq, &err), 0);
    float *cos_t = malloc((size_t)n_pos * half * sizeof *cos_t), *sin_t = malloc((size_t)n_pos * half * sizeof *sin_t);
    df_rope_tables(rope, head_dim, n_pos, cos_t, sin_t);
    int regimes[3] = {0, 0, 0};
    double *inv = malloc((size_t)half * sizeof *inv);
    for (int i = 0; i < half; i++) inv[i] = reference_inv_freq(rope, head_dim, i, regimes);
    if (expect_all_regimes)
        for (int r = 0; r < 3; r++) assert_true(regimes[r] > 0);
    float *x = df_test_random_array((size_t)t * heads * head_dim, 51, 1.0f);
    double *want = malloc((size_t)t * heads * head_dim * sizeof *want);
    for (int s = 0; s < nseq; s++)
        for (int tok = starts[s]; tok < starts[s + 1]; tok++)
            for (int h = 0; h < heads; h++)
                for (int i = 0; i < head_dim; i++) {
                    size_t base = ((size_t)tok * heads + h) * head_dim;
                    int j = i % half;
                    double ang = (tok - starts[s]) * inv[j];
                    double rot = i < half ? -(double)x[base + i + half] : (double)x[base + i - half];
                    want[base + i] = x[base + i] * cos(ang) + rot * sin(ang);
                }
    DfBuffer bx = df_test_upload(be, x, (size_t)t * heads * head_dim, DF_BUF_ACT);
    DfBuffer bc = df_test_upload(be, cos_t, (size_t)n_pos * half, DF_BUF_F32), bs = df_test_upload(be, sin_t, (size_t)n_pos * half, DF_BUF_F32);
    df_op_rope(be, bx, pb.positions, bc, bs, t, heads, head_dim);
    assert_int_equal(be->ops->sync(be, &err), 0);
    float *got = df_test_download(be, bx);
    assert_close(got, want, (size_t)t * heads * head_dim, 1e-5);
    df_buffer_free(be, &bx), df_buffer_free(be, &bc), df_buffer_free(be, &bs);
    df_packed_batch_free(&pb, be);
    free(cos_t), free(sin_t), free(inv), free(x), free(want), free(got);
}

static void test_rope_default(void **state) {
    DfRopeConfig rope = {.theta = 10000.0, .type = DF_ROPE_DEFAULT};
    check_rope(((Fixture *)*state)->be, &rope, 18, 40, 0);
}

static void test_rope_llama3(void **state) {
    /* original context 64: wavelengths below 16 kept, above 64 divided by 8,
     * in between blended; head_dim 32 with theta 500000 spans all three */
    DfRopeConfig rope = {.theta = 500000.0, .type = DF_ROPE_LLAMA3, .factor = 8.0, .low_freq_factor = 1.0,
                         .high_freq_factor = 4.0, .original_max_position_embeddings = 64};
    check_rope(((Fixture *)*state)->be, &rope, 32, 64, 1);
}

static void test_rope_position_outside_table(void **state) {
    DfBackend *be = ((Fixture *)*state)->be;
    DfRopeConfig rope = {.theta = 10000.0, .type = DF_ROPE_DEFAULT};
    const int32_t starts[] = {0, 12};
    DfError err;
    DfPackedBatch pb;
    assert_int_equal(df_packed_batch_init(&pb, be, starts, 1, &err), 0);
    float cos_t[10 * 2], sin_t[10 * 2];
    df_rope_tables(&rope, 4, 10, cos_t, sin_t); /* 10 positions, the sequence has 12 */
    float *x = df_test_random_array(12 * 4, 61, 1.0f);
    DfBuffer bx = df_test_upload(be, x, 12 * 4, DF_BUF_ACT), bc = df_test_upload(be, cos_t, 20, DF_BUF_F32),
             bs = df_test_upload(be, sin_t, 20, DF_BUF_F32);
    df_op_rope(be, bx, pb.positions, bc, bs, 12, 1, 4);
    assert_int_equal(be->ops->sync(be, &err), -1);
    assert_non_null(strstr(err.msg, "position 10"));
    df_buffer_free(be, &bx), df_buffer_free(be, &bc), df_buffer_free(be, &bs);
    df_packed_batch_free(&pb, be);
    free(x);
}

static void test_attention_packed_gqa(void **state) {
    DfBackend *be = ((Fixture *)*state)->be;
    /* lengths 5, 300, 1, 140: the long ones span several query tiles */
    const int32_t starts[] = {0, 5, 305, 306, 446};
    const int nseq = 4, t = 446, heads = 6, kvh = 2, hd = 12, group = heads / kvh;
    const double scale = 1.0 / sqrt((double)hd);
    float *q = df_test_random_array((size_t)t * heads * hd, 71, 2.0f), *k = df_test_random_array((size_t)t * kvh * hd, 72, 2.0f);
    float *v = df_test_random_array((size_t)t * kvh * hd, 73, 1.0f);
    double *want = malloc((size_t)t * heads * hd * sizeof *want), *want_lse = malloc((size_t)heads * t * sizeof *want_lse);
    double *sc = malloc((size_t)t * sizeof *sc);
    for (int s = 0; s < nseq; s++)
        for (int h = 0; h < heads; h++)
            for (int i = starts[s]; i < starts[s + 1]; i++) {
                double mx = -INFINITY, sum = 0;
                for (int j = starts[s]; j <= i; j++) {
                    double d = 0;
                    for (int c = 0; c < hd; c++)
                        d += (double)q[((size_t)i * heads + h) * hd + c] * k[((size_t)j * kvh + h / group) * hd + c];
                    sc[j] = d * scale;
                    mx = fmax(mx, sc[j]);
                }
                for (int j = starts[s]; j <= i; j++) sum += exp(sc[j] - mx);
                for (int c = 0; c < hd; c++) {
                    double o = 0;
                    for (int j = starts[s]; j <= i; j++)
                        o += exp(sc[j] - mx) / sum * v[((size_t)j * kvh + h / group) * hd + c];
                    want[((size_t)i * heads + h) * hd + c] = o;
                }
                want_lse[(size_t)h * t + i] = mx + log(sum);
            }
    DfError err;
    DfPackedBatch pb;
    assert_int_equal(df_packed_batch_init(&pb, be, starts, nseq, &err), 0);
    assert_int_equal(pb.max_seq_len, 300);
    DfBuffer bq = df_test_upload(be, q, (size_t)t * heads * hd, DF_BUF_ACT), bk = df_test_upload(be, k, (size_t)t * kvh * hd, DF_BUF_ACT);
    DfBuffer bv = df_test_upload(be, v, (size_t)t * kvh * hd, DF_BUF_ACT), bo, bl;
    assert_int_equal(df_buffer_alloc(be, &bo, DF_BUF_ACT, (size_t)t * heads * hd, &err), 0);
    assert_int_equal(df_buffer_alloc(be, &bl, DF_BUF_F32, (size_t)t * heads, &err), 0);
    df_op_attention(be, bo, bl, bq, bk, bv, &pb, heads, kvh, hd, (float)scale);
    assert_int_equal(be->ops->sync(be, &err), 0);
    float *got = df_test_download(be, bo), *lse = df_test_download(be, bl);
    assert_close(got, want, (size_t)t * heads * hd, TOL);
    assert_close(lse, want_lse, (size_t)t * heads, TOL);
    df_buffer_free(be, &bq), df_buffer_free(be, &bk), df_buffer_free(be, &bv), df_buffer_free(be, &bo);
    df_buffer_free(be, &bl);
    df_packed_batch_free(&pb, be);
    free(q), free(k), free(v), free(want), free(want_lse), free(sc), free(got), free(lse);
}

static void test_copy2d_into_column_block(void **state) {
    DfBackend *be = ((Fixture *)*state)->be;
    const int rows = 9, cols = 5, ld_dst = 17, col0 = 7;
    float *src = df_test_random_array((size_t)rows * cols, 81, 1.0f), *dst0 = df_test_random_array((size_t)rows * ld_dst, 82, 1.0f);
    double *want = malloc((size_t)rows * ld_dst * sizeof *want);
    for (int i = 0; i < rows * ld_dst; i++) want[i] = dst0[i];
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) want[r * ld_dst + col0 + c] = src[r * cols + c];
    DfBuffer bs = df_test_upload(be, src, (size_t)rows * cols, DF_BUF_ACT), bd = df_test_upload(be, dst0, (size_t)rows * ld_dst, DF_BUF_ACT);
    df_op_copy2d(be, df_buffer_view(bd, col0, bd.count - col0), ld_dst, bs, cols, rows, cols);
    float *got = df_test_download(be, bd);
    assert_close(got, want, (size_t)rows * ld_dst, 1e-7);
    df_buffer_free(be, &bs), df_buffer_free(be, &bd);
    free(src), free(dst0), free(want), free(got);
}

static void test_packed_batch_rejects_bad_starts(void **state) {
    DfBackend *be = ((Fixture *)*state)->be;
    DfError err;
    DfPackedBatch pb;
    const int32_t not_zero[] = {1, 4}, empty_seq[] = {0, 3, 3, 5};
    assert_int_equal(df_packed_batch_init(&pb, be, not_zero, 1, &err), -1);
    assert_int_equal(df_packed_batch_init(&pb, be, empty_seq, 3, &err), -1);
    assert_non_null(strstr(err.msg, "sequence 1"));
    const int32_t ok[] = {0, 3, 4, 9};
    assert_int_equal(df_packed_batch_init(&pb, be, ok, 3, &err), 0);
    assert_int_equal(pb.n_tokens, 9);
    assert_int_equal(pb.max_seq_len, 5);
    df_packed_batch_free(&pb, be);
}

int main(void) {
    /* three threads even on a 2-core machine: uneven row/column blocks and
     * attention tasks shared by more than two threads get exercised */
    omp_set_num_threads(3);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_matmul_all_transposes, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
        cmocka_unit_test_setup_teardown(test_linear, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
        cmocka_unit_test_setup_teardown(test_rmsnorm, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
        cmocka_unit_test_setup_teardown(test_add_and_swiglu, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
        cmocka_unit_test_setup_teardown(test_embedding, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
        cmocka_unit_test_setup_teardown(test_rope_default, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
        cmocka_unit_test_setup_teardown(test_rope_llama3, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
        cmocka_unit_test_setup_teardown(test_rope_position_outside_table, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
        cmocka_unit_test_setup_teardown(test_attention_packed_gqa, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
        cmocka_unit_test_setup_teardown(test_copy2d_into_column_block, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
        cmocka_unit_test_setup_teardown(test_packed_batch_rejects_bad_starts, df_test_cpu_backend_setup, df_test_cpu_backend_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
