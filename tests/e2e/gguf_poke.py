#!/usr/bin/env python3
"""gguf_poke.py IN OUT TENSOR BYTE_OFFSET HEXBYTES: copies a GGUF, writing
HEXBYTES at BYTE_OFFSET inside TENSOR's data (offsets from the tensor's
first byte). Test helper for targeted corruptions (a block scale, one value)."""
import struct
import sys


def tensor_offsets(b):
    o = 8
    nt, nkv = struct.unpack_from("<QQ", b, o)
    o += 16
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    align = 32

    def rstr(o):
        n, = struct.unpack_from("<Q", b, o)
        return bytes(b[o + 8:o + 8 + n]), o + 8 + n

    for _ in range(nkv):
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
                o += sizes[at] * n
        else:
            if k == b"general.alignment":
                align = struct.unpack_from("<I", b, o)[0]
            o += sizes[t]
    offs = {}
    for _ in range(nt):
        name, o = rstr(o)
        nd, = struct.unpack_from("<I", b, o)
        o += 4 + 8 * nd
        _, off = struct.unpack_from("<IQ", b, o)
        o += 12
        offs[name.decode()] = off
    data = (o + align - 1) // align * align
    return {k: data + v for k, v in offs.items()}


def main():
    src, dst, name, at, hexbytes = sys.argv[1:6]
    b = bytearray(open(src, "rb").read())
    p = tensor_offsets(b)[name] + int(at)
    v = bytes.fromhex(hexbytes)
    b[p:p + len(v)] = v
    open(dst, "wb").write(b)


if __name__ == "__main__":
    main()
