/* The pipeline queue: producers and consumers on threads lose and duplicate
 * nothing and keep each producer's order; close lets consumers take what is
 * left, then says closed, and wakes a waiting consumer; abort wakes blocked
 * producers and consumers at once with the reason and leaves the items for
 * drain; a timed pop times out; and the occupancy statistics match depths
 * and waits the test sets up and times itself. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "pipeline/queue.h"
#include "test_util.h"

/* ------------------------------------------------------ many threads */

#define PRODUCERS 3
#define CONSUMERS 3
#define PER_PRODUCER 3000

typedef struct Worker {
    DfQueue *q;
    int id;
    uintptr_t *seen; /* consumers: items in the order popped */
    int n_seen;
    int last_rc;
} Worker;

static void *produce(void *arg) {
    Worker *w = arg;
    for (int i = 0; i < PER_PRODUCER; i++) {
        DfError err;
        /* never NULL: item = producer << 20 | index, plus one */
        w->last_rc = df_queue_push(w->q, (void *)(((uintptr_t)w->id << 20 | (uintptr_t)i) + 1), &err);
        if (w->last_rc != DF_QUEUE_OK) break;
    }
    return NULL;
}

static void *consume(void *arg) {
    Worker *w = arg;
    w->seen = malloc(PRODUCERS * PER_PRODUCER * sizeof *w->seen);
    for (;;) {
        void *item;
        DfError err;
        w->last_rc = df_queue_pop(w->q, &item, &err);
        if (w->last_rc != DF_QUEUE_OK) break;
        w->seen[w->n_seen++] = (uintptr_t)item - 1;
    }
    return NULL;
}

static void test_producers_and_consumers(void **state) {
    (void)state;
    DfQueue q;
    DfError err;
    assert_int_equal(df_queue_init(&q, "mpmc", 4, &err), 0);
    pthread_t tp[PRODUCERS], tc[CONSUMERS];
    Worker wp[PRODUCERS], wc[CONSUMERS];
    for (int i = 0; i < CONSUMERS; i++) {
        wc[i] = (Worker){.q = &q, .id = i};
        pthread_create(&tc[i], NULL, consume, &wc[i]);
    }
    for (int i = 0; i < PRODUCERS; i++) {
        wp[i] = (Worker){.q = &q, .id = i};
        pthread_create(&tp[i], NULL, produce, &wp[i]);
    }
    for (int i = 0; i < PRODUCERS; i++) pthread_join(tp[i], NULL);
    df_queue_close(&q);
    for (int i = 0; i < CONSUMERS; i++) pthread_join(tc[i], NULL);

    int *count = calloc(PRODUCERS * PER_PRODUCER, sizeof *count);
    int total = 0;
    for (int c = 0; c < CONSUMERS; c++) {
        assert_int_equal(wc[c].last_rc, DF_QUEUE_CLOSED);
        int last[PRODUCERS] = {-1, -1, -1};
        for (int k = 0; k < wc[c].n_seen; k++) {
            int p = (int)(wc[c].seen[k] >> 20), i = (int)(wc[c].seen[k] & 0xFFFFF);
            assert_true(p >= 0 && p < PRODUCERS && i < PER_PRODUCER);
            assert_true(i > last[p]); /* FIFO: one producer's items in its order */
            last[p] = i;
            count[p * PER_PRODUCER + i]++;
        }
        total += wc[c].n_seen;
        free(wc[c].seen);
    }
    assert_int_equal(total, PRODUCERS * PER_PRODUCER);
    for (int k = 0; k < PRODUCERS * PER_PRODUCER; k++) assert_int_equal(count[k], 1);
    free(count);
    for (int i = 0; i < PRODUCERS; i++) assert_int_equal(wp[i].last_rc, DF_QUEUE_OK);
    DfQueueStats s;
    df_queue_stats(&q, &s);
    assert_int_equal(s.pushed, PRODUCERS * PER_PRODUCER);
    assert_int_equal(s.popped, PRODUCERS * PER_PRODUCER);
    assert_true(s.max_depth >= 1 && s.max_depth <= 4);
    assert_true(s.mean_depth >= 0 && s.mean_depth <= 4);
    df_queue_destroy(&q);
}

/* ------------------------------------------------------ close and abort */

typedef struct Blocked {
    DfQueue *q;
    int push; /* 1: push one item, 0: pop one */
    int rc;
    double took;
    DfError err;
} Blocked;

static void *blocked_call(void *arg) {
    Blocked *b = arg;
    double t0 = df_now_seconds();
    void *item = NULL;
    b->rc = b->push ? df_queue_push(b->q, (void *)0x1, &b->err) : df_queue_pop(b->q, &item, &b->err);
    b->took = df_now_seconds() - t0;
    return NULL;
}

static void test_close(void **state) {
    (void)state;
    DfQueue q;
    DfError err;
    assert_int_equal(df_queue_init(&q, "closing", 4, &err), 0);
    int items[3];
    for (int i = 0; i < 3; i++) assert_int_equal(df_queue_push(&q, &items[i], &err), DF_QUEUE_OK);
    df_queue_close(&q);
    assert_int_equal(df_queue_push(&q, &items[0], &err), DF_QUEUE_CLOSED);
    assert_non_null(strstr(err.msg, "queue closing: push after close"));
    for (int i = 0; i < 3; i++) {
        void *item;
        assert_int_equal(df_queue_pop(&q, &item, &err), DF_QUEUE_OK);
        assert_ptr_equal(item, &items[i]);
    }
    void *item;
    assert_int_equal(df_queue_pop(&q, &item, &err), DF_QUEUE_CLOSED);
    df_queue_destroy(&q);

    /* a consumer waiting on an empty queue wakes when it is closed */
    assert_int_equal(df_queue_init(&q, "waiting", 2, &err), 0);
    Blocked b = {.q = &q, .push = 0};
    pthread_t t;
    pthread_create(&t, NULL, blocked_call, &b);
    df_sleep_seconds(0.1);
    df_queue_close(&q);
    pthread_join(t, NULL);
    assert_int_equal(b.rc, DF_QUEUE_CLOSED);
    assert_true(b.took >= 0.09 && b.took < 5);
    df_queue_destroy(&q);
}

