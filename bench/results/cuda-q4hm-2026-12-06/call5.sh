# call 5: where call 4's end-to-end loss comes from: every Q4_K matmul shape of the full model at 512
# and 2048 tokens on both kernels (gpukernbench), and `muser bench --profile` with each.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/log.txt
F=/tmp/full.gguf
(nice .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 8 -o $F > /tmp/gen.log 2>&1; touch /tmp/gen.done) &
KB=.gpu/gpukernbench
for t in 512 2048; do
  for s in "4096 6656" "256 6656" "6656 4096" "39936 6656" "6656 19968"; do
    for v in 0 1; do
      MUSER_CUDA_Q4_HMMA=$v timeout 20 $KB Q4_K $s $t --reps 15 2>&1 | sed "s/^/hmma=$v /" >> $OUT/kb.txt
    done
  done
done
el kb done
while [ ! -f /tmp/gen.done ]; do sleep 2; done
el gen done
for v in 0 1 0 1; do
  echo "== MUSER_CUDA_Q4_HMMA=$v" >> $OUT/prof.txt
  MUSER_CUDA_Q4_HMMA=$v timeout 60 .gpu/muser bench -m $F --backend cuda --depths 512 --gen 8 --profile >> $OUT/prof.txt 2>&1
done
el all done
