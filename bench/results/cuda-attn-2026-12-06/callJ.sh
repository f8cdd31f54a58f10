# call J (for the next session; not run yet): k_scores_t2 (MUSER_CUDA_SCORES_T=2: each output's even
# and odd lanes on the two threads of a pair, four partial sums a thread instead of five) against
# k_scores_t, and k_pv_t2 (MUSER_CUDA_PV_T=2: V and the weights by cp.async two tiles ahead) against
# k_pv_t; then what call I would have run (golden prompts with --backend cuda, memcheck of a
# ring-wrapping prefill). Kernel test with =2, `muser bench` interleaved at 2048 / 8192, Nsight
# Compute of both scores kernels on layers 11 and 12 of chunk 12 of the 8192 prefill.
# Carry .gpu/cuda.tar.xz (tools/device/cuda-h200-pack.sh).
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/log.txt
F=/tmp/full.gguf
[ -f $F ] || (nice .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 4 -o $F.tmp > /tmp/gen.log 2>&1 && mv $F.tmp $F) &
MUSER_CUDA_SCORES_T=2 MUSER_CUDA_PV_T=2 timeout 100 .gpu/test_gpu_kern > /tmp/kern.log 2>&1
echo "kern (scores t2, pv t2) rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
grep -i -A3 fail /tmp/kern.log | head -30 >> $OUT/tests.txt
el kern done
cp .gpu/muser muser && cp .gpu/muser-cuda.so muser-cuda.so && mkdir -p build/tests/gpu build/golden &&
  cp .gpu/test_gpu_kern .gpu/test_gpu_engine .gpu/test_gpu_stream .gpu/test_gpu_vision .gpu/test_gpu_draft build/tests/gpu/
MUSER_BACKEND=cuda GOLDEN_WORK=$PWD/build/golden timeout 150 bash tests/golden/run.sh > /tmp/golden.log 2>&1
echo "golden rc $? (124: cut)" >> $OUT/tests.txt
grep -v '^ok' /tmp/golden.log | tail -25 >> $OUT/tests.txt; echo "ok lines: $(grep -c '^ok' /tmp/golden.log)" >> $OUT/tests.txt
for gm in g3-q4_k_m g8-1b-q4_k_m; do
  MUSER_CUDA_SCORES_T=2 MUSER_CUDA_PV_T=2 timeout 60 build/tests/gpu/test_gpu_engine build/golden/$gm.gguf 2>&1 |
    grep 'gpu engine' | sed 's/^/[t2] /' >> $OUT/tests.txt
done
el golden done
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
for v in 1 2; do
  MUSER_CUDA_SCORES_T=$v MUSER_CUDA_PV_T=$v timeout 60 $san --tool memcheck --error-exitcode 9 ./muser run -m build/golden/g3-q4_k_m.gguf \
    --prompt-ids $(seq -s, 1 900) -n 2 --temp 0 --backend cuda > /dev/null 2> /tmp/mc.log
  echo "memcheck g3, 900-token prompt, scores and pv $v: rc $?" >> $OUT/tests.txt; tail -5 /tmp/mc.log >> $OUT/tests.txt
done
el memcheck done
while [ ! -f $F ]; do sleep 2; done
b() { env $2 timeout 100 .gpu/muser bench -m $F --backend cuda --depths 2048,8192 --gen 8 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$1 /" >> $OUT/ab.txt; }
for r in 1 2; do
  b t1 MUSER_CUDA_SCORES_T=1; b s2 MUSER_CUDA_SCORES_T=2; b p2 MUSER_CUDA_PV_T=2; b s2p2 "MUSER_CUDA_SCORES_T=2 MUSER_CUDA_PV_T=2"; el rep $r
done
for v in 1 2; do
  MUSER_CUDA_SCORES_T=$v MUSER_CUDA_PV_T=$v timeout 90 ncu --kernel-name regex:'k_scores_t|k_pv_t' --launch-skip 1374 --launch-count 4 --clock-control none \
    --section SpeedOfLight --section WarpStateStats --section LaunchStats \
    --metrics smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_wait,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum \
    .gpu/muser bench -m $F --backend cuda --depths 8192 --gen 2 > $OUT/ncu-attn$v.txt 2>&1
done
el all done
