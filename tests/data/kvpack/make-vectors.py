#!/usr/bin/env python3
"""Regenerates the kvpack v1 conformance vectors in this directory from the
kvpack project's own Python reference (stdlib only), run outside muser.

    git clone https://github.com/High-Performance-AI-Lab/kvpack /tmp/kvpack
    python3 tests/data/kvpack/make-vectors.py /tmp/kvpack [OUT_DIR]

It drives reference/python/production_v1.py through its command line:
  fixture-lines CODEC CHUNK PACK      -> fixture-CODEC-CHUNK-PACK.tsv
  delta-chain-lines CODEC CHUNK PACK  -> delta-CODEC-CHUNK-PACK.tsv
for CODEC in raw, lossless and CHUNK, PACK in plain, encrypted (the output
is stored exactly as the reference prints it), and for every case of
reference/corpus/production_v1_rejections.tsv it applies the case's
mutation to the raw/plain/plain fixture object the case names and records
the reference's own verdict (`transcode KIND HEX`) in rejections.tsv.

The corpus names the legacy magics of `legacy-magic` cases only by number;
this script (and tests/unit/test_kvpack.c) use the development magics that
PACK_V1.md lists as invalid, in LEGACY_MAGICS order below."""

import os
import subprocess
import sys

LEGACY_MAGICS = [b"IOKVPK1\0", b"KVREC1\0\0", b"KVCOMMIT", b"KVFOOT1\0", b"KVZLIB1\0", b"KVQ8V1\0\0", b"IOKVENC\0"]


def ref(kvpack, *args):
    cli = os.path.join(kvpack, "reference", "python", "production_v1.py")
    out = subprocess.run([sys.executable, cli, *args], check=True, capture_output=True, text=True)
    return out.stdout


def mutate(data, op, offset, value):
    data = bytearray(data)
    if op == "truncate":
        return bytes(data[:offset])
    if op == "xor":
        data[offset] ^= value
    elif op == "set-u8":
        data[offset] = value
    elif op == "set-u16":
        data[offset:offset + 2] = value.to_bytes(2, "little")
    elif op == "append-zero":
        data.append(0)
    elif op == "legacy-magic":
        data[0:8] = LEGACY_MAGICS[value]
    else:
        raise SystemExit(f"unknown corpus operation {op}")
    return bytes(data)


def main():
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    kvpack = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) == 3 else os.path.dirname(os.path.abspath(__file__))
    for codec in ("raw", "lossless"):
        for chunk in ("plain", "encrypted"):
            for pack in ("plain", "encrypted"):
                name = f"{codec}-{chunk}-{pack}.tsv"
                with open(os.path.join(out, "fixture-" + name), "w") as f:
                    f.write(ref(kvpack, "fixture-lines", codec, chunk, pack))
                with open(os.path.join(out, "delta-" + name), "w") as f:
                    f.write(ref(kvpack, "delta-chain-lines", codec, chunk, pack))
    fields = dict(line.split("\t", 1) for line in ref(kvpack, "fixture-lines", "raw", "plain", "plain").splitlines())
    corpus = os.path.join(kvpack, "reference", "corpus", "production_v1_rejections.tsv")
    rows = ["# case\tkind\tfield\toperation\toffset\tvalue\texpected_category\treference_category\treference_message"]
    with open(corpus) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            case, kind, field, op, offset, value, expected = line.rstrip("\n").split("\t")
            data = mutate(bytes.fromhex(fields[field]), op, int(offset), int(value))
            verdict = ref(kvpack, "transcode", kind, data.hex()).rstrip("\n").split("\t")
            if verdict[0] != "error":
                raise SystemExit(f"{case}: the reference accepted the mutated object")
            rows.append("\t".join((case, kind, field, op, offset, value, expected, verdict[1], verdict[2])))
    with open(os.path.join(out, "rejections.tsv"), "w") as f:
        f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
