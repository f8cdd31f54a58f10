#!/usr/bin/env bash
# cuda-vision-mtmd.sh: the vision encoder on CUDA against llama.cpp's mtmd on
# CUDA (issue 19: the GPU half of its speed item), same machine, same
# projector, same image, in one device call (first run: 2026-12-05,
# bench/results/cuda-2026-12-05b/).
# Needs what tools/device/cuda-h200-pack.sh --llamacpp SRC packed
# (.gpu/cuda.tar.xz, unpacked at the repository root first: .gpu/muser,
# .gpu/muser-cuda.so, .gpu/test_gpu_vision, .gpu/llama-cuda.tar.xz with
# llama.cpp's mtmd sources in it).
#   1. in the background: llama.cpp's libmtmd with GGML_CUDA for sm_90
#      (/tmp/lc/build, about as long as cuda-h200.sh's llama-bench build),
#      and the full projector (muser gen --mmproj --preset full, F16)
#   2. tools/mtmd_ref built against it (gcc, the tree's source)
#   3. interleaved, REPS times: mtmd_ref with MTMD_GPU=1 MTMD_REPEAT=4 on the
#      896x896 test image (the first encode pays the device's warm-up; the
#      median of the other three is the figure), then test_gpu_vision
#      --bench: the timing of the full projector at 448 and 896 (median of 3
#      after a first) with MUSER_CUDA_PLUGIN (its verdicts, muser's GPU rows
#      against its CPU rows, which equal CPU mtmd's bit for bit, come from a
#      whole test_gpu_vision run: tools/device/cuda-vision.sh)
# $OUT gets vision-mtmd.txt (every time line and verdict) and
# vision-mtmd-logs.tar.xz.
# WAIT_FOR=FILE: the timed runs wait until FILE exists (another job of the
# call using the GPU meanwhile), or until 150 s of the budget are left.
# usage: OUT=... [REPS=2] [BUDGET=540] [WAIT_FOR=FILE] bash tools/device/cuda-vision-mtmd.sh
set -u
cd "$(dirname "$0")/../.." || exit 1
T0=$(date +%s)
OUT=${OUT:-/tmp/cuda-vision-mtmd-out}
W=${VISION_WORK:-/tmp/cuda-vision-work}
REPS=${REPS:-2}
BUDGET=${BUDGET:-540}
L=$W/logs
mkdir -p "$OUT" "$W" "$L"
S=$OUT/vision-mtmd.txt
el() { echo $(($(date +%s) - T0)); }
note() { echo "cuda-vision-mtmd: $(el)s: $*" | tee -a "$S" >&2; }
finish() { tar -cJf "$OUT/vision-mtmd-logs.tar.xz" -C "$W" logs 2>/dev/null; exit "${1:-0}"; }
for f in .gpu/muser .gpu/muser-cuda.so .gpu/test_gpu_vision .gpu/llama-cuda.tar.xz; do
  [ -e $f ] || { note "missing $f: pack with tools/device/cuda-h200-pack.sh --llamacpp SRC, unpack first"; finish 1; }
done
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
M=$PWD/.gpu/muser
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; "$M" --version; } >>"$S" 2>&1

B=/tmp/lc/build
if [ ! -f $B/bin/libmtmd.so ]; then
  ( mkdir -p /tmp/lc && tar -xJf .gpu/llama-cuda.tar.xz -C /tmp/lc &&
    [ -d /tmp/lc/tools/mtmd ] && printf 'add_subdirectory(mtmd)\n' >/tmp/lc/tools/CMakeLists.txt &&
    cmake -S /tmp/lc -B $B -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=ON \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DGGML_NATIVE=ON &&
    cmake --build $B -j"$(nproc)" --target mtmd; echo "libmtmd build rc $? at $(el)s" >>"$S"
  ) >"$L/llama-build.log" 2>&1 &
fi
P=$W/vision-full-f16.gguf
[ -f "$P" ] || ( "$M" gen --mmproj "$P.tmp" --preset full >"$L/gen-full.log" 2>&1 && mv "$P.tmp" "$P" ) &
T=$W/text-6656.gguf
[ -f "$T" ] || "$M" gen --preset tiny --embd 6656 --layers 1 --ff 512 --heads 4 --kv-heads 2 --head-dim 128 \
  --type q8_0 --name vision-bench-text -o "$T" >"$L/gen-text.log" 2>&1
wait
[ -f $B/bin/libmtmd.so ] || { note "libmtmd not built: $(grep -i -m5 'error' "$L/llama-build.log")"; finish 1; }
[ -f "$P" ] || { note "projector not written: $(tail -2 "$L/gen-full.log")"; finish 1; }
R=$W/mtmd_ref
gcc -std=c11 -O2 -I/tmp/lc/include -I/tmp/lc/ggml/include -I/tmp/lc/tools/mtmd -o "$R" tools/mtmd_ref/mtmd_ref.c \
  -L$B/bin -lmtmd -lllama -lggml -lggml-base -Wl,-rpath,$B/bin >"$L/mtmd_ref-build.log" 2>&1 ||
  { note "mtmd_ref build failed: $(head -5 "$L/mtmd_ref-build.log")"; finish 1; }
note "built; projector and text model ready"
if [ -n "${WAIT_FOR:-}" ]; then # another job of the same call holds the GPU until it writes this file
  while [ ! -e "$WAIT_FOR" ] && [ "$(el)" -lt $((BUDGET - 150)) ]; do sleep 2; done
  note "waited for $WAIT_FOR: $([ -e "$WAIT_FOR" ] && echo there || echo 'not there, going on')"
fi

mkdir -p "$W/mtmd-rows"
for ((k = 1; k <= REPS; k++)); do
  [ "$(el)" -lt $((BUDGET - 90)) ] || { note "budget: stopped before rep $k"; break; }
  note "rep $k: mtmd (CUDA) 896x896, 4 encodes"
  MTMD_GPU=1 MTMD_REPEAT=4 timeout 120 "$R" "$T" "$P" "$W/mtmd-rows" 896 896 1 >"$L/mtmd-$k.log" 2>&1 ||
    note "mtmd_ref rc $?: $(tail -3 "$L/mtmd-$k.log")"
  grep "encoded in" "$L/mtmd-$k.log" | sed 's/^/mtmd cuda: /' >>"$S"
  grep -i -m3 "CUDA\|backend" "$L/mtmd-$k.log" >>"$S"
  note "rep $k: muser (CUDA), test_gpu_vision"
  timeout $((BUDGET - $(el) - 20)) .gpu/test_gpu_vision "$W" --bench >"$L/muser-$k.log" 2>&1 || note "test_gpu_vision rc $?"
  grep -E "^bench|^FAIL" "$L/muser-$k.log" | sed 's/^/muser cuda: /' >>"$S"
done
python3 - "$S" <<'PY' | tee -a "$S"
import re, statistics, sys
t = open(sys.argv[1]).read()
m = [float(x) for x in re.findall(r'^mtmd cuda: .*encoded in ([\d.]+) s', t, re.M)]
warm = [x for i, x in enumerate(m) if i % 4]  # drop each run's first encode
u = [float(x) for x in re.findall(r'^muser cuda: bench cuda vision full 896x896 .*?: ([\d.]+) ms median', t, re.M)]
if warm and u:
    mw, uw = statistics.median(warm) * 1e3, statistics.median(u)
    print(f"# 896x896 on CUDA: mtmd {mw:.1f} ms (median of {len(warm)} warm encodes), muser {uw:.1f} ms "
          f"(median of {len(u)} medians); muser/mtmd speed {mw / uw:.2f}x")
PY
finish 0
