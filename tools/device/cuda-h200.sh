#!/usr/bin/env bash
# cuda-h200.sh: one device call's worth of CUDA work on the H200 machine,
# from what tools/device/cuda-h200-pack.sh packed (unpack .gpu/cuda.tar.xz
# at the repository root first). In order, each step skipped when the
# budget left cannot hold it (summary.txt says so):
#   1. the full-shape file (muser gen --preset full --type TYPE, q4_k_m
#      unless --type says, /tmp, in the background from the start) and,
#      with --compare, llama.cpp's llama-bench built with GGML_CUDA for
#      sm_90 (background, ~4 minutes)
#   2. the gpu tier (tests/gpu/run.sh; cut after --tier-cap seconds, 420)
#      unless --no-tier, and the kernel test
#      once more per value of --kern-env (e.g. MUSER_CUDA_DEC_U=0)
#   2b. --spec S: tools/device/spec-cuda.sh --no-check (plain vs ngram vs
#      dflash on the bundled model, --backend cuda) for at most S seconds
#   3. `muser bench --backend cuda` on the full shape at --depths, --reps
#      repetitions, each value of --ab VAR=V1,V2,... in turn inside every
#      repetition (interleaved; no --ab: the defaults alone), or each
#      environment of --variants 'A=0 B=0;A=0;defaults' (';' between
#      variants; `defaults` sets nothing), and each --par value (1,4:
#      `--parallel N`, N slots decoding together) inside those; --no-bench
#      skips this step
#   4. --profile: `muser bench --profile` at the first depth; --ncu REGEX:
#      Nsight Compute on six launches of the kernels REGEX names, after
#      the first --ncu-skip (20) of them
#      (speed of light, memory, warp stalls; real clocks) in ncu.txt
#   5. --compare: bench/compare-llamacpp-cuda (muser and llama-bench in a
#      rotating order, medians) at --depths, --reps
#   6. --lane LENGTHS: bench/lane-h200.sh (CUDA producer, CPU decoder) in
#      what is left
# $OUT gets at most 8 files: summary.txt (every step's verdict and the
# bench lines), tier.log, bench.txt, profile.txt, ncu.txt, compare.json,
# compare.log, lane.tar.xz (with --spec, spec-cuda.sh's spec-summary.txt,
# spec.jsonl and spec.log too: use it without --lane).
# usage: bash tools/device/cuda-h200.sh [--budget 560] [--type q4_k_m] [--no-tier] [--tier-cap 420]
#          [--no-bench] [--kern-env VAR=V]... [--ab VAR=V1,V2 | --variants 'A=0;B=1;defaults']
#          [--depths 512,2048] [--par 1,4] [--spec 150]
#          [--reps 2] [--profile] [--ncu REGEX [--ncu-skip 20]] [--compare] [--lane 2048]
set -u
cd "$(dirname "$0")/../.."
T0=$(date +%s)
OUT=${OUT:-/tmp/cuda-h200-out}
BUDGET=560 TYPE=q4_k_m TIER=1 TCAP=420 BENCH=1 AB= VARS= NCU= DEPTHS=512,2048 REPS=2 PROF=0 CMP=0 LANE= KENV=() PAR=1 SPEC=0
while [ $# -gt 0 ]; do
  case $1 in
    --budget) BUDGET=${2:?}; shift 2 ;;
    --no-tier) TIER=0; shift ;;
    --tier-cap) TCAP=${2:?}; shift 2 ;;
    --no-bench) BENCH=0; shift ;;
    --type) TYPE=${2:?}; shift 2 ;;
    --kern-env) KENV+=("${2:?}"); shift 2 ;;
    --ab) AB=${2:?}; shift 2 ;;
    --variants) VARS=${2?}; shift 2 ;;
    --depths) DEPTHS=${2:?}; shift 2 ;;
    --par) PAR=${2:?}; shift 2 ;;
    --spec) SPEC=${2:?}; shift 2 ;;
    --reps) REPS=${2:?}; shift 2 ;;
    --profile) PROF=1; shift ;;
    --ncu) NCU=${2:?}; shift 2 ;;
    --ncu-skip) NCU_SKIP=${2:?}; shift 2 ;;
    --compare) CMP=1; shift ;;
    --lane) LANE=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    *) echo "cuda-h200: unknown argument: $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
S=$OUT/summary.txt
el() { echo $(($(date +%s) - T0)); }
left() { echo $((BUDGET - $(el))); }
note() { echo "cuda-h200: $(el)s: $*" | tee -a "$S" >&2; }
[ -x .gpu/muser ] && [ -f .gpu/muser-cuda.so ] || { note "no .gpu/muser or .gpu/muser-cuda.so: unpack .gpu/cuda.tar.xz first"; exit 1; }
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
M=$PWD/.gpu/muser
F=/tmp/full-$TYPE.gguf
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader; nproc
  ldd "$M" | grep "not found"; "$M" --version; command -v ncu nsys; } >>"$S" 2>&1

if [ ! -f "$F" ]; then
  ( "$M" gen --preset full --type "$TYPE" --quant fast --threads 8 -o "$F.tmp" >/tmp/cuda-h200-gen.log 2>&1 &&
    mv "$F.tmp" "$F"; echo "gen rc $? at $(el)s" >>"$S" ) &
fi
LB=/tmp/lc/build/bin/llama-bench
if [ $CMP = 1 ] && [ ! -x $LB ]; then
  if [ -f .gpu/llama-cuda.tar.xz ]; then
    ( mkdir -p /tmp/lc && tar -xJf .gpu/llama-cuda.tar.xz -C /tmp/lc &&
      printf 'add_subdirectory(llama-bench)\n' >/tmp/lc/tools/CMakeLists.txt &&
      cmake -S /tmp/lc -B /tmp/lc/build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
        -DGGML_NATIVE=ON &&
      cmake --build /tmp/lc/build -j"$(nproc)" --target llama-bench; echo "llama.cpp build rc $? at $(el)s" >>"$S"
    ) >/tmp/cuda-h200-llama.log 2>&1 &
  else
    note "--compare: no .gpu/llama-cuda.tar.xz (pack with --llamacpp SRC)"; CMP=0
  fi
