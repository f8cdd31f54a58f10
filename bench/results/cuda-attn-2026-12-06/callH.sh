# call H: k_pv_t's weights fetched a warp's 16 neighbouring cells of two heads a load (call G: its
# warps stalled mostly on those global loads, 2-byte loads across 16 rows). Kernel test, the engine
# tests of g3 (head dim 128, window 64: whole-ring spans) and g8 (1B shape) and the bundled model,
# `muser bench` against main 52c9eba's plugin at 2048 / 8192, Nsight Compute of k_pv_t (layers 11
# and 12 of chunk 12, as before), then the gpu tier in the time left.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz
xz -dc .gpu/head-plugin.so.xz > /tmp/head.so
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/log.txt
F=/tmp/full.gguf
[ -f $F ] || (nice .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 4 -o $F.tmp > /tmp/gen.log 2>&1 && mv $F.tmp $F) &
timeout 100 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
grep -i -A3 fail /tmp/kern.log | head -30 >> $OUT/tests.txt
el kern done
cp .gpu/muser muser && cp .gpu/muser-cuda.so muser-cuda.so && mkdir -p build/tests/gpu build/golden &&
  cp .gpu/test_gpu_kern .gpu/test_gpu_engine .gpu/test_gpu_stream .gpu/test_gpu_vision .gpu/test_gpu_draft build/tests/gpu/
grep -E '^(g3|g8)' tests/golden/models.txt | while read -r name opts; do
  ./muser gen -o build/golden/$name.gguf $opts --name $name > /dev/null 2>&1
  timeout 60 build/tests/gpu/test_gpu_engine build/golden/$name.gguf 2>&1 | grep 'gpu engine' >> $OUT/tests.txt
done
timeout 60 build/tests/gpu/test_gpu_engine models/muser-default.gguf 2>&1 | grep 'gpu engine' >> $OUT/tests.txt
el engine done
while [ ! -f $F ]; do sleep 2; done
el model ready
b() { env $2 timeout 100 .gpu/muser bench -m $F --backend cuda --depths 2048,8192 --gen 8 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$1 /" >> $OUT/ab.txt; }
for r in 1 2; do b head MUSER_CUDA_PLUGIN=/tmp/head.so; b new X=1; el rep $r; done
timeout 90 ncu --kernel-name k_pv_t --launch-skip 687 --launch-count 2 --clock-control none \
  --section SpeedOfLight --section WarpStateStats --section LaunchStats \
  --metrics smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_wait,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum \
  .gpu/muser bench -m $F --backend cuda --depths 8192 --gen 2 > $OUT/ncu-pv.txt 2>&1
el ncu done
timeout ${TIER_S:-100} bash tests/gpu/run.sh > /tmp/tier.log 2>&1; echo "tier rc $? (124: cut)" >> $OUT/tests.txt
grep -E 'gpu kernels|passed|FAIL|fail|^---' /tmp/tier.log | head -40 >> $OUT/tests.txt
el all done
