# call 2: the one-token Q4_K split kernel with fewer instructions (q4_load without a divergent branch,
# the activation row staged a warp a block) and the warps a row group chosen per launch
# (MUSER_CUDA_D1=1: FFN down's 78 super-blocks a row take 8 warps a row group so that two blocks fit an SM;
# the default stays 2), against main ae71cc8's plugin ("old"): the kernel test, gpukernbench on the one-token
# shapes (old, new default, new with 2 / 4 / 8), Nsight Compute's counters of the new kernel, muser bench
# interleaved, and bench/compare-llamacpp-cuda (llama.cpp built in the background from the start).
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
CB=${CB:-570}; left() { echo $(( CB - $(date +%s) + T0 )); }
tar -xJf .gpu/cuda.tar.xz; mkdir -p .gpu/old && xz -dc .gpu/old-plugin.so.xz > .gpu/old/muser-cuda.so
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
N=$PWD/.gpu/muser-cuda.so O=$PWD/.gpu/old/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/log.txt
F=/tmp/full.gguf
(nice .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 6 -o $F > /tmp/gen.log 2>&1; touch /tmp/gen.done) &
LB=/tmp/lc/build/bin/llama-bench
( mkdir -p /tmp/lc && tar -xJf .gpu/llama-cuda.tar.xz -C /tmp/lc && printf 'add_subdirectory(llama-bench)\n' >/tmp/lc/tools/CMakeLists.txt &&
  cmake -S /tmp/lc -B /tmp/lc/build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DGGML_NATIVE=ON > /tmp/lc.log 2>&1 &&
  nice cmake --build /tmp/lc/build -j10 --target llama-bench >> /tmp/lc.log 2>&1; echo "llama.cpp build rc $?" > /tmp/lc.done ) &
for v in 1 2 4; do
  MUSER_CUDA_D1=$v timeout 60 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "D1=$v kern rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
  grep -i fail /tmp/kern.log | head -5 >> $OUT/tests.txt
done
el kern done
KB=.gpu/gpukernbench
for r in 1 2; do
  for s in "Q4_K 39936 6656 1" "Q4_K 6656 19968 1" "Q4_K 4352 6656 1" "Q4_K 6656 4096 1" "Q4_K 256 6656 1" "Q6_K 6656 19968 1"; do
    MUSER_CUDA_PLUGIN=$O timeout 20 $KB $s --reps 50 2>&1 | sed "s/^/r$r old /" >> $OUT/kb.txt
    for v in 1 2 4 8; do MUSER_CUDA_D1=$v timeout 20 $KB $s --reps 50 2>&1 | sed "s/^/r$r d1=$v /" >> $OUT/kb.txt; done
  done
done
el kb done
W=/tmp/w; mkdir -p $W
for v in old new; do
  p=$N; [ $v = old ] && p=$O
  MUSER_CUDA_PLUGIN=$p timeout 60 ncu --kernel-name regex:k_mm_q4K_d1 --launch-skip 2 --launch-count 1 --clock-control none \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats --section SourceCounters \
    --section Occupancy --section LaunchStats -o $W/d1$v $KB Q4_K 39936 6656 1 --reps 3 > $W/d1$v.log 2>&1
  ncu -i $W/d1$v.ncu-rep > $W/d1$v.txt 2>&1; ncu -i $W/d1$v.ncu-rep --page source --csv --print-source sass > $W/d1$v.src.csv 2>&1
done
(cd $W && tar -cJf $OUT/prof.tar.xz *.txt *.log *.src.csv)
el ncu done
while [ ! -f /tmp/gen.done ]; do sleep 2; done
el gen done
b() { # name plugin env...
  local n=$1 p=$2; shift 2
  env MUSER_CUDA_PLUGIN=$p "$@" timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512,2048 --gen 32 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$n /" >> $OUT/ab.txt
}
for r in 1 2 3; do
  b old $O; b new $N; b new-d1=1 $N MUSER_CUDA_D1=1; b new-d1=8 $N MUSER_CUDA_D1=8
  el rep $r
  [ $r -ge 2 ] && [ $(left) -lt 230 ] && break
done
while [ ! -f /tmp/lc.done ] && [ $(left) -gt 100 ]; do sleep 3; done
el "llama.cpp: $(cat /tmp/lc.done 2>/dev/null)"
if [ -x $LB ] && [ $(left) -gt 90 ]; then
  timeout $(( $(left) - 5 )) bench/compare-llamacpp-cuda -m $F --muser .gpu/muser --llama-bench $LB --depths 512,2048 \
    --reps 1 --out $OUT/compare.json > $OUT/compare.log 2>&1
  el compare rc $?
else
  tail -20 /tmp/lc.log >> $OUT/log.txt
fi
el all done
