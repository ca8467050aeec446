/* Inside the rendezvous (dist/rendezvous.c, dist/heartbeat.c): the group's
 * state (the wire format is dist/wire.h). */
#ifndef DF_DIST_RENDEZVOUS_INTERNAL_H
#define DF_DIST_RENDEZVOUS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "dist/rendezvous.h"
#include "dist/wire.h"

enum { DF_CHANNEL_CONTROL = 0, DF_CHANNEL_HEARTBEAT = 1 };

typedef enum DfLinkState { DF_LINK_NONE, DF_LINK_LIVE, DF_LINK_DEPARTED, DF_LINK_LOST } DfLinkState;

/* One heartbeat connection, read only by the monitor thread. */
typedef struct DfHbLink {
    int fd;
    atomic_int state; /* DfLinkState; read by the collectives */
    double last_seen;
    uint8_t buf[DF_WIRE_HEADER + DF_ERROR_MAX];
    size_t have;
} DfHbLink;

struct DfDistGroup {
    int rank, world;
    DfDistOptions opt;
    int *ctrl;    /* [world]: control sockets (rank 0: one per peer; others: ctrl[0]); -1 where none */
    DfHbLink *hb; /* [world]: heartbeat links, same pattern */
    uint64_t seq; /* collectives so far */

    atomic_int failed;
    pthread_mutex_t fail_mu;
    char fail_msg[DF_ERROR_MAX];
    void (*on_failure)(void *ctx); /* df_dist_set_failure_hook; under fail_mu */
    void *on_failure_ctx;

    pthread_mutex_t hb_send_mu; /* serializes writes on the heartbeat sockets */
    pthread_t monitor;
    int monitor_started;
    int wake[2]; /* pipe that stops the monitor */
};

/* Records the group's first failure; with notify, sends it to the ranks this
 * one talks to (rank 0: every live peer; others: rank 0) except skip. */
void df_dist_record_failure(DfDistGroup *g, const char *msg, int notify, int skip);

int df_dist_monitor_start(DfDistGroup *g, DfError *err);
/* Sends the goodbyes, stops and joins the monitor. */
void df_dist_monitor_stop(DfDistGroup *g);

#endif
