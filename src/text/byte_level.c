#include "text/byte_level.h"

#include <string.h>

#include "text/utf8.h"

static int maps_to_itself(int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

void df_byte_level_init(DfByteLevel *bl) {
    memset(bl->cp_to_byte, 0xFF, sizeof bl->cp_to_byte);
    uint32_t next = 256; /* the other bytes take U+0100, U+0101, ... in byte order */
    for (int b = 0; b < 256; b++) {
        uint32_t cp = maps_to_itself(b) ? (uint32_t)b : next++;
        char buf[4];
        bl->byte_to_cp[b] = cp;
        bl->utf8_len[b] = (uint8_t)df_utf8_encode(cp, buf);
        memcpy(bl->utf8[b], buf, bl->utf8_len[b]);
        bl->cp_to_byte[cp] = (int16_t)b;
    }
}
