#!/usr/bin/env bash
# The gpu tier (make test-gpu): needs a CUDA device and a build with the
# plugin (muser-cuda.so next to muser). Skips, exit 0, without a device.
#  1. every GPU matmul and row lookup == the CPU reference kernels, bit for bit
#     (and with the switches that select other kernels: Q4_K prefill on int8 alone, dp4a decode, k_pv_d,
#     one token's Q4_K and Q6_K rows on the ring kernels, Q4_K's split 8 ways, the Q8_0 / NVFP4
#     ring for 16 tokens)
#  2. CPU engine vs CUDA engine on every golden model (logits, batching, KV
#     rows moved between the backends; layer streaming, test_gpu_stream)
#  3. the golden models and the shared fixtures with --backend cuda under
#     the team's tie-aware rule (tests/golden/compare.py)
#  4. the vision encoder on CUDA vs the CPU's (test_gpu_vision: the tiny
#     projector, and the full one when GPU_VISION_FULL=1), and
#     tests/e2e/test_vision.sh with --backend cuda (llama.cpp's greedy
#     tokens after images)
#  5. the DFlash drafter on the device against the CPU's (test_gpu_draft), and
#     --spec ngram and --spec dflash with --backend cuda on the bundled model:
#     the ids of plain greedy decoding (dflash: with drafts accepted), the
#     drafter on the device and on the CPU
#  6. compute-sanitizer memcheck of a short CUDA run, plain and with dflash
set -u
cd "$(dirname "$0")/../.."
root=$PWD
build=${BUILD:-build}
export MUSER_CUDA_PLUGIN=$root/muser-cuda.so
rc=0
if ! ./muser info 2>/dev/null | grep -q '^gpu 0'; then
  echo "gpu tier: skipped: $(./muser info 2>/dev/null | grep '^gpu' | head -1)"
  exit 0
fi
./muser info | grep '^gpu\|^backend'

echo "--- kernels"
"$build/tests/gpu/test_gpu_kern" || rc=1
# the dp4a decode ring for 2-4 Q4_K tokens (by default the tensor cores take them: docs/cuda.md)
MUSER_CUDA_DEC_MMA=0 "$build/tests/gpu/test_gpu_kern" | sed 's/^/[dec dp4a] /'
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
# the other V pass for several lone tokens, still selectable: k_pv_d
MUSER_CUDA_PVD_M=0 "$build/tests/gpu/test_gpu_kern" | sed 's/^/[pv_d] /'
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
# one token's Q4_K and Q6_K rows on the ring kernels (D1=0; by default k_mm_q4K_d1 takes every one-token
# Q4_K launch, k_mm_q6K_d1 the Q6_K ones of few rows), and Q4_K split 8 ways
MUSER_CUDA_D1=0 "$build/tests/gpu/test_gpu_kern" | sed 's/^/[d1 off] /'
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
MUSER_CUDA_D1=8 "$build/tests/gpu/test_gpu_kern" | sed 's/^/[d1 8] /'
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
# Q4_K prefill on the int8 kernel alone (by default tiles of 128 tokens of matrices of 1024 or more rows
# take the wgmma kernel where the plugin has sm_90a code: docs/cuda.md)
MUSER_CUDA_Q4_WG=0 "$build/tests/gpu/test_gpu_kern" | sed 's/^/[q4 int8] /'
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
# the Q8_0 / NVFP4 decode ring for 5-16 tokens (opt-in: docs/cuda.md)
MUSER_CUDA_Q8D_T=16 "$build/tests/gpu/test_gpu_kern" | sed 's/^/[q8 ring 16] /'
[ "${PIPESTATUS[0]}" = 0 ] || rc=1

work=${GOLDEN_WORK:-$root/build/golden}
mkdir -p "$work"
echo "--- engine: CPU vs CUDA"
while read -r name opts; do
  case $name in ''|\#*) continue ;; esac
  # shellcheck disable=SC2086
  [ -f "$work/$name.gguf" ] || ./muser gen -o "$work/$name.gguf" $opts --name "$name" >/dev/null 2>&1
  "$build/tests/gpu/test_gpu_engine" "$work/$name.gguf" || rc=1
  "$build/tests/gpu/test_gpu_stream" "$work/$name.gguf" || rc=1
done < tests/golden/models.txt

# captures of few-token passes launched directly (by default they replay graphs: docs/cuda.md)
MUSER_CUDA_CAPTURE_GRAPH=0 "$build/tests/gpu/test_gpu_engine" models/muser-default.gguf | sed 's/^/[capture direct] /'
[ "${PIPESTATUS[0]}" = 0 ] || rc=1

echo "--- DFlash drafter: CPU vs CUDA (tests/unit/draft_compare.h)"
"$build/tests/gpu/test_gpu_draft" tests/data/dflash/target.gguf tests/data/dflash/drafter.gguf || rc=1
# the passes replayed as graphs (captured per sequence)
MUSER_CUDA_DRAFT_GRAPH=1 "$build/tests/gpu/test_gpu_draft" tests/data/dflash/target.gguf tests/data/dflash/drafter.gguf |
  sed 's/^/[draft graph] /'
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
if [ -f models/muser-default.dflash.gguf ]; then # Q8_0: draft_compare.h's looser bar
  "$build/tests/gpu/test_gpu_draft" models/muser-default.gguf models/muser-default.dflash.gguf 5e-2 || rc=1
fi

echo "--- vision encoder: CPU vs CUDA"
# shellcheck disable=SC2046
"$build/tests/gpu/test_gpu_vision" "$work" "$work/g3-q4_k_m.gguf" $([ "${GPU_VISION_FULL:-0}" = 1 ] || echo --no-full) || rc=1

