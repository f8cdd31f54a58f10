# call A: main fef2017 + the stage scratch kept a stream (scratch.diff of cuda-wgpipe-2026-12-06),
# one activation conversion for a group's wgmma launches (q and gate, FFN gate and up), the
# sub-block sums from the Q8_K bsums; test_grouped at prefill sizes. The gpu tier whole (first,
# capped), then `muser bench` interleaved: this plugin / fef2017's (sm_90a, same flags) / the int8
# kernel (MUSER_CUDA_Q4_WG=0) / the min parts on the tensor cores (MUSER_CUDA_Q4_WG=3: its kernel
# test first, gpukernbench against the default form), 2 rounds; --profile at 512 for the new and the
# old plugin.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz
xz -dc .gpu/headplug.so.xz > /tmp/headplug.so
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/log.txt
F=/tmp/full.gguf
(nice .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 4 -o $F > /tmp/gen.log 2>&1; touch /tmp/gen.done) &
cp .gpu/muser muser && cp .gpu/muser-cuda.so muser-cuda.so && mkdir -p build/tests/gpu &&
  cp .gpu/test_gpu_kern .gpu/test_gpu_engine .gpu/test_gpu_stream .gpu/test_gpu_vision .gpu/test_gpu_draft build/tests/gpu/
MUSER_CUDA_Q4_WG=3 MUSER_TEST_VERBOSE=1 timeout 60 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern mt rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
grep -i -A8 fail /tmp/kern.log | head -30 >> $OUT/tests.txt
el kern mt done
timeout ${TIER_S:-300} bash tests/gpu/run.sh > /tmp/tier.log 2>&1; echo "tier rc $? (124: cut)" >> $OUT/tests.txt
grep -E '=== gpu tier|gpu kernels|passed|FAIL|fail|skipped|^---|^\[' /tmp/tier.log | grep -v '^ok' | head -80 >> $OUT/tests.txt
xz -9 < /tmp/tier.log > $OUT/tier.log.xz
el tier done
for t in 512 2048; do
  for sh in "39936 6656" "4096 6656" "6656 19968"; do
    for v in 1 3; do MUSER_CUDA_Q4_WG=$v timeout 20 .gpu/gpukernbench Q4_K $sh $t --reps 15 2>&1 | sed "s/^/wg=$v /" >> $OUT/kb.txt; done
  done
done
el kb done
while [ ! -f /tmp/gen.done ]; do sleep 2; done
el gen done
N=$PWD/.gpu/muser-cuda.so
b() { # name plugin env
  env MUSER_CUDA_PLUGIN=$2 $3 timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512,2048 --gen 8 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$1 /" >> $OUT/ab.txt
}
for r in 1 2; do
  b new $N MUSER_CUDA_Q4_WG=1; b head /tmp/headplug.so MUSER_CUDA_Q4_WG=1; b int8 $N MUSER_CUDA_Q4_WG=0; b mt $N MUSER_CUDA_Q4_WG=3
  el rep $r
done
for p in "$N 1" "/tmp/headplug.so 1" "$N 3"; do
  set -- $p
  echo "== $p" >> $OUT/prof.txt
  MUSER_CUDA_PLUGIN=$1 MUSER_CUDA_Q4_WG=$2 timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512 --gen 8 --profile 2>&1 | grep 'prefill\|profile' >> $OUT/prof.txt
done
el all done
