# call 3: the f16 kernel with the min part on the CUDA cores (the sub-blocks sums made with the f16 tile), one LOP3 a nibble pair;
# 8 (64-token tiles), 6 (48) and 9 (64, the isum chain split in two), against the int8 kernel:
# kernel test, gpukernbench, Nsight Compute source counters on 8, `muser bench` interleaved.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/log.txt
F=/tmp/full.gguf
(nice .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 8 -o $F > /tmp/gen.log 2>&1; touch /tmp/gen.done) &
for v in "MUSER_CUDA_Q4H_NN=8" "MUSER_CUDA_Q4H_NN=6" "MUSER_CUDA_Q4H_NN=9"; do
  env $v timeout 90 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern $v rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
  grep -i fail /tmp/kern.log | head -8 >> $OUT/tests.txt
done
el kern done
KB=.gpu/gpukernbench
for r in 1 2; do
  for s in "Q4_K 39936 6656 512" "Q4_K 39936 6656 2048" "Q4_K 6656 19968 512" "Q4_K 4096 6656 512"; do
    for v in "MUSER_CUDA_Q4_HMMA=0" "MUSER_CUDA_Q4H_NN=6" "MUSER_CUDA_Q4H_NN=8" "MUSER_CUDA_Q4H_NN=9"; do
      env $v timeout 20 $KB $s --reps 20 2>&1 | sed "s/^/r$r $v /" >> $OUT/kb.txt
    done
  done
done
el kb done
W=/tmp/w; mkdir -p $W
MUSER_CUDA_Q4H_NN=8 timeout 90 ncu --kernel-name regex:k_mm_q4K_hm --launch-skip 2 --launch-count 1 --clock-control none \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats \
  --section ComputeWorkloadAnalysis --section SourceCounters -o $W/hm $KB Q4_K 39936 6656 512 --reps 3 > $W/hm.log 2>&1
ncu -i $W/hm.ncu-rep > $W/hm.txt 2>&1
ncu -i $W/hm.ncu-rep --page source --csv --print-source sass > $W/hm.src.csv 2>&1
(cd $W && tar -cJf $OUT/ncu.tar.xz hm.txt hm.log hm.src.csv)
el ncu done
while [ ! -f /tmp/gen.done ]; do sleep 2; done
el gen done
b() { # name env
  env $2 timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512,2048 --gen 16 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$1 /" >> $OUT/ab.txt
}
for r in 1 2 3; do b tc MUSER_CUDA_Q4_HMMA=0; b hm8 MUSER_CUDA_Q4H_NN=8; b hm9 MUSER_CUDA_Q4H_NN=9; el rep $r; done
el all done
