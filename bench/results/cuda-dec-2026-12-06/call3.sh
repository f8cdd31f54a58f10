# call 3: the norm kernels quantize their rows to Q8_0 too (pre_q: the q/k/v/gate and FFN gate/up
# inputs of Q8_0 and NVFP4 files, two launches fewer a layer), against main 1d62859's plugin
# (.gpu/old-plugin.so.xz); the Q8_0 / NVFP4 decode ring in blocks of 8 and 4 warps
# (MUSER_CUDA_RING_WARPS). Tests first: kernel test, golden prompts with --backend cuda, engine
# tests (CPU against CUDA logits) on g2 (Q8_0), g9 (NVFP4), g3; the copy rate; gpukernbench at
# T 1; full-shape decode (--depths 128 --gen 128), old-w8 / new-w8 / new-w4 interleaved, three
# rounds for Q8_0, then two for NVFP4.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz && xz -dc .gpu/old-plugin.so.xz > .gpu/old.so
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader > $OUT/log.txt
Q=/tmp/q8.gguf N=/tmp/nv.gguf
(nice .gpu/muser gen --preset full --type q8_0 --threads 8 -o $Q.tmp > /dev/null 2>&1 && mv $Q.tmp $Q;
 nice .gpu/muser gen --preset full --type nvfp4 --threads 8 -o $N.tmp > /dev/null 2>&1 && mv $N.tmp $N) &
timeout 100 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
cp .gpu/muser muser && cp .gpu/muser-cuda.so muser-cuda.so && mkdir -p build/tests/gpu build/golden &&
  cp .gpu/test_gpu_kern .gpu/test_gpu_engine .gpu/test_gpu_stream .gpu/test_gpu_vision .gpu/test_gpu_draft build/tests/gpu/
MUSER_BACKEND=cuda GOLDEN_WORK=$PWD/build/golden timeout 200 bash tests/golden/run.sh > /tmp/golden.log 2>&1
echo "golden rc $? (124: cut)" >> $OUT/tests.txt
grep -v '^ok' /tmp/golden.log | grep -v '^---' | tail -15 >> $OUT/tests.txt
echo "ok lines: $(grep -c '^ok' /tmp/golden.log); largest |dp|: $(grep -o 'max |dp| [0-9.e+-]*' /tmp/golden.log | awk '{print $3}' | sort -g | tail -1)" >> $OUT/tests.txt
for gm in g2-q8_0 g9-nvfp4 g3-q4_k_m; do
  timeout 60 build/tests/gpu/test_gpu_engine build/golden/$gm.gguf 2>&1 | grep 'gpu engine' >> $OUT/tests.txt
done
el tests done
for r in 1 2 3; do .gpu/gpukernbench copy 4096 --reps 20 >> $OUT/copy.txt 2>&1; done
for ty in Q8_0 NVFP4; do
  for sh in "8192 6656" "6656 4096" "39936 6656" "6656 19968"; do
    for w in 8 4; do
      MUSER_CUDA_RING_WARPS=$w .gpu/gpukernbench $ty $sh 1 --reps 30 2>&1 | sed "s/^/w$w /" >> $OUT/kb.txt
    done
  done
done
el kb done
for f in $Q $N; do
  while [ ! -f $f ]; do sleep 2; done; el $f ready
  rounds=3; [ $f = $N ] && rounds=2
  for r in $(seq $rounds); do
    for v in old-w8 new-w8 new-w4; do
      p=$PWD/.gpu/muser-cuda.so; [ ${v%-*} = old ] && p=$PWD/.gpu/old.so
      MUSER_CUDA_PLUGIN=$p MUSER_CUDA_RING_WARPS=${v#*-w} timeout 60 .gpu/muser bench -m $f --backend cuda --depths 128 --gen 128 2>&1 |
        grep "tok/s" | sed "s/peak RSS.*//; s/^/$(basename $f) $v r$r /" >> $OUT/dec.txt
    done
  done
  rm -f $f; el $f done
done
