# call 2 of stop 33: activation windows (Q4_K, Q6_K rings) + mma; kernels, engine, A/B vs call 1, ncu
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
M=$PWD/.gpu/muser F=/tmp/full.gguf S=$OUT/summary.txt NEW=$PWD/.gpu/muser-cuda.so OLD=$PWD/.gpu/old/muser-cuda-c1.so WIN=$PWD/.gpu/old/muser-cuda-win.so
export MUSER_CUDA_PLUGIN=$NEW
( $M gen --preset full --type q4_k_m --quant fast --threads 12 -o $F > /tmp/gen.log 2>&1; echo "gen rc $? at $(el)s" >> $S ) &
for e in "X=1" "MUSER_CUDA_DEC_MMA=0" "MUSER_CUDA_RING_WARPS=2"; do
  env $e timeout 150 .gpu/test_gpu_kern > /tmp/kernv.log 2>&1; echo "kern $e rc $?: $(grep 'gpu kernels:' /tmp/kernv.log) at $(el)s" >> $S
  grep FAIL /tmp/kernv.log | head -8 >> $S
done
mkdir -p /tmp/g
for n in g3-q4_k_m g5-q6_k g8-1b-q4_k_m; do
  opts=$(grep "^$n " tests/golden/models.txt | cut -d' ' -f2-)
  $M gen -o /tmp/g/$n.gguf $opts --name $n > /dev/null 2>&1
  timeout 100 .gpu/test_gpu_engine /tmp/g/$n.gguf > /tmp/eng-$n.log 2>&1; echo "engine $n rc $? at $(el)s" >> $S; grep -i "fail" /tmp/eng-$n.log | head -3 >> $S
done
timeout 100 .gpu/test_gpu_engine models/muser-default.gguf > /tmp/eng-def.log 2>&1; echo "engine default rc $? at $(el)s" >> $S
cat /tmp/eng-*.log > $OUT/engine.log
wait
for rep in 1 2; do for v in c1 win new; do for p in 1 4; do
  [ $(el) -gt 360 ] && break 3
  P=$NEW; [ $v = c1 ] && P=$OLD; [ $v = win ] && P=$WIN
  MUSER_CUDA_PLUGIN=$P timeout 100 $M bench -m $F --backend cuda --depths 512,2048 --gen 32 --parallel $p 2>&1 | grep tok/s | sed "s/peak RSS.*//; s/^/rep $rep [$v] p$p /" >> $OUT/ab.txt
done; done; done
echo "ab done at $(el)s" >> $S
timeout 60 ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv \
    $M bench -m $F --backend cuda --depths 512 --gen 2 --parallel 4 > $OUT/ncu-p4.csv 2> /tmp/ncu.err
echo "ncu dur rc $? at $(el)s" >> $S
xz -9 $OUT/ncu-p4.csv
timeout 120 ncu --kernel-name "regex:k_mm_q4K_dec|k_mm_q6K_dec" --launch-skip 40 --launch-count 8 --clock-control none \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
    --section LaunchStats --section SchedulerStats \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    $M bench -m $F --backend cuda --depths 512 --gen 4 --parallel 4 > $OUT/ncu-stall.txt 2>&1
echo "ncu stall rc $? at $(el)s" >> $S
xz -9 $OUT/ncu-stall.txt
cat $S $OUT/ab.txt
