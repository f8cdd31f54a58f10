# call 2 of stop 34: gpu tier on the pinned-logits change, A/B against main 969dc1b, k_pv_d lanes at four slots
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
for rep in 1 2; do
  for v in old new; do for p in 1 4; do
    if [ $v = old ]; then B=.gpu/old; else B=.gpu; fi
    MUSER_CUDA_PLUGIN=$PWD/$B/muser-cuda.so timeout 120 $B/muser bench -m $F --backend cuda --depths 512,2048,8192 --gen 64 --parallel $p 2>&1 | grep tok/s | sed "s/peak RSS.*//; s/^/rep $rep $v p$p /" >> $OUT/ab.txt
  done; done
  for L in 1 2 4; do
    MUSER_CUDA_PVD_L=$L MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so timeout 120 .gpu/muser bench -m $F --backend cuda --depths 512,8192 --gen 64 --parallel 4 2>&1 | grep tok/s | sed "s/peak RSS.*//; s/^/rep $rep pvdL$L p4 /" >> $OUT/pvd.txt
  done
done
echo "all done at $(el)s" >> $OUT/log.txt
