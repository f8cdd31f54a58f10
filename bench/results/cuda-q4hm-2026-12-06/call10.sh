# call 10 (NOT RUN: no device time was left; pipe.diff is the code, compile-checked only, 254 registers
# without spills): k_mm_q4K_wg with a step's wgmmas issued before the chain steps of the step before
# (MUSER_CUDA_Q4_WG=2, two accumulator sets) against the committed form (=1) and the int8 kernel (=0):
# kernel test, gpukernbench, then `muser bench` as far as the device time goes.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
F=/tmp/full.gguf
(nice .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 8 -o $F > /tmp/gen.log 2>&1; touch /tmp/gen.done) &
MUSER_CUDA_Q4_WG=2 MUSER_TEST_VERBOSE=1 timeout 60 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern wg=2 rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
grep -i -A8 fail /tmp/kern.log | head -30 >> $OUT/tests.txt
el kern done
KB=.gpu/gpukernbench
for t in 512 2048; do
  for s in "39936 6656" "4096 6656" "6656 19968"; do
    for v in 0 1 2; do
      MUSER_CUDA_Q4_WG=$v timeout 20 $KB Q4_K $s $t --reps 15 2>&1 | sed "s/^/wg=$v /" >> $OUT/kb.txt
    done
  done
done
el kb done
while [ ! -f /tmp/gen.done ]; do sleep 2; done
el gen done
for r in 1 2; do
  for v in 0 1 2; do
    MUSER_CUDA_Q4_WG=$v timeout 30 .gpu/muser bench -m $F --backend cuda --depths 512,2048 --gen 4 2>&1 | grep "tok/s" | sed "s/ decode.*//; s/^/wg=$v /" >> $OUT/ab.txt
  done
  el rep $r
done
el all done
