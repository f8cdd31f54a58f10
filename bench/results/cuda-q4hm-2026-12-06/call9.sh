# call 9: k_mm_q4K_wg taken for matrices of 1024 rows or more (k and v stay on the int8 kernel): kernel
# test (new Q4_K cases of 1024-1100 rows), engine tests on every golden model and the bundled one,
# gpukernbench on the Q4_K shapes, `muser bench` interleaved (full shape Q4_K_M) and --profile.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/log.txt
F=/tmp/full.gguf
(nice .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 8 -o $F > /tmp/gen.log 2>&1; touch /tmp/gen.done) &
MUSER_TEST_VERBOSE=1 timeout 90 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
grep -i -A8 fail /tmp/kern.log | head -40 >> $OUT/tests.txt
el kern done
mkdir -p /tmp/g
while read -r name opts; do
  case $name in ''|\#*) continue ;; esac
  .gpu/muser gen -o /tmp/g/$name.gguf $opts --name $name > /dev/null 2>&1
  timeout 40 .gpu/test_gpu_engine /tmp/g/$name.gguf > /tmp/eng.log 2>&1; echo "engine $name rc $?: $(tail -1 /tmp/eng.log)" >> $OUT/tests.txt
done < tests/golden/models.txt
timeout 40 .gpu/test_gpu_engine models/muser-default.gguf > /tmp/eng.log 2>&1; echo "engine default rc $?: $(tail -1 /tmp/eng.log)" >> $OUT/tests.txt
el engine done
KB=.gpu/gpukernbench
for t in 512 2048; do
  for s in "4096 6656" "256 6656" "39936 6656"; do
    for v in 0 1; do
      MUSER_CUDA_Q4_WG=$v timeout 20 $KB Q4_K $s $t --reps 15 2>&1 | sed "s/^/wg=$v /" >> $OUT/kb.txt
    done
  done
done
el kb done
while [ ! -f /tmp/gen.done ]; do sleep 2; done
el gen done
b() { # name env
  env $2 timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512,2048 --gen 16 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$1 /" >> $OUT/ab.txt
}
for r in 1 2 3; do b int8 MUSER_CUDA_Q4_WG=0; b wg MUSER_CUDA_Q4_WG=1; el rep $r; done
for v in 0 1; do
  echo "== MUSER_CUDA_Q4_WG=$v" >> $OUT/prof.txt
  MUSER_CUDA_Q4_WG=$v timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512 --gen 8 --profile 2>&1 | grep 'prefill\|profile' >> $OUT/prof.txt
done
el all done
