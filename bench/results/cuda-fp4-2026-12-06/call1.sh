# call 1: NVFP4 decode with the device layout (scale 0x7f made 0, nibbles regrouped a chain a half
# word) and codes split by sign (fp4_mags: one byte permute a four, two dp4a from MAGIC_I, their
# difference as the float); Q8_0 decode's (float) by MAGIC_I too. Kernel test; gpukernbench of
# every decode shape, old plugin (main e0050fe) / new / new with rings of 3 chunks
# (MUSER_CUDA_Q8D_S=3), interleaved; engine test on a 1B NVFP4 model; full-shape NVFP4 decode
# (--depths 128 --gen 128), old / new / new-s3, two rounds.
# Carry .gpu/cuda.tar.xz and .gpu/old-plugin.so.xz.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz && xz -dk .gpu/old-plugin.so.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
NEW=$PWD/.gpu/muser-cuda.so OLD=$PWD/.gpu/old-plugin.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader > $OUT/log.txt
N=/tmp/nv.gguf
(nice .gpu/muser gen --preset 1b --type nvfp4 --threads 4 -o /tmp/nv-1b.gguf > /dev/null 2>&1;
 nice .gpu/muser gen --preset full --type nvfp4 --threads 12 -o $N.tmp > /dev/null 2>&1 && mv $N.tmp $N) &
timeout 150 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
grep FAIL /tmp/kern.log | head -20 >> $OUT/tests.txt
el kern done
MUSER_CUDA_Q8D_S=3 timeout 150 .gpu/test_gpu_kern > /tmp/kern3.log 2>&1; echo "kern (s3) rc $?: $(tail -1 /tmp/kern3.log)" >> $OUT/tests.txt
el kern s3 done
while [ ! -f /tmp/nv-1b.gguf ]; do sleep 1; done; sleep 1
timeout 60 .gpu/test_gpu_engine /tmp/nv-1b.gguf 2>&1 | grep 'gpu engine' >> $OUT/tests.txt
MUSER_CUDA_Q8D_S=3 timeout 60 .gpu/test_gpu_engine /tmp/nv-1b.gguf 2>&1 | grep 'gpu engine' | sed 's/^/[s3] /' >> $OUT/tests.txt
el engine done
kb() { MUSER_CUDA_PLUGIN=$2 env $3 .gpu/gpukernbench $4 $5 $6 $7 --reps 30 2>&1 | sed "s/^/$1 /" >> $OUT/kb.txt; }
for r in 1 2; do
  for ty in NVFP4 Q8_0; do
    for sh in "4096 6656" "256 6656" "6656 4096" "39936 6656" "6656 19968" "202048 6656"; do
      for T in 1 4; do
        [ $T = 4 ] && [ $ty = Q8_0 ] && continue
        kb old $OLD X=1 $ty $sh $T; kb new $NEW X=1 $ty $sh $T; kb s3 $NEW MUSER_CUDA_Q8D_S=3 $ty $sh $T
      done
    done
  done
  el kb round $r
done
while [ ! -f $N ] && [ $(( $(date +%s) - T0 )) -lt 330 ]; do sleep 2; done
ls -la $N >> $OUT/log.txt 2>&1; el nv gen done
b() { MUSER_CUDA_PLUGIN=$2 env $3 timeout 60 .gpu/muser bench -m $N --backend cuda --depths 128 --gen 128 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$1 /" >> $OUT/dec.txt; }
for r in 1 2; do
  b old $OLD X=1; b new $NEW X=1; b s3 $NEW MUSER_CUDA_Q8D_S=3; el dec round $r
done
el all done
