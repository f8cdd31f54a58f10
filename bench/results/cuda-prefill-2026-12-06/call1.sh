# call 1 (the only device call this session could get): the gpu tier (tests/gpu/run.sh, capped), the
# kernel test with each prefill variant (MUSER_CUDA_Q4TC 2-9, MUSER_CUDA_Q6TC 1-3) and the Q6_K decode
# split for FFN down (MUSER_CUDA_D1Q6=2), then muser bench on the full shape Q4_K_M: the variants and
# main 97c2031's plugin ("old"), interleaved; Nsight Compute and the CPU claim (issue 20) if time is left
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
CB=${CB:-560}; left() { echo $(( CB - $(date +%s) + T0 )); }
tar -xJf .gpu/cuda.tar.xz; tar -xJf .gpu/old.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/machine.txt; nproc >> $OUT/machine.txt
lscpu | grep -i 'model name' >> $OUT/machine.txt
F=/tmp/full.gguf
(.gpu/muser gen --preset full --type q4_k_m --quant fast --threads 8 -o $F > /tmp/gen.log 2>&1;
 .gpu/muser gen --preset 1b --type q4_k_m -o /tmp/m1b.gguf > /tmp/gen1b.log 2>&1; touch /tmp/gen.done) &
cp .gpu/muser muser && cp .gpu/muser-cuda.so muser-cuda.so && mkdir -p build/tests/gpu &&
  cp .gpu/test_gpu_kern .gpu/test_gpu_engine .gpu/test_gpu_stream .gpu/test_gpu_vision .gpu/test_gpu_draft build/tests/gpu/
timeout $(( CB > 500 ? 200 : 150 )) bash tests/gpu/run.sh > $OUT/tier.log 2>&1
el tier rc $?
for e in MUSER_CUDA_Q4TC=6 MUSER_CUDA_Q4TC=7 MUSER_CUDA_Q4TC=9 MUSER_CUDA_Q4TC=2 MUSER_CUDA_Q4TC=5 MUSER_CUDA_Q4TC=8 \
         MUSER_CUDA_Q4TC=4 MUSER_CUDA_Q6TC=1 MUSER_CUDA_Q6TC=2 MUSER_CUDA_Q6TC=3 MUSER_CUDA_D1Q6=2; do
  env $e timeout 40 .gpu/test_gpu_kern > /tmp/kern.log 2>&1
  echo "$e kern rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt; grep -i "fail" /tmp/kern.log | head -5 >> $OUT/tests.txt
done
el kern done
while [ ! -f /tmp/gen.done ]; do sleep 2; done
el gen done
b() { # name plugin env...
  local n=$1 p=$2; shift 2
  env MUSER_CUDA_PLUGIN=$p "$@" timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512,2048 --gen 32 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$n /" >> $OUT/ab.txt
}
N=$PWD/.gpu/muser-cuda.so O=$PWD/.gpu/old/muser-cuda.so
for r in 1 2 3; do
  b old $O
  for v in 0 6 7 9 2 5 8; do b q4tc$v $N MUSER_CUDA_Q4TC=$v; done
  for v in 1 2; do b q6tc$v $N MUSER_CUDA_Q6TC=$v; done
  b d1q6-2 $N MUSER_CUDA_D1Q6=2
  el rep $r
  [ $(left) -lt 150 ] && break
done
[ $(left) -gt 40 ] && timeout 40 .gpu/muser bench -m $F --backend cuda --depths 512 --gen 16 --profile > $OUT/profile.txt 2>&1
el profile done
for v in q4:0 q4:6 q6:0; do
  [ $(left) -lt 50 ] && break
  k=k_mm_q4K_tc; [ ${v%%:*} = q6 ] && k=k_mm_q6K_mma
  echo "=== $k MUSER_CUDA_Q4TC=${v#*:}" >> $OUT/ncu.txt
  MUSER_CUDA_Q4TC=${v#*:} timeout 45 ncu --kernel-name regex:$k --launch-skip 0 --launch-count 3 --clock-control none \
    --section SpeedOfLight --section WarpStateStats --section Occupancy --section ComputeWorkloadAnalysis \
    --section SchedulerStats --section InstructionStats --section LaunchStats \
    .gpu/muser bench -m $F --backend cuda --depths 512 --gen 2 >> $OUT/ncu.txt 2>&1
  el ncu $v rc $?
done
for t in 4 16; do
  for v in old new; do
    [ $(left) -lt 15 ] && break 2
    m=.gpu/muser; [ $v = old ] && m=.gpu/old/muser
    timeout 15 $m bench -m /tmp/m1b.gguf --backend cpu --threads $t --depths 512 --gen 8 2>&1 | grep tok/s | sed "s/peak RSS.*//; s/^/$v t$t /" >> $OUT/cpu.txt
  done
done
el all done
