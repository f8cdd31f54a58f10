# call 3: what the CPU chains' float steps cost the Q4_K prefill kernel: main 56b041f's plugin ("new")
# against the same with those steps replaced by two integer adds ("sol", sol.diff: wrong results, timing
# only), gpukernbench; and Nsight Compute's per-instruction counters of the new kernel (bench/ncu-opcodes).
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz; mkdir -p .gpu/sol && xz -dc .gpu/sol-plugin.so.xz > .gpu/sol/muser-cuda.so
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
N=$PWD/.gpu/muser-cuda.so S=$PWD/.gpu/sol/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/log.txt
KB=.gpu/gpukernbench
for r in 1 2 3; do
  for s in "Q4_K 39936 6656 512" "Q4_K 39936 6656 2048" "Q4_K 6656 19968 512"; do
    for v in new sol; do
      p=$N; [ $v = sol ] && p=$S
      MUSER_CUDA_PLUGIN=$p timeout 20 $KB $s --reps 20 2>&1 | sed "s/^/r$r $v /" >> $OUT/kb.txt
    done
  done
done
el kb done
W=/tmp/w; mkdir -p $W
for v in new sol; do
  p=$N; [ $v = sol ] && p=$S
  MUSER_CUDA_PLUGIN=$p timeout 90 ncu --kernel-name regex:k_mm_q4K_tc --launch-skip 2 --launch-count 1 --clock-control none \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats --section SourceCounters \
    -o $W/q4$v $KB Q4_K 39936 6656 512 --reps 3 > $W/q4$v.log 2>&1
  ncu -i $W/q4$v.ncu-rep > $W/q4$v.txt 2>&1; ncu -i $W/q4$v.ncu-rep --page source --csv --print-source sass > $W/q4$v.src.csv 2>&1
done
(cd $W && tar -cJf $OUT/ncu.tar.xz *.txt *.log *.src.csv)
el all done
