# call 6: the final plugin (80c65d0's GPU code) against main 97c2031's, kernel and engine tests, the Q6_K
# split for FFN down (MUSER_CUDA_D1Q6); then issue 20: per-token jobs claiming tokens (uncommitted CPU change)
# against 97c2031's muser, 1B Q4_K_M prefill at 4 and 16 threads
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz; tar -xJf .gpu/old.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
F=/tmp/full.gguf
(.gpu/muser gen --preset full --type q4_k_m --quant fast --threads 8 -o $F > /tmp/gen.log 2>&1;
 .gpu/muser gen --preset 1b --type q4_k_m -o /tmp/m1b.gguf > /tmp/gen1b.log 2>&1; touch /tmp/gen.done) &
N=$PWD/.gpu/muser-cuda.so O=$PWD/.gpu/old/muser-cuda.so
mkdir -p /tmp/g
for v in 0 2; do
  MUSER_CUDA_PLUGIN=$N MUSER_CUDA_D1Q6=$v timeout 100 .gpu/test_gpu_kern > /tmp/kern.log 2>&1
  echo "D1Q6=$v kern rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt; grep -i "fail" /tmp/kern.log | head -5 >> $OUT/tests.txt
done
el kern done
for name in g3-q4_k_m g8-1b-q4_k_m g2-q8_0 g5-q6_k g1-f16; do
  opts=$(grep "^$name " tests/golden/models.txt | cut -d' ' -f2-)
  .gpu/muser gen -o /tmp/g/$name.gguf $opts --name $name > /dev/null 2>&1
  MUSER_CUDA_PLUGIN=$N timeout 60 .gpu/test_gpu_engine /tmp/g/$name.gguf 2>&1 | tail -1 >> $OUT/tests.txt
done
MUSER_CUDA_PLUGIN=$N timeout 60 .gpu/test_gpu_engine models/muser-default.gguf 2>&1 | tail -1 >> $OUT/tests.txt
MUSER_CUDA_PLUGIN=$N timeout 60 .gpu/test_gpu_stream /tmp/g/g8-1b-q4_k_m.gguf 2>&1 | tail -1 >> $OUT/tests.txt
el engine done
while [ ! -f /tmp/gen.done ]; do sleep 2; done
el gen done
b() { # name plugin env...
  local n=$1 p=$2; shift 2
  env MUSER_CUDA_PLUGIN=$p "$@" timeout 70 .gpu/muser bench -m $F --backend cuda --depths 512,8192 --gen 128 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$n /" >> $OUT/ab.txt
}
for r in 1 2; do
  b old $O
  b new $N
  b new-q6s2 $N MUSER_CUDA_D1Q6=2
  el rep $r
done
for p in $O $N; do
  MUSER_CUDA_PLUGIN=$p timeout 100 .gpu/muser bench -m $F --backend cuda --depths 512 --gen 128 --parallel 4 2>&1 | grep tok/s | sed "s/peak RSS.*//; s|^|$p p4 |" >> $OUT/ab.txt
done
el gpu done
nproc > $OUT/cpu.txt; lscpu | grep -i "model name" >> $OUT/cpu.txt
for r in 1 2; do
  for t in 4 16; do
    for v in old new; do
      m=.gpu/muser; [ $v = old ] && m=.gpu/old/muser
      timeout 60 $m bench -m /tmp/m1b.gguf --backend cpu --threads $t --depths 512 --gen 16 2>&1 | grep tok/s | sed "s/peak RSS.*//; s/^/$v t$t /" >> $OUT/cpu.txt
    done
  done
  el cpu rep $r
done
el all done
