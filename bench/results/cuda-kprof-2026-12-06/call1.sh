# call 1: where the kernels spend their issue slots. The SASS of the plugin, gpukernbench on the
# full shape's matmuls (prefill 512 tokens and one decode token), Nsight Compute's per-instruction
# counters (source page) for the Q4_K and Q6_K prefill kernels and the one-token Q4_K kernel, the
# kernel test (the D1Q6 removal and run_matmul have not run on a device), then muser bench --profile
# on the full shape and the gpu tier with what time is left.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
CB=${CB:-560}; left() { echo $(( CB - $(date +%s) + T0 )); }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/log.txt; nproc >> $OUT/log.txt
F=/tmp/full.gguf
(.gpu/muser gen --preset full --type q4_k_m --quant fast --threads 8 -o $F > /tmp/gen.log 2>&1; touch /tmp/gen.done) &
W=/tmp/w; mkdir -p $W
cuobjdump -sass .gpu/muser-cuda.so > $W/plugin.sass 2>&1; el sass rc $?
KB=.gpu/gpukernbench
for s in "Q4_K 39936 6656 512" "Q4_K 6656 4096 512" "Q4_K 4096 6656 512" "Q6_K 6656 19968 512" "Q4_K 6656 19968 512" \
         "Q4_K 39936 6656 2048" "Q6_K 6656 19968 2048" \
         "Q4_K 39936 6656 1" "Q4_K 6656 19968 1" "Q6_K 6656 19968 1" "Q4_K 4096 6656 1" "Q4_K 6656 4096 1" \
         "Q4_K 256 6656 1" "Q6_K 256 6656 1" "Q4_K 39936 6656 4" "Q6_K 6656 19968 4"; do
  timeout 30 $KB $s --reps 30 >> $OUT/kb.txt 2>&1 || echo "rc $? $s" >> $OUT/kb.txt
done
el kb done
nc() { # name kernel-regex skip kb-args...
  local n=$1 k=$2 sk=$3; shift 3
  timeout 60 ncu --kernel-name regex:$k --launch-skip $sk --launch-count 1 --clock-control none \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats \
    --section SourceCounters --section Occupancy --section LaunchStats -o $W/$n $KB "$@" --reps 3 > $W/$n.log 2>&1
  el ncu $n rc $?
  ncu -i $W/$n.ncu-rep > $W/$n.txt 2>&1
  ncu -i $W/$n.ncu-rep --page source --csv --print-source sass > $W/$n.src.csv 2>&1
}
nc q4p k_mm_q4K_tc 2 Q4_K 39936 6656 512
nc q6p k_mm_q6K_mma 2 Q6_K 6656 19968 512
nc q4d 'k_mm_q4K' 2 Q4_K 39936 6656 1
nc q6d 'k_mm_q6K' 2 Q6_K 6656 19968 1
(cd $W && tar -cJf $OUT/prof.tar.xz plugin.sass *.txt *.log *.src.csv)
el prof packed
mkdir -p build/tests/gpu && cp .gpu/muser muser && cp .gpu/muser-cuda.so muser-cuda.so &&
  cp .gpu/test_gpu_kern .gpu/test_gpu_engine .gpu/test_gpu_stream .gpu/test_gpu_vision .gpu/test_gpu_draft build/tests/gpu/
timeout 60 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern rc $?: $(tail -2 /tmp/kern.log)" >> $OUT/tests.txt
grep -i fail /tmp/kern.log | head >> $OUT/tests.txt
el kern done
while [ ! -f /tmp/gen.done ]; do sleep 2; done
el gen done
timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512 --gen 32 --profile > $OUT/profile.txt 2>&1
el profile rc $?
for r in 1 2; do
  timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512,2048 --gen 32 2>&1 | grep tok/s | sed "s/peak RSS.*//; s/^/r$r /" >> $OUT/bench.txt
done
el bench done
[ $(left) -gt 60 ] && { timeout $(( $(left) - 15 )) bash tests/gpu/run.sh > /tmp/tier.log 2>&1; el tier rc $?; xz -c /tmp/tier.log > $OUT/tier.log.xz; }
el all done
