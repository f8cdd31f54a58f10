#!/usr/bin/env bash
# lane-h200.sh: remote prefill on the GPU machine (docs/lane.md,
# "Benchmark"): a CUDA producer and a CPU decoder of the full-shape Q4_K_M
# model on the same host over loopback, time to first token with remote
# prefill against local CPU prefill at 2K and 8K prompt tokens, the
# fraction of the transfer hidden under the producer's compute and the
# bytes per handoff, full and delta (a delta: the decoder's slot holds a
# 512-token prefix it prefilled itself, the node replays it and ships the rest).
# Everything it measures goes under $OUT (default
# ./lane-h200-out): lane-h200.jsonl (bench/lane's raw lines and
# summaries), summary.txt, the producer's and servers' logs, the machine.
#
# Run on the GPU machine in the repository root, with the binaries
# brought as ../shared/reference/gpu-machine.md says: .gpu/muser,
# .gpu/muser-cuda.so and .gpu/lib/ (the shared libraries the machine
# lacks), or .gpu.tar.xz holding them (unpacked here first):
#     bash bench/lane-h200.sh
# Environment: MODEL (default /tmp/full-q4km.gguf, made with `muser gen
# --preset full --type q4_k_m --quant fast --threads 8` when absent),
# LIMIT_S (the whole run's time box, default 470 s: the local CPU prefill
# of 8K full-shape tokens takes minutes, so bench/lane skips a local run
# that would not fit and reports a linear extrapolation from the 2K one
# instead, labelled as such), LENGTHS (default 2048,8192), QUALIFY (node
# add's qualification prompt, default 300 tokens: each of its three runs
# prefills that locally on the CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
OUT=${OUT:-$PWD/lane-h200-out}
MODEL=${MODEL:-/tmp/full-q4km.gguf}
LIMIT_S=${LIMIT_S:-470}
LENGTHS=${LENGTHS:-2048,8192}
QUALIFY=${QUALIFY:-300}
PRODUCER_BACKEND=${PRODUCER_BACKEND:-cuda} # cpu: a dry run of this script on a machine without a GPU
mkdir -p "$OUT"
log() { echo "lane-h200: $(( $(date +%s) - T0 )) s: $*" | tee -a "$OUT/summary.txt" >&2; }

if [ ! -x .gpu/muser ] && [ -f .gpu.tar.xz ]; then tar -xJf .gpu.tar.xz; fi
MUSER=$PWD/.gpu/muser
[ -x "$MUSER" ] || { log "no .gpu/muser (nor .gpu.tar.xz holding it)"; exit 1; }
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if ldd "$MUSER" | grep -q 'not found'; then
  log "libraries missing: $(ldd "$MUSER" | grep 'not found' | tr -s ' \n' ' ')"; exit 1
fi
[ -f .gpu/muser-cuda.so ] || log "warning: no .gpu/muser-cuda.so: the producer cannot use CUDA"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true
  nproc; free -g | sed -n 2p; "$MUSER" info 2>&1 | head -20; } >"$OUT/machine.txt"

if [ ! -f "$MODEL" ]; then
  log "generating $MODEL (full shape, Q4_K_M)"
  "$MUSER" gen --preset full --type q4_k_m --quant fast --threads 8 -o "$MODEL" >"$OUT/gen.log" 2>&1
fi
log "model $MODEL: $(stat -c %s "$MODEL") bytes"

WORK=$(mktemp -d /tmp/lane-h200.XXXXXX) # the homes (keys, certificates) stay here, not in $OUT
trap 'cp "$WORK"/*.err "$WORK"/*.out "$OUT/" 2>/dev/null || true; rm -rf "$WORK"' EXIT
BUDGET=$(( LIMIT_S - ($(date +%s) - T0) - 20 ))
log "bench/lane: $PRODUCER_BACKEND producer, CPU decoder, lengths $LENGTHS, local runs time-boxed to ${BUDGET} s"
python3 bench/lane "$MODEL" --muser "$MUSER" --lengths "$LENGTHS" --reps 1 --threads "$(nproc)" \
  --producer-backend "$PRODUCER_BACKEND" --decoder-backend cpu --qualify-tokens "$QUALIFY" --local-budget-s "$BUDGET" --delta \
  --work "$WORK" >"$OUT/lane-h200.jsonl" 2>"$OUT/bench.err" || { log "bench/lane failed: $(tail -5 "$OUT/bench.err")"; exit 1; }
grep '"summary"' "$OUT/lane-h200.jsonl" | tee -a "$OUT/summary.txt"
grep -h 'muser producer: \(handoff\|.* on 127\)' "$WORK/producer.err" >>"$OUT/summary.txt" 2>/dev/null || true
grep -h 'qualify\|healthy' "$OUT/bench.err" >>"$OUT/summary.txt" 2>/dev/null || true
log "done"
