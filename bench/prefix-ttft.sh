#!/usr/bin/env bash
# prefix-ttft.sh: time to first token of an 8192-token prompt whose first
# 7680 tokens are in the server's prefix cache, against the same prompt
# cold (docs/benchmarks.md "KV packs and the prefix cache").
#   bench/prefix-ttft.sh MODEL [OUT.json]
# One server (--parallel 1, --ctx 8448, default 512-token blocks): A = the
# prompt cold; U = a short unrelated prompt (it takes the slot, so the live
# slot no longer holds A's tokens); B = A's first 7680 tokens + 512 others:
# the prefix cache restores 7680 (cache_source "cache"). TTFT is the
# server's queue_ms + prompt_ms (submit -> first token sampled) and curl's
# time to the whole answer (n_predict 1).
set -eu
MODEL=$1
OUT=${2:-/dev/stdout}
MUSER=${MUSER_BIN:-$(dirname "$0")/../muser}
T=$(mktemp -d)
trap 'kill $SP 2>/dev/null; rm -rf "$T"' EXIT
ids() { python3 -c "import sys; print(','.join(str((i * int(sys.argv[3]) + int(sys.argv[2])) % 30000 + 100) for i in range(int(sys.argv[1]))))" "$1" "$2" "$3"; }
SHARED=$(ids 7680 1 37)
A="$SHARED,$(ids 512 2 41)"
B="$SHARED,$(ids 512 3 43)"
U=$(ids 64 4 47)
"$MUSER" serve -m "$MODEL" --port 0 --ctx 8448 --parallel 1 ${THREADS:+--threads $THREADS} 2>"$T/log" &
SP=$!
for _ in $(seq 3000); do grep -q 'on http' "$T/log" && break; sleep 0.1; done
PORT=$(sed -nE 's/.* on https?:\/\/[^ ]*:([0-9]+) .*/\1/p' "$T/log" | head -1)
ask() {
  curl -s -o "$T/$1" -w '%{time_total}' "http://127.0.0.1:$PORT/completion" -H 'Content-Type: application/json' \
    -d "{\"prompt\":[$2],\"n_predict\":1,\"temperature\":0,\"cache_prompt\":true}"
}
wa=$(ask a "$A")
ask u "$U" >/dev/null
wb=$(ask b "$B")
python3 - "$T/a" "$T/b" "$wa" "$wb" "$MODEL" "$(nproc)" "$(cut -d' ' -f1 /proc/loadavg)" >"$OUT" <<'PY'
import json, sys
ja, jb = (json.load(open(f)) for f in sys.argv[1:3])
a, b = ja["timings"], jb["timings"]
a["cache_source"], b["cache_source"] = ja["cache_source"], jb["cache_source"]
ta, tb = a["queue_ms"] + a["prompt_ms"], b["queue_ms"] + b["prompt_ms"]
print(json.dumps({"model": sys.argv[5], "cpus": int(sys.argv[6]), "loadavg_1m_after": float(sys.argv[7]),
    "prompt_tokens": 8192, "cold": {"ttft_ms": ta, "cache_n": a["cache_n"], "cache_source": a["cache_source"],
    "curl_s": float(sys.argv[3])}, "cached": {"ttft_ms": tb, "cache_n": b["cache_n"],
    "cache_source": b["cache_source"], "curl_s": float(sys.argv[4])}, "speedup": ta / tb}, indent=1))
PY
