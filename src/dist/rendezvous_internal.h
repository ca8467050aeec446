/* Inside the rendezvous (dist/rendezvous.c, dist/heartbeat.c): the group's
 * state and the wire format. Every message is a 24-byte header (magic,
 * type, collective sequence number, payload length; little-endian) and
 * its payload. */
#ifndef DF_DIST_RENDEZVOUS_INTERNAL_H
#define DF_DIST_RENDEZVOUS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "dist/rendezvous.h"

#define DF_WIRE_MAGIC 0x56524644u /* "DFRV" */
#define DF_WIRE_VERSION 1u
#define DF_WIRE_HEADER 24
#define DF_WIRE_MAX_PAYLOAD ((uint64_t)1 << 30)

typedef enum DfWireType {
    DF_MSG_HELLO = 1, /* payload: rank, world size, channel, version (4 x u32); rank 0 answers with an empty one */
    DF_MSG_WELCOME,   /* rank 0: everyone is here */
    DF_MSG_ABORT,     /* payload: the failure message */
    DF_MSG_HEARTBEAT,
    DF_MSG_GOODBYE, /* a clean close */
    DF_MSG_BROADCAST,
    DF_MSG_BARRIER_IN,
    DF_MSG_BARRIER_OUT,
    DF_MSG_GATHER_IN,
    DF_MSG_GATHER_OUT,
    DF_MSG_REDUCE_IN,  /* all-reduce: a rank's values to rank 0 */
    DF_MSG_REDUCE_OUT, /* all-reduce: rank 0's sums to every rank */
} DfWireType;

enum { DF_CHANNEL_CONTROL = 0, DF_CHANNEL_HEARTBEAT = 1 };

typedef struct DfWireHeader {
    uint32_t type;
    uint64_t seq, len;
} DfWireHeader;

static inline void df_wire_put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t df_wire_get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static inline void df_wire_put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint64_t df_wire_get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}
static inline void df_wire_put_header(uint8_t *p, uint32_t type, uint64_t seq, uint64_t len) {
    df_wire_put_u32(p, DF_WIRE_MAGIC);
    df_wire_put_u32(p + 4, type);
    df_wire_put_u64(p + 8, seq);
    df_wire_put_u64(p + 16, len);
}
/* -1 when the magic is wrong or the length absurd (not one of ours). */
static inline int df_wire_get_header(const uint8_t *p, DfWireHeader *h) {
    if (df_wire_get_u32(p) != DF_WIRE_MAGIC) return -1;
    h->type = df_wire_get_u32(p + 4);
    h->seq = df_wire_get_u64(p + 8);
    h->len = df_wire_get_u64(p + 16);
    return h->len > DF_WIRE_MAX_PAYLOAD ? -1 : 0;
}

const char *df_wire_type_name(uint32_t type);

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
