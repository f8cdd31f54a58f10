# call 2: stop 51's variants k_scores_t2 / k_pv_t2 against k_scores_t / k_pv_t (muser bench
# prefill at 2048 / 8192, two rounds interleaved, full-shape Q4_K_M); where the Q8_0 and NVFP4
# decode steps go (gpukernbench of each decode shape at T 1, Nsight Compute of FFN gate+up and
# down, `muser bench --profile` of a full-shape decode); NVFP4 full-shape decode, three reps.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader > $OUT/log.txt
F=/tmp/full.gguf Q=/tmp/q8.gguf N=/tmp/nv.gguf
(nice .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 8 -o $F.tmp > /dev/null 2>&1 && mv $F.tmp $F;
 nice .gpu/muser gen --preset full --type q8_0 --threads 8 -o $Q.tmp > /dev/null 2>&1 && mv $Q.tmp $Q) &
for ty in Q8_0 NVFP4 Q4_K; do
  for sh in "4096 6656" "256 6656" "6656 4096" "39936 6656" "6656 19968" "202048 6656"; do
    .gpu/gpukernbench $ty $sh 1 --reps 30 >> $OUT/kb.txt 2>&1
  done
done
el kb done
for ty in Q8_0 NVFP4; do
  for sh in "39936 6656" "6656 19968"; do
    timeout 60 ncu --launch-skip 1 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --section WarpStateStats --section LaunchStats --section Occupancy .gpu/gpukernbench $ty $sh 1 --reps 2 \
      > $OUT/ncu-$ty-${sh/ /x}.txt 2>&1
  done
done
el ncu done
while [ ! -f $F ]; do sleep 2; done; el q4km gen done
b() { env $2 timeout 100 .gpu/muser bench -m $F --backend cuda --depths 2048,8192 --gen 8 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$1 /" >> $OUT/ab.txt; }
for r in 1 2; do
  b t1 MUSER_CUDA_SCORES_T=1; b s2 MUSER_CUDA_SCORES_T=2; b p2 MUSER_CUDA_PV_T=2; b s2p2 "MUSER_CUDA_SCORES_T=2 MUSER_CUDA_PV_T=2"; el rep $r
done
rm -f $F
while [ ! -f $Q ]; do sleep 2; done; el q8 gen done
timeout 60 .gpu/muser bench -m $Q --backend cuda --depths 512 --gen 64 --profile > $OUT/prof-q8.txt 2>&1
rm -f $Q; el q8 profile done
.gpu/muser gen --preset full --type nvfp4 --threads 16 -o $N > /dev/null 2>&1; el nv gen done
for r in 1 2 3; do
  timeout 60 .gpu/muser bench -m $N --backend cuda --depths 512 --gen 128 2>&1 | grep "tok/s" | sed "s/^/nvfp4 r$r /" >> $OUT/dec.txt
done
el nv dec done
timeout 60 .gpu/muser bench -m $N --backend cuda --depths 512 --gen 64 --profile > $OUT/prof-nv.txt 2>&1
el all done
