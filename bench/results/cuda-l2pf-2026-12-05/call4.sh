# call 4: the decode changes together (k_mm_q4K_d1 with KS 2, k_mm_q6K_d1 for v, k_post_add_w, k_qk's sum by
# shuffles) against main 97c2031's plugin (.gpu/old), kernel and engine tests, A/B, per-kernel durations
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz; tar -xJf .gpu/old.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
F=/tmp/full.gguf
(.gpu/muser gen --preset full --type q4_k_m --quant fast --threads 12 -o $F > /tmp/gen.log 2>&1; touch /tmp/gen.done) &
mkdir -p build/tests/gpu /tmp/g; cp .gpu/test_gpu_* build/tests/gpu/
for v in 2 0 8; do
  MUSER_CUDA_D1=$v timeout 100 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "D1=$v kern rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
  grep -i "fail" /tmp/kern.log | head -5 >> $OUT/tests.txt
done
el kern done
for name in g3-q4_k_m g8-1b-q4_k_m g2-q8_0 g5-q6_k g4-q5_k g1-f16; do
  opts=$(grep "^$name " tests/golden/models.txt | cut -d' ' -f2-)
  .gpu/muser gen -o /tmp/g/$name.gguf $opts --name $name > /dev/null 2>&1
  timeout 90 .gpu/test_gpu_engine /tmp/g/$name.gguf 2>&1 | tail -1 >> $OUT/tests.txt
  timeout 90 .gpu/test_gpu_stream /tmp/g/$name.gguf 2>&1 | tail -1 >> $OUT/tests.txt
done
timeout 60 .gpu/test_gpu_engine models/muser-default.gguf 2>&1 | tail -1 >> $OUT/tests.txt
el engine done
while [ ! -f /tmp/gen.done ]; do sleep 2; done
el gen done
b() { # name plugin env...
  local n=$1 p=$2; shift 2
  env MUSER_CUDA_PLUGIN=$p "$@" timeout 70 .gpu/muser bench -m $F --backend cuda --depths 512,8192 --gen 128 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$n /" >> $OUT/ab.txt
}
N=$PWD/.gpu/muser-cuda.so O=$PWD/.gpu/old/muser-cuda.so
for r in 1 2 3; do
  b old $O
  b new $N
  b new-all $N MUSER_CUDA_D1_ALL=1
  b new-d1off $N MUSER_CUDA_D1=0
  b new-post0 $N MUSER_CUDA_POST=0
  el rep $r
done
for p in $O $N $O $N; do
  MUSER_CUDA_PLUGIN=$p timeout 100 .gpu/muser bench -m $F --backend cuda --depths 512 --gen 128 --parallel 4 2>&1 | grep tok/s | sed "s/peak RSS.*//; s|^|$p p4 |" >> $OUT/ab.txt
done
el p4 done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
timeout 150 $NCU --launch-skip 1500 --launch-count 700 --metrics gpu__time_duration.sum --csv .gpu/muser bench -m $F --backend cuda --depths 512 --gen 8 > /tmp/ncu.csv 2>&1
xz -c /tmp/ncu.csv > $OUT/ncu-step-512.csv.xz
el all done
