# call 8: k_mm_q4K_wg with its token tile, sums and d in one bulk copy a super-block (cp.async.bulk, an mbarrier a
# buffer; k_q8K_h writes them in that layout): kernel test (verbose), engine test, every Q4_K shape on both
# kernels, Nsight Compute, `muser bench` interleaved and --profile.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/log.txt
F=/tmp/full.gguf
(nice .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 8 -o $F > /tmp/gen.log 2>&1; touch /tmp/gen.done) &
MUSER_TEST_VERBOSE=1 timeout 90 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
grep -i -A8 fail /tmp/kern.log | head -60 >> $OUT/tests.txt
mkdir -p /tmp/g
while read -r name opts; do
  case $name in g8-1b-q4_k_m) ;; *) continue ;; esac
  .gpu/muser gen -o /tmp/g/$name.gguf $opts --name $name > /dev/null 2>&1
  timeout 60 .gpu/test_gpu_engine /tmp/g/$name.gguf > /tmp/eng.log 2>&1; echo "engine $name rc $?: $(tail -1 /tmp/eng.log)" >> $OUT/tests.txt
done < tests/golden/models.txt
el tests done
KB=.gpu/gpukernbench
for t in 512 2048; do
  for s in "4096 6656" "256 6656" "6656 4096" "39936 6656" "6656 19968"; do
    for v in 0 1; do
      MUSER_CUDA_Q4_WG=$v timeout 20 $KB Q4_K $s $t --reps 15 2>&1 | sed "s/^/hmma=$v /" >> $OUT/kb.txt
    done
  done
done
el kb done
W=/tmp/w; mkdir -p $W
timeout 90 ncu --kernel-name regex:k_mm_q4K_wg --launch-skip 2 --launch-count 1 --clock-control none \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats \
  --section ComputeWorkloadAnalysis --section SourceCounters -o $W/hs $KB Q4_K 39936 6656 512 --reps 3 > $W/hs.log 2>&1
ncu -i $W/hs.ncu-rep > $W/hs.txt 2>&1
ncu -i $W/hs.ncu-rep --page source --csv --print-source sass > $W/hs.src.csv 2>&1
(cd $W && tar -cJf $OUT/ncu.tar.xz hs.txt hs.log hs.src.csv)
el ncu done
while [ ! -f /tmp/gen.done ]; do sleep 2; done
el gen done
b() { # name env
  env $2 timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512,2048 --gen 16 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$1 /" >> $OUT/ab.txt
}
for r in 1 2 3; do b tc MUSER_CUDA_Q4_WG=0; b hs MUSER_CUDA_Q4_WG=1; el rep $r; done
for v in 0 1; do
  echo "== MUSER_CUDA_Q4_WG=$v" >> $OUT/prof.txt
  MUSER_CUDA_Q4_WG=$v timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512 --gen 8 --profile 2>&1 | grep 'prefill\|profile' >> $OUT/prof.txt
done
el all done
