# call B: the min parts on the tensor cores as the Q4_K wgmma kernel's form (MUSER_CUDA_Q4_WG=3 for
# every run here): the gpu tier whole (call A's was cut in the golden prompts), llama.cpp built in the
# background from the start (node-llama-cpp 3.22.1's source); then bench/compare-llamacpp-cuda (3 reps
# if the time allows), four slots against one, bench/spec-slots with 1024-token bursts.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
CB=${CB:-585}; left() { echo $(( CB - $(date +%s) + T0 )); }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so MUSER_CUDA_Q4_WG=3
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/log.txt
F=/tmp/full.gguf
(nice .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 4 -o $F > /tmp/gen.log 2>&1; touch /tmp/gen.done) &
LB=/tmp/lc/build/bin/llama-bench
( mkdir -p /tmp/lc && tar -xJf .gpu/llama-cuda.tar.xz -C /tmp/lc && printf 'add_subdirectory(llama-bench)\n' >/tmp/lc/tools/CMakeLists.txt &&
  cmake -S /tmp/lc -B /tmp/lc/build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DGGML_NATIVE=ON > /tmp/lc.log 2>&1 &&
  nice cmake --build /tmp/lc/build -j10 --target llama-bench >> /tmp/lc.log 2>&1; echo "llama.cpp build rc $?" > /tmp/lc.done ) &
cp .gpu/muser muser && cp .gpu/muser-cuda.so muser-cuda.so && mkdir -p build/tests/gpu &&
  cp .gpu/test_gpu_kern .gpu/test_gpu_engine .gpu/test_gpu_stream .gpu/test_gpu_vision .gpu/test_gpu_draft build/tests/gpu/
timeout ${TIER_S:-340} bash tests/gpu/run.sh > /tmp/tier.log 2>&1; echo "tier rc $? (124: cut)" >> $OUT/tests.txt
grep -E '=== gpu tier|gpu kernels|passed|FAIL|fail|skipped|memcheck|ERROR|^---' /tmp/tier.log | grep -v '^ok' | head -80 >> $OUT/tests.txt
tail -5 /tmp/tier.log >> $OUT/tests.txt
xz -9 < /tmp/tier.log > $OUT/tier.log.xz
el tier done
while [ ! -f /tmp/lc.done ] && [ $(left) -gt 150 ]; do sleep 3; done
el "llama.cpp: $(cat /tmp/lc.done 2>/dev/null)"
while [ ! -f /tmp/gen.done ]; do sleep 2; done
R=3; [ $(left) -lt 200 ] && R=1
if [ -x $LB ] && [ $(left) -gt 60 ]; then
  timeout $(( $(left) - 5 )) bench/compare-llamacpp-cuda -m $F --muser .gpu/muser --llama-bench $LB --depths 512,2048 \
    --reps $R --out $OUT/compare.json > $OUT/compare.log 2>&1
  el compare reps $R rc $?
else
  tail -20 /tmp/lc.log >> $OUT/log.txt
fi
for p in 1 4; do
  [ $(left) -gt 40 ] || break
  timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512,2048 --gen 64 --parallel $p 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/par$p /" >> $OUT/par.txt
done
el par done
D=models/muser-default.dflash.gguf
[ $(left) -gt 40 ] && timeout $(( $(left) - 5 )) python3 bench/spec-slots models/muser-default.gguf --muser ./muser --reps 15 --n 1024 --parallel 4 --draft $D \
  > $OUT/slots.jsonl 2> $OUT/slots.err; el slots rc $?
el all done
