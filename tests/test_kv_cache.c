/* The paged KV cache's pool (target/kv_cache.h): a slot holds the pages its
 * rows need and no more, a hold the pool cannot serve takes nothing, a
 * released slot's pages serve the next, no page is ever held twice, and the
 * contiguous layout holds any length up to its capacity. */
#include <string.h>

#include "test_util.h"

#include "target/kv_cache.h"

enum { SLOTS = 3, CAP = 200, PAGES = 6 };

/* Every page is held by one slot or free, once. */
static void check_pages_once(const DfKvCache *c) {
    int seen[PAGES] = {0};
    for (int s = 0; s < c->n_slots; s++)
        for (int j = 0; j < c->pages_per_slot; j++) {
            int32_t p = c->table[s * c->pages_per_slot + j];
            if (j >= c->held[s]) {
                assert_int_equal(p, -1);
                continue;
            }
            assert_true(p >= 0 && p < PAGES);
            seen[p]++;
        }
    for (int i = 0; i < c->n_free; i++) seen[c->free_pages[i]]++;
    for (int p = 0; p < PAGES; p++) assert_int_equal(seen[p], 1);
}

static void test_pool(void **state) {
    (void)state;
    DfError err;
    DfBackend *be = df_backend_cpu_create(&err);
    DfKvCache c;
    if (df_kv_cache_init_layers(&c, be, 2, NULL, SLOTS, CAP, PAGES, 8, &err)) fail_msg("%s", err.msg);
    assert_int_equal(c.pages_per_slot, 4);
    assert_int_equal(c.k[0].count, (size_t)PAGES * DF_KV_PAGE_ROWS * 8);
    assert_int_equal(df_kv_cache_hold(&c, 0, 1), 0);   /* 1 page */
    assert_int_equal(df_kv_cache_hold(&c, 0, 64), 0);  /* still 1 */
    assert_int_equal(c.held[0], 1);
    assert_int_equal(df_kv_cache_hold(&c, 1, 130), 0); /* 3 pages */
    assert_int_equal(c.n_free, 2);
    check_pages_once(&c);
    assert_int_equal(df_kv_cache_hold(&c, 2, 190), -1); /* 3 pages, 2 free: none taken */
    assert_int_equal(c.held[2], 0);
    assert_int_equal(c.n_free, 2);
    assert_int_equal(df_kv_cache_hold(&c, 0, CAP + 1), -1); /* past the capacity */
    assert_int_equal(df_kv_cache_hold(&c, 0, 129), 0);      /* grows to 3 */
    assert_int_equal(c.n_free, 0);
    check_pages_once(&c);
    c.lens[1] = 100;
    df_kv_cache_release(&c, 1);
    assert_int_equal(c.lens[1], 0);
    assert_int_equal(c.n_free, 3);
    assert_int_equal(df_kv_cache_hold(&c, 2, 190), 0); /* the released pages serve the next */
    check_pages_once(&c);
    DfKvPageTable t;
    assert_ptr_equal(df_kv_cache_page_table(&c, &t), &t);
    assert_ptr_equal(t.table, c.table);
    assert_int_equal(t.n_pages, PAGES);
    df_kv_cache_free(&c, be);
    /* more pages than every slot's capacity needs: refused */
    assert_int_equal(df_kv_cache_init_layers(&c, be, 2, NULL, SLOTS, CAP, SLOTS * 4 + 1, 8, &err), -1);
    assert_non_null(strstr(err.msg, "13 pages"));
    df_backend_destroy(be);
}

static void test_contiguous(void **state) {
    (void)state;
    DfError err;
    DfBackend *be = df_backend_cpu_create(&err);
    DfKvCache c;
    if (df_kv_cache_init(&c, be, 1, SLOTS, CAP, 8, &err)) fail_msg("%s", err.msg);
    assert_int_equal(c.k[0].count, (size_t)SLOTS * CAP * 8);
    assert_int_equal(df_kv_cache_hold(&c, 2, CAP), 0);
    assert_int_equal(df_kv_cache_hold(&c, 2, CAP + 1), -1);
    DfKvPageTable t;
    assert_null(df_kv_cache_page_table(&c, &t));
    df_kv_cache_free(&c, be);
    df_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_contiguous),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
