# call G: the prefill attention after call F's Nsight Compute (k_scores_t at ~24 % of the FP32 lanes,
# k_pv_t ~29 %, both with the shared memory the busiest unit): k_scores_t issues all its tile loads
# before the stores and maps a warp to 4 row groups x 8 cell groups (each shared load <= 128 bytes);
# k_pv_t stores its V tile 16 bytes a thread (no bank conflicts). Kernel test, the engine tests of
# the golden models (CPU vs CUDA), `muser bench` against main 52c9eba's plugin at 2048 / 8192,
# --profile at 8192, Nsight Compute of layers 11 and 12 of chunk 12 (as call F), then the gpu tier.
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
while read -r name opts; do
  case $name in ''|\#*) continue ;; esac
  [ -f build/golden/$name.gguf ] || ./muser gen -o build/golden/$name.gguf $opts --name $name > /dev/null 2>&1
  timeout 60 build/tests/gpu/test_gpu_engine build/golden/$name.gguf >> $OUT/tests.txt 2>&1
done < tests/golden/models.txt
el engine done
while [ ! -f $F ]; do sleep 2; done
el model ready
b() { env $2 timeout 100 .gpu/muser bench -m $F --backend cuda --depths 2048,8192 --gen 8 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$1 /" >> $OUT/ab.txt; }
for r in 1 2; do b head MUSER_CUDA_PLUGIN=/tmp/head.so; b new X=1; el rep $r; done
timeout 60 .gpu/muser bench -m $F --backend cuda --depths 8192 --gen 8 --profile 2>&1 | grep 'prefill\|profile' > $OUT/prof8192.txt
el prof done
timeout 120 ncu --kernel-name regex:'k_scores_t|k_softmax_t|k_pv_t' --launch-skip 2061 --launch-count 6 --clock-control none \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats \
  --metrics smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_wait,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum \
  .gpu/muser bench -m $F --backend cuda --depths 8192 --gen 2 > $OUT/ncu-attn.txt 2>&1
el attn done
timeout ${TIER_S:-150} bash tests/gpu/run.sh > /tmp/tier.log 2>&1; echo "tier rc $? (124: cut)" >> $OUT/tests.txt
grep -E '=== gpu tier|gpu kernels|passed|FAIL|fail|memcheck|^---' /tmp/tier.log | head -60 >> $OUT/tests.txt
el all done
