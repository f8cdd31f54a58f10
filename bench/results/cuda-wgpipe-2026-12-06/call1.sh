# call 1: (a) k_mm_q4K_wg with a step's wgmmas issued before the chain steps of the step before
# (MUSER_CUDA_Q4_WG=2, two accumulator sets; bench/results/cuda-q4hm-2026-12-06/pipe.diff) against
# the committed form (=1) and the int8 kernel (=0); (b) the new k_mm_q6K_wg against k_mm_q6K_mma
# (MUSER_CUDA_Q6_WG=0): kernel tests, engine tests, gpukernbench, `muser bench` interleaved,
# --profile; nsys (or ncu) of the model's prefill at 512 for the q / gate launches' own times; the
# default-arch plugin (sm_80 + sm_90a + compute_90) against the sm_90a one; bench/compare-llamacpp-cuda
# (llama.cpp built in the background from the start).
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
CB=${CB:-570}; left() { echo $(( CB - $(date +%s) + T0 )); }
tar -xJf .gpu/cuda.tar.xz
xz -dc .gpu/defplug.so.xz > /tmp/defplug.so
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/log.txt
command -v nsys ncu >> $OUT/log.txt
F=/tmp/full.gguf
(nice .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 6 -o $F > /tmp/gen.log 2>&1; touch /tmp/gen.done) &
LB=/tmp/lc/build/bin/llama-bench
( mkdir -p /tmp/lc && tar -xJf .gpu/llama-cuda.tar.xz -C /tmp/lc && printf 'add_subdirectory(llama-bench)\n' >/tmp/lc/tools/CMakeLists.txt &&
  cmake -S /tmp/lc -B /tmp/lc/build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DGGML_NATIVE=ON > /tmp/lc.log 2>&1 &&
  nice cmake --build /tmp/lc/build -j10 --target llama-bench >> /tmp/lc.log 2>&1; echo "llama.cpp build rc $?" > /tmp/lc.done ) &
for e in MUSER_CUDA_Q4_WG=1 MUSER_CUDA_Q4_WG=2 MUSER_CUDA_Q6_WG=0; do
  env $e MUSER_TEST_VERBOSE=1 timeout 60 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern $e rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
  grep -i -A8 fail /tmp/kern.log | head -30 >> $OUT/tests.txt
done
MUSER_CUDA_PLUGIN=/tmp/defplug.so timeout 60 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern default-arch plugin rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
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
  for s in "39936 6656" "4096 6656" "6656 19968"; do
    for v in 0 1 2; do
      MUSER_CUDA_Q4_WG=$v timeout 20 $KB Q4_K $s $t --reps 15 2>&1 | sed "s/^/wg=$v /" >> $OUT/kb.txt
    done
  done
  for v in 0 1; do
    MUSER_CUDA_Q6_WG=$v timeout 20 $KB Q6_K 6656 19968 $t --reps 15 2>&1 | sed "s/^/q6wg=$v /" >> $OUT/kb.txt
  done
done
for p in $PWD/.gpu/muser-cuda.so /tmp/defplug.so; do
  MUSER_CUDA_PLUGIN=$p timeout 20 $KB Q4_K 39936 6656 512 --reps 15 2>&1 | sed "s|^|plugin $(basename $p) |" >> $OUT/kb.txt
done
el kb done
while [ ! -f /tmp/gen.done ]; do sleep 2; done
el gen done
b() { # name env
  env $2 timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512,2048 --gen 8 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$1 /" >> $OUT/ab.txt
}
for r in 1 2 3; do
  b default MUSER_CUDA_Q4_WG=1; b q4pipe MUSER_CUDA_Q4_WG=2; b q6old MUSER_CUDA_Q6_WG=0; b int8 "MUSER_CUDA_Q4_WG=0 MUSER_CUDA_Q6_WG=0"
  el rep $r
done
for e in MUSER_CUDA_Q4_WG=1 MUSER_CUDA_Q6_WG=0 MUSER_CUDA_Q4_WG=2; do
  echo "== $e" >> $OUT/prof.txt
  env $e timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512 --gen 8 --profile 2>&1 | grep 'prefill\|profile' >> $OUT/prof.txt
done
el prof done
# each kernel's own time in the model's prefill at 512
if command -v nsys > /dev/null; then
  timeout 90 nsys profile -o /tmp/nm --force-overwrite true .gpu/muser bench -m $F --backend cuda --depths 512 --gen 2 > /tmp/nsys.log 2>&1
  timeout 60 nsys stats -q --report cuda_gpu_kern_sum --format csv /tmp/nm.nsys-rep > /tmp/nsys.csv 2>&1
  timeout 60 nsys stats -q --report cuda_api_sum --format csv /tmp/nm.nsys-rep >> /tmp/nsys.csv 2>&1
  timeout 60 nsys stats -q --report cuda_gpu_trace --format csv /tmp/nm.nsys-rep 2>/dev/null | grep -E 'k_mm_q4K|k_q8K_h|k_mm_q6K' | head -600 >> /tmp/nsys.csv
  xz -9 < /tmp/nsys.csv > $OUT/nsys.csv.xz
else
  timeout 120 ncu --kernel-name regex:'k_mm_q4K_wg|k_q8K_h' --launch-count 40 --cache-control none --clock-control none \
    --metrics gpu__time_duration.sum,launch__grid_size .gpu/muser bench -m $F --backend cuda --depths 512 --gen 2 2>&1 | xz -9 > $OUT/nsys.csv.xz
fi
el nsys done
while [ ! -f /tmp/lc.done ] && [ $(left) -gt 70 ]; do sleep 3; done
el "llama.cpp: $(cat /tmp/lc.done 2>/dev/null)"
if [ -x $LB ] && [ $(left) -gt 60 ]; then
  timeout $(( $(left) - 5 )) bench/compare-llamacpp-cuda -m $F --muser .gpu/muser --llama-bench $LB --depths 512,2048 \
    --reps 1 --out $OUT/compare.json > $OUT/compare.log 2>&1
  el compare rc $?
else
  tail -20 /tmp/lc.log >> $OUT/log.txt
fi
el all done
