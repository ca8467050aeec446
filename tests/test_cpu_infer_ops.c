/* The KV-cache ops of the CPU backend against naive double-precision
 * references: kv_cache_write puts each new row at (slot, cache_len + j), and
 * kv_attention (causal, and bidirectional among the new rows as in a DFlash
 * block) over several sequences with different cache lengths, GQA, and more
 * new rows than one query tile, with the slots' rows contiguous and in a
 * paged cache whose page table scrambles the pages (the references read
 * rows through the same table). Also: causal kv_attention of a whole prompt
 * on an empty cache equals the packed attention op; a step layout set again
 * and again in the same storage equals a fresh one each time; argmax_rows
 * picks the first maximum (ties), the first NaN or +inf of a row holding
 * one, flagged as -1 - column as a row of -inf is. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend/backend.h"

enum { HEADS = 4, KV_HEADS = 2, HD = 8, KVD = KV_HEADS * HD, QD = HEADS * HD, N_SLOTS = 4, CAP = 160 };
enum { PAGES_PER_SLOT = (CAP + DF_KV_PAGE_ROWS - 1) / DF_KV_PAGE_ROWS, N_PAGES = N_SLOTS * PAGES_PER_SLOT };

typedef struct Case {
    int n_seqs;
    int32_t slots[3], lens[3], starts[4];
} Case;

/* The cache's layout: contiguous slots, or pages handed out scrambled
 * (page j of slot s is (5 * (s * PAGES_PER_SLOT + j) + 7) mod N_PAGES, 5
 * prime to N_PAGES: every page once). */
typedef struct Layout {
    int paged;
    int32_t table[N_PAGES];
} Layout;

static Layout layout_of(int paged) {
    Layout l = {paged, {0}};
    for (int i = 0; i < N_PAGES; i++) l.table[i] = (5 * i + 7) % N_PAGES;
    return l;
}

/* The cache row holding row r of slot, by the layout (independent of df_kv_cache_row). */
static size_t cache_row(const Layout *l, int slot, int r) {
    if (!l->paged) return (size_t)slot * CAP + r;
    return (size_t)l->table[slot * PAGES_PER_SLOT + r / DF_KV_PAGE_ROWS] * DF_KV_PAGE_ROWS + r % DF_KV_PAGE_ROWS;
}

static DfBuffer upload(DfBackend *be, const float *x, size_t n) {
    DfError err;
    DfBuffer b;
    if (df_buffer_alloc(be, &b, DF_BUF_ACT, n, &err) || be->ops->upload_f32(be, b, x, &err)) fail_msg("%s", err.msg);
    return b;
}

static float *download(DfBackend *be, DfBuffer b) {
    DfError err;
    float *x = malloc(b.count * sizeof *x);
    if (be->ops->sync(be, &err) || be->ops->download_f32(be, x, b, &err)) fail_msg("%s", err.msg);
    return x;
}

/* Reference output of new row j of sequence s: softmax over the visible
 * cache rows (after the write) of scale * q.k, times v, in double. */
static void reference(const Case *c, const Layout *l, const float *q, const float *kc, const float *vc, int causal,
                      double *out) {
    double scale = 1.0 / sqrt((double)HD);
    for (int s = 0; s < c->n_seqs; s++) {
        int n = c->starts[s + 1] - c->starts[s];
        for (int j = 0; j < n; j++)
            for (int h = 0; h < HEADS; h++) {
                int visible = causal ? c->lens[s] + j + 1 : c->lens[s] + n, g = h / (HEADS / KV_HEADS);
                const float *qr = q + (size_t)(c->starts[s] + j) * QD + h * HD;
                double *sc = malloc((size_t)visible * sizeof *sc), mx = -INFINITY, sum = 0;
                for (int r = 0; r < visible; r++) {
                    const float *kr = kc + cache_row(l, c->slots[s], r) * KVD + g * HD;
                    double d = 0;
                    for (int i = 0; i < HD; i++) d += (double)qr[i] * kr[i];
                    sc[r] = d * scale;
                    mx = sc[r] > mx ? sc[r] : mx;
                }
                for (int r = 0; r < visible; r++) sum += (sc[r] = exp(sc[r] - mx));
                double *o = out + (size_t)(c->starts[s] + j) * QD + h * HD;
                for (int i = 0; i < HD; i++) {
                    double acc = 0;
                    for (int r = 0; r < visible; r++)
                        acc += sc[r] / sum * vc[cache_row(l, c->slots[s], r) * KVD + g * HD + i];
                    o[i] = acc;
                }
                free(sc);
            }
    }
}

