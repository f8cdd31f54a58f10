# call F: (1) the prefill attention: skips the ring cells before a sliding window (k_scores_t, k_pv_t) and the softmax with less traffic (k_softmax_t: the row read once into shared
# memory, the weights written as F16 packed at the row's start, k_pv_t reading those) against
# main 52c9eba's plugin (.gpu/head-plugin.so); (2) cluster.diff of cuda-wgscratch-2026-12-06
# (MUSER_CUDA_Q4_WG=2: the wgmma kernel's stage blocks multicast to clusters of two row blocks)
# against the committed form (=1). Kernel test (attention cases included) with =2, gpukernbench,
# Nsight Compute of one gate+up launch of each form, `muser bench` of the three plugins/forms
# interleaved at 512 / 2048 / 8192, --profile at 8192, Nsight Compute of the attention kernels of
# one full layer (layer 11, chunk 12) of the 8192 prefill, then the gpu tier in the time left.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz
xz -dc .gpu/head-plugin.so.xz > /tmp/head.so
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/log.txt
F=/tmp/full.gguf
[ -f $F ] || (nice .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 4 -o $F.tmp > /tmp/gen.log 2>&1 && mv $F.tmp $F) &
MUSER_CUDA_Q4_WG=2 timeout 100 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern (=2) rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
grep -i -A3 fail /tmp/kern.log | head -30 >> $OUT/tests.txt
el kern done
for t in 512 2048; do
  for sh in "39936 6656" "6656 19968"; do
    for v in 1 2; do MUSER_CUDA_Q4_WG=$v timeout 20 .gpu/gpukernbench Q4_K $sh $t --reps 15 2>&1 | sed "s/^/wg=$v /" >> $OUT/kb.txt; done
  done
done
el kb done
for v in 1 2; do
  MUSER_CUDA_Q4_WG=$v timeout 60 ncu --kernel-name regex:k_mm_q4K_wg --launch-count 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section LaunchStats .gpu/gpukernbench Q4_K 39936 6656 512 --reps 1 > $OUT/ncu-wg$v.txt 2>&1
done
el ncu done
while [ ! -f $F ]; do sleep 2; done
el model ready
b() { env $2 timeout 100 .gpu/muser bench -m $F --backend cuda --depths 512,2048,8192 --gen 8 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$1 /" >> $OUT/ab.txt; }
for r in 1 2; do
  b head MUSER_CUDA_PLUGIN=/tmp/head.so; b new1 MUSER_CUDA_Q4_WG=1; b new2 MUSER_CUDA_Q4_WG=2; el rep $r
done
for p in /tmp/head.so $PWD/.gpu/muser-cuda.so; do
  echo "== $p" >> $OUT/prof8192.txt
  MUSER_CUDA_PLUGIN=$p timeout 60 .gpu/muser bench -m $F --backend cuda --depths 8192 --gen 8 --profile 2>&1 | grep 'prefill\|profile' >> $OUT/prof8192.txt
done
el prof done
# warm-up prefill (32 tokens) = 156 launches of the three, then 3 a layer: chunk 12, layer 11 (full)
timeout 120 ncu --kernel-name regex:'k_scores_t|k_softmax_t|k_pv_t' --launch-skip 2061 --launch-count 6 --clock-control none \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats \
  .gpu/muser bench -m $F --backend cuda --depths 8192 --gen 2 > $OUT/ncu-attn.txt 2>&1
el attn done
cp .gpu/muser muser && cp .gpu/muser-cuda.so muser-cuda.so && mkdir -p build/tests/gpu &&
  cp .gpu/test_gpu_kern .gpu/test_gpu_engine .gpu/test_gpu_stream .gpu/test_gpu_vision .gpu/test_gpu_draft build/tests/gpu/
timeout ${TIER_S:-150} bash tests/gpu/run.sh > /tmp/tier.log 2>&1; echo "tier rc $? (124: cut)" >> $OUT/tests.txt
grep -E '=== gpu tier|gpu kernels|gpu engine|passed|FAIL|fail|memcheck|^---' /tmp/tier.log | head -60 >> $OUT/tests.txt
xz -9 < /tmp/tier.log > $OUT/tier.log.xz
el all done
