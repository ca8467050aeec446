/* libFuzzer target: the rendezvous's wire format (src/dist/wire.c), on the
 * input as the byte stream a joining process sends rank 0: messages read one
 * after another as the rendezvous reads them (a header, checked, then its
 * payload), a hello through the hello parser, an abort as its message. A
 * header that passes keeps its type known and its length within the type's
 * bound; a hello that parses as this version carries the whole token. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/wire.h"

static void take_payload(const DfWireHeader *h, const uint8_t *p) {
    if (h->type == DF_MSG_HELLO) {
        DfWireHello hello;
        DfError err = {{0}};
        if (df_wire_get_hello(p, (size_t)h->len, &hello, &err) == 0) {
            if (hello.version == DF_WIRE_VERSION && h->len != DF_WIRE_HELLO_BYTES) abort();
            uint8_t again[DF_WIRE_HELLO_BYTES];
            df_wire_put_hello(again, &hello);
            if (memcmp(again, p, 16) != 0) abort(); /* the fields read back as sent */
        } else if (!err.msg[0]) {
            abort(); /* a refusal says why */
        }
    } else if (h->type == DF_MSG_ABORT) {
        char msg[DF_ERROR_MAX];
        snprintf(msg, sizeof msg, "%.*s", (int)h->len, (const char *)p);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t at = 0;
    while (size - at >= DF_WIRE_HEADER) {
        DfWireHeader h;
        if (df_wire_get_header(data + at, &h) != 0) return 0; /* the connection is dropped */
        int64_t max = df_wire_max_len(h.type);
        if (max < 0 || h.len > (uint64_t)max) abort();
        if (df_wire_type_name(h.type) == NULL) abort();
        at += DF_WIRE_HEADER;
        if (h.len > size - at) return 0; /* the sender closed mid-message */
        /* the payload in a buffer of exactly its length, as a bounded read fills it */
        uint8_t *p = malloc(h.len ? (size_t)h.len : 1);
        memcpy(p, data + at, (size_t)h.len);
        take_payload(&h, p);
        free(p);
        at += (size_t)h.len;
    }
    return 0;
}
