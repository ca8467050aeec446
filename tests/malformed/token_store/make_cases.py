#!/usr/bin/env python3
"""Writes the malformed token stores of this folder from a valid one made by
`dflash prepare` (valid.store, 3 samples: usage: make_cases.py VALID_STORE).
Each case gets correct checksums unless the case is about checksums, so that
the check it targets is the one that fails. valid.store is a format version 1
store (df_hash64 checksums, as in src/base/hash64.h), which readers still
accept; the cases keep that version.
import struct, sys

M = (1 << 64) - 1

def hash64(data):
    lanes = [(0x9E3779B97F4A7C15 * (j + 1)) & M for j in range(4)]
    padded = data + b"\0" * (-len(data) % 8)
    for k in range(len(padded) // 8):
        w = struct.unpack_from("<Q", padded, 8 * k)[0]
        v = ((lanes[k % 4] ^ w) * 0xFF51AFD7ED558CCD) & M
        lanes[k % 4] = v ^ (v >> 29)
    h = (len(data) * 0xC4CEB9FE1A85EC53) & M
    for v in lanes:
        x = v ^ (v >> 33)
        x = (x * 0xC4CEB9FE1A85EC53) & M
        x ^= x >> 33
        h = ((h ^ x) * 0xFF51AFD7ED558CCD) & M
        h ^= h >> 29
    return h

def seal(b):
    b = bytearray(b)
    struct.pack_into("<Q", b, 104, hash64(bytes(b[128:])))
    struct.pack_into("<Q", b, 120, hash64(bytes(b[:120])))
    return bytes(b)

def u64(b, off, x, sealed=True):
    b = bytearray(b)
    struct.pack_into("<Q", b, off, x)
    return seal(b) if sealed else bytes(b)

valid = open(sys.argv[1], "rb").read()
assert hash64(valid[:120]) == struct.unpack_from("<Q", valid, 120)[0], "hash64 port disagrees with the C code"
ids_off, ids_size, mask_off, mask_size, offs_off, offs_size = struct.unpack_from("<6Q", valid, 56)
n_tokens = struct.unpack_from("<Q", valid, 40)[0]
cases = {}
cases["bad_magic"] = b"NOTSTORE" + valid[8:]
cases["truncated_header"] = valid[:100]
cases["header_checksum"] = valid[:20] + bytes([valid[20] ^ 1]) + valid[21:]
cases["payload_checksum"] = valid[:ids_off] + bytes([valid[ids_off] ^ 1]) + valid[ids_off + 1:]
b = bytearray(valid); struct.pack_into("<I", b, 8, 3); cases["version"] = seal(b)
b = bytearray(valid); struct.pack_into("<I", b, 16, 0); cases["zero_vocab"] = seal(b)
cases["sample_count_huge"] = u64(valid, 32, 1 << 60)
cases["ids_misaligned"] = u64(valid, 56, len(valid) + 8)
cases["ids_past_end"] = u64(valid, 56, 1 << 20)
cases["token_count_mismatch"] = u64(valid, 40, n_tokens + 1)
b = bytearray(valid); struct.pack_into("<q", b, offs_off + 8, 1 << 40); cases["offset_past_end"] = seal(b)
b = bytearray(valid); struct.pack_into("<q", b, offs_off + 8, -4); cases["offset_negative"] = seal(b)
b = bytearray(valid); struct.pack_into("<i", b, ids_off, 1 << 30); cases["id_outside_vocab"] = seal(b)
b = bytearray(valid); b[mask_off] = 7; cases["mask_value"] = seal(b)
cases["truncated_payload"] = seal(valid[:len(valid) - 8])
for name, data in cases.items():
    open(name + ".store", "wb").write(data)
