# call D: the final code (the min part on the tensor cores as the only form of k_mm_q4K_wg, no
# switch): gpukernbench of the gate+up shape at 512 (call A: 1.415 ms), Nsight Compute's sections of
# one such launch, then the gpu tier, capped.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/log.txt
for t in 512 2048; do timeout 20 .gpu/gpukernbench Q4_K 39936 6656 $t --reps 15 >> $OUT/kb.txt 2>&1; done
el kb done
# where the kernel's time goes: speed of light, memory and the pipes, one launch of the gate+up shape
timeout 90 ncu --kernel-name k_mm_q4K_wg --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section ComputeWorkloadAnalysis --section WarpStateStats .gpu/gpukernbench Q4_K 39936 6656 512 --reps 1 > $OUT/ncu.txt 2>&1
el ncu done
cp .gpu/muser muser && cp .gpu/muser-cuda.so muser-cuda.so && mkdir -p build/tests/gpu &&
  cp .gpu/test_gpu_kern .gpu/test_gpu_engine .gpu/test_gpu_stream .gpu/test_gpu_vision .gpu/test_gpu_draft build/tests/gpu/
timeout ${TIER_S:-300} bash tests/gpu/run.sh > /tmp/tier.log 2>&1; echo "tier rc $? (124: cut)" >> $OUT/tests.txt
grep -E '=== gpu tier|gpu kernels|gpu engine|passed|FAIL|fail|skipped|memcheck|ERROR|^---' /tmp/tier.log | grep -v '^ok' | head -90 >> $OUT/tests.txt
xz -9 < /tmp/tier.log > $OUT/tier.log.xz
el all done
