#!/usr/bin/env bash
# Makes the embedding references in tests/golden/embd/: for every case of
# embd-cases.txt, generate its golden model with `muser gen` (models.txt),
# add llama.cpp's pooling_type key when the case names one
# (gguf_set_u32.py), record the file's SHA-256, and ask llama.cpp
# (node-llama-cpp 3.22.1, zen4 CPU variant: see ../shared/fixtures/README.md)
# for the embeddings of the prompts of make-spec.py (those that fit).
# Needs: ./muser built, node, and once: (cd tests/golden && npm i -E node-llama-cpp@3.22.1)
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)
work=${GOLDEN_WORK:-$root/build/golden}
mkdir -p "$work" embd
[ -d node_modules/node-llama-cpp ] || { echo "run: (cd tests/golden && npm i -E node-llama-cpp@3.22.1)"; exit 1; }
grep -v '^#' embd-cases.txt | while read -r case model key pooling maxlen; do
  [ -n "$case" ] || continue
  opts=$(awk -v m="$model" '$1 == m { $1 = ""; print }' models.txt)
  # shellcheck disable=SC2086
  "$root/muser" gen -o "$work/$model.gguf" $opts --name "$model" >/dev/null
  if [ "$key" = "-" ]; then cp "$work/$model.gguf" "$work/$case.gguf"
  else python3 gguf_set_u32.py "$work/$model.gguf" "$work/$case.gguf" muse-glimmer.pooling_type "$key"; fi
  vocab=$("$root/muser" info -m "$work/$case.gguf" | awk '/^vocab/ {print $2}')
  bos=$("$root/muser" info -m "$work/$case.gguf" | awk '/^tokens/ {print $3}')
  python3 make-spec.py "$vocab" "$bos" |
    python3 -c 'import json,sys; s=json.load(sys.stdin); n=int(sys.argv[1]); s["prompts"]=[p for p in s["prompts"] if len(p["ids"]) <= n] + ([{"name":"p%d"%n,"ids":s["prompts"][-1]["ids"][:n]}] if n < 600 else []); json.dump(s,sys.stdout)' "$maxlen" \
    > "$work/$case.embd-spec.json"
  node llamacpp-embd.mjs "$work/$case.gguf" "$work/$case.embd-spec.json" "embd/$case.json"
  echo "$(sha256sum "$work/$case.gguf" | cut -d' ' -f1)  $case.gguf" > "embd/$case.sha256"
done
