# call 1 of stop 33: Q4_K decode ring on int8 mma for 2-8 tokens; kernels, engine, A/B DEC_MMA=0/1, ncu
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
M=$PWD/.gpu/muser F=/tmp/full.gguf S=$OUT/summary.txt
export MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
( $M gen --preset full --type q4_k_m --quant fast --threads 12 -o $F > /tmp/gen.log 2>&1; echo "gen rc $? at $(el)s" >> $S ) &
timeout 150 .gpu/test_gpu_kern > $OUT/kern.log 2>&1; echo "kern rc $?: $(grep 'gpu kernels:' $OUT/kern.log) at $(el)s" >> $S
grep FAIL $OUT/kern.log | head -20 >> $S
MUSER_CUDA_DEC_MMA=0 timeout 150 .gpu/test_gpu_kern > /tmp/kern0.log 2>&1; echo "kern DEC_MMA=0 rc $?: $(grep 'gpu kernels:' /tmp/kern0.log) at $(el)s" >> $S
grep FAIL /tmp/kern0.log | head -5 >> $S
mkdir -p /tmp/g
for n in g3-q4_k_m g8-1b-q4_k_m; do
  opts=$(grep "^$n " tests/golden/models.txt | cut -d' ' -f2-)
  $M gen -o /tmp/g/$n.gguf $opts --name $n > /dev/null 2>&1
  timeout 100 .gpu/test_gpu_engine /tmp/g/$n.gguf > /tmp/eng-$n.log 2>&1; echo "engine $n rc $? at $(el)s" >> $S; grep -i "fail" /tmp/eng-$n.log | head -3 >> $S
done
timeout 100 .gpu/test_gpu_engine models/muser-default.gguf > /tmp/eng-def.log 2>&1; echo "engine default rc $? at $(el)s" >> $S
cat /tmp/eng-*.log > $OUT/engine.log
wait
for rep in 1 2; do for v in 0 1; do for p in 1 4; do
  [ $(el) -gt 400 ] && break 3
  [ $v = 0 ] && [ $p = 1 ] && [ $rep = 2 ] && continue
  MUSER_CUDA_DEC_MMA=$v timeout 100 $M bench -m $F --backend cuda --depths 512,2048 --gen 32 --parallel $p 2>&1 | grep tok/s | sed "s/peak RSS.*//; s/^/rep $rep [mma=$v] p$p /" >> $OUT/ab.txt
done; done; done
echo "ab done at $(el)s" >> $S
for v in 0 1; do
  [ $(el) -gt 480 ] && break
  MUSER_CUDA_DEC_MMA=$v timeout 60 ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv \
    $M bench -m $F --backend cuda --depths 512 --gen 2 --parallel 4 > $OUT/ncu-p4-mma$v.csv 2> /tmp/ncu.err
  echo "ncu mma=$v rc $? at $(el)s" >> $S
  xz -9 $OUT/ncu-p4-mma$v.csv
done
cat $S $OUT/ab.txt
