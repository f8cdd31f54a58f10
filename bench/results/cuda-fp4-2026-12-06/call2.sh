# call 2: v2 = call 1's change plus whole chunks without a test a block (the -128 fix decided once a
# chunk), a one-token instantiation of k_mm_q8_dec, and Q8_0 / NVFP4 ring blocks of at least four
# warps before one thread block an SM (ring_shape; FFN down at four tokens took blocks of two). Tests of v2: kernel test, golden prompts with
# --backend cuda (every model, NVFP4 included), engine tests g2 (Q8_0), g9 (NVFP4). gpukernbench of
# the decode shapes at T 1 and FFN at T 4, old (main e0050fe) / v1 (call 1's plugin) / v2. Full-shape decode
# (--depths 128 --gen 128) NVFP4 old / v1 / v2, Q8_0 old / v2, two rounds interleaved. Nsight
# Compute of v2's NVFP4 FFN gate+up at T 1.
# Carry .gpu/cuda.tar.xz, .gpu/old-plugin.so.xz, .gpu/v1-plugin.so.xz.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz && xz -dk .gpu/old-plugin.so.xz .gpu/v1-plugin.so.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
V2=$PWD/.gpu/muser-cuda.so V1=$PWD/.gpu/v1-plugin.so OLD=$PWD/.gpu/old-plugin.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader > $OUT/log.txt
Q=/tmp/q8.gguf N=/tmp/nv.gguf
(nice .gpu/muser gen --preset full --type nvfp4 --threads 8 -o $N.tmp > /dev/null 2>&1 && mv $N.tmp $N;
 nice .gpu/muser gen --preset full --type q8_0 --threads 8 -o $Q.tmp > /dev/null 2>&1 && mv $Q.tmp $Q) &
timeout 100 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
grep FAIL /tmp/kern.log | head -20 >> $OUT/tests.txt
el kern done
cp .gpu/muser muser && cp .gpu/muser-cuda.so muser-cuda.so && mkdir -p build/tests/gpu build/golden &&
  cp .gpu/test_gpu_kern .gpu/test_gpu_engine .gpu/test_gpu_stream .gpu/test_gpu_vision .gpu/test_gpu_draft build/tests/gpu/
MUSER_BACKEND=cuda GOLDEN_WORK=$PWD/build/golden timeout 200 bash tests/golden/run.sh > /tmp/golden.log 2>&1
echo "golden rc $? (124: cut)" >> $OUT/tests.txt
grep -v '^ok' /tmp/golden.log | grep -v '^---' | tail -15 >> $OUT/tests.txt
echo "ok lines: $(grep -c '^ok' /tmp/golden.log); largest |dp|: $(grep -o 'max |dp| [0-9.e+-]*' /tmp/golden.log | awk '{print $3}' | sort -g | tail -1)" >> $OUT/tests.txt
for gm in g2-q8_0 g9-nvfp4; do
  timeout 60 build/tests/gpu/test_gpu_engine build/golden/$gm.gguf 2>&1 | grep 'gpu engine' >> $OUT/tests.txt
done
el tests done
kb() { MUSER_CUDA_PLUGIN=$2 .gpu/gpukernbench $3 $4 $5 $6 --reps 30 2>&1 | sed "s/^/$1 /" >> $OUT/kb.txt; }
for ty in NVFP4 Q8_0; do
  for sh in "8704 6656" "6656 4096" "39936 6656" "6656 19968" "202048 6656"; do
    kb old $OLD $ty $sh 1; kb v1 $V1 $ty $sh 1; kb v2 $V2 $ty $sh 1
  done
  for sh in "39936 6656" "6656 19968"; do kb old $OLD $ty $sh 4; kb v2 $V2 $ty $sh 4; done
done
el kb done
timeout 60 ncu --launch-skip 1 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section Occupancy \
  --section ComputeWorkloadAnalysis .gpu/gpukernbench NVFP4 39936 6656 1 --reps 2 > $OUT/ncu-nvfp4-gu.txt 2>&1
el ncu done
while [ ! -f $N ] && [ $(( $(date +%s) - T0 )) -lt 420 ]; do sleep 2; done
b() { MUSER_CUDA_PLUGIN=$3 timeout 60 .gpu/muser bench -m $2 --backend cuda --depths 128 --gen 128 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$1 /" >> $OUT/dec.txt; }
for r in 1 2; do
  [ -f $N ] && { b "nv old" $N $OLD; b "nv v1" $N $V1; b "nv v2" $N $V2; }
  [ -f $Q ] && [ $(( $(date +%s) - T0 )) -lt 520 ] && { b "q8 old" $Q $OLD; b "q8 v2" $Q $V2; }
  el dec round $r
done
el all done