static void run_case(const Case *c, int causal, int paged) {
    DfError err;
    DfBackend *be = df_backend_cpu_create(&err);
    int t = c->starts[c->n_seqs];
    Layout l = layout_of(paged);
    size_t cache_n = (paged ? (size_t)N_PAGES * DF_KV_PAGE_ROWS : (size_t)N_SLOTS * CAP) * KVD;
    float *kc = malloc(cache_n * sizeof *kc), *vc = malloc(cache_n * sizeof *vc);
    float *q = malloc((size_t)t * QD * sizeof *q), *kn = malloc((size_t)t * KVD * sizeof *kn);
    float *vn = malloc((size_t)t * KVD * sizeof *vn);
    df_test_fill_random(kc, cache_n, 1, 1.0f);
    df_test_fill_random(vc, cache_n, 2, 1.0f);
    df_test_fill_random(q, (size_t)t * QD, 3, 2.0f);
    df_test_fill_random(kn, (size_t)t * KVD, 4, 1.0f);
    df_test_fill_random(vn, (size_t)t * KVD, 5, 1.0f);
    DfBuffer bk = upload(be, kc, cache_n), bv = upload(be, vc, cache_n), bq = upload(be, q, (size_t)t * QD);
    DfBuffer bkn = upload(be, kn, (size_t)t * KVD), bvn = upload(be, vn, (size_t)t * KVD), bo;
    if (df_buffer_alloc(be, &bo, DF_BUF_ACT, (size_t)t * QD, &err)) fail_msg("%s", err.msg);
    DfKvBatch kb;
    memset(&kb, 0, sizeof kb);
    DfKvPageTable table = {l.table, N_PAGES};
    if (df_kv_batch_set_paged(&kb, be, c->n_seqs, c->slots, c->lens, c->starts, N_SLOTS, CAP, paged ? &table : NULL,
                              &err))
        fail_msg("%s", err.msg);
    df_op_kv_cache_write(be, bk, bkn, &kb, KVD);
    df_op_kv_cache_write(be, bv, bvn, &kb, KVD);
    df_op_kv_attention(be, bo, bq, bk, bv, &kb, HEADS, KV_HEADS, HD, 1.0f / sqrtf((float)HD), causal);
    /* the naive write on the host copies, and the positions */
    int32_t pos[512];
    for (int s = 0; s < c->n_seqs; s++)
        for (int j = 0; j < c->starts[s + 1] - c->starts[s]; j++) {
            size_t row = cache_row(&l, c->slots[s], c->lens[s] + j);
            memcpy(kc + row * KVD, kn + (size_t)(c->starts[s] + j) * KVD, KVD * sizeof *kc);
            memcpy(vc + row * KVD, vn + (size_t)(c->starts[s] + j) * KVD, KVD * sizeof *vc);
            pos[c->starts[s] + j] = c->lens[s] + j;
        }
    float *gk = download(be, bk), *gv = download(be, bv), *go = download(be, bo);
    assert_memory_equal(gk, kc, cache_n * sizeof *kc); /* rows outside the new ones untouched too */
    assert_memory_equal(gv, vc, cache_n * sizeof *vc);
    int32_t *gpos = kb.positions.ptr;
    assert_memory_equal(gpos, pos, (size_t)t * sizeof *pos);
    double *ref = malloc((size_t)t * QD * sizeof *ref);
    reference(c, &l, q, kc, vc, causal, ref);
    double worst = 0;
    for (size_t i = 0; i < (size_t)t * QD; i++) worst = fmax(worst, fabs(go[i] - ref[i]));
    if (worst > 1e-5) fail_msg("kv_attention (causal %d, paged %d): max error %.3g", causal, paged, worst);
    df_kv_batch_free(&kb, be);
    DfBuffer *bufs[] = {&bk, &bv, &bq, &bkn, &bvn, &bo};
    for (int i = 0; i < 6; i++) df_buffer_free(be, bufs[i]);
    free(kc), free(vc), free(q), free(kn), free(vn), free(gk), free(gv), free(go), free(ref);
    df_backend_destroy(be);
}

