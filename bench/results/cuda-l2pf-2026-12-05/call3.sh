# call 3: k_mm_q4K_d1 (one token's Q4_K rows split over the warps, MUSER_CUDA_D1=0/2/4/8) and k_post_add_w
# (a warp a Q8_K block, MUSER_CUDA_POST=0/1): kernel test, engine tests, decode A/B, per-kernel durations
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
F=/tmp/full.gguf
(.gpu/muser gen --preset full --type q4_k_m --quant fast --threads 12 -o $F > /tmp/gen.log 2>&1; touch /tmp/gen.done) &
mkdir -p build/tests/gpu /tmp/g; cp .gpu/test_gpu_* build/tests/gpu/
timeout 200 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern rc $?" > $OUT/tests.txt
grep -v "^ok\|: ok" /tmp/kern.log | tail -15 >> $OUT/tests.txt; tail -3 /tmp/kern.log >> $OUT/tests.txt
el kern done
for name in g3-q4_k_m g8-1b-q4_k_m g2-q8_0 g5-q6_k; do
  opts=$(grep "^$name " tests/golden/models.txt | cut -d' ' -f2-)
  .gpu/muser gen -o /tmp/g/$name.gguf $opts --name $name > /dev/null 2>&1
  timeout 90 .gpu/test_gpu_engine /tmp/g/$name.gguf 2>&1 | tail -1 >> $OUT/tests.txt
done
timeout 60 .gpu/test_gpu_engine models/muser-default.gguf 2>&1 | tail -1 >> $OUT/tests.txt
el engine done
while [ ! -f /tmp/gen.done ]; do sleep 2; done
el gen done
b() { # name env...
  local n=$1; shift
  env "$@" timeout 70 .gpu/muser bench -m $F --backend cuda --depths 512,8192 --gen 128 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$n /" >> $OUT/ab.txt
}
for r in 1 2; do
  b base MUSER_CUDA_D1=0 MUSER_CUDA_POST=0
  b d1 MUSER_CUDA_D1=4 MUSER_CUDA_POST=0
  b post MUSER_CUDA_D1=0 MUSER_CUDA_POST=1
  b both MUSER_CUDA_D1=4 MUSER_CUDA_POST=1
  b both-d2 MUSER_CUDA_D1=2 MUSER_CUDA_POST=1
  b both-d8 MUSER_CUDA_D1=8 MUSER_CUDA_POST=1
  el rep $r
done
MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so timeout 100 .gpu/muser bench -m $F --backend cuda --depths 512 --gen 128 --parallel 4 2>&1 | grep tok/s | sed 's/^/both p4 /' >> $OUT/ab.txt
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
timeout 200 $NCU --launch-skip 1500 --launch-count 700 --metrics gpu__time_duration.sum --csv .gpu/muser bench -m $F --backend cuda --depths 512 --gen 8 > /tmp/ncu.csv 2>&1
xz -c /tmp/ncu.csv > $OUT/ncu-step-512.csv.xz
el all done
