# call 2b (call2.sh cut to the device time the session had left): the one-token Q4_K split kernel with
# fewer instructions (q4_load without a divergent branch, the activation row staged a warp a block) against
# main ae71cc8's plugin ("old"), and the warps a row group chosen per launch (MUSER_CUDA_D1=1) against the
# default 2: the kernel test, gpukernbench on the one-token shapes, muser bench interleaved.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
CB=${CB:-130}; left() { echo $(( CB - $(date +%s) + T0 )); }
tar -xJf .gpu/cuda.tar.xz; mkdir -p .gpu/old && xz -dc .gpu/old-plugin.so.xz > .gpu/old/muser-cuda.so
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
N=$PWD/.gpu/muser-cuda.so O=$PWD/.gpu/old/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/log.txt
F=/tmp/full.gguf
(.gpu/muser gen --preset full --type q4_k_m --quant fast --threads 12 -o $F > /tmp/gen.log 2>&1; touch /tmp/gen.done) &
for v in 2 1; do
  MUSER_CUDA_D1=$v timeout 30 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "D1=$v kern rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
  grep -i fail /tmp/kern.log | head -5 >> $OUT/tests.txt
done
el kern done
KB=.gpu/gpukernbench
for s in "Q4_K 39936 6656 1" "Q4_K 6656 19968 1" "Q4_K 4352 6656 1" "Q4_K 6656 4096 1"; do
  MUSER_CUDA_PLUGIN=$O timeout 10 $KB $s --reps 40 2>&1 | sed "s/^/old /" >> $OUT/kb.txt
  for v in 2 1 8; do MUSER_CUDA_D1=$v timeout 10 $KB $s --reps 40 2>&1 | sed "s/^/d1=$v /" >> $OUT/kb.txt; done
done
el kb done
while [ ! -f /tmp/gen.done ] && [ $(left) -gt 30 ]; do sleep 2; done
el gen done
b() { # name plugin env...
  local n=$1 p=$2; shift 2
  env MUSER_CUDA_PLUGIN=$p "$@" timeout 25 .gpu/muser bench -m $F --backend cuda --depths 512 --gen 32 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$n /" >> $OUT/ab.txt
}
for r in 1 2 3; do
  [ -f /tmp/gen.done ] || break
  b old $O; b new $N; b new-d1=1 $N MUSER_CUDA_D1=1
  el rep $r
  [ $(left) -lt 40 ] && break
done
el all done
