#!/usr/bin/env bash
# spec-cuda.sh: speculative decoding on CUDA (issue 15) in one device call,
# from what tools/device/cuda-h200-pack.sh packed (unpack .gpu/cuda.tar.xz at
# the repository root first), on the bundled model (models/, tracked, so it
# travels with the tree) and its drafter:
#   0. --tier: the gpu tier (tests/gpu/run.sh, as cuda-h200.sh runs it:
#      kernels, CPU vs CUDA engine on the golden models, goldens with
#      --backend cuda, --spec ngram/dflash == plain greedy, memcheck), at
#      most 300 s and never the last 150 s of the budget
#   1. test_gpu_engine on the bundled model (the CUDA engine against the CPU
#      engine: logits, cells and the captured hidden states of
#      mu_batch_item.feat), with MUSER_CUDA_CAPTURE_GRAPH=0 and 1, unless
#      --no-check
#   2. bench/spec-ngram with --backend cuda: plain greedy, --spec ngram
#      (ngram-r1: MUSER_SPEC_ROW_COST=0.1), --spec dflash with the drafter
#      on the CPU (dflash-cpu: MUSER_DRAFT_DEVICE=0) and on the device
#      (dflash; dflash-r1: MUSER_SPEC_ROW_COST=0.1; dflash-r1g: that and
#      MUSER_CUDA_DRAFT_GRAPH=1; dflash-15g: that, --draft-max 15 and
#      MUSER_CUDA_GRAPH_T=16, its verification blocks of up to 16 tokens
#      replaying graphs) one after the other for each prompt of
#      bench/spec-prompts-dflash.json (the order alternating per repetition),
#      --reps repetitions (3), medians; it stops with an error if a
#      speculative run's ids differ from plain greedy's, and starts no
#      repetition once the budget left cannot hold one
# $OUT gets at most 5 files, named so they can share an $OUT with
# cuda-h200.sh's: spec-summary.txt (the verdicts, a table per prompt:
# tokens/s of each mode, the speedups, accepted drafts per step), spec.jsonl
# (spec-ngram's raw lines and summary), spec.log (its stderr),
# spec-engine.log, spec-tier.log.
# --backend cpu with --muser ./muser runs the same logic on a machine
# without a GPU (for checking the script; its numbers mean nothing there).
# --variant "NAME SPEC [ENV=VALUE...] [-- ARGS...]" (repeatable): time these
# (muser run --spec SPEC under that environment, with those arguments
# appended) after plain greedy instead of the seven above.
# --threads: muser run's --threads (4): a CUDA engine keeps one CPU thread,
# a DFlash drafter on the CPU (dflash-cpu) gets a pool of these.
# usage: OUT=... bash tools/device/spec-cuda.sh [--budget 300] [--reps 3] [--n 128]
#          [--draft-max 8] [--threads 4] [--backend cuda] [--muser .gpu/muser] [--no-check] [--tier]
#          [--variant "NAME SPEC [ENV...] [-- ARGS...]"]...
set -u
cd "$(dirname "$0")/../.."
T0=$(date +%s)
OUT=${OUT:-/tmp/spec-cuda-out}
BUDGET=300 REPS=3 N=128 DMAX=8 THREADS=4 BACKEND=cuda M=$PWD/.gpu/muser CHECK=1 TIER=0 VARIANTS=()
while [ $# -gt 0 ]; do
  case $1 in
    --budget) BUDGET=${2:?}; shift 2 ;;
    --reps) REPS=${2:?}; shift 2 ;;
    --n) N=${2:?}; shift 2 ;;
    --draft-max) DMAX=${2:?}; shift 2 ;;
    --threads) THREADS=${2:?}; shift 2 ;;
    --backend) BACKEND=${2:?}; shift 2 ;;
    --muser) M=$(realpath "${2:?}"); shift 2 ;;
    --no-check) CHECK=0; shift ;;
    --tier) TIER=1; shift ;;
    --variant) VARIANTS+=("${2:?}"); shift 2 ;;
    -h|--help) sed -n '2,39p' "$0"; exit 0 ;;
    *) echo "spec-cuda: unknown argument: $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