/* decode-like (one row each), a block of 8, a long chunk crossing tiles */
static const Case CASES[] = {
    {3, {2, 0, 3}, {17, 0, 40}, {0, 1, 2, 3}},
    {2, {1, 3}, {5, 33}, {0, 8, 16}},
    {3, {0, 2, 1}, {0, 9, 80}, {0, 70, 75, 150}},
};

static void test_kv_attention_causal(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) run_case(&CASES[i], 1, 0);
}

static void test_kv_attention_block(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) run_case(&CASES[i], 0, 0);
}

/* The same through scrambled pages; the third case's rows cross page ends (80 cached + 70 new). */
static void test_kv_attention_paged(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) run_case(&CASES[i], 1, 1), run_case(&CASES[i], 0, 1);
}

/* A page table entry a step needs that is no page: refused, naming it. */
static void test_bad_page_table_refused(void **state) {
    (void)state;
    DfError err;
    DfBackend *be = df_backend_cpu_create(&err);
    Layout l = layout_of(1);
    DfKvPageTable table = {l.table, N_PAGES};
    int32_t slots[1] = {2}, lens[1] = {63}, starts[2] = {0, 2};
    DfKvBatch kb = {0};
    assert_int_equal(df_kv_batch_set_paged(&kb, be, 1, slots, lens, starts, N_SLOTS, CAP, &table, &err), 0);
    l.table[2 * PAGES_PER_SLOT + 2] = -1; /* past the step's rows: not needed */
    assert_int_equal(df_kv_batch_set_paged(&kb, be, 1, slots, lens, starts, N_SLOTS, CAP, &table, &err), 0);
    l.table[2 * PAGES_PER_SLOT + 1] = -1; /* row 64, the step's second row */
    assert_int_equal(df_kv_batch_set_paged(&kb, be, 1, slots, lens, starts, N_SLOTS, CAP, &table, &err), -1);
    assert_non_null(strstr(err.msg, "needs page 1 of its table, which is -1"));
    l.table[2 * PAGES_PER_SLOT + 1] = N_PAGES;
    assert_int_equal(df_kv_batch_set_paged(&kb, be, 1, slots, lens, starts, N_SLOTS, CAP, &table, &err), -1);
    df_kv_batch_free(&kb, be);
    df_backend_destroy(be);
}

static void test_bad_layouts_refused(void **state) {
    (void)state;
    DfError err;
    DfBackend *be = df_backend_cpu_create(&err);
    DfKvBatch kb;
    int32_t slots[2] = {0, 0}, lens[2] = {0, 0}, starts[3] = {0, 2, 4};
    assert_int_equal(df_kv_batch_init(&kb, be, 2, slots, lens, starts, N_SLOTS, CAP, &err), -1); /* shared slot */
    slots[1] = 1;
    lens[1] = CAP - 1;
    assert_int_equal(df_kv_batch_init(&kb, be, 2, slots, lens, starts, N_SLOTS, CAP, &err), -1); /* overflow */
    lens[1] = 0;
    starts[1] = 0;
    assert_int_equal(df_kv_batch_init(&kb, be, 2, slots, lens, starts, N_SLOTS, CAP, &err), -1); /* empty sequence */
    starts[1] = 2;
    slots[1] = N_SLOTS;
    assert_int_equal(df_kv_batch_init(&kb, be, 2, slots, lens, starts, N_SLOTS, CAP, &err), -1); /* slot range */
    df_backend_destroy(be);
}

