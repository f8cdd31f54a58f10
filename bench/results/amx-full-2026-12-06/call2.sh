# Full shape Q4_K_M at 16 threads against llama.cpp (llama-bench built here, GGML_NATIVE, from the bundled
# source), prefill at depth 512 only (--gen 0), flash attention on (its faster prefill on 2026-12-06's 1B
# run), one repetition each: what time was left of the session's device budget.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/amx.tar.xz -C .gpu; D=$PWD/.gpu/amx; export LD_LIBRARY_PATH=$D/lib
W=/tmp/lcw; mkdir -p $W/lc && tar xJf $D/llama-min.tar.xz -C $W/lc && printf 'add_subdirectory(llama-bench)\n' >$W/lc/tools/CMakeLists.txt
(cmake -S $W/lc -B $W/lc/build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF > /tmp/lc.log 2>&1 && cmake --build $W/lc/build -j16 --target llama-bench >> /tmp/lc.log 2>&1; echo "rc $?" > /tmp/lc.done) &
F=/tmp/full.gguf
nice $D/muser gen --preset full --type q4_k_m --quant fast --threads 8 -o $F > /tmp/gen.log 2>&1
el gen done
while [ ! -f /tmp/lc.done ]; do sleep 2; done
el "llama.cpp build $(cat /tmp/lc.done)"
python3 bench/compare-llamacpp-cpu -m $F --muser $D/muser --llama-bench $W/lc/build/bin/llama-bench --threads 16 --depths 512 \
  --gen 0 --reps 1 --kern avx512 --fa 1 --out $OUT/compare-full-t16.json > $OUT/compare-full-t16.log 2>&1
el "compare rc $?"
