# call 6 (2026-12-07): call4.sh plus Q8_0 full-shape decode. v3 = v2 (main 6efe9b8) plus four rows a warp for Q8_0 / NVFP4 ring launches where eight
# would leave fewer than two thread blocks an SM (q8d_rpw: q/k/v/gate, wo, FFN down; each lane one
# chain). Tests of v3: kernel test (default: the test's small matrices take four rows a warp;
# MUSER_CUDA_Q8D_RPW=8 with MUSER_CUDA_Q8D_T=16), golden prompts with --backend cuda, engine tests
# g2 (Q8_0) and g9 (NVFP4). gpukernbench of the launches that change at T 1, v2 / v3. Full-shape
# decode, NVFP4, v2 / v3, one run each, and Q8_0 (generated after NVFP4 in the background), two runs each.
# Carry .gpu/cuda.tar.xz, .gpu/v2-plugin.so.xz.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz && xz -dk .gpu/v2-plugin.so.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
V3=$PWD/.gpu/muser-cuda.so V2=$PWD/.gpu/v2-plugin.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader > $OUT/log.txt
Q=/tmp/q8.gguf N=/tmp/nv.gguf
(nice .gpu/muser gen --preset full --type nvfp4 --threads 8 -o $N.tmp > /dev/null 2>&1 && mv $N.tmp $N;
 nice .gpu/muser gen --preset full --type q8_0 --threads 12 -o $Q.tmp > /dev/null 2>&1 && mv $Q.tmp $Q) &
kt() { env $2 timeout 100 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern [$1] rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt; grep FAIL /tmp/kern.log | head -10 >> $OUT/tests.txt; }
kt default X=1; kt "rpw 8, t 16" "MUSER_CUDA_Q8D_RPW=8 MUSER_CUDA_Q8D_T=16"
el kern done
cp .gpu/muser muser && cp .gpu/muser-cuda.so muser-cuda.so && mkdir -p build/tests/gpu build/golden &&
  cp .gpu/test_gpu_kern .gpu/test_gpu_engine .gpu/test_gpu_stream .gpu/test_gpu_vision .gpu/test_gpu_draft build/tests/gpu/
MUSER_BACKEND=cuda GOLDEN_WORK=$PWD/build/golden timeout 120 bash tests/golden/run.sh > /tmp/golden.log 2>&1
echo "golden rc $? (124: cut)" >> $OUT/tests.txt
grep -v '^ok' /tmp/golden.log | grep -v '^---' | tail -15 >> $OUT/tests.txt
echo "ok lines: $(grep -c '^ok' /tmp/golden.log); largest |dp|: $(grep -o 'max |dp| [0-9.e+-]*' /tmp/golden.log | awk '{print $3}' | sort -g | tail -1)" >> $OUT/tests.txt
el golden done
for m in build/golden/g2-q8_0.gguf build/golden/g9-nvfp4.gguf; do
  [ -f $m ] && timeout 60 .gpu/test_gpu_engine $m 2>&1 | grep 'gpu engine' >> $OUT/tests.txt
done
el engine done
kb() { MUSER_CUDA_PLUGIN=$2 env $3 .gpu/gpukernbench $4 $5 $6 1 --reps 30 2>&1 | sed "s/^/$1 /" >> $OUT/kb.txt; }
for ty in NVFP4 Q8_0; do
  for sh in "8704 6656" "6656 4096" "6656 19968"; do
    kb v2 $V2 X=1 $ty $sh; kb v3 $V3 X=1 $ty $sh
  done
done
el kb done
while [ ! -f $N ] && [ $(( $(date +%s) - T0 )) -lt 230 ]; do sleep 2; done
b() { MUSER_CUDA_PLUGIN=$3 timeout 40 .gpu/muser bench -m $2 --backend cuda --depths 128 --gen 128 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$1 /" >> $OUT/dec.txt; }
[ -f $N ] && { b "nv v2" $N $V2; b "nv v3" $N $V3; }
el nv done
while [ ! -f $Q ] && [ $(( $(date +%s) - T0 )) -lt 400 ]; do sleep 2; done
[ -f $Q ] && { b "q8 v2" $Q $V2; b "q8 v3" $Q $V3; b "q8 v2" $Q $V2; b "q8 v3" $Q $V3; }
el q8 done
[ -f $N ] && [ $(( $(date +%s) - T0 )) -lt 480 ] && { b "nv v2" $N $V2; b "nv v3" $N $V3; }
el all done
