# call C (same warm machine as call B if it is still held: /tmp/full.gguf and llama-bench kept):
# bench/compare-llamacpp-cuda with 3 reps; one slot against four at 512 / 2048 / 8192, 3 rounds.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
CB=${CB:-560}; left() { echo $(( CB - $(date +%s) + T0 )); }
[ -x .gpu/muser ] || tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so MUSER_CUDA_Q4_WG=3
F=/tmp/full.gguf LB=/tmp/lc/build/bin/llama-bench
ls -la $F $LB > $OUT/log.txt 2>&1 || { echo "not kept: fresh machine" >> $OUT/log.txt; exit 0; }
for r in 1 2 3; do
  for p in 1 4; do
    timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512,2048,8192 --gen 64 --parallel $p 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/r$r par$p /" >> $OUT/par.txt
  done
  el par $r
done
timeout $(( $(left) - 5 )) bench/compare-llamacpp-cuda -m $F --muser .gpu/muser --llama-bench $LB --depths 512,2048,8192 \
  --reps 3 --out $OUT/compare.json > $OUT/compare.log 2>&1
el compare rc $?
