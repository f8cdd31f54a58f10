#!/usr/bin/env python3
"""gguf_set_u32.py IN OUT KEY VALUE: copies a GGUF (v2/v3), adding the
metadata key KEY as a uint32 VALUE (replacing it when present). The tensor
data is copied byte for byte; only the header grows. Used to give a golden
model llama.cpp's `<arch>.pooling_type` for the embedding references."""
import struct
import sys

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def main():
    src, dst, key, value = sys.argv[1], sys.argv[2], sys.argv[3].encode(), int(sys.argv[4])
    b = open(src, "rb").read()
    if b[:4] != b"GGUF":
        sys.exit(f"gguf_set_u32: not a GGUF file: {src}")
    nt, nkv = struct.unpack_from("<QQ", b, 8)
    o = 24
    align = 32
    kvs = []

    def rstr(o):
        n, = struct.unpack_from("<Q", b, o)
        return bytes(b[o + 8:o + 8 + n]), o + 8 + n

    for _ in range(nkv):
        start = o
        k, o = rstr(o)
        t, = struct.unpack_from("<I", b, o)
        o += 4
        if t == 8:
            _, o = rstr(o)
        elif t == 9:
            at, n = struct.unpack_from("<IQ", b, o)
            o += 12
            if at == 8:
                for _ in range(n):
                    _, o = rstr(o)
            else:
                o += SIZES[at] * n
        else:
            if k == b"general.alignment":
                align, = struct.unpack_from("<I", b, o)
            o += SIZES[t]
        if k != key:
            kvs.append(b[start:o])
    infos_start = o
    for _ in range(nt):
        _, o = rstr(o)
        nd, = struct.unpack_from("<I", b, o)
        o += 4 + 8 * nd + 12
    infos = b[infos_start:o]
    data_start = (o + align - 1) // align * align
    kvs.append(struct.pack("<Q", len(key)) + key + struct.pack("<II", 4, value))
    head = b[:8] + struct.pack("<QQ", nt, len(kvs)) + b"".join(kvs) + infos
    head += b"\0" * ((-len(head)) % align)
    with open(dst, "wb") as f:
        f.write(head)
        f.write(b[data_start:])


if __name__ == "__main__":
    main()