S=$OUT/spec-summary.txt
el() { echo $(($(date +%s) - T0)); }
left() { echo $((BUDGET - $(el))); }
note() { echo "spec-cuda: $(el)s: $*" | tee -a "$S" >&2; }
MODEL=$PWD/models/muser-default.gguf
[ -x "$M" ] || { note "no $M: unpack .gpu/cuda.tar.xz first (or --muser)"; exit 1; }
[ -f "$MODEL" ] && [ -f models/muser-default.dflash.gguf ] || { note "no bundled model or drafter under models/"; exit 1; }
if [ -d .gpu/lib ]; then export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; fi
if [ -f .gpu/muser-cuda.so ]; then export MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so; fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null; nproc; uptime
  "$M" --version; "$M" info 2>&1 | grep '^gpu\|^backend'; } >>"$S" 2>&1
note "backend $BACKEND, budget ${BUDGET}s, reps $REPS, n $N, draft-max $DMAX, threads $THREADS"

if [ $TIER = 1 ]; then
  cp .gpu/muser muser && cp .gpu/muser-cuda.so muser-cuda.so && mkdir -p build/tests/gpu &&
    cp .gpu/test_gpu_kern .gpu/test_gpu_engine .gpu/test_gpu_stream .gpu/test_gpu_vision .gpu/test_gpu_draft build/tests/gpu/
  tl=$(( $(left) - 150 )); [ $tl -gt 300 ] && tl=300
  if [ $tl -gt 30 ]; then
    timeout $tl bash tests/gpu/run.sh >"$OUT/spec-tier.log" 2>&1
    note "gpu tier rc $?: $(grep '=== gpu tier' "$OUT/spec-tier.log"); $(grep -c '^ok spec' "$OUT/spec-tier.log") spec runs ok, $(grep -c '^FAIL' "$OUT/spec-tier.log") FAIL lines"
    grep '^FAIL\|^ok spec\|^capture rows\|^\[capture graphs\] capture rows\|^memcheck' "$OUT/spec-tier.log" | head -40 >>"$S"
  else
    note "gpu tier: skipped: $(left)s left"
  fi
fi

if [ $CHECK = 1 ]; then
  E=.gpu/test_gpu_engine
  [ -x $E ] || E=build/tests/gpu/test_gpu_engine
  if [ -x $E ]; then
    for cg in 0 1; do
      MUSER_CUDA_CAPTURE_GRAPH=$cg timeout "$(( $(left) > 60 ? 60 : $(left) ))" $E "$MODEL" >"$OUT/e$cg.tmp" 2>&1
      note "test_gpu_engine (bundled model, MUSER_CUDA_CAPTURE_GRAPH=$cg): rc $? ($(grep -m1 '^capture rows' "$OUT/e$cg.tmp"); $(tail -1 "$OUT/e$cg.tmp"))"
      cat "$OUT/e$cg.tmp" >>"$OUT/spec-engine.log"; rm -f "$OUT/e$cg.tmp"
    done
  else
    note "no test_gpu_engine: check skipped"
  fi
fi

