# call 7 (2026-12-07): v3 = main + the leaner Q4_K decode lanes (q4_load's scale bytes by two
# permutes, q4_group's high nibbles in place with unsigned dp4a and its min part by dp2a on the
# raw bsums, k_mm_q4K_d1's four lanes exchanging halves and leaving d and dmin to the chain thread,
# a lane's ring copies one address and constant offsets). v2 = the plugin of main 6efe9b8 (its
# Q4_K kernels are main's). Tests of v3: kernel test (default, MUSER_CUDA_D1=0: the ring kernel's
# dp4a path at one token, MUSER_CUDA_D1=8), golden prompts with MUSER_BACKEND=cuda, engine tests on
# the Q4_K golden models. gpukernbench of the one-token Q4_K launches (and a Q6_K one, unchanged),
# v2 / v3 / v3 with MUSER_CUDA_D1=4. Full-shape Q4_K_M decode at depth 512, v2 / v3 interleaved.
# Then, if llama-bench (built in the background from the pack's llama-cuda.tar.xz) is ready in
# time: bench/compare-llamacpp-cuda on the same file, v3, depths 512 and 8192, two reps.
# Carry .gpu/cuda.tar.xz (packed with --llamacpp), .gpu/v2-plugin.so.xz.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz && xz -dk .gpu/v2-plugin.so.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
V3=$PWD/.gpu/muser-cuda.so V2=$PWD/.gpu/v2-plugin.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader > $OUT/log.txt
F=/tmp/q4km.gguf LB=/tmp/lc/build/bin/llama-bench
( mkdir -p /tmp/lc && tar -xJf .gpu/llama-cuda.tar.xz -C /tmp/lc &&
  printf 'add_subdirectory(llama-bench)\n' > /tmp/lc/tools/CMakeLists.txt &&
  cmake -S /tmp/lc -B /tmp/lc/build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DGGML_NATIVE=ON &&
  cmake --build /tmp/lc/build -j12 --target llama-bench; el "llama.cpp build rc $?" ) > /tmp/llama.log 2>&1 &
(nice .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 8 -o $F.tmp > /tmp/gen.log 2>&1 && mv $F.tmp $F) &
kt() { env $2 timeout 100 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern [$1] rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt; grep FAIL /tmp/kern.log | head -10 >> $OUT/tests.txt; }
kt default X=1; kt "d1 0" MUSER_CUDA_D1=0; kt "d1 8" MUSER_CUDA_D1=8
el kern done
cp .gpu/muser muser && cp .gpu/muser-cuda.so muser-cuda.so && mkdir -p build/tests/gpu build/golden &&
  cp .gpu/test_gpu_kern .gpu/test_gpu_engine .gpu/test_gpu_stream .gpu/test_gpu_vision .gpu/test_gpu_draft build/tests/gpu/
MUSER_BACKEND=cuda GOLDEN_WORK=$PWD/build/golden timeout 150 bash tests/golden/run.sh > /tmp/golden.log 2>&1
echo "golden rc $? (124: cut)" >> $OUT/tests.txt
grep -v '^ok' /tmp/golden.log | grep -v '^---' | tail -15 >> $OUT/tests.txt
echo "ok lines: $(grep -c '^ok' /tmp/golden.log); largest |dp|: $(grep -o 'max |dp| [0-9.e+-]*' /tmp/golden.log | awk '{print $3}' | sort -g | tail -1)" >> $OUT/tests.txt
el golden done
for m in build/golden/*q4_k*.gguf; do
  [ -f $m ] && timeout 60 .gpu/test_gpu_engine $m 2>&1 | grep 'gpu engine' >> $OUT/tests.txt
done
el engine done
kb() { MUSER_CUDA_PLUGIN=$2 env $3 .gpu/gpukernbench $4 $5 $6 1 --reps 40 2>&1 | sed "s/^/$1 /" >> $OUT/kb.txt; }
for sh in "39936 6656" "6656 19968" "4352 6656" "6656 4096" "256 6656"; do
  kb v2 $V2 X=1 Q4_K $sh; kb v3 $V3 X=1 Q4_K $sh; kb v3d4 $V3 MUSER_CUDA_D1=4 Q4_K $sh
done
kb v2 $V2 X=1 Q6_K 6656 19968; kb v3 $V3 X=1 Q6_K 6656 19968
el kb done
while [ ! -f $F ] && [ $(( $(date +%s) - T0 )) -lt 250 ]; do sleep 2; done
el gen waited
b() { MUSER_CUDA_PLUGIN=$3 env $4 timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512 --gen 128 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$1 /" >> $OUT/dec.txt; }
if [ -f $F ]; then
  for rep in 1 2; do
    b v2 x $V2 X=1; b v3 x $V3 X=1
    [ $(( $(date +%s) - T0 )) -lt 300 ] || break
  done
  [ $(( $(date +%s) - T0 )) -lt 320 ] && b v3d4 x $V3 MUSER_CUDA_D1=4
fi
if [ -x $LB ] && [ -f $F ] && [ $(( $(date +%s) - T0 )) -lt 300 ]; then
  timeout $(( 410 - ($(date +%s) - T0) )) bench/compare-llamacpp-cuda -m $F --muser .gpu/muser --llama-bench $LB \
    --depths 512,8192 --reps 2 --out $OUT/compare.json > $OUT/compare.log 2>&1
  el "compare rc $?"
else
  el "compare skipped: llama-bench $([ -x $LB ] && echo built || echo 'not built'); $(tail -3 /tmp/llama.log)"
fi
el all done
