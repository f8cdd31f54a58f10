# call 3 of stop 34: gpu tier on the per-row pinned download; where a step's host time goes now; decode attention kernels at 8192 (1 vs 4 tokens)
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
F=/tmp/full-q4_k_m.gguf
if [ ! -f $F ]; then .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 16 -o $F.tmp > $OUT/gen.log 2>&1 && mv $F.tmp $F; fi
echo "gen done at $(el)s" >> $OUT/log.txt
OUT=/tmp/cuda-h200-out bash tools/device/cuda-h200.sh --budget 320 --tier-cap 300 --no-bench > $OUT/tier-driver.log 2>&1
cp /tmp/cuda-h200-out/summary.txt $OUT/tier-summary.txt 2>/dev/null; xz -c /tmp/cuda-h200-out/tier.log > $OUT/tier.log.xz 2>/dev/null
echo "tier done at $(el)s" >> $OUT/log.txt
I=$PWD/.gpu/instr
for p in 1 4; do for d in 512 8192; do
  MUSER_STEP_TIMING=1 MUSER_CUDA_PLUGIN=$I/muser-cuda.so timeout 90 $I/muser bench -m $F --backend cuda --depths $d --gen 64 --parallel $p > /tmp/o.txt 2>&1
  grep -h "tok/s\|STEPTIME\|SCHEDTIME" /tmp/o.txt | sed "s/peak RSS.*//; s/^/p$p d$d /" >> $OUT/steady.txt
done; done
echo "instr done at $(el)s" >> $OUT/log.txt
export MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
timeout 150 ncu --kernel-name-base demangled --kernel-name 'regex:k_scores_d|k_softmax<\(bool\)1>|k_pv_d|k_pv_comb|k_qk' --metrics gpu__time_duration.sum,launch__grid_size \
  --cache-control none --clock-control none --csv .gpu/muser bench -m $F --backend cuda --depths 8192 --gen 3 --parallel 4 > /tmp/ncu8k.csv 2>$OUT/ncu8k.err
echo "ncu rc $? at $(el)s" >> $OUT/log.txt
xz -c /tmp/ncu8k.csv > $OUT/ncu8k.csv.xz
echo "all done at $(el)s" >> $OUT/log.txt