/* A prompt on an empty cache: the same as the packed causal attention. */
static void test_prefill_equals_packed_attention(void **state) {
    (void)state;
    DfError err;
    DfBackend *be = df_backend_cpu_create(&err);
    int32_t seq_starts[3] = {0, 37, 137}, slots[2] = {1, 0}, lens[2] = {0, 0};
    int t = 137;
    float *q = malloc((size_t)t * QD * sizeof *q), *k = malloc((size_t)t * KVD * sizeof *k);
    float *v = malloc((size_t)t * KVD * sizeof *v);
    df_test_fill_random(q, (size_t)t * QD, 11, 2.0f);
    df_test_fill_random(k, (size_t)t * KVD, 12, 1.0f);
    df_test_fill_random(v, (size_t)t * KVD, 13, 1.0f);
    DfBuffer bq = upload(be, q, (size_t)t * QD), bk = upload(be, k, (size_t)t * KVD), bv = upload(be, v, (size_t)t * KVD);
    DfBuffer o1, o2, kc, vc, no_lse = {0};
    no_lse.kind = DF_BUF_F32;
    assert_int_equal(df_buffer_alloc(be, &o1, DF_BUF_ACT, (size_t)t * QD, &err), 0);
    assert_int_equal(df_buffer_alloc(be, &o2, DF_BUF_ACT, (size_t)t * QD, &err), 0);
    assert_int_equal(df_buffer_alloc(be, &kc, DF_BUF_ACT, (size_t)N_SLOTS * CAP * KVD, &err), 0);
    assert_int_equal(df_buffer_alloc(be, &vc, DF_BUF_ACT, (size_t)N_SLOTS * CAP * KVD, &err), 0);
    DfPackedBatch pb;
    DfKvBatch kb;
    if (df_packed_batch_init(&pb, be, seq_starts, 2, &err) ||
        df_kv_batch_init(&kb, be, 2, slots, lens, seq_starts, N_SLOTS, CAP, &err))
        fail_msg("%s", err.msg);
    float scale = 1.0f / sqrtf((float)HD);
    df_op_attention(be, o1, no_lse, bq, bk, bv, &pb, HEADS, KV_HEADS, HD, scale);
    df_op_kv_cache_write(be, kc, bk, &kb, KVD);
    df_op_kv_cache_write(be, vc, bv, &kb, KVD);
    df_op_kv_attention(be, o2, bq, kc, vc, &kb, HEADS, KV_HEADS, HD, scale, 1);
    float *a = download(be, o1), *b = download(be, o2);
    assert_true(df_rel_error(b, a, (size_t)t * QD) < 1e-6);
    free(a), free(b), free(q), free(k), free(v);
    df_packed_batch_free(&pb, be);
    df_kv_batch_free(&kb, be);
    DfBuffer *bufs[] = {&bq, &bk, &bv, &o1, &o2, &kc, &vc};
    for (int i = 0; i < 7; i++) df_buffer_free(be, bufs[i]);
    df_backend_destroy(be);
}

/* The fields of a step layout, host and backend copies, against the arrays
 * it was made from. */
static void check_layout(DfBackend *be, const DfKvBatch *kb, int n, const int32_t *slots, const int32_t *lens,
                         const int32_t *starts) {
    assert_int_equal(kb->n_seqs, n);
    assert_int_equal(kb->n_rows, starts[n]);
    int max_new = 0, max_visible = 0;
    for (int i = 0; i < n; i++) {
        int k = starts[i + 1] - starts[i];
        max_new = k > max_new ? k : max_new;
        max_visible = lens[i] + k > max_visible ? lens[i] + k : max_visible;
    }
    assert_int_equal(kb->max_new, max_new);
    assert_int_equal(kb->max_visible, max_visible);
    assert_memory_equal(kb->host_slots, slots, (size_t)n * sizeof *slots);
    assert_memory_equal(kb->host_cache_lens, lens, (size_t)n * sizeof *lens);
    assert_memory_equal(kb->host_row_starts, starts, (size_t)(n + 1) * sizeof *starts);
    int32_t got[256];
    DfError err;
    assert_true(n + 1 <= 256 && starts[n] <= 256);
    assert_int_equal(be->ops->download_i32(be, got, kb->slots, &err), 0);
    assert_memory_equal(got, slots, (size_t)n * sizeof *slots);
    assert_int_equal(be->ops->download_i32(be, got, kb->cache_lens, &err), 0);
    assert_memory_equal(got, lens, (size_t)n * sizeof *lens);
    assert_int_equal(be->ops->download_i32(be, got, kb->row_starts, &err), 0);
    assert_memory_equal(got, starts, (size_t)(n + 1) * sizeof *starts);
    assert_int_equal(kb->positions.count, (size_t)starts[n]);
    assert_int_equal(be->ops->download_i32(be, got, kb->positions, &err), 0);
    for (int i = 0; i < n; i++)
        for (int j = starts[i]; j < starts[i + 1]; j++) assert_int_equal(got[j], lens[i] + j - starts[i]);
}

