# call 3 of stop 33: the final code: gpu tier, bench p1/p4, llama.cpp compare; then p4 gen 128 A/B vs win
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
tar -xJf .gpu/cuda.tar.xz
bash tools/device/cuda-h200.sh --budget 450 --tier-cap 300 --compare --depths 512,2048,8192 --reps 2 --par 1,4
export LD_LIBRARY_PATH=$PWD/.gpu/lib
M=$PWD/.gpu/muser F=/tmp/full-q4_k_m.gguf NEW=$PWD/.gpu/muser-cuda.so WIN=$PWD/.gpu/old/muser-cuda-win.so
for rep in 1 2; do for v in new win; do for p in 1 4; do
  [ $(el) -gt 560 ] && break 3
  P=$NEW; [ $v = win ] && P=$WIN
  MUSER_CUDA_PLUGIN=$P timeout 60 $M bench -m $F --backend cuda --depths 512 --gen 128 --parallel $p 2>&1 | grep tok/s | sed "s/peak RSS.*//; s/^/rep $rep [$v] p$p gen128 /" >> $OUT/ab128.txt
done; done; done
echo "ab128 done at $(el)s" >> $OUT/summary.txt
cat $OUT/ab128.txt
