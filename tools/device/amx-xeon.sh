#!/usr/bin/env bash
# amx-xeon.sh: the AMX table on a Xeon with AMX-INT8 (the GPU machine's CPU),
# in one device call of at most 8 minutes. Runs from the repository root with
# what tools/device/amx-xeon-pack.sh put in .gpu/amx/ (binaries built on the
# CPU machine, their libraries, the shared fixture t3-q4_k_m, optionally
# llama.cpp's source), and writes everything under $OUT:
#   machine.txt          CPU, flags, cores (lscpu: threads per core, caches),
#                        memory; ldd of the binaries
#   membw.log            read bandwidth at 1..all threads (bench/membw.c)
#   test_kern.log        tests/unit/test_kern.c with every table this CPU has
#                        (must list KERN: "amx")
#   model-KERN.log       the model tier (tests/golden/run.sh) with MUSER_KERN=KERN
#   shared-KERN.log      the shared fixtures carried (tests/golden/compare.py)
#                        with MUSER_KERN=KERN
#   kernbench.log        gemm GMAC/s of BASE and KERN on Q4_K, Q6_K, Q5_K at
#                        the prefill shapes (512 activation rows; n 2048 and
#                        6144, the 1B shape's n_embd and n_ff), 1 and all threads
#   sweep.jsonl, sweep.txt  without --llamacpp: `muser bench` on a 1B-shape
#                        Q4_K_M file (made here by `muser gen --preset 1b`),
#                        threads x {BASE, KERN}, depths 512 and 2048, the
#                        tables' order rotating with the repetition; medians
#                        and thread scaling
#   compare.log, compare-cpu.json   with --llamacpp: llama-bench built here
#                        (GGML_NATIVE: llama.cpp's AMX code on this CPU) against
#                        muser's BASE and KERN (bench/compare-llamacpp-cpu) at
#                        every --threads, depth 512, llama.cpp with flash
#                        attention off and on, 16 decode steps
#   compare2048.log, compare-cpu-2048.json   the same at depth 2048, prefill
#                        only (llama-bench's decode at depth 2048 prefills the
#                        depth again) and flash attention on only (llama.cpp's
#                        faster prefill at every thread count on 2026-12-02)
#   profile.jsonl        `muser bench --profile` per table: depth 512 at the
#                        fewest and the most threads, 2048 at the most
#   depth8k.log          decode at depth 8192 on every core: muser with the
#                        split decode attention (src/engine/attn.c) on and
#                        off, and llama-bench -d 8192 when built
#   summary.txt          one line per step: rc, seconds, verdict
#   logs.tar.xz          at the end, every file above but summary.txt, machine.txt
#                        and the compare files (the device tool returns 8 files)
# Steps that would not fit in the budget are skipped and say so in
# summary.txt. The llama.cpp build (3-4 minutes on 16 cores) runs in the
# background while the correctness steps run, and the benchmarks start only
# after it has finished (nothing else runs while they measure).
#
# usage: bash tools/device/amx-xeon.sh [--llamacpp] [--llama-bench PATH]
#          [--kern amx] [--base avx512] [--threads 2,4,8,16] [--reps 2]
#          [--budget 470] [--no-model]
#   --kern/--base   the table under test and the one it is measured against
#                   (on a CPU without AMX: --kern amxsim or avx512, to try
#                   the script itself)
#   --llama-bench   an existing llama-bench instead of building one
#   --budget S      seconds for the whole script (the device allows 600 a call)
# AMX_SLOW=N multiplies every step's time limit (a slower machine, to try the
# script); OUT defaults to /tmp/amx-xeon-out, the work folder AMX_WORK to
# /tmp/amx-xeon.
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
D=${AMX_DIR:-$ROOT/.gpu/amx}
OUT=${OUT:-/tmp/amx-xeon-out}
KERN=amx BASE=avx512 THREADS=2,4,8,16 REPS=2 BUDGET=470 LLAMA=0 LB= MODEL=1 BUILD_PID=
while [ $# -gt 0 ]; do
  case $1 in
    --llamacpp) LLAMA=1; shift ;;
    --llama-bench) LB=${2:?}; LLAMA=1; shift 2 ;;
    --kern) KERN=${2:?}; shift 2 ;;
    --base) BASE=${2:?}; shift 2 ;;
    --threads) THREADS=${2:?}; shift 2 ;;
    --reps) REPS=${2:?}; shift 2 ;;
    --budget) BUDGET=${2:?}; shift 2 ;;
    --no-model) MODEL=0; shift ;;
    -h|--help) sed -n '2,52p' "$0"; exit 0 ;;
    *) echo "amx-xeon: unknown argument: $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
