# call 8: call7.sh cut to what the device time left allows (call 7 never started): v3's kernel
# test (default), the engine test on a
# 1B-shape Q4_K_M file, gpukernbench of the one-token Q4_K launches v2 / v3, full-shape Q4_K_M
# decode at depth 512, v2 / v3 interleaved. Carry .gpu/cuda.tar.xz, .gpu/v2-plugin.so.xz.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz && xz -dk .gpu/v2-plugin.so.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
V3=$PWD/.gpu/muser-cuda.so V2=$PWD/.gpu/v2-plugin.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader > $OUT/log.txt
F=/tmp/q4km.gguf
(.gpu/muser gen --preset 1b --type q4_k_m --threads 4 -o /tmp/1b.gguf > /dev/null 2>&1;
 .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 12 -o $F.tmp > /tmp/gen.log 2>&1 && mv $F.tmp $F) &
kt() { env $2 timeout 60 .gpu/test_gpu_kern > /tmp/kern.log 2>&1; echo "kern [$1] rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt; grep FAIL /tmp/kern.log | head -10 >> $OUT/tests.txt; }
kt default X=1
el kern done
[ -f /tmp/1b.gguf ] && timeout 40 .gpu/test_gpu_engine /tmp/1b.gguf 2>&1 | grep 'gpu engine' >> $OUT/tests.txt
el engine done
kb() { MUSER_CUDA_PLUGIN=$2 .gpu/gpukernbench $3 $4 $5 1 --reps 40 2>&1 | sed "s/^/$1 /" >> $OUT/kb.txt; }
for sh in "39936 6656" "6656 19968" "4352 6656" "6656 4096"; do kb v2 $V2 Q4_K $sh; kb v3 $V3 Q4_K $sh; done
el kb done
while [ ! -f $F ] && [ $(( $(date +%s) - T0 )) -lt 150 ]; do sleep 2; done
b() { MUSER_CUDA_PLUGIN=$2 timeout 40 .gpu/muser bench -m $F --backend cuda --depths 512 --gen 128 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/$1 /" >> $OUT/dec.txt; }
if [ -f $F ]; then
  for rep in 1 2; do b v2 $V2; b v3 $V3; [ $(( $(date +%s) - T0 )) -lt 175 ] || break; done
fi
el all done
