# call 5: k_mm_q4K_d1 for every one-token Q4_K launch (FFN gate and up too), the Q6_K split for FFN down
# (MUSER_CUDA_D1Q6=2/4/8) against main 97c2031's plugin; the gpu tier on the default, the kernel test
# with MUSER_CUDA_D1Q6=2 and 4
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz; tar -xJf .gpu/old.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
F=/tmp/full.gguf
(.gpu/muser gen --preset full --type q4_k_m --quant fast --threads 8 -o $F > /tmp/gen.log 2>&1; touch /tmp/gen.done) &
cp .gpu/muser .gpu/muser-cuda.so .; mkdir -p build/tests/gpu; cp .gpu/test_gpu_* build/tests/gpu/
for v in 2 4; do
  MUSER_CUDA_PLUGIN=$PWD/muser-cuda.so MUSER_CUDA_D1Q6=$v timeout 100 build/tests/gpu/test_gpu_kern > /tmp/kern.log 2>&1
  echo "D1Q6=$v kern rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt; grep -i "fail" /tmp/kern.log | head -5 >> $OUT/tests.txt
done
el kern done
timeout 250 bash tests/gpu/run.sh > /tmp/tier.log 2>&1; echo "tier rc $?" >> $OUT/tests.txt
grep -E "gpu tier|FAIL|fail|gpu kernels:" /tmp/tier.log | head -20 >> $OUT/tests.txt
xz -c /tmp/tier.log > $OUT/tier.log.xz
el tier done
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
  b new-q6s2 $N MUSER_CUDA_D1Q6=2
  b new-q6s4 $N MUSER_CUDA_D1Q6=4
  b new-q6s8 $N MUSER_CUDA_D1Q6=8
  el rep $r
done
el all done