/* One DfKvBatch set for a run of steps of changing shape (grow, shrink, a
 * refused layout in between) holds what a fresh df_kv_batch_init holds, and
 * its backend storage is allocated only when a step needs more. */
static void test_kv_batch_reused_across_steps(void **state) {
    (void)state;
    DfError err;
    DfBackend *be = df_backend_cpu_create(&err);
    DfKvBatch kb = {0}, fresh;
    enum { SLOTS = 64 };
    int32_t slots[SLOTS], lens[SLOTS], starts[SLOTS + 1];
    const int sizes[] = {3, 1, 40, 40, 2, 64, 5, 64};
    const void *last_pack = NULL;
    size_t last_cap = 0;
    for (size_t step = 0; step < sizeof sizes / sizeof sizes[0]; step++) {
        int n = sizes[step];
        starts[0] = 0;
        for (int i = 0; i < n; i++) {
            slots[i] = (int32_t)((i * 5 + step) % SLOTS);
            lens[i] = (int32_t)((i * 7 + step * 3) % 50);
            starts[i + 1] = starts[i] + (n <= 5 ? 1 + (i + (int)step) % 4 : 1); /* prefill-like or decode */
        }
        if (df_kv_batch_set(&kb, be, n, slots, lens, starts, SLOTS, CAP, &err)) fail_msg("%s", err.msg);
        check_layout(be, &kb, n, slots, lens, starts);
        if (df_kv_batch_init(&fresh, be, n, slots, lens, starts, SLOTS, CAP, &err)) fail_msg("%s", err.msg);
        check_layout(be, &fresh, n, slots, lens, starts);
        df_kv_batch_free(&fresh, be);
        /* storage moves only when it grows */
        if (last_pack && kb.pack_cap == last_cap) assert_ptr_equal(kb.pack.ptr, last_pack);
        assert_true(kb.pack_cap >= last_cap);
        last_pack = kb.pack.ptr, last_cap = kb.pack_cap;
        /* a refused layout (a shared slot) leaves storage that the next step reuses */
        int32_t bad_slots[2] = {1, 1}, bad_starts[3] = {0, 1, 2};
        assert_int_equal(df_kv_batch_set(&kb, be, 2, bad_slots, lens, bad_starts, SLOTS, CAP, &err), -1);
        assert_ptr_equal(kb.pack.ptr, last_pack);
    }
    df_kv_batch_free(&kb, be);
    assert_null(kb.pack.ptr);
    assert_null(kb.host_pack);
    df_backend_destroy(be);
}

/* The first maximum as its definition says, written apart from the op: the
 * first NaN or +inf if the row has one, else the smallest column of the
 * largest value. */
static int reference_argmax(const float *x, int n) {
    for (int i = 0; i < n; i++)
        if (isnan(x[i]) || x[i] == INFINITY) return i;
    float m = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > m) m = x[i];
    for (int i = 0; i < n; i++)
        if (x[i] == m) return i;
    return -1;
}

/* The op's index: the column, or -1 - column where the chosen value is not finite. */
static int reference_index(const float *x, int n) {
    int best = reference_argmax(x, n);
    return isfinite(x[best]) ? best : -1 - best;
}