echo "--- images: llama.cpp's greedy tokens after an image, --backend cuda"
MUSER_BACKEND=cuda bash tests/e2e/test_vision.sh || rc=1

echo "--- golden models, --backend cuda"
MUSER_BACKEND=cuda GOLDEN_WORK=$work bash tests/golden/run.sh || rc=1
if [ -d "${SHARED_FIXTURES:-../shared/fixtures}" ]; then
  echo "--- shared fixtures, --backend cuda"
  MUSER_BACKEND=cuda bash tests/golden/run-shared.sh || rc=1
fi

echo "--- speculative decoding, --backend cuda: the same ids as plain greedy (bundled model)"
# --spec dflash reads the target's hidden states from the device
# (mu_gpu_chunk.feat); the drafter runs on the device (on the CPU in the
# dflash-cpu runs). Runs that never drafted
# would prove nothing: the dflash runs together must have drafts accepted
# (one prompt alone may pause drafting after its first step).
bm=models/muser-default.gguf
if [ -f "$bm" ] && [ -f models/muser-default.dflash.gguf ]; then
  spec_prompts=("GREP(1)

NAME
       grep - print lines that match patterns

SYNOPSIS
" "import os
import sys

def main():
    for name in os.listdir(sys.argv[1]):
        print(name)

import os
import sys

def main():
" "The history of the printing press")
  dflash_acc=0
  for p in "${spec_prompts[@]}"; do
    plain=$(./muser run -m "$bm" --backend cuda -p "$p" -n 96 --temp 0 --ignore-eos --json 2>"$work/spec.err") ||
      { echo "FAIL spec: plain run: $(tail -2 "$work/spec.err")"; rc=1; continue; }
    for spec in ngram dflash dflash-graph dflash-cpu; do
      # dflash-graph: MUSER_CUDA_CAPTURE_GRAPH=1 (captures of few-token passes replayed as graphs)
      # and MUSER_CUDA_DRAFT_GRAPH=1 (the drafter's passes too);
      # dflash-cpu: the drafter on the CPU (MUSER_DRAFT_DEVICE=0), the others' on the device
      g=$([ $spec = dflash-graph ] && echo 1 || echo 0)
      got=$(MUSER_CUDA_CAPTURE_GRAPH=$g MUSER_CUDA_DRAFT_GRAPH=$g \
            MUSER_DRAFT_DEVICE=$([ $spec = dflash-cpu ] && echo 0 || echo 1) ./muser run -m "$bm" --backend cuda \
              -p "$p" -n 96 --temp 0 --ignore-eos --json --spec ${spec%-*} 2>"$work/spec.err") ||
        { echo "FAIL spec $spec: $(tail -2 "$work/spec.err")"; rc=1; continue; }
      verdict=$(python3 -c '
import json, sys
def ids(s): return [json.loads(l)["id"] for l in s.splitlines() if l.startswith("{\"id\"")]
def tim(s): return [json.loads(l)["timings"] for l in s.splitlines() if "\"timings\"" in l][0]
a, b, spec = sys.argv[1], sys.argv[2], sys.argv[3]
t = tim(b)
same = ids(a) == ids(b) and len(ids(a)) > 0
print(("ok" if same else "FAIL") + " spec %s: %d ids %s plain; drafted %d, accepted %d in %d steps" % (
    spec, len(ids(b)), "==" if same else "!=", t.get("draft_n", 0), t.get("draft_n_accepted", 0), t.get("spec_steps", 0)))
' "$plain" "$got" "$spec")
      echo "$verdict (${p%%$'\n'*})"
      case $verdict in ok*) ;; *) rc=1 ;; esac
      [ $spec != ngram ] && dflash_acc=$((dflash_acc + $(echo "$verdict" | sed -n 's/.*accepted \([0-9]*\) in.*/\1/p')))
    done
  done
  [ "$dflash_acc" -gt 0 ] || { echo "FAIL spec dflash: no draft accepted in any run"; rc=1; }
else
  echo "spec: no bundled model or drafter under models/, skipped"
fi

echo "--- compute-sanitizer memcheck"
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$san" ]; then
  if "$san" --tool memcheck --error-exitcode 9 ./muser run -m "$work/g3-q4_k_m.gguf" --prompt-ids 1,2,3,4,5,6,7,8,9,10 \
       -n 4 --temp 0 --backend cuda >/dev/null 2>"$work/memcheck.log"; then
    echo "memcheck: ok"
  else
    echo "FAIL memcheck:"; tail -20 "$work/memcheck.log"; rc=1
  fi
  for cg in 0 1; do # MUSER_CUDA_CAPTURE_GRAPH
    [ -f models/muser-default.dflash.gguf ] || break
    if MUSER_CUDA_CAPTURE_GRAPH=$cg "$san" --tool memcheck --error-exitcode 9 ./muser run -m models/muser-default.gguf \
         -p "import os
import sys" -n 24 --temp 0 --ignore-eos --spec dflash --backend cuda >/dev/null 2>"$work/memcheck-dflash.log"; then
      echo "memcheck (--spec dflash, MUSER_CUDA_CAPTURE_GRAPH=$cg): ok"
    else
      echo "FAIL memcheck (--spec dflash, MUSER_CUDA_CAPTURE_GRAPH=$cg):"; tail -20 "$work/memcheck-dflash.log"; rc=1
    fi
  done
else
  echo "memcheck: compute-sanitizer not found, skipped"
fi
echo "=== gpu tier: $([ $rc = 0 ] && echo passed || echo FAILED)"
exit $rc
