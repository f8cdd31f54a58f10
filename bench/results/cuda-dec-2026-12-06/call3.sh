# call 3: the Q8_0 and NVFP4 decode ring in blocks of 8, 4 and 2 warps (MUSER_CUDA_RING_WARPS):
# gpukernbench of each decode shape at T 1, then full-shape decode (muser bench --depths 128
# --gen 128) with 8 and 4 warps, three rounds interleaved, for both files. First the kernel test on
# the plugin without k_scores_t2 / k_pv_t2, and the copy rate of this machine.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader > $OUT/log.txt
Q=/tmp/q8.gguf N=/tmp/nv.gguf
(.gpu/muser gen --preset full --type q8_0 --threads 8 -o $Q.tmp > /dev/null 2>&1 && mv $Q.tmp $Q;
 .gpu/muser gen --preset full --type nvfp4 --threads 8 -o $N.tmp > /dev/null 2>&1 && mv $N.tmp $N) &
timeout 100 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/log.txt
for r in 1 2 3; do .gpu/gpukernbench copy 4096 --reps 20 >> $OUT/copy.txt 2>&1; done
for ty in Q8_0 NVFP4; do
  for sh in "4096 6656" "8192 6656" "512 6656" "6656 4096" "39936 6656" "6656 19968"; do
    for w in 8 4 2; do
      MUSER_CUDA_RING_WARPS=$w .gpu/gpukernbench $ty $sh 1 --reps 30 2>&1 | sed "s/^/w$w /" >> $OUT/kb.txt
    done
  done
done
el kb done
for f in $Q $N; do
  while [ ! -f $f ]; do sleep 2; done; el $f ready
  for r in 1 2 3; do
    for w in 8 4; do
      MUSER_CUDA_RING_WARPS=$w timeout 60 .gpu/muser bench -m $f --backend cuda --depths 128 --gen 128 2>&1 | grep "tok/s" |
        sed "s/^/$(basename $f) w$w r$r /" >> $OUT/dec.txt
    done
  done
  rm -f $f
done
el all done
