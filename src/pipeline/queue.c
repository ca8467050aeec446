#include "pipeline/queue.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"

int df_queue_init(DfQueue *q, const char *name, int capacity, DfError *err) {
    memset(q, 0, sizeof *q);
    snprintf(q->name, sizeof q->name, "%s", name ? name : "queue");
    if (capacity < 1) return df_fail(err, "queue %s: capacity %d (at least 1)", q->name, capacity);
    q->slots = df_xcalloc((size_t)capacity, sizeof *q->slots, "queue slots");
    q->capacity = capacity;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC); /* timed pops immune to wall-clock jumps */
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->not_empty, &attr);
    pthread_cond_init(&q->not_full, &attr);
    pthread_condattr_destroy(&attr);
    q->t_start = q->t_changed = df_now_seconds();
    return 0;
}

void df_queue_destroy(DfQueue *q) {
    if (!q->slots) return;
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->not_empty);
    pthread_cond_destroy(&q->not_full);
    free(q->slots);
    q->slots = NULL;
}

/* Adds the time at the current depth to the integral; under mu. */
static void account_depth(DfQueue *q, double now) {
    q->depth_seconds += (double)q->count * (now - q->t_changed);
    q->t_changed = now;
}

static DfQueueResult aborted(DfQueue *q, DfError *err) {
    df_fail(err, "queue %s aborted: %s", q->name, q->abort_msg);
    return DF_QUEUE_ABORTED;
}

DfQueueResult df_queue_push(DfQueue *q, void *item, DfError *err) {
    pthread_mutex_lock(&q->mu);
    double t0 = df_now_seconds();
    int waited = 0;
    while (q->count == q->capacity && !q->closed && !q->aborted) {
        waited = 1;
        pthread_cond_wait(&q->not_full, &q->mu);
    }
    double now = df_now_seconds();
    if (waited) q->producer_wait_s += now - t0;
    DfQueueResult rc = DF_QUEUE_OK;
    if (q->aborted) {
        rc = aborted(q, err);
    } else if (q->closed) {
        df_fail(err, "queue %s: push after close", q->name);
        rc = DF_QUEUE_CLOSED;
    } else {
        account_depth(q, now);
        q->slots[(q->head + q->count) % q->capacity] = item;
        q->count++;
        q->pushed++;
        if (q->count > q->max_depth) q->max_depth = q->count;
        pthread_cond_signal(&q->not_empty);
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

static void deadline_timespec(double timeout_s, struct timespec *ts) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    double whole = (double)(time_t)timeout_s;
    ts->tv_sec += (time_t)whole;
    ts->tv_nsec += (long)((timeout_s - whole) * 1e9);
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* timeout_s < 0: wait as long as it takes. */
static DfQueueResult pop_until(DfQueue *q, void **item, double timeout_s, DfError *err) {
    struct timespec deadline;
    if (timeout_s >= 0) deadline_timespec(timeout_s, &deadline);
    pthread_mutex_lock(&q->mu);
    double t0 = df_now_seconds();
    int waited = 0, timed_out = 0;
    while (q->count == 0 && !q->closed && !q->aborted && !timed_out) {
        waited = 1;
        if (timeout_s < 0)
            pthread_cond_wait(&q->not_empty, &q->mu);
        else
            timed_out = pthread_cond_timedwait(&q->not_empty, &q->mu, &deadline) == ETIMEDOUT;
    }
    double now = df_now_seconds();
    if (waited) q->consumer_wait_s += now - t0;
    DfQueueResult rc = DF_QUEUE_OK;
    if (q->aborted) {
        rc = aborted(q, err);
    } else if (q->count > 0) {
        account_depth(q, now);
        *item = q->slots[q->head];
        q->head = (q->head + 1) % q->capacity;
        q->count--;
        q->popped++;
        pthread_cond_signal(&q->not_full);
    } else {
        rc = q->closed ? DF_QUEUE_CLOSED : DF_QUEUE_TIMEOUT;
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

DfQueueResult df_queue_pop(DfQueue *q, void **item, DfError *err) { return pop_until(q, item, -1, err); }

DfQueueResult df_queue_pop_timed(DfQueue *q, void **item, double timeout_s, DfError *err) {
    return pop_until(q, item, timeout_s < 0 ? 0 : timeout_s, err);
}

void df_queue_close(DfQueue *q) {
    pthread_mutex_lock(&q->mu);
    q->closed = 1;
    pthread_cond_broadcast(&q->not_empty);
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->mu);
}

void df_queue_abort(DfQueue *q, const char *reason) {
    pthread_mutex_lock(&q->mu);
    if (!q->aborted) snprintf(q->abort_msg, sizeof q->abort_msg, "%s", reason ? reason : "(no reason given)");
    q->aborted = 1;
    pthread_cond_broadcast(&q->not_empty);
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->mu);
}

int df_queue_drain(DfQueue *q, void **items, int max) {
    pthread_mutex_lock(&q->mu);
    account_depth(q, df_now_seconds());
    int n = 0;
    while (q->count > 0 && n < max) {
        items[n++] = q->slots[q->head];
        q->head = (q->head + 1) % q->capacity;
        q->count--;
    }
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->mu);
    return n;
}

void df_queue_stats(DfQueue *q, DfQueueStats *out) {
    pthread_mutex_lock(&q->mu);
    double now = df_now_seconds();
    account_depth(q, now);
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", q->name);
    out->capacity = q->capacity;
    out->pushed = q->pushed;
    out->popped = q->popped;
    out->elapsed_s = now - q->t_start;
    out->mean_depth = out->elapsed_s > 0 ? q->depth_seconds / out->elapsed_s : 0;
    out->max_depth = q->max_depth;
    out->producer_wait_s = q->producer_wait_s;
    out->consumer_wait_s = q->consumer_wait_s;
    pthread_mutex_unlock(&q->mu);
}
