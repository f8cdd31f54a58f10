# call 2: the prefill kernels' copies with their addresses formed once (q4w_plan, q6w_plan, q8_plan)
# against main 5a6bb63's plugin ("old"): the kernel test and engine tests, gpukernbench on the full
# shape's prefill shapes, Nsight Compute on the new Q4_K kernel, muser bench interleaved (full shape
# Q4_K_M), then the gpu tier in what is left.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
CB=${CB:-540}; left() { echo $(( CB - $(date +%s) + T0 )); }
tar -xJf .gpu/cuda.tar.xz; mkdir -p .gpu/old && xz -dc .gpu/old-plugin.so.xz > .gpu/old/muser-cuda.so
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
N=$PWD/.gpu/muser-cuda.so O=$PWD/.gpu/old/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/log.txt
F=/tmp/full.gguf
(nice .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 8 -o $F > /tmp/gen.log 2>&1; touch /tmp/gen.done) &
timeout 90 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
grep -i fail /tmp/kern.log | head -5 >> $OUT/tests.txt
el kern done
KB=.gpu/gpukernbench
for r in 1 2; do
  for s in "Q4_K 39936 6656 512" "Q4_K 39936 6656 2048" "Q6_K 6656 19968 512" "Q6_K 6656 19968 2048" "Q4_K 6656 19968 512" "Q4_K 4096 6656 512"; do
    for v in old new; do
      p=$N; [ $v = old ] && p=$O
      MUSER_CUDA_PLUGIN=$p timeout 20 $KB $s --reps 20 2>&1 | sed "s/^/r$r $v /" >> $OUT/kb.txt
    done
  done
done
el kb done
W=/tmp/w; mkdir -p $W
for v in old new; do
  p=$N; [ $v = old ] && p=$O
  MUSER_CUDA_PLUGIN=$p timeout 60 ncu --kernel-name regex:k_mm_q4K_tc --launch-skip 2 --launch-count 1 --clock-control none \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats \
    --section Occupancy --section LaunchStats -o $W/q4$v $KB Q4_K 39936 6656 512 --reps 3 > $W/q4$v.log 2>&1
  ncu -i $W/q4$v.ncu-rep > $W/q4$v.txt 2>&1
done
(cd $W && tar -cJf $OUT/ncu.tar.xz *.txt *.log)
el ncu done
while [ ! -f /tmp/gen.done ]; do sleep 2; done
el gen done
b() { # name plugin
  MUSER_CUDA_PLUGIN=$2 timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512,2048 --gen 16 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$1 /" >> $OUT/ab.txt
}
for r in 1 2 3; do b old $O; b new $N; el rep $r; done
mkdir -p /tmp/g
while read -r name opts; do
  case $name in g3-q4_k_m|g5-q6_k|g8-1b-q4_k_m) ;; *) continue ;; esac
  .gpu/muser gen -o /tmp/g/$name.gguf $opts --name $name > /dev/null 2>&1
  timeout 60 .gpu/test_gpu_engine /tmp/g/$name.gguf > /tmp/eng.log 2>&1; echo "engine $name rc $?: $(tail -1 /tmp/eng.log)" >> $OUT/tests.txt
done < tests/golden/models.txt
el engine done
cp .gpu/muser muser && cp .gpu/muser-cuda.so muser-cuda.so && mkdir -p build/tests/gpu &&
  cp .gpu/test_gpu_kern .gpu/test_gpu_engine .gpu/test_gpu_stream .gpu/test_gpu_vision .gpu/test_gpu_draft build/tests/gpu/
timeout $(( $(left) - 5 )) bash tests/gpu/run.sh > /tmp/tier.log 2>&1; echo "tier rc $?" >> $OUT/tests.txt
xz -c /tmp/tier.log > $OUT/tier.log.xz
grep -E 'FAIL|fail|summary|ok$|skip' /tmp/tier.log | tail -30 >> $OUT/tests.txt
el all done