T0=$(date +%s)
NCPU=$(nproc)
W=${AMX_WORK:-/tmp/amx-xeon}
mkdir -p "$W"
SUM=$OUT/summary.txt
: >"$SUM"
left() { echo $((BUDGET - ($(date +%s) - T0))); }
note() { echo "$*" | tee -a "$SUM"; }

# step NAME NEED_S MAX_S CMD...: runs CMD with its output in $OUT/NAME.log,
# under a timeout of MAX_S (cut to the budget left), if at least NEED_S
# seconds are left; its verdict goes to summary.txt
step() {
  local name=$1 need=$2 max=$3 l rc t
  shift 3
  max=$((max * ${AMX_SLOW:-1}))
  l=$(left)
  if [ "$l" -lt "$need" ]; then
    note "$name: skipped: ${l}s of the budget left, needs ${need}s"
    return 99
  fi
  [ "$max" -gt "$l" ] && max=$l
  t=$(date +%s)
  timeout -k 5 "$max" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  note "$name: rc $rc in $(($(date +%s) - t))s$([ $rc = 124 ] && echo " (timed out at ${max}s)")"
  return $rc
}

export LD_LIBRARY_PATH=$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export MUSER_BIN=$D/muser
M1B=$W/m1b-q4_k_m.gguf
# what the steps run through `bash -c FUNCTION` sees
export D OUT W KERN BASE THREADS REPS BUDGET T0 NCPU M1B
export -f left
{
  date -u
  grep -m1 'model name' /proc/cpuinfo
  echo "cores: $NCPU"
  lscpu 2>/dev/null | grep -E '^(Thread|Core|Socket|NUMA|CPU max|CPU min|L1d|L2|L3)' || true
  grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(amx|avx512_vnni|avx512_bf16|avx512f)' | tr '\n' ' '
  echo
  free -g | head -2
  git -C "$ROOT" log -1 --oneline 2>/dev/null || true
  for b in muser test_kern kernbench membw; do echo "ldd $b:"; ldd "$D/$b" | grep 'not found' || echo "  complete"; done
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
missing=$(for b in muser test_kern kernbench; do [ -x "$D/$b" ] || echo "$b"; ldd "$D/$b" 2>/dev/null | grep 'not found'; done)
if [ -n "$missing" ]; then
  note "amx-xeon: $D is incomplete (run tools/device/amx-xeon-pack.sh and carry .gpu/amx): $missing"
  exit 1
fi

# llama.cpp: built in the background while the correctness steps run
if [ "$LLAMA" = 1 ] && [ -z "$LB" ]; then
  if [ -f "$D/llama-min.tar.xz" ]; then
    rm -rf "$W/lc" && mkdir -p "$W/lc" && tar xJf "$D/llama-min.tar.xz" -C "$W/lc"
    printf 'add_subdirectory(llama-bench)\n' >"$W/lc/tools/CMakeLists.txt"
    LB=$W/lc/build/bin/llama-bench
    setsid bash -c "t=\$(date +%s)
      cmake -S '$W/lc' -B '$W/lc/build' -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
        && cmake --build '$W/lc/build' -j$NCPU --target llama-bench
      echo \"rc \$? in \$((\$(date +%s) - t))s\" >'$W/lc/done'" </dev/null >"$OUT/llamacpp-build.log" 2>&1 &
    BUILD_PID=$!
    note "llamacpp-build: started in the background"
  else
    note "llamacpp: skipped: no $D/llama-min.tar.xz (amx-xeon-pack.sh --llamacpp SRC)"
    LLAMA=0
  fi
fi

# ---- exactness ----------------------------------------------------------
step test_kern 20 90 "$D/test_kern"
grep -m1 'tables:' "$OUT/test_kern.log" | tee -a "$SUM"
grep -q "tables:.* $KERN\b" "$OUT/test_kern.log" || note "test_kern: table $KERN NOT available on this CPU"
if [ "$MODEL" = 1 ]; then
  step "model-$KERN" 60 240 env GOLDEN_WORK="$W/golden" MUSER_KERN="$KERN" bash tests/golden/run.sh
  note "  $(grep -c '^ok' "$OUT/model-$KERN.log") ok lines, $(grep -c 'FAIL' "$OUT/model-$KERN.log") FAIL lines"
else
  note "model-$KERN: skipped (--no-model)"
fi
if ls "$D"/fixtures/*.gguf >/dev/null 2>&1; then
  shared() {
    local rc=0 f
    for f in "$D"/fixtures/*.gguf; do
      echo "--- $(basename "$f")"
      python3 tests/golden/compare.py "$MUSER_BIN" "$f" "${f%.gguf}.ref.json" || rc=1
    done
    return $rc
  }
  export -f shared
  step "shared-$KERN" 20 90 env MUSER_KERN="$KERN" bash -c shared
else
  note "shared-$KERN: skipped: no fixtures in $D/fixtures"
fi

# ---- benchmarks: only after the llama.cpp build is done -----------------
if [ -n "$BUILD_PID" ]; then
  while [ ! -f "$W/lc/done" ] && [ "$(left)" -gt 150 ]; do sleep 2; done
  if [ -f "$W/lc/done" ]; then
    note "llamacpp-build: $(cat "$W/lc/done")"
  else
    note "llamacpp-build: not done with $(left)s left: stopped"
    kill -- -"$BUILD_PID" 2>/dev/null || kill "$BUILD_PID" 2>/dev/null
  fi
fi
if [ "$LLAMA" = 1 ] && [ ! -x "$LB" ]; then
  note "llamacpp: skipped: no llama-bench at $LB (llamacpp-build.log)"
  LLAMA=0
fi

kernbench() {
  local n t k
  for n in 2048 6144; do for t in 1 "$NCPU"; do for k in $BASE $KERN; do
    "$D/kernbench" "$t" 0 512 "$n" Q4_K,Q6_K,Q5_K "$k" | sed "s/^{/{\"n\": $n, /" || return 1
  done; done; done
}
export -f kernbench
step kernbench 40 120 bash -c kernbench
python3 - "$OUT/kernbench.log" <<'EOF' | tee -a "$SUM"
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print("kernbench gemm GMAC/s (512 activation rows): n threads type " +
      " ".join(sorted({r["table"] for r in rs})))
g = {}
for r in rs:
    g.setdefault((r["n"], r["threads"], r["type"]), {})[r["table"]] = r["gemm_gmacs"]
for k in sorted(g):
    print(f"  {k[0]:5d} {k[1]:3d} {k[2]:5s} " + " ".join(f"{g[k][t]:9.1f}" for t in sorted(g[k])))
EOF

step membw 15 60 "$D/membw" 512 "$NCPU"
[ -f "$M1B" ] || step gen-1b 30 90 "$D/muser" gen --preset 1b --type q4_k_m --quant fast --threads "$NCPU" -o "$M1B"

sweep() {
  local rep t k ks
  for rep in $(seq 1 "$REPS"); do
    for t in ${THREADS//,/ }; do
      if [ $((rep % 2)) = 1 ]; then ks="$BASE $KERN"; else ks="$KERN $BASE"; fi
      for k in $ks; do
        [ "$(left)" -lt "$SWEEP_RESERVE" ] && { echo "sweep: stopped at rep $rep threads $t: budget"; return 0; }
        "$D/muser" bench -m "$M1B" --depths "$SWEEP_DEPTHS" --gen 32 --threads "$t" --kern "$k" --json |
          grep '^{' | python3 -c "import json,sys
for l in sys.stdin:
    j=json.loads(l); j['rep']=$rep; print(json.dumps(j))" >>"$OUT/sweep.jsonl" || return 1
      done
    done
  done
}
rm -f "$OUT/sweep.jsonl"
# with llama.cpp, the two comparisons cover both tables at depths 512 and
# 2048 (about 125 s and 165 s on the 16-core Xeon): no sweep
SWEEP_DEPTHS=512,2048 SWEEP_RESERVE=100
export -f sweep
export SWEEP_DEPTHS SWEEP_RESERVE
[ -f "$M1B" ] && [ "$LLAMA" = 0 ] && step sweep 90 300 bash -c sweep
if [ -f "$OUT/sweep.jsonl" ]; then
  python3 - "$OUT/sweep.jsonl" "$BASE" "$KERN" >"$OUT/sweep.txt" <<'EOF'
import json, statistics, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
key = lambda r: (r["kern"], r["depth"], r["threads"])
g = {}
for r in rs:
    g.setdefault(key(r), []).append(r)
print("table    depth threads  n  prefill tok/s  decode tok/s  peak RSS MiB")
med = {}
for k in sorted(g):
    p = statistics.median(r["prefill_tps"] for r in g[k])
    d = statistics.median(r["decode_tps"] for r in g[k])
    med[k] = p
    print(f"{k[0]:8s} {k[1]:5d} {k[2]:7d} {len(g[k]):2d} {p:14.1f} {d:13.2f} {max(r['peak_rss_mib'] for r in g[k]):13.1f}")
print("\nprefill scaling from the fewest threads (fraction of linear)")
for kern, depth in sorted({(k[0], k[1]) for k in g}):
    ts = sorted(k[2] for k in g if k[:2] == (kern, depth))
    base = med[(kern, depth, ts[0])]
    print(f"{kern:8s} {depth:5d} " + "  ".join(f"{t}: x{med[(kern, depth, t)] / base:.2f} "
          f"({med[(kern, depth, t)] / base / (t / ts[0]):.0%})" for t in ts))
base, kern = sys.argv[2], sys.argv[3]
if base != kern:
    print(f"\nprefill and decode, {kern} / {base}")
    for depth, t in sorted({(k[1], k[2]) for k in g}):
        a, b = g.get((kern, depth, t)), g.get((base, depth, t))
        if a and b:
            pa, pb = (statistics.median(r["prefill_tps"] for r in x) for x in (a, b))
            da, db = (statistics.median(r["decode_tps"] for r in x) for x in (a, b))
            print(f"  depth {depth} threads {t}: prefill x{pa / pb:.2f}, decode x{da / db:.2f}")
EOF
  cat "$OUT/sweep.txt" >>"$SUM"
fi

export TMAX=${THREADS##*,} TMIN=${THREADS%%,*}
profile() { # where the time of a prefill token goes at the fewest and the most threads (issue 20's scaling)
  local k t
  for k in $BASE $KERN; do
    for t in $TMIN $TMAX; do
      "$D/muser" bench -m "$M1B" --depths 512 --gen 16 --threads "$t" --kern "$k" --json --profile | grep '^{'
    done
    "$D/muser" bench -m "$M1B" --depths 2048 --gen 16 --threads "$TMAX" --kern "$k" --json --profile | grep '^{'
  done >"$OUT/profile.jsonl"
}
export -f profile
[ -f "$M1B" ] && step profile 60 150 bash -c profile

if [ "$LLAMA" = 1 ]; then
  step compare 100 220 python3 bench/compare-llamacpp-cpu -m "$M1B" --muser "$D/muser" --llama-bench "$LB" \
    --threads "$THREADS" --depths 512 --gen 16 --reps "$REPS" --kern "$BASE,$KERN" --fa 0,1 --out "$OUT/compare-cpu.json"
  sed -n '/threads | depth/,$p' "$OUT/compare.log" >>"$SUM"
  step compare2048 120 240 python3 bench/compare-llamacpp-cpu -m "$M1B" --muser "$D/muser" --llama-bench "$LB" \
    --threads "$THREADS" --depths 2048 --gen 0 --reps "$REPS" --kern "$BASE,$KERN" --fa 1 --out "$OUT/compare-cpu-2048.json"
  sed -n '/threads | depth/,$p' "$OUT/compare2048.log" >>"$SUM"
fi
# decode at depth 8192 on every core: the split decode attention (attn.c)
# against the same binary with it off, and llama.cpp's decode there
depth8k() {
  local sm fa
  for sm in 4096 100000000; do
    MUSER_ATTN_SPLIT_MIN=$sm "$D/muser" bench -m "$M1B" --depths "$DEPTH_LONG" --gen 32 --threads "$NCPU" --kern "$BASE" --json |
      grep '^{' | sed "s/^{/{\"attn_split_min\": $sm, /"
  done
  if [ -n "${LB:-}" ] && [ -x "$LB" ]; then
    for fa in 0 1; do "$LB" -m "$M1B" -t "$NCPU" -fa $fa -r 1 -o jsonl -p 0 -n 32 -d "$DEPTH_LONG" | grep '^{'; done
  fi
}
export -f depth8k
export LB DEPTH_LONG=${DEPTH_LONG:-8192}
[ -f "$M1B" ] && step depth8k 70 150 bash -c depth8k && python3 - "$OUT/depth8k.log" <<'EOF' | tee -a "$SUM"
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith("{"): continue
    j = json.loads(l)
    if "attn_split_min" in j:
        print(f"depth {j['depth']} muser split_min {j['attn_split_min']}: prefill {j['prefill_tps']:.1f} decode {j['decode_tps']:.2f} tok/s")
    else:
        print(f"depth {j.get('n_depth')} llama.cpp fa {j.get('flash_attn')}: decode {j.get('avg_ts', 0):.2f} tok/s")
EOF
note "total: $(($(date +%s) - T0))s of a ${BUDGET}s budget"
# The device tool brings back at most 8 files: summary.txt, machine.txt and
# the comparisons stay as they are, every other log goes into logs.tar.xz.
(cd "$OUT" && keep='summary.txt machine.txt compare.log compare-cpu.json compare2048.log compare-cpu-2048.json' &&
  set -- $(ls | grep -vxF -e logs.tar.xz $(printf -- '-e %s ' $keep)) &&
  [ $# -gt 0 ] && tar -cJf logs.tar.xz "$@" && rm -f "$@")
