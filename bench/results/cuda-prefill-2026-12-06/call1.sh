# call 1: prefill tile variants (Q4TC 6-8: the min part by dp2a from the activations' sums; 9: with 16-byte activation loads) (MUSER_CUDA_Q4TC, MUSER_CUDA_Q6TC) and the Q6_K decode split for FFN down
# (MUSER_CUDA_D1Q6=2): kernel test per variant, engine tests, then muser bench on the full shape Q4_K_M;
# then issue 20: old (97c2031) vs new muser, 1B Q4_K_M prefill at 4 and 16 threads
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz; tar -xJf .gpu/old.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/machine.txt; nproc >> $OUT/machine.txt
lscpu | grep -i 'model name' >> $OUT/machine.txt
F=/tmp/full.gguf
(.gpu/muser gen --preset full --type q4_k_m --quant fast --threads 8 -o $F > /tmp/gen.log 2>&1;
 .gpu/muser gen --preset 1b --type q4_k_m -o /tmp/m1b.gguf > /tmp/gen1b.log 2>&1; touch /tmp/gen.done) &
for e in MUSER_CUDA_Q4TC=0 MUSER_CUDA_Q4TC=2 MUSER_CUDA_Q4TC=4 MUSER_CUDA_Q4TC=5 MUSER_CUDA_Q4TC=6 MUSER_CUDA_Q4TC=7 MUSER_CUDA_Q4TC=8 MUSER_CUDA_Q4TC=9 \
         MUSER_CUDA_Q6TC=1 MUSER_CUDA_Q6TC=2 MUSER_CUDA_Q6TC=3 MUSER_CUDA_D1Q6=2; do
  env $e timeout 60 .gpu/test_gpu_kern > /tmp/kern.log 2>&1
  echo "$e kern rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt; grep -i "fail" /tmp/kern.log | head -5 >> $OUT/tests.txt
done
el kern done
mkdir -p /tmp/g
for name in g3-q4_k_m g8-1b-q4_k_m g5-q6_k; do
  opts=$(grep "^$name " tests/golden/models.txt | cut -d' ' -f2-)
  .gpu/muser gen -o /tmp/g/$name.gguf $opts --name $name > /dev/null 2>&1
  timeout 60 .gpu/test_gpu_engine /tmp/g/$name.gguf 2>&1 | tail -1 >> $OUT/tests.txt
done
timeout 60 .gpu/test_gpu_engine models/muser-default.gguf 2>&1 | tail -1 >> $OUT/tests.txt
timeout 60 .gpu/test_gpu_stream /tmp/g/g8-1b-q4_k_m.gguf 2>&1 | tail -1 >> $OUT/tests.txt
el engine done
while [ ! -f /tmp/gen.done ]; do sleep 2; done
el gen done
b() { # name env...
  local n=$1; shift
  env "$@" timeout 70 .gpu/muser bench -m $F --backend cuda --depths 512,2048 --gen 32 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$n /" >> $OUT/ab.txt
}
for r in 1 2; do
  for v in 0 2 4 5 6 7 8 9; do b q4tc$v MUSER_CUDA_Q4TC=$v; done
  for v in 1 2 3; do b q6tc$v MUSER_CUDA_Q6TC=$v; done
  b d1q6-2 MUSER_CUDA_D1Q6=2
  el rep $r
  [ $(( $(date +%s) - T0 )) -gt 420 ] && break
done
timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512 --gen 16 --profile > $OUT/profile.txt 2>&1
el profile done
for v in 0 6; do
  [ $(( $(date +%s) - T0 )) -gt 470 ] && break
  MUSER_CUDA_Q4TC=$v timeout 70 ncu --kernel-name regex:k_mm_q4K_tc --launch-skip 0 --launch-count 6 --clock-control none \
    --section SpeedOfLight --section WarpStateStats --section Occupancy --section ComputeWorkloadAnalysis \
    --section SchedulerStats --section InstructionStats --section LaunchStats \
    .gpu/muser bench -m $F --backend cuda --depths 512 --gen 2 > $OUT/ncu-q4tc$v.txt 2>&1
  el ncu $v rc $?
done
[ $(( $(date +%s) - T0 )) -gt 520 ] && exit 0
for t in 4 16; do
  for v in old new; do
    m=.gpu/muser; [ $v = old ] && m=.gpu/old/muser
    timeout 40 $m bench -m /tmp/m1b.gguf --backend cpu --threads $t --depths 512 --gen 16 2>&1 | grep tok/s | sed "s/peak RSS.*//; s/^/$v t$t /" >> $OUT/cpu.txt
  done
done
el all done
