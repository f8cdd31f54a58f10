# call 1 of stop 32: cp.async activation staging + ring_warps + norm rows in smem; kernels, engine, A/B vs s31, ncu durations
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
M=$PWD/.gpu/muser F=/tmp/full.gguf S=$OUT/summary.txt NEW=$PWD/.gpu/muser-cuda.so OLD=$PWD/.gpu/old/muser-cuda-s31.so
export MUSER_CUDA_PLUGIN=$NEW
( $M gen --preset full --type q4_k_m --quant fast --threads 12 -o $F > /tmp/gen.log 2>&1; echo "gen rc $? at $(el)s" >> $S ) &
timeout 150 .gpu/test_gpu_kern > $OUT/kern.log 2>&1; echo "kern rc $?: $(grep 'gpu kernels:' $OUT/kern.log) at $(el)s" >> $S
for w in 8 2; do
  MUSER_CUDA_RING_WARPS=$w timeout 150 .gpu/test_gpu_kern > /tmp/kern$w.log 2>&1; echo "kern RING_WARPS=$w rc $?: $(grep 'gpu kernels:' /tmp/kern$w.log) at $(el)s" >> $S
  grep FAIL /tmp/kern$w.log | head -5 >> $S
done
mkdir -p /tmp/g
for n in g2-q8_0 g3-q4_k_m g8-1b-q4_k_m g9-nvfp4; do
  opts=$(grep "^$n " tests/golden/models.txt | cut -d' ' -f2-)
  $M gen -o /tmp/g/$n.gguf $opts --name $n > /dev/null 2>&1
  timeout 100 .gpu/test_gpu_engine /tmp/g/$n.gguf > /tmp/eng-$n.log 2>&1; echo "engine $n rc $? at $(el)s" >> $S; grep -i "fail" /tmp/eng-$n.log | head -3 >> $S
done
timeout 100 .gpu/test_gpu_engine models/muser-default.gguf > /tmp/eng-def.log 2>&1; echo "engine default rc $? at $(el)s" >> $S
cat /tmp/eng-*.log > $OUT/engine.log
wait
for rep in 1 2; do for v in old new w8; do for p in 1 4; do
  [ $(el) -gt 470 ] && break 3
  [ $v = w8 ] && [ $p = 4 ] && continue
  P=$NEW; E=; [ $v = old ] && P=$OLD; [ $v = w8 ] && E=MUSER_CUDA_RING_WARPS=8
  env $E MUSER_CUDA_PLUGIN=$P timeout 100 $M bench -m $F --backend cuda --depths 512,2048,8192 --gen 32 --parallel $p 2>&1 | grep tok/s | sed "s/peak RSS.*//; s/^/rep $rep [$v] p$p /" >> $OUT/ab.txt
done; done; done
echo "ab done at $(el)s" >> $S
if [ $(el) -lt 500 ]; then
timeout 80 ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv \
  $M bench -m $F --backend cuda --depths 512 --gen 2 --parallel 1 > $OUT/ncu-p1-512.csv 2> $OUT/ncu-p1-512.err
echo "ncu p1 rc $? at $(el)s" >> $S
xz -9 $OUT/ncu-p1-512.csv
fi
cat $S $OUT/ab.txt
