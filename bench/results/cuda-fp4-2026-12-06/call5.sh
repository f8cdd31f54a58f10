# call 5 (what device time was left after call 4 never started): v3's kernel tests (default, where
# the test's small matrices take four rows a warp; MUSER_CUDA_Q8D_RPW=8 MUSER_CUDA_Q8D_T=16), the
# engine test on a 1B NVFP4 model, gpukernbench of the launches v3 changes, v2 / v3.
# Carry .gpu/cuda.tar.xz, .gpu/v2-plugin.so.xz.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz && xz -dk .gpu/v2-plugin.so.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
V3=$PWD/.gpu/muser-cuda.so V2=$PWD/.gpu/v2-plugin.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader > $OUT/log.txt
(.gpu/muser gen --preset 1b --type nvfp4 --threads 12 -o /tmp/nv-1b.gguf > /dev/null 2>&1) &
kt() { env $2 timeout 60 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern [$1] rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt; grep FAIL /tmp/kern.log | head -10 >> $OUT/tests.txt; }
kt default X=1; el kern 1; kt "rpw 8, t 16" "MUSER_CUDA_Q8D_RPW=8 MUSER_CUDA_Q8D_T=16"; el kern 2
wait
timeout 30 .gpu/test_gpu_engine /tmp/nv-1b.gguf 2>&1 | grep 'gpu engine' >> $OUT/tests.txt
el engine done
kb() { MUSER_CUDA_PLUGIN=$2 .gpu/gpukernbench $3 $4 $5 1 --reps 30 2>&1 | sed "s/^/$1 /" >> $OUT/kb.txt; }
for ty in NVFP4 Q8_0; do
  for sh in "8704 6656" "6656 4096" "6656 19968"; do kb v2 $V2 $ty $sh; kb v3 $V3 $ty $sh; done
done
el all done
