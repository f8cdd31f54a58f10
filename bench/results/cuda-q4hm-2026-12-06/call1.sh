# call 1 (issue 12): Q4_K prefill on the f16 tensor cores (k_mm_q4K_hm) against the int8 kernel
# (MUSER_CUDA_Q4_HMMA=0) in the same plugin: the kernel test with each (and the f16 kernel's 48, 56 and
# 64-token tiles, MUSER_CUDA_Q4H_NN), gpukernbench on the full shape's Q4_K prefill shapes, Nsight
# Compute on both kernels, `muser bench` interleaved (full shape Q4_K_M), engine tests on Q4_K models.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/log.txt
F=/tmp/full.gguf
(nice .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 8 -o $F > /tmp/gen.log 2>&1; touch /tmp/gen.done) &
for v in "MUSER_CUDA_Q4H_NN=8" "MUSER_CUDA_Q4H_NN=6" "MUSER_CUDA_Q4H_NN=7" "MUSER_CUDA_Q4_HMMA=0"; do
  env $v timeout 90 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern $v rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
  grep -i fail /tmp/kern.log | head -8 >> $OUT/tests.txt
done
el kern done
KB=.gpu/gpukernbench
for r in 1 2; do
  for s in "Q4_K 39936 6656 512" "Q4_K 39936 6656 2048" "Q4_K 6656 19968 512" "Q4_K 4096 6656 512"; do
    for v in "MUSER_CUDA_Q4_HMMA=0" "MUSER_CUDA_Q4H_NN=6" "MUSER_CUDA_Q4H_NN=7" "MUSER_CUDA_Q4H_NN=8"; do
      env $v timeout 20 $KB $s --reps 20 2>&1 | sed "s/^/r$r $v /" >> $OUT/kb.txt
    done
  done
done
el kb done
W=/tmp/w; mkdir -p $W
for v in hm tc; do
  e=MUSER_CUDA_Q4H_NN=8; [ $v = tc ] && e=MUSER_CUDA_Q4_HMMA=0
  env $e timeout 60 ncu --kernel-name regex:k_mm_q4K_$v --launch-skip 2 --launch-count 1 --clock-control none \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats \
    --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis -o $W/q4$v $KB Q4_K 39936 6656 512 --reps 3 > $W/q4$v.log 2>&1
  ncu -i $W/q4$v.ncu-rep > $W/q4$v.txt 2>&1
done
(cd $W && tar -cJf $OUT/ncu.tar.xz *.txt *.log)
el ncu done
mkdir -p /tmp/g
while read -r name opts; do
  case $name in g3-q4_k_m|g8-1b-q4_k_m|g2-q4_k_m) ;; *) continue ;; esac
  .gpu/muser gen -o /tmp/g/$name.gguf $opts --name $name > /dev/null 2>&1
  timeout 60 .gpu/test_gpu_engine /tmp/g/$name.gguf > /tmp/eng.log 2>&1; echo "engine $name rc $?: $(tail -1 /tmp/eng.log)" >> $OUT/tests.txt
done < tests/golden/models.txt
timeout 60 .gpu/test_gpu_engine models/muser-default.gguf > /tmp/eng.log 2>&1; echo "engine default rc $?: $(tail -1 /tmp/eng.log)" >> $OUT/tests.txt
el engine done
while [ ! -f /tmp/gen.done ]; do sleep 2; done
el gen done
b() { # name env
  env $2 timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512,2048 --gen 16 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$1 /" >> $OUT/ab.txt
}
for r in 1 2 3; do b tc MUSER_CUDA_Q4_HMMA=0; b hm8 MUSER_CUDA_Q4H_NN=8; b hm6 MUSER_CUDA_Q4H_NN=6; el rep $r; done
el all done
