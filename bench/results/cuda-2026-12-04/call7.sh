# call 7 of stop 34 (last, ~260 s): the weights-as-A Q4_K decode ring, k_pv_dm, per-kind attention spans:
# kernel test, engine tests, A/B against f72d64b, then the golden runs with what is left
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
F=/tmp/full-q4_k_m.gguf
[ -f $F ] || ( .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 8 -o $F.tmp > $OUT/gen.log 2>&1 && mv $F.tmp $F ) &
cp .gpu/muser muser && cp .gpu/muser-cuda.so muser-cuda.so && mkdir -p build/tests/gpu build/golden &&
  cp .gpu/test_gpu_kern .gpu/test_gpu_engine .gpu/test_gpu_stream .gpu/test_gpu_vision build/tests/gpu/
timeout 60 .gpu/test_gpu_kern > /tmp/kern.txt 2>&1; echo "kern rc $? at $(el)s" >> $OUT/log.txt
grep -v "^ok" /tmp/kern.txt | tail -20 > $OUT/kern.txt
for g in g3-q4_k_m g8-1b-q4_k_m; do
  opts=$(grep "^$g " tests/golden/models.txt | cut -d' ' -f2-)
  ./muser gen -o build/golden/$g.gguf $opts --name $g > /dev/null 2>&1
  timeout 40 .gpu/test_gpu_engine build/golden/$g.gguf 2>&1 | tail -3 >> $OUT/engine.txt
done
timeout 40 .gpu/test_gpu_engine models/muser-default.gguf 2>&1 | tail -3 >> $OUT/engine.txt
echo "engine done at $(el)s" >> $OUT/log.txt
wait
echo "gen done at $(el)s" >> $OUT/log.txt
for p in 4 1; do for v in new old; do
  if [ $v = old ]; then B=$PWD/.gpu/old; else B=$PWD/.gpu; fi
  MUSER_CUDA_PLUGIN=$B/muser-cuda.so timeout 50 $B/muser bench -m $F --backend cuda --depths 512,2048,8192 --gen 64 --parallel $p 2>&1 | grep tok/s | sed "s/peak RSS.*//; s/^/$v p$p /" >> $OUT/ab.txt
done; done
echo "bench done at $(el)s" >> $OUT/log.txt
MUSER_BACKEND=cuda GOLDEN_WORK=$PWD/build/golden timeout $(( 250 - $(el) )) bash tests/golden/run.sh > /tmp/golden.txt 2>&1
echo "golden rc $? at $(el)s" >> $OUT/log.txt
grep -c "^ok" /tmp/golden.txt >> $OUT/log.txt; grep -v "^ok" /tmp/golden.txt | tail -15 > $OUT/golden.txt
