#!/usr/bin/env bash
# bench/vision/run.sh: encoding one 896x896 image (1024 merged tokens, 4096
# patches) with the full-geometry projector on the CPU, muser against
# llama.cpp's mtmd (llama-mtmd-cli) in the same run, same thread count.
#   MTMD_CLI=/path/to/llama-mtmd-cli bench/vision/run.sh [THREADS] [OUT]
# Builds nothing of llama.cpp (tests/data/vision/README.md says how to build
# it); writes the raw lines of both programs to OUT (default
# bench/results/vision-896-full-t$THREADS.txt). The text model is a one-layer
# model of the projector's output width (6656): only its width matters.
set -euo pipefail
cd "$(dirname "$0")/../.."
T=${1:-2}
OUT=${2:-bench/results/vision-896-full-t$T.txt}
CLI=${MTMD_CLI:?set MTMD_CLI to llama.cpp\'s llama-mtmd-cli}
W=${BENCH_DIR:-/tmp/muser-vision-bench}
mkdir -p "$W"
[ -f "$W/text.gguf" ] || ./muser gen --preset tiny --embd 6656 --layers 1 --ff 512 --heads 4 --kv-heads 2 \
    --head-dim 128 --type q8_0 --name vision-bench-text -o "$W/text.gguf" >/dev/null
[ -f "$W/full.gguf" ] || ./muser gen --mmproj "$W/full.gguf" --preset full --seed 1
python3 - "$W/img.png" <<'PY'
import struct, sys, zlib
w = h = 896
raw = b''.join(b'\0' + bytes(((x * 3 + y * 5 + c * 80 + (x * y) % 37) & 255) for x in range(w) for c in range(3))
               for y in range(h))
ck = lambda t, d: struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
open(sys.argv[1], 'wb').write(b'\x89PNG\r\n\x1a\n' + ck(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) +
                              ck(b'IDAT', zlib.compress(raw)) + ck(b'IEND', b''))
PY
{
    echo "# bench/vision/run.sh, $(date -u +%FT%TZ), threads $T, $(git describe --always --dirty)"
    echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), load: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "## llama-mtmd-cli"
    "$CLI" -m "$W/text.gguf" --mmproj "$W/full.gguf" --image "$W/img.png" -p "x" -n 1 --temp 0 -t "$T" 2>&1 |
        grep -E "encoded in|decoded in|flash|load_hparams: (n_embd|n_layer)|image_max" || true
    echo "## muser"
    MUSER_IMAGE_TIMING=1 ./muser run -m "$W/text.gguf" --mmproj "$W/full.gguf" --image "$W/img.png" -p "x" -n 1 \
        --temp 0 --threads "$T" 2>&1 >/dev/null | grep -E "encoded in" || true
} | tee "$OUT"