# one repetition's runs: 8 prompts x 8 modes; the first repetition's time
# (minus a margin) is what the time limit leaves for the others
lim=$(( $(left) - 30 ))
if [ "$lim" -lt 10 ]; then note "bench: skipped: $(left)s left"; note "done"; exit 0; fi
# variants: the same binary under wrappers that set the environment (and
# dflash-15 appends --draft-max 15: the last one given counts)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
wrap() { # NAME ENV... [-- ARGS...]
  local name=$1 env="" args=""; shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do env="$env $1"; shift; done
  [ "${1:-}" = -- ] && { shift; args="$*"; }
  printf '#!/bin/sh\nexec env%s "%s" "$@" %s\n' "$env" "$M" "$args" >"$W/$name"
  chmod +x "$W/$name"
}
# dflash-cpu: the drafter on the CPU (before the device drafter, 2026-12-05);
# -r1: MUSER_SPEC_ROW_COST=0.1 (a verified draft costs a tenth of a step, not
# the CPU's 0.4: the policy drafts more; docs/speculative.md)
# -g: MUSER_CUDA_DRAFT_GRAPH=1 (the drafter's pass replayed as a graph)
VA=(--variant "plain=$M:none")
if [ ${#VARIANTS[@]} = 0 ]; then
  wrap ngram-r1 MUSER_SPEC_ROW_COST=0.1
  wrap dflash-cpu MUSER_DRAFT_DEVICE=0
  wrap dflash-r1 MUSER_SPEC_ROW_COST=0.1
  wrap dflash-r1g MUSER_SPEC_ROW_COST=0.1 MUSER_CUDA_DRAFT_GRAPH=1
  wrap dflash-15g MUSER_SPEC_ROW_COST=0.1 MUSER_CUDA_DRAFT_GRAPH=1 MUSER_CUDA_GRAPH_T=16 -- --draft-max 15
  VA+=(--variant "ngram=$M:ngram" --variant "ngram-r1=$W/ngram-r1:ngram" --variant "dflash-cpu=$W/dflash-cpu:dflash"
       --variant "dflash=$M:dflash" --variant "dflash-r1=$W/dflash-r1:dflash" --variant "dflash-r1g=$W/dflash-r1g:dflash"
       --variant "dflash-15g=$W/dflash-15g:dflash")
else
  for v in "${VARIANTS[@]}"; do # "NAME SPEC [ENV...] [-- ARGS...]"
    set -- $v
    name=$1 spec=$2; shift 2
    wrap "$name" "$@"
    VA+=(--variant "$name=$W/$name:$spec")
  done
fi
timeout "$(( $(left) - 5 ))" python3 bench/spec-ngram "$MODEL" --muser "$M" --backend "$BACKEND" --reps "$REPS" --n "$N" \
  --draft-max "$DMAX" --threads "$THREADS" --prompts bench/spec-prompts-dflash.json --time-limit "$lim" \
  "${VA[@]}" >"$OUT/spec.jsonl" 2>"$OUT/spec.log"
r=$?
note "spec-ngram rc $r$([ $r = 124 ] && echo ' (timed out: no summary)')$(grep -h 'stopped\|changed the tokens\|failed' "$OUT/spec.jsonl" "$OUT/spec.log" | head -3 | sed 's/^/; /')"
python3 - "$OUT/spec.jsonl" >>"$S" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"prompt"')]
by = {}
for r in rows:
    by.setdefault(r["prompt"], {})[r["variant"]] = r
if not by:
    print("no summary lines")
    sys.exit(0)
modes = [m for m in by[rows[0]["prompt"]] if m != "plain"]
print("prompt         plain tok/s" + "".join("   %-8s tok/s (x)   acc/step" % m for m in modes)
      + "   (medians of %s)" % rows[0]["reps"])
sp = {m: [] for m in modes}
for name, v in by.items():
    cells = ["%-14s %11.1f" % (name, v["plain"]["tps"])]
    for m in modes:
        r = v.get(m)
        if r:
            sp[m].append(r["speedup"] or 0)
            cells.append("%8.1f (%5.2fx) %9.2f" % (r["tps"], r["speedup"] or 0, r["accepted_per_step"]))
    print("   ".join(cells))
for m, x in sp.items():
    if x:
        print("%s: median speedup %.2fx over %d prompts (min %.2fx, max %.2fx)" % (m, statistics.median(x), len(x), min(x), max(x)))
EOF
note "done"
