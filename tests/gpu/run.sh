#!/usr/bin/env bash
# The gpu tier (make test-gpu): needs a CUDA device and a build with the
# plugin (muser-cuda.so next to muser). Skips, exit 0, without a device.
#  1. every GPU matmul and row lookup == the CPU reference kernels, bit for bit
#  2. CPU engine vs CUDA engine on every golden model (logits, batching, KV
#     rows moved between the backends; layer streaming, test_gpu_stream)
#  3. the golden models and the shared fixtures with --backend cuda under
#     the team's tie-aware rule (tests/golden/compare.py)
#  4. the vision encoder on CUDA vs the CPU's (test_gpu_vision: the tiny
#     projector, and the full one when GPU_VISION_FULL=1)
#  5. compute-sanitizer memcheck of a short CUDA run
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

echo "--- vision encoder: CPU vs CUDA"
# shellcheck disable=SC2046
"$build/tests/gpu/test_gpu_vision" "$work" "$work/g3-q4_k_m.gguf" $([ "${GPU_VISION_FULL:-0}" = 1 ] || echo --no-full) || rc=1

echo "--- golden models, --backend cuda"
MUSER_BACKEND=cuda GOLDEN_WORK=$work bash tests/golden/run.sh || rc=1
if [ -d "${SHARED_FIXTURES:-../shared/fixtures}" ]; then
  echo "--- shared fixtures, --backend cuda"
  MUSER_BACKEND=cuda bash tests/golden/run-shared.sh || rc=1
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
else
  echo "memcheck: compute-sanitizer not found, skipped"
fi
echo "=== gpu tier: $([ $rc = 0 ] && echo passed || echo FAILED)"
exit $rc
