#!/usr/bin/env bash
# kvbench-rounds.sh: kvbench runs interleaved round by round (a noisy,
# shared machine: every configuration sees the same load over time), one
# JSON line per run with the configuration added, appended to OUT.
#   bench/kvbench-rounds.sh OUT ROUNDS SCRATCH CONFIG...
# CONFIG: NAME:BINARY:MODEL:KV_THREADS:SHA (SHA: default or ref, MUSER_KV_SHA)
# e.g. new16:build/bench/kvbench:/tmp/kv16.gguf:1:default
# Each run: kvbench -n 2048 --threads 1 --fill --only-raw --reps 5.
# Medians: bench/kvbench-median.py OUT.
set -eu
out=$1 rounds=$2 scratch=$3
shift 3
for ((r = 1; r <= rounds; r++)); do
  for c in "$@"; do
    IFS=: read -r name bin model kvt sha <<<"$c"
    line=$(MUSER_KV_SHA=$sha "$bin" -m "$model" -n 2048 --threads 1 --kv-threads "$kvt" --fill --only-raw --reps 5 \
      -o "$scratch")
    load=$(cut -d' ' -f1 /proc/loadavg)
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d.update(config=sys.argv[2], round=int(sys.argv[3]), load1=float(sys.argv[4])); print(json.dumps(d))' \
      "$line" "$name" "$r" "$load" >>"$out"
    echo "round $r $name done (load $load)" >&2
  done
done
