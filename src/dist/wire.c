#include "dist/wire.h"

#include <string.h>

void df_wire_put_header(uint8_t *p, uint32_t type, uint64_t seq, uint64_t len) {
    df_wire_put_u32(p, DF_WIRE_MAGIC);
    df_wire_put_u32(p + 4, type);
    df_wire_put_u64(p + 8, seq);
    df_wire_put_u64(p + 16, len);
}

int64_t df_wire_max_len(uint32_t type) {
    switch (type) {
    case DF_MSG_HELLO: return DF_WIRE_HELLO_BYTES;
    case DF_MSG_ABORT: return DF_ERROR_MAX - 1;
    case DF_MSG_WELCOME:
    case DF_MSG_HEARTBEAT:
    case DF_MSG_GOODBYE:
    case DF_MSG_BARRIER_IN:
    case DF_MSG_BARRIER_OUT: return 0;
    case DF_MSG_BROADCAST:
    case DF_MSG_GATHER_IN:
    case DF_MSG_GATHER_OUT:
    case DF_MSG_REDUCE_IN:
    case DF_MSG_REDUCE_OUT: return (int64_t)DF_WIRE_MAX_PAYLOAD;
    default: return -1;
    }
}

int df_wire_get_header(const uint8_t *p, DfWireHeader *h) {
    if (df_wire_get_u32(p) != DF_WIRE_MAGIC) return -1;
    h->type = df_wire_get_u32(p + 4);
    h->seq = df_wire_get_u64(p + 8);
    h->len = df_wire_get_u64(p + 16);
    int64_t max = df_wire_max_len(h->type);
    return max < 0 || h->len > (uint64_t)max ? -1 : 0;
}

const char *df_wire_type_name(uint32_t type) {
    static const char *const names[] = {"?",         "hello",      "welcome",     "abort",
                                        "heartbeat", "goodbye",    "broadcast",   "barrier",
                                        "barrier",   "all-gather", "all-gather",
                                        "all-reduce", "all-reduce"};
    return type < sizeof names / sizeof *names ? names[type] : "unknown message";
}

void df_wire_put_hello(uint8_t p[DF_WIRE_HELLO_BYTES], const DfWireHello *hello) {
    df_wire_put_u32(p, hello->rank);
    df_wire_put_u32(p + 4, hello->world);
    df_wire_put_u32(p + 8, hello->channel);
    df_wire_put_u32(p + 12, hello->version);
    memcpy(p + 16, hello->token, DF_JOB_TOKEN_BYTES);
}

int df_wire_get_hello(const uint8_t *p, size_t len, DfWireHello *hello, DfError *err) {
    memset(hello, 0, sizeof *hello);
    if (len < DF_WIRE_HELLO_MIN_BYTES || len > DF_WIRE_HELLO_BYTES)
        return df_fail(err, "a hello of %zu bytes (expected %d)", len, DF_WIRE_HELLO_BYTES);
    hello->rank = df_wire_get_u32(p);
    hello->world = df_wire_get_u32(p + 4);
    hello->channel = df_wire_get_u32(p + 8);
    hello->version = df_wire_get_u32(p + 12);
    if (hello->version != DF_WIRE_VERSION) return 0; /* the caller names the version */
    if (len != DF_WIRE_HELLO_BYTES)
        return df_fail(err, "a version %u hello of %zu bytes (expected %d)", hello->version, len,
                       DF_WIRE_HELLO_BYTES);
    memcpy(hello->token, p + 16, DF_JOB_TOKEN_BYTES);
    return 0;
}
