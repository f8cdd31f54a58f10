#!/usr/bin/env bash
# bench/vision/run.sh: encoding one 896x896 image (1024 merged tokens, 4096
# patches) with the full-geometry projector on the CPU, muser against
# llama.cpp's mtmd in the same run, same thread count, REPS times
# interleaved (mtmd, muser, mtmd, muser, ...), then the medians.
#   MTMD_REF=/path/to/mtmd_ref [SIZE=896] [REPS=3] [MUSER_BASE=/path/to/muser] bench/vision/run.sh [THREADS] [OUT]
# (SIZE: another square side, a multiple of 28, for a quicker run;
# MUSER_BASE: another muser binary, e.g. main's, timed and checked the same
# way in each rep after this tree's, its lines marked "base")
# mtmd_ref is tools/mtmd_ref/mtmd_ref.c built against libmtmd
# (tests/data/vision/README.md has the recipe); it times mtmd_encode_chunk
# alone. muser's time is mu_mprompt_new's (PNG decode + preprocessing +
# encode, and the first touch of the mapped weights; MUSER_IMAGE_TIMING).
# Both see the same pixels (the seeded image of tests/unit/vision_img.h, as
# a PNG for muser), and every muser run's rows (MUSER_IMAGE_DUMP) are
# compared with mtmd's bit for bit. Each time is wall and process CPU; on a
# shared machine the CPU time is the steadier of the two. The raw lines go
# to OUT (default: under bench/results, named by size and thread count). The
# text model is a one-layer model of the projector's output width (6656):
# only its width matters.
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
R=${REPS:-3}
check_rows() {
    if cmp -s "$W/muser.emb" "$W/img_${S}x${S}_s1.emb"; then
        echo "rows: bit-identical to mtmd's ($(stat -c %s "$W/muser.emb") bytes)"
    else
        echo "rows: DIFFER from mtmd's ($(stat -c %s "$W/muser.emb" 2>/dev/null || echo 0) vs $(stat -c %s "$W/img_${S}x${S}_s1.emb") bytes)"
    fi
}
{
    echo "# bench/vision/run.sh, $(date -u +%FT%TZ), ${S}x$S, threads $T, reps $R, $(git describe --always --dirty)"
    echo "# cpu:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg)"
    for ((k = 1; k <= R; k++)); do
        echo "## rep $k: llama.cpp mtmd (mtmd_ref: mtmd_encode_chunk, $T threads), load $(cut -d' ' -f1 /proc/loadavg)"
        MTMD_THREADS=$T "$REF" "$W/text.gguf" "$W/full.gguf" "$W" "$S" "$S" 1 2>"$W/mtmd.log" || { tail -5 "$W/mtmd.log"; exit 1; }
        grep -E "flash attention" "$W/mtmd.log" | head -1 || true
        echo "## rep $k: muser (run --image, $T threads), load $(cut -d' ' -f1 /proc/loadavg)"
        rm -f "$W/muser.emb"
        MUSER_IMAGE_TIMING=1 MUSER_IMAGE_DUMP="$W/muser.emb" ./muser run -m "$W/text.gguf" --mmproj "$W/full.gguf" \
            --image "$W/img.png" -p "x" -n 1 --temp 0 --threads "$T" 2>&1 >/dev/null | grep -E "encoded in" || true
        check_rows
        if [ -n "${MUSER_BASE:-}" ]; then
            echo "## rep $k: base muser ($MUSER_BASE, $T threads), load $(cut -d' ' -f1 /proc/loadavg)"
            rm -f "$W/muser.emb"
            MUSER_IMAGE_TIMING=1 MUSER_IMAGE_DUMP="$W/muser.emb" "$MUSER_BASE" run -m "$W/text.gguf" --mmproj "$W/full.gguf" \
                --image "$W/img.png" -p "x" -n 1 --temp 0 --threads "$T" 2>&1 >/dev/null | grep -E "encoded in" | sed 's/^/base /' || true
            check_rows
        fi
    done
    echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT"
python3 - "$OUT" <<'PY' | tee -a "$OUT"
import re, statistics, sys
t = open(sys.argv[1]).read()
m = [tuple(map(float, x)) for x in re.findall(r'\.emb \d+ tokens x \d+, encoded in ([\d.]+) s \(process CPU ([\d.]+) s\)', t)]
u = [tuple(map(float, x)) for x in re.findall(r'^muser run: \d+ image\(s\) encoded in ([\d.]+) s \(process CPU ([\d.]+) s;', t, re.M)]
b = [tuple(map(float, x)) for x in re.findall(r'^base muser run: \d+ image\(s\) encoded in ([\d.]+) s \(process CPU ([\d.]+) s;', t, re.M)]
if m and u:
    mw, mc = statistics.median(x[0] for x in m), statistics.median(x[1] for x in m)
    uw, uc = statistics.median(x[0] for x in u), statistics.median(x[1] for x in u)
    print(f"# medians of {len(m)} mtmd and {len(u)} muser runs: mtmd wall {mw:.1f} s, CPU {mc:.1f} s; "
          f"muser wall {uw:.1f} s, CPU {uc:.1f} s; muser/mtmd speed: CPU {mc / uc:.2f}x, wall {mw / uw:.2f}x")
if m and b:
    bw, bc = statistics.median(x[0] for x in b), statistics.median(x[1] for x in b)
    print(f"# base muser, median of {len(b)} runs: wall {bw:.1f} s, CPU {bc:.1f} s; base/mtmd speed: CPU {mc / bc:.2f}x, wall {mw / bw:.2f}x")
PY
