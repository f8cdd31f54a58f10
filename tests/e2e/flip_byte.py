#!/usr/bin/env python3
"""flip_byte.py FILE OFFSET: inverts every bit of the byte at OFFSET, so the
file is damaged whatever the byte was (writing a constant leaves it whole
when the byte already held that value: 1 time in 256 where the bytes are
random, as in a pack's sealed manifest or compressed chunks)."""
import sys

path, off = sys.argv[1], int(sys.argv[2])
with open(path, "r+b") as f:
    f.seek(off)
    b = f.read(1)
    if len(b) != 1:
        sys.exit(f"flip_byte: {path} has no byte at {off}")
    f.seek(off)
    f.write(bytes([b[0] ^ 0xFF]))
