# call 1: the Q6_K prefill kernel with the lane chains split over the warps (k_mm_q6K_mw, NN = 8, 6, 4
# tokens x 8 a block; MUSER_CUDA_Q6_MW=0 is the kernel before, k_mm_q6K_mma): the kernel test with each,
# engine tests on the golden models with Q6_K matrices, gpukernbench on the full shape's Q6_K shapes,
# Nsight Compute on both kernels, muser bench interleaved (full shape Q4_K_M), and
# bench/compare-llamacpp-cuda (llama.cpp built in the background from the start).
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
CB=${CB:-560}; left() { echo $(( CB - $(date +%s) + T0 )); }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/log.txt
F=/tmp/full.gguf
(nice .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 6 -o $F > /tmp/gen.log 2>&1; touch /tmp/gen.done) &
LB=/tmp/lc/build/bin/llama-bench
( mkdir -p /tmp/lc && tar -xJf .gpu/llama-cuda.tar.xz -C /tmp/lc && printf 'add_subdirectory(llama-bench)\n' >/tmp/lc/tools/CMakeLists.txt &&
  cmake -S /tmp/lc -B /tmp/lc/build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DGGML_NATIVE=ON > /tmp/lc.log 2>&1 &&
  nice cmake --build /tmp/lc/build -j10 --target llama-bench >> /tmp/lc.log 2>&1; echo "llama.cpp build rc $?" > /tmp/lc.done ) &
for v in 8 6 4 0; do
  MUSER_CUDA_Q6_MW=$v timeout 90 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "Q6_MW=$v kern rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
  grep -i fail /tmp/kern.log | head -5 >> $OUT/tests.txt
done
el kern done
mkdir -p /tmp/g
while read -r name opts; do
  case $name in g3-q4_k_m|g5-q6_k|g8-1b-q4_k_m) ;; *) continue ;; esac
  .gpu/muser gen -o /tmp/g/$name.gguf $opts --name $name > /dev/null 2>&1
  timeout 60 .gpu/test_gpu_engine /tmp/g/$name.gguf > /tmp/eng.log 2>&1; echo "engine $name rc $?: $(tail -1 /tmp/eng.log)" >> $OUT/tests.txt
done < tests/golden/models.txt
timeout 60 .gpu/test_gpu_engine models/muser-default.gguf > /tmp/eng.log 2>&1; echo "engine default rc $?: $(tail -1 /tmp/eng.log)" >> $OUT/tests.txt
el engine done
KB=.gpu/gpukernbench
for r in 1 2; do
  for s in "Q6_K 6656 19968 512" "Q6_K 6656 19968 2048" "Q6_K 256 6656 512" "Q4_K 6656 19968 512"; do
    for v in 0 4 6 8; do MUSER_CUDA_Q6_MW=$v timeout 20 $KB $s --reps 20 2>&1 | sed "s/^/r$r mw=$v /" >> $OUT/kb.txt; done
  done
done
el kb done
W=/tmp/w; mkdir -p $W
for v in 0 8; do
  MUSER_CUDA_Q6_MW=$v timeout 60 ncu --kernel-name regex:k_mm_q6K --launch-skip 2 --launch-count 1 --clock-control none \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats \
    --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis -o $W/q6mw$v $KB Q6_K 6656 19968 512 --reps 3 > $W/q6mw$v.log 2>&1
  ncu -i $W/q6mw$v.ncu-rep > $W/q6mw$v.txt 2>&1
done
(cd $W && tar -cJf $OUT/ncu.tar.xz *.txt *.log)
el ncu done
while [ ! -f /tmp/gen.done ]; do sleep 2; done
el gen done
b() { # name env...
  local n=$1; shift
  env "$@" timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512,2048 --gen 32 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$n /" >> $OUT/ab.txt
}
for r in 1 2 3; do
  b mw0 MUSER_CUDA_Q6_MW=0; b mw8 MUSER_CUDA_Q6_MW=8; b mw6 MUSER_CUDA_Q6_MW=6
  el rep $r
  [ $r -ge 2 ] && [ $(left) -lt 200 ] && break
done
timeout 40 .gpu/muser bench -m $F --backend cuda --depths 512 --gen 8 --profile > $OUT/profile.txt 2>&1
el profile done
while [ ! -f /tmp/lc.done ] && [ $(left) -gt 60 ]; do sleep 3; done
el "llama.cpp: $(cat /tmp/lc.done 2>/dev/null)"
if [ -x $LB ] && [ $(left) -gt 50 ]; then
  timeout $(( $(left) - 5 )) bench/compare-llamacpp-cuda -m $F --muser .gpu/muser --llama-bench $LB --depths 512,2048 \
    --reps 1 --out $OUT/compare.json > $OUT/compare.log 2>&1
  el compare rc $?
else
  tail -20 /tmp/lc.log >> $OUT/log.txt
fi
el all done
