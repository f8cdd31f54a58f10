#!/usr/bin/env bash
# cuda-vision.sh: the vision encoder on CUDA (issue 19) in one device call
# of about 2-3 minutes, from what tools/device/cuda-h200-pack.sh packed
# (unpack .gpu/cuda.tar.xz at the repository root first):
#   1. in the background: the full-shape projector (muser gen --mmproj
#      --preset full, F16, ~3.8 GB in $W) and the g3-q4_k_m golden model
#   2. compute-sanitizer memcheck, then racecheck, of test_gpu_vision on the
#      tiny projectors (--no-full)
#   3. test_gpu_vision on everything: tiny at ten sizes (judged), tiny in
#      F32/BF16/Q8_0 (printed), the engine route (--backend cuda, a PNG
#      through mu_mmproj_encode), full at 448x448 and 672x364 (judged), and
#      the timing lines of full at 448 and 896
# $OUT gets two files, so it can follow cuda-h200.sh in one call: vision.txt
# (verdicts, every comparison and timing line) and vision-logs.tar.xz
# (vision.log, memcheck.log, racecheck.log, the generators' logs).
# usage: OUT=... bash tools/device/cuda-vision.sh
set -u
cd "$(dirname "$0")/../.."
T0=$(date +%s)
OUT=${OUT:-/tmp/cuda-vision-out}
W=${VISION_WORK:-/tmp/cuda-vision-work}
L=$W/logs
mkdir -p "$OUT" "$W" "$L"
S=$OUT/vision.txt
note() { echo "cuda-vision: $(($(date +%s) - T0))s: $*" | tee -a "$S" >&2; }
[ -x .gpu/muser ] && [ -x .gpu/test_gpu_vision ] && [ -f .gpu/muser-cuda.so ] ||
  { note "no .gpu/muser, .gpu/test_gpu_vision or .gpu/muser-cuda.so: unpack .gpu/cuda.tar.xz first"; exit 1; }
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
M=$PWD/.gpu/muser
V=$PWD/.gpu/test_gpu_vision
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; lscpu | grep 'Model name'
  ldd "$V" | grep "not found"; "$M" --version; "$M" info | grep '^gpu\|^backend'; } >>"$S" 2>&1

( [ -f "$W/vision-full-f16.gguf" ] || "$M" gen --mmproj "$W/vision-full-f16.gguf" --preset full >"$L/gen-full.log" 2>&1
  echo "gen full projector rc $? at $(($(date +%s) - T0))s" >>"$S" ) &
gen_pid=$!
# shellcheck disable=SC2046
[ -f "$W/g3-q4_k_m.gguf" ] || "$M" gen -o "$W/g3-q4_k_m.gguf" $(grep '^g3-q4_k_m ' tests/golden/models.txt | cut -d' ' -f2-) \
  --name g3-q4_k_m >"$L/gen-g3.log" 2>&1 || note "gen g3 failed: $(tail -2 "$L/gen-g3.log")"

san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$san" ]; then
  for tool in memcheck racecheck; do
    timeout 75 "$san" --tool $tool --error-exitcode 9 "$V" "$W" --no-full >"$L/$tool.log" 2>&1
    r=$?
    note "$tool (tiny projectors): rc $r ($(grep -c '^ok ' "$L/$tool.log") comparisons ok; $(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' "$L/$tool.log"))"
  done
else
  note "compute-sanitizer not found: sanitizer runs skipped"
fi

wait $gen_pid
timeout 200 "$V" "$W" "$W/g3-q4_k_m.gguf" >"$L/vision.log" 2>&1
note "test_gpu_vision: rc $?"
grep -E '^(ok|FAIL|info|bench|gen|gpu vision|cpu encoder)' "$L/vision.log" >>"$S"
tar -cJf "$OUT/vision-logs.tar.xz" -C "$W" logs
note "done"
