#!/usr/bin/env bash
# The model tier: regenerates every golden model of models.txt with
# `muser gen`, checks it is byte-identical to the file llama.cpp answered on
# (SHA-256 in ref/<name>.sha256), and compares muser's greedy generation and
# top-8 probabilities with ref/<name>.json under the tie-aware rule
# (compare.py). MUSER_KERN, if set, picks the kernel table.
set -u
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)
bin=${MUSER_BIN:-$root/muser}
work=${GOLDEN_WORK:-$root/build/golden}
mkdir -p "$work"
rc=0
while read -r name opts; do
  case $name in ''|\#*) continue ;; esac
  [ -f "ref/$name.json" ] || { echo "FAIL $name: no ref/$name.json (run make-golden.sh)"; rc=1; continue; }
  # shellcheck disable=SC2086
  if ! "$bin" gen -o "$work/$name.gguf" $opts --name "$name" >/dev/null 2>"$work/$name.gen.log"; then
    echo "FAIL $name: muser gen failed: $(tail -1 "$work/$name.gen.log")"; rc=1; continue
  fi
  want=$(cut -d' ' -f1 "ref/$name.sha256")
  got=$(sha256sum "$work/$name.gguf" | cut -d' ' -f1)
  if [ "$want" != "$got" ]; then
    echo "FAIL $name: generated model differs from the one llama.cpp answered on (sha256 $got, want $want): regenerate the goldens"
    rc=1; continue
  fi
  echo "--- $name"
  python3 compare.py "$bin" "$work/$name.gguf" "ref/$name.json" || rc=1
done < models.txt
# embeddings: llama.cpp's vectors on golden models (embd-cases.txt,
# made by make-embd.sh), compared by compare-embd.py (cosine >= 1 - 1e-4)
while read -r case model key pooling maxlen; do
  case $case in ''|\#*) continue ;; esac
  [ -f "embd/$case.json" ] || { echo "FAIL $case: no embd/$case.json (run make-embd.sh)"; rc=1; continue; }
  [ -f "$work/$model.gguf" ] || { echo "FAIL $case: no $work/$model.gguf"; rc=1; continue; }
  if [ "$key" = "-" ]; then cp "$work/$model.gguf" "$work/$case.gguf"
  else python3 gguf_set_u32.py "$work/$model.gguf" "$work/$case.gguf" muse-glimmer.pooling_type "$key"; fi
  want=$(cut -d' ' -f1 "embd/$case.sha256")
  got=$(sha256sum "$work/$case.gguf" | cut -d' ' -f1)
  if [ "$want" != "$got" ]; then
    echo "FAIL $case: model differs from the one llama.cpp answered on (sha256 $got, want $want)"; rc=1; continue
  fi
  echo "--- $case (embeddings, --pooling $pooling)"
  python3 compare-embd.py "$bin" "$work/$case.gguf" "$pooling" "embd/$case.json" || rc=1
done < embd-cases.txt
# the bundled trained model (answers made by tools/train, see trained/README.md)
if [ -f "$root/models/muser-default.gguf" ] && [ -f trained/llamacpp-q8_0.json ]; then
  echo "--- muser-default (trained)"
  python3 compare.py "$bin" "$root/models/muser-default.gguf" trained/llamacpp-q8_0.json || rc=1
fi
# the sampler chain: llama.cpp's tokens with penalties, DRY, logit bias, XTC
# and seeded draws (ref-sampler/<model>.json, made by make-sampler.sh),
# compared by sampler-check.py on the models generated above
for f in ref-sampler/*.json; do
  [ -f "$f" ] || continue
  name=$(basename "$f" .json)
  [ -f "$work/$name.gguf" ] || { echo "FAIL $name (sampler chain): no $work/$name.gguf"; rc=1; continue; }
  echo "--- $name (sampler chain)"
  python3 sampler-check.py "$bin" "$work/$name.gguf" "$f" || rc=1
done
# grammars: llama.cpp's greedy tokens under GBNF grammars and JSON-schema
# grammars (ref-grammar/<model>.json, made by make-grammar.sh), compared by
# grammar-check.py on the models generated above
for f in ref-grammar/*.json; do
  [ -f "$f" ] || continue
  name=$(basename "$f" .json)
  [ -f "$work/$name.gguf" ] || { echo "FAIL $name (grammars): no $work/$name.gguf"; rc=1; continue; }
  echo "--- $name (grammars)"
  python3 grammar-check.py "$bin" "$work/$name.gguf" "$f" || rc=1
done
# context shifts: llama.cpp's greedy tokens across its server's shifts
# (ref-shift/<model>.json, made by make-shift.sh), compared by
# shift-check.py, bit for bit on the CPU engine
for f in ref-shift/*.json; do
  [ -f "$f" ] || continue
  name=$(basename "$f" .json)
  if [ "${MUSER_BACKEND:-cpu}" != cpu ]; then # the CUDA engine refuses a shift (docs/api.md, "Context shift")
    echo "--- $name (context shift): skipped on ${MUSER_BACKEND}"
    continue
  fi
  [ -f "$work/$name.gguf" ] || { echo "FAIL $name (context shift): no $work/$name.gguf"; rc=1; continue; }
  echo "--- $name (context shift)"
  python3 shift-check.py "$bin" "$work/$name.gguf" "$f" || rc=1
done
exit $rc
