# NOT RUN (no device time was left); to run with scratch.diff applied.
# call 2 (final code: k_mm_q4K_wg pipelined always, its stage scratch kept a stream instead of
# cudaMallocAsync / cudaFreeAsync a launch, k_mm_q6K_wg dropped): kernel tests, engine tests on the
# golden models and the bundled one, `muser bench` (2 rounds) interleaved against call 1's plugin run as the same kernels (MUSER_CUDA_Q4_WG=2 MUSER_CUDA_Q6_WG=0:
# only the scratch differs) and the int8 kernel (MUSER_CUDA_Q4_WG=0), --profile, then the gpu tier
# in the time left.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
CB=${CB:-330}; left() { echo $(( CB - $(date +%s) + T0 )); }
tar -xJf .gpu/cuda.tar.xz
xz -dc .gpu/c1plug.so.xz > /tmp/c1plug.so
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/log.txt
F=/tmp/full.gguf
(nice .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 8 -o $F > /tmp/gen.log 2>&1; touch /tmp/gen.done) &
for e in MUSER_CUDA_Q4_WG=1 MUSER_CUDA_Q4_WG=0; do
  env $e MUSER_TEST_VERBOSE=1 timeout 60 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern $e rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
  grep -i -A8 fail /tmp/kern.log | head -30 >> $OUT/tests.txt
done
el kern done
mkdir -p /tmp/g
while read -r name opts; do
  case $name in ''|\#*) continue ;; esac
  .gpu/muser gen -o /tmp/g/$name.gguf $opts --name $name > /dev/null 2>&1
  timeout 40 .gpu/test_gpu_engine /tmp/g/$name.gguf > /tmp/eng.log 2>&1; echo "engine $name rc $?: $(tail -1 /tmp/eng.log)" >> $OUT/tests.txt
done < tests/golden/models.txt
timeout 40 .gpu/test_gpu_engine models/muser-default.gguf > /tmp/eng.log 2>&1; echo "engine default rc $?: $(tail -1 /tmp/eng.log)" >> $OUT/tests.txt
el engine done
while [ ! -f /tmp/gen.done ]; do sleep 2; done
el gen done
b() { # name plugin env
  env MUSER_CUDA_PLUGIN=$2 $3 timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512,2048 --gen 8 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$1 /" >> $OUT/ab.txt
}
N=$PWD/.gpu/muser-cuda.so
for r in 1 2; do
  b new $N MUSER_CUDA_Q4_WG=1; b call1 /tmp/c1plug.so "MUSER_CUDA_Q4_WG=2 MUSER_CUDA_Q6_WG=0"; b int8 $N MUSER_CUDA_Q4_WG=0
  el rep $r
done
timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512 --gen 8 --profile 2>&1 | grep 'prefill\|profile' > $OUT/prof.txt
el prof done
cp .gpu/muser muser && cp .gpu/muser-cuda.so muser-cuda.so && mkdir -p build/tests/gpu &&
  cp .gpu/test_gpu_kern .gpu/test_gpu_engine .gpu/test_gpu_stream .gpu/test_gpu_vision .gpu/test_gpu_draft build/tests/gpu/
timeout $(( $(left) > 30 ? $(left) : 30 )) bash tests/gpu/run.sh > /tmp/tier.log 2>&1; echo "tier rc $? (cut at $(left)s left if 124)" >> $OUT/tests.txt
grep -E '=== gpu tier|gpu kernels:|FAIL|fail|skipped|^---' /tmp/tier.log | head -40 >> $OUT/tests.txt
xz -9 < /tmp/tier.log > $OUT/tier.log.xz
el all done
