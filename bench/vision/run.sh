#!/usr/bin/env bash
# bench/vision/run.sh: encoding one 896x896 image (1024 merged tokens, 4096
# patches) with the full-geometry projector on the CPU, muser against
# llama.cpp's mtmd in the same run, same thread count.
#   MTMD_REF=/path/to/mtmd_ref [SIZE=896] bench/vision/run.sh [THREADS] [OUT]
# (SIZE: another square side, a multiple of 28, for a quicker run)
# mtmd_ref is tools/mtmd_ref/mtmd_ref.c built against libmtmd
# (tests/data/vision/README.md has the recipe); it times mtmd_encode_chunk
# alone. muser's time is mu_mprompt_new's (PNG decode + preprocessing +
# encode; MUSER_IMAGE_TIMING). Both see the same pixels (the seeded image of
# tests/unit/vision_img.h, as a PNG for muser). The raw lines go to OUT
# (default: under bench/results, named by the thread count). The text model
# is a one-layer model of the projector's output width (6656): only its
# width matters.
set -euo pipefail
cd "$(dirname "$0")/../.."
T=${1:-2}
S=${SIZE:-896}
OUT=${2:-bench/results/vision-$S-full-t$T.txt}
REF=${MTMD_REF:?set MTMD_REF to a built tools/mtmd_ref/mtmd_ref}
W=${BENCH_DIR:-/tmp/muser-vision-bench}
mkdir -p "$W"
[ -f "$W/text.gguf" ] || ./muser gen --preset tiny --embd 6656 --layers 1 --ff 512 --heads 4 --kv-heads 2 \
    --head-dim 128 --type q8_0 --name vision-bench-text -o "$W/text.gguf" >/dev/null
[ -f "$W/full.gguf" ] || ./muser gen --mmproj "$W/full.gguf" --preset full --seed 1
python3 - "$W/img.png" "$S" <<'PY'
import struct, sys, zlib
M = (1 << 64) - 1
def image(w, h, seed):  # tests/unit/vision_img.h
    s = (seed * 0x9E3779B97F4A7C15 + 0x1234567) & M
    out = bytearray(w * h * 3)
    for y in range(h):
        for x in range(w):
            for c in range(3):
                s = (s + 0x9E3779B97F4A7C15) & M
                z = s
                z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
                z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
                z ^= z >> 31
                v = (x * (3 + c) + y * (5 - c) + c * 80) % 256 + z % 48 - 24
                out[(y * w + x) * 3 + c] = min(255, max(0, v))
    return out
w = h = int(sys.argv[2])
px = image(w, h, 1)
raw = b''.join(b'\0' + bytes(px[y * w * 3:(y + 1) * w * 3]) for y in range(h))
ck = lambda t, d: struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
open(sys.argv[1], 'wb').write(b'\x89PNG\r\n\x1a\n' + ck(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) +
                              ck(b'IDAT', zlib.compress(raw)) + ck(b'IEND', b''))
PY
{
    echo "# bench/vision/run.sh, $(date -u +%FT%TZ), ${S}x$S, threads $T, $(git describe --always --dirty)"
    echo "# cpu:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "## llama.cpp mtmd (mtmd_ref: mtmd_encode_chunk, $T threads)"
    MTMD_THREADS=$T "$REF" "$W/text.gguf" "$W/full.gguf" "$W" "$S" "$S" 1 2>"$W/mtmd.log" || { tail -5 "$W/mtmd.log"; exit 1; }
    grep -E "flash attention" "$W/mtmd.log" | head -1 || true
    echo "## muser (run --image, $T threads)"
    MUSER_IMAGE_TIMING=1 ./muser run -m "$W/text.gguf" --mmproj "$W/full.gguf" --image "$W/img.png" -p "x" -n 1 \
        --temp 0 --threads "$T" 2>&1 >/dev/null | grep -E "encoded in" || true
    echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT"