static void test_abort(void **state) {
    (void)state;
    DfQueue full, empty;
    DfError err;
    assert_int_equal(df_queue_init(&full, "full", 1, &err), 0);
    assert_int_equal(df_queue_init(&empty, "empty", 1, &err), 0);
    int item;
    assert_int_equal(df_queue_push(&full, &item, &err), DF_QUEUE_OK);
    Blocked producer = {.q = &full, .push = 1}, consumer = {.q = &empty, .push = 0};
    pthread_t tp, tc;
    pthread_create(&tp, NULL, blocked_call, &producer);
    pthread_create(&tc, NULL, blocked_call, &consumer);
    df_sleep_seconds(0.1);
    df_queue_abort(&full, "rank 1 lost");
    df_queue_abort(&empty, "rank 1 lost");
    df_queue_abort(&empty, "a later reason"); /* the first one stays */
    pthread_join(tp, NULL);
    pthread_join(tc, NULL);
    assert_int_equal(producer.rc, DF_QUEUE_ABORTED);
    assert_int_equal(consumer.rc, DF_QUEUE_ABORTED);
    assert_string_equal(producer.err.msg, "queue full aborted: rank 1 lost");
    assert_string_equal(consumer.err.msg, "queue empty aborted: rank 1 lost");
    assert_true(producer.took >= 0.09 && producer.took < 5);
    /* items stay for the owner to free; pops refuse them */
    void *got;
    assert_int_equal(df_queue_pop(&full, &got, &err), DF_QUEUE_ABORTED);
    void *left[4];
    assert_int_equal(df_queue_drain(&full, left, 4), 1);
    assert_ptr_equal(left[0], &item);
    assert_int_equal(df_queue_drain(&full, left, 4), 0);
    df_queue_destroy(&full);
    df_queue_destroy(&empty);
}

static void test_timed_pop(void **state) {
    (void)state;
    DfQueue q;
    DfError err;
    assert_int_equal(df_queue_init(&q, "timed", 2, &err), 0);
    void *item;
    double t0 = df_now_seconds();
    assert_int_equal(df_queue_pop_timed(&q, &item, 0.1, &err), DF_QUEUE_TIMEOUT);
    double took = df_now_seconds() - t0;
    assert_true(took >= 0.099 && took < 5);
    int x;
    assert_int_equal(df_queue_push(&q, &x, &err), DF_QUEUE_OK);
    assert_int_equal(df_queue_pop_timed(&q, &item, 0.1, &err), DF_QUEUE_OK);
    assert_ptr_equal(item, &x);
    df_queue_destroy(&q);
    assert_int_equal(df_queue_init(&q, "bad", 0, &err), -1);
    assert_non_null(strstr(err.msg, "capacity 0"));
}

/* ------------------------------------------------------ statistics */

static void test_occupancy(void **state) {
    (void)state;
    DfQueue q;
    DfError err;
    assert_int_equal(df_queue_init(&q, "stats", 8, &err), 0);
    int x[4];
    for (int i = 0; i < 4; i++) assert_int_equal(df_queue_push(&q, &x[i], &err), DF_QUEUE_OK);
    double full_from = df_now_seconds();
    df_sleep_seconds(0.2);
    double full_to = df_now_seconds();
    void *item;
    for (int i = 0; i < 4; i++) assert_int_equal(df_queue_pop(&q, &item, &err), DF_QUEUE_OK);
    /* a consumer that waits 150 ms for an item */
    Blocked b = {.q = &q, .push = 0};
    pthread_t t;
    pthread_create(&t, NULL, blocked_call, &b);
    df_sleep_seconds(0.15);
    assert_int_equal(df_queue_push(&q, &x[0], &err), DF_QUEUE_OK);
    pthread_join(t, NULL);
    DfQueueStats s;
    df_queue_stats(&q, &s);
    /* depth 4 for (about) the 200 ms the test held it, 0 otherwise */
    double expect = 4 * (full_to - full_from) / s.elapsed_s;
    assert_true(s.mean_depth > 0.9 * expect && s.mean_depth < 1.1 * expect + 4 * 0.002 / s.elapsed_s);
    assert_int_equal(s.max_depth, 4);
    assert_int_equal(s.pushed, 5);
    assert_int_equal(s.popped, 5);
    assert_true(s.consumer_wait_s >= 0.14 && s.consumer_wait_s <= b.took + 1e-6);
    assert_true(s.producer_wait_s == 0);
    assert_string_equal(s.name, "stats");
    assert_int_equal(s.capacity, 8);
    df_queue_destroy(&q);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_producers_and_consumers),
        cmocka_unit_test(test_close),
        cmocka_unit_test(test_abort),
        cmocka_unit_test(test_timed_pop),
        cmocka_unit_test(test_occupancy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
