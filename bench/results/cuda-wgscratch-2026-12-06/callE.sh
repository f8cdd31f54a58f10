# NOT RUN (no device time was left). To run with cluster.diff applied (git apply
# bench/results/cuda-wgscratch-2026-12-06/cluster.diff, then tools/device/cuda-h200-pack.sh):
# call E: the Q4_K wgmma kernel in clusters of two row blocks that multicast each stage block
# (MUSER_CUDA_Q4_WG=2) against the committed form (=1). Why: each block reads its token tile's stage
# block (74 KB a super-block) from L2; at gate+up's 1.415 ms that is about 3.8 TB/s of L2 reads for
# all the blocks, a large share of what the L2 gives. Kernel test with =2, gpukernbench, Nsight
# Compute's sections (speed of light, memory, compute, warp states) of one gate+up launch of each,
# `muser bench` interleaved; the prefill attention at 8192 (--profile, Nsight Compute of its
# three kernels on a late chunk); then the gpu tier (=1) in the time left.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/log.txt
F=/tmp/full.gguf
(nice .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 4 -o $F > /tmp/gen.log 2>&1; touch /tmp/gen.done) &
MUSER_CUDA_Q4_WG=2 MUSER_TEST_VERBOSE=1 timeout 60 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern cluster rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
grep -i -A8 fail /tmp/kern.log | head -30 >> $OUT/tests.txt
el kern done
for t in 512 2048; do
  for sh in "39936 6656" "4096 6656" "6656 19968"; do
    for v in 1 2; do MUSER_CUDA_Q4_WG=$v timeout 20 .gpu/gpukernbench Q4_K $sh $t --reps 15 2>&1 | sed "s/^/wg=$v /" >> $OUT/kb.txt; done
  done
done
el kb done
for v in 1 2; do
  MUSER_CUDA_Q4_WG=$v timeout 90 ncu --kernel-name regex:k_mm_q4K_wg --launch-count 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats --section LaunchStats \
    .gpu/gpukernbench Q4_K 39936 6656 512 --reps 1 > $OUT/ncu-wg$v.txt 2>&1
done
el ncu done
while [ ! -f /tmp/gen.done ]; do sleep 2; done
b() { env $2 timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512,2048 --gen 8 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$1 /" >> $OUT/ab.txt; }
for r in 1 2; do b wg1 MUSER_CUDA_Q4_WG=1; b wg2 MUSER_CUDA_Q4_WG=2; el rep $r; done
# prefill at depth: the attention's share (--profile at 8192) and its three kernels on a late chunk
# (Nsight Compute, one launch each, spans of 6-8K cells): 0.64x of llama.cpp there (this session)
timeout 90 .gpu/muser bench -m $F --backend cuda --depths 8192 --gen 8 --profile 2>&1 | grep 'prefill\|profile' > $OUT/prof8192.txt
timeout 150 ncu --kernel-name regex:'k_scores_t|k_softmax|k_pv_t' --launch-skip 1900 --launch-count 3 --section SpeedOfLight \
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats \
  .gpu/muser bench -m $F --backend cuda --depths 8192 --gen 2 > $OUT/ncu-attn.txt 2>&1
el attn done
cp .gpu/muser muser && cp .gpu/muser-cuda.so muser-cuda.so && mkdir -p build/tests/gpu &&
  cp .gpu/test_gpu_kern .gpu/test_gpu_engine .gpu/test_gpu_stream .gpu/test_gpu_vision .gpu/test_gpu_draft build/tests/gpu/
timeout ${TIER_S:-200} bash tests/gpu/run.sh > /tmp/tier.log 2>&1; echo "tier rc $? (124: cut)" >> $OUT/tests.txt
grep -E '=== gpu tier|gpu kernels|gpu engine|passed|FAIL|fail|memcheck|^---' /tmp/tier.log | head -60 >> $OUT/tests.txt
el all done