fi

if [ $TIER = 1 ]; then
  cp .gpu/muser muser && cp .gpu/muser-cuda.so muser-cuda.so && mkdir -p build/tests/gpu &&
    cp .gpu/test_gpu_kern .gpu/test_gpu_engine .gpu/test_gpu_stream .gpu/test_gpu_vision .gpu/test_gpu_draft build/tests/gpu/
  timeout "$(( $(left) > TCAP ? TCAP : $(left) ))" bash tests/gpu/run.sh >"$OUT/tier.log" 2>&1
  note "gpu tier rc $?: $(grep '=== gpu tier' "$OUT/tier.log") $(grep 'gpu kernels:' "$OUT/tier.log") $(grep -c '^gpu stream .*: ok' "$OUT/tier.log") stream tests ok"
fi
if [ "$SPEC" -gt 0 ] && [ "$(left)" -gt 120 ]; then
  sb=$(( $(left) - 60 < SPEC ? $(left) - 60 : SPEC ))
  OUT=$OUT bash tools/device/spec-cuda.sh --no-check --budget "$sb" >/dev/null 2>&1
  note "spec rc $?: $(grep -c . "$OUT/spec-summary.txt" 2>/dev/null) summary lines"
fi
for kv in "${KENV[@]}"; do
  env "$kv" timeout 120 .gpu/test_gpu_kern >/tmp/cuda-h200-kern.log 2>&1
  note "kernel test with $kv: rc $?: $(grep 'gpu kernels:' /tmp/cuda-h200-kern.log)"
done

while [ ! -f "$F" ] && [ "$(left)" -gt 60 ]; do sleep 2; done
[ -f "$F" ] || { note "no full-shape file: $(tail -3 /tmp/cuda-h200-gen.log)"; exit 1; }
# the environments to compare, one per line
if [ -n "$VARS" ]; then envs=$(printf '%s\n' "$VARS" | tr ';' '\n' | sed 's/^defaults$/ /')
elif [ -n "$AB" ]; then envs=$(for v in $(echo "${AB#*=}" | tr ',' ' '); do echo "${AB%%=*}=$v"; done)
else envs=; fi
[ -n "$envs" ] || envs=" "
for rep in $(seq 1 "$((BENCH ? REPS : 0))"); do
  while IFS= read -r e; do
    for p in $(echo "$PAR" | tr ',' ' '); do
      if [ "$(left)" -lt 60 ]; then note "bench: stopped at rep $rep ($e, parallel $p): budget"; break 3; fi
      # shellcheck disable=SC2086
      env $e timeout 120 "$M" bench -m "$F" --backend cuda --depths "$DEPTHS" --gen 32 --parallel "$p" 2>&1 |
        grep 'tok/s' | sed "s/^/rep $rep [${e:-defaults}] p$p /" | tee -a "$OUT/bench.txt" >>"$S"
    done
  done <<<"$envs"
done
if [ $PROF = 1 ] && [ "$(left)" -gt 60 ]; then
  timeout 120 "$M" bench -m "$F" --backend cuda --depths "${DEPTHS%%,*}" --gen 16 --profile >"$OUT/profile.txt" 2>&1
  note "profile rc $?"
fi
if [ -n "$NCU" ] && [ "$(left)" -gt 90 ]; then
  timeout "$(( $(left) - 30 ))" ncu --kernel-name "regex:$NCU" --launch-skip "${NCU_SKIP:-20}" --launch-count 6 --clock-control none \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
    --section ComputeWorkloadAnalysis --section InstructionStats \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    "$M" bench -m "$F" --backend cuda --depths "${DEPTHS%%,*}" --gen 4 >"$OUT/ncu.txt" 2>&1
  note "ncu rc $?"
fi
if [ $CMP = 1 ]; then
  while [ ! -x $LB ] && [ "$(left)" -gt 120 ] && ! grep -q "llama.cpp build rc" "$S"; do sleep 5; done
  if [ -x $LB ] && [ "$(left)" -gt 120 ]; then
    timeout "$(( $(left) - 20 ))" bench/compare-llamacpp-cuda -m "$F" --muser "$M" --llama-bench $LB --depths "$DEPTHS" \
      --reps "$REPS" --out "$OUT/compare.json" >"$OUT/compare.log" 2>&1
    note "compare rc $?"; grep -i 'x[0-9]\|ratio' "$OUT/compare.log" | tail -12 >>"$S"
  else
    note "compare: skipped (llama-bench $([ -x $LB ] && echo built || echo 'not built'), $(left)s left): $(grep -i -B2 -A3 "error" /tmp/cuda-h200-llama.log | head -30)"
  fi
fi
if [ -n "$LANE" ] && [ "$(left)" -gt 150 ]; then
  OUT=/tmp/cuda-h200-lane LIMIT_S=$(( $(left) - 10 )) LENGTHS=$LANE MODEL=$F timeout "$(left)" bash bench/lane-h200.sh \
    >/tmp/cuda-h200-lane.log 2>&1
  note "lane rc $?"; tail -5 /tmp/cuda-h200-lane/summary.txt >>"$S" 2>/dev/null
  tar -cJf "$OUT/lane.tar.xz" -C /tmp cuda-h200-lane cuda-h200-lane.log 2>/dev/null
elif [ -n "$LANE" ]; then
  note "lane: skipped: $(left)s left"
fi
note "done"
