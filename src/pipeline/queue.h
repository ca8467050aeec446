/* A bounded queue of pointers between pipeline stages (any number of
 * producer and consumer threads). push blocks while the queue is full, pop
 * while it is empty. close() says no more items will come: waiting threads
 * wake, pops return the items still queued and then DF_QUEUE_CLOSED.
 * abort() is for failures: every waiting and later call returns
 * DF_QUEUE_ABORTED with the reason at once; items still queued stay for
 * df_queue_drain, so their owner can free them.
 *
 * Statistics for "where the time went": time-weighted mean and maximum
 * depth, and how long producers waited on a full queue (the consumer is the
 * bottleneck) and consumers on an empty one (the producer is). */
#ifndef DF_PIPELINE_QUEUE_H
#define DF_PIPELINE_QUEUE_H

#include <pthread.h>
#include <stdint.h>

#include "base/error.h"

typedef enum DfQueueResult {
    DF_QUEUE_ABORTED = -1, /* err has the reason */
    DF_QUEUE_OK = 0,
    DF_QUEUE_CLOSED = 1,  /* pop: closed and empty; push: closed (err says so) */
    DF_QUEUE_TIMEOUT = 2, /* df_queue_pop_timed only */
} DfQueueResult;

typedef struct DfQueueStats {
    char name[32];
    int capacity;
    uint64_t pushed, popped;
    double mean_depth; /* items queued, averaged over time since init */
    int max_depth;
    double producer_wait_s; /* summed over producer threads */
    double consumer_wait_s; /* summed over consumer threads */
    double elapsed_s;       /* since init */
} DfQueueStats;

typedef struct DfQueue {
    char name[32];
    void **slots;
    int capacity, head, count;
    int closed, aborted;
    char abort_msg[DF_ERROR_MAX];
    pthread_mutex_t mu;
    pthread_cond_t not_empty, not_full; /* on CLOCK_MONOTONIC */
    /* statistics, under mu */
    double t_start, t_changed, depth_seconds, producer_wait_s, consumer_wait_s;
    int max_depth;
    uint64_t pushed, popped;
} DfQueue;

int df_queue_init(DfQueue *q, const char *name, int capacity, DfError *err);
/* No thread may be using the queue any more; items left are not freed. */
void df_queue_destroy(DfQueue *q);

DfQueueResult df_queue_push(DfQueue *q, void *item, DfError *err);
DfQueueResult df_queue_pop(DfQueue *q, void **item, DfError *err);
/* As pop, giving up after timeout_s seconds (DF_QUEUE_TIMEOUT). */
DfQueueResult df_queue_pop_timed(DfQueue *q, void **item, double timeout_s, DfError *err);

void df_queue_close(DfQueue *q);
/* The first reason wins; later aborts keep it. */
void df_queue_abort(DfQueue *q, const char *reason);

/* Takes up to max queued items without waiting (for freeing them after an
 * abort); returns how many. */
int df_queue_drain(DfQueue *q, void **items, int max);

void df_queue_stats(DfQueue *q, DfQueueStats *out);

#endif
