/* The rendezvous's wire format (dist/rendezvous.c, dist/heartbeat.c): every
 * message is a 24-byte header (magic, type, collective sequence number,
 * payload length; little-endian) and its payload. A header is taken only
 * with the magic, a known type and a length within that type's bound, so
 * that no length from the network reaches an allocation or a read unchecked.
 *
 * The hello, the first message on a joining connection: rank, world size,
 * channel, protocol version (4 x u32) and the job token (dist/job_token.h,
 * DF_JOB_TOKEN_BYTES). Version 2 added the token. */
#ifndef DF_DIST_WIRE_H
#define DF_DIST_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "dist/job_token.h"

#define DF_WIRE_MAGIC 0x56524644u /* "DFRV" */
#define DF_WIRE_VERSION 2u
#define DF_WIRE_HEADER 24
#define DF_WIRE_MAX_PAYLOAD ((uint64_t)1 << 30)
#define DF_WIRE_HELLO_BYTES (16 + DF_JOB_TOKEN_BYTES)
/* The fields of a hello that every version has: a hello of another version is told apart by them. */
#define DF_WIRE_HELLO_MIN_BYTES 16

typedef enum DfWireType {
    DF_MSG_HELLO = 1, /* payload: the hello; rank 0 answers with an empty one */
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
    DF_MSG_TYPE_END,
} DfWireType;

typedef struct DfWireHeader {
    uint32_t type;
    uint64_t seq, len;
} DfWireHeader;

typedef struct DfWireHello {
    uint32_t rank, world, channel, version;
    uint8_t token[DF_JOB_TOKEN_BYTES]; /* zeros in a hello of another version */
} DfWireHello;

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

void df_wire_put_header(uint8_t *p, uint32_t type, uint64_t seq, uint64_t len);

/* The largest payload a message of this type may carry; -1 for an unknown type. */
int64_t df_wire_max_len(uint32_t type);

/* Reads a header: -1 when the magic is wrong, the type unknown or the
 * length past the type's bound (not one of ours, or damaged). */
int df_wire_get_header(const uint8_t *p, DfWireHeader *h);

/* "hello", "barrier", ... ("unknown message" for others; a static string). */
const char *df_wire_type_name(uint32_t type);

void df_wire_put_hello(uint8_t p[DF_WIRE_HELLO_BYTES], const DfWireHello *hello);

/* A hello's payload of `len` bytes: -1 when shorter than the fields every
 * version has or longer than this version's; the token is read only from a
 * hello of this version and length (err says which check failed). */
int df_wire_get_hello(const uint8_t *p, size_t len, DfWireHello *hello, DfError *err);

#endif
