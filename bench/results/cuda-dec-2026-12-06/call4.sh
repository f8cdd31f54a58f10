# call 4: Q8_0 and NVFP4 prefill on k_mm_q8t (dp4a in tiles of 64 rows x 32 tokens, the CPU's eight
# lane chains; NVFP4's codes decoded once a step into shared memory) against k_mm_q
# (MUSER_CUDA_Q8_TILE=0): the kernel test (new tile cases of both types, NaN activations), the
# engine test on 1B Q8_0 and NVFP4 models, gpukernbench at 512 tokens, full-shape Q8_0 prefill at
# 512 if time is left.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader > $OUT/log.txt
Q=/tmp/q8.gguf
(nice .gpu/muser gen --preset full --type q8_0 --threads 8 -o $Q.tmp > /dev/null 2>&1 && mv $Q.tmp $Q) &
(.gpu/muser gen --preset 1b --type q8_0 --threads 4 -o /tmp/q8-1b.gguf > /dev/null 2>&1;
 .gpu/muser gen --preset 1b --type nvfp4 --threads 4 -o /tmp/nv-1b.gguf > /dev/null 2>&1) &
timeout 150 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
grep FAIL /tmp/kern.log | head -20 >> $OUT/tests.txt
el kern done
while [ ! -f /tmp/nv-1b.gguf ]; do sleep 1; done; sleep 2
for m in q8-1b nv-1b; do timeout 60 .gpu/test_gpu_engine /tmp/$m.gguf 2>&1 | grep 'gpu engine' >> $OUT/tests.txt; done
el engine done
for v in 1 0 1 0; do
  for ty in Q8_0 NVFP4; do
    for sh in "39936 6656" "6656 19968"; do
      MUSER_CUDA_Q8_TILE=$v .gpu/gpukernbench $ty $sh 512 --reps 10 2>&1 | sed "s/^/tile$v /" >> $OUT/kb.txt
    done
  done
done
el kb done
while [ ! -f $Q ] && [ $(( $(date +%s) - T0 )) -lt 200 ]; do sleep 2; done
if [ -f $Q ] && [ $(( $(date +%s) - T0 )) -lt 200 ]; then
  for v in 1 0; do
    MUSER_CUDA_Q8_TILE=$v timeout 40 .gpu/muser bench -m $Q --backend cuda --depths 512 --gen 8 2>&1 | grep "tok/s" |
      sed "s/peak RSS.*//; s/^/tile$v /" >> $OUT/pre.txt
  done
fi
el all done