static void test_argmax_rows_first_maximum(void **state) {
    (void)state;
    DfError err;
    DfBackend *be = df_backend_cpu_create(&err);
    enum { ROWS = 37, COLS = 1003 };
    float *x = malloc((size_t)ROWS * COLS * sizeof *x);
    df_test_fill_random(x, (size_t)ROWS * COLS, 77, 4.0f);
    /* few distinct values: ties everywhere, the maximum repeated in most rows */
    for (size_t i = 0; i < (size_t)ROWS * COLS; i++) x[i] = roundf(x[i]);
    x[1 * COLS + 0] = NAN;                                                   /* NaN first: column 0 */
    x[2 * COLS + 5] = NAN, x[2 * COLS + 900] = 100.f;                        /* one NaN among numbers: chosen */
    x[8 * COLS + 7] = INFINITY, x[8 * COLS + 9] = NAN;                       /* +inf before a NaN */
    x[9 * COLS + 7] = NAN, x[9 * COLS + 9] = INFINITY;                       /* a NaN before +inf */
    x[10 * COLS + 3] = -INFINITY;                                            /* -inf among numbers: finite top */
    for (int c = 0; c < COLS; c++) x[3 * COLS + c] = -INFINITY;              /* all -inf: column 0 */
    x[4 * COLS + COLS - 1] = 50.f, x[4 * COLS + COLS - 2] = 50.f;            /* tie at the end */
    x[5 * COLS + 0] = 50.f, x[5 * COLS + 1] = 50.f;                          /* tie at the start */
    for (int c = 0; c < COLS; c++) x[6 * COLS + c] = c % 2 ? NAN : -INFINITY; /* -inf and NaN */
    for (int c = 0; c < COLS; c++) x[7 * COLS + c] = 1.0f;                   /* all equal */
    DfBuffer bx = upload(be, x, (size_t)ROWS * COLS), idx, val;
    assert_int_equal(df_buffer_alloc(be, &idx, DF_BUF_I32, ROWS, &err), 0);
    assert_int_equal(df_buffer_alloc(be, &val, DF_BUF_F32, ROWS, &err), 0);
    df_op_argmax_rows(be, idx, val, bx, ROWS, COLS);
    int32_t got[ROWS];
    float got_val[ROWS];
    assert_int_equal(be->ops->sync(be, &err), 0);
    assert_int_equal(be->ops->download_i32(be, got, idx, &err), 0);
    assert_int_equal(be->ops->download_f32(be, got_val, val, &err), 0);
    int tied = 0;
    for (int r = 0; r < ROWS; r++) {
        const float *row = x + (size_t)r * COLS;
        int want = reference_argmax(row, COLS);
        if (got[r] != reference_index(row, COLS))
            fail_msg("row %d: argmax %d, expected %d", r, (int)got[r], reference_index(row, COLS));
        assert_memory_equal(&got_val[r], &row[want], sizeof(float)); /* NaN included */
        for (int c = want + 1; c < COLS; c++) tied += row[c] == row[want];
    }
    assert_true(tied > ROWS); /* the data did exercise ties */
    /* the flagged rows, spelt out */
    assert_int_equal(got[1], -1), assert_int_equal(got[2], -1 - 5), assert_int_equal(got[3], -1);
    assert_int_equal(got[6], -1 - 1), assert_int_equal(got[8], -1 - 7), assert_int_equal(got[9], -1 - 7);
    assert_true(got[10] >= 0 && got[5] == 0 && got[4] >= 0);
    /* without the value output, the same choice */
    int32_t again[ROWS];
    df_op_argmax_rows(be, idx, (DfBuffer){0}, bx, ROWS, COLS);
    assert_int_equal(be->ops->download_i32(be, again, idx, &err), 0);
    assert_memory_equal(again, got, sizeof got);
    df_buffer_free(be, &bx), df_buffer_free(be, &idx), df_buffer_free(be, &val);
    free(x);
    df_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_attention_causal),
        cmocka_unit_test(test_kv_attention_block),
        cmocka_unit_test(test_kv_attention_paged),
        cmocka_unit_test(test_bad_page_table_refused),
        cmocka_unit_test(test_bad_layouts_refused),
        cmocka_unit_test(test_prefill_equals_packed_attention),
        cmocka_unit_test(test_kv_batch_reused_across_steps),
        cmocka_unit_test(test_argmax_rows_first_maximum),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
