# call 4 of stop 35: gpu tier on the final code (k_best kernel test, attention spans read before the PDL wait,
# softmax exponentials a cell a thread, graphs for passes of up to 16 tokens); A/B against the same tree with
# the attention file of e742055 and GRAPH_MAX_T 8 (.gpu/old); verification cost on CUDA, new vs old
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
R=/tmp/r; mkdir -p $R
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
F=/tmp/full-q4_k_m.gguf
if [ ! -f $F ]; then .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 16 -o $F.tmp > $R/gen.log 2>&1 && mv $F.tmp $F; fi
.gpu/muser gen --preset 1b --type q4_k_m -o /tmp/m1b.gguf > $R/gen1b.log 2>&1
echo "gen done at $(el)s" >> $OUT/log.txt
OUT=/tmp/cuda-h200-out bash tools/device/cuda-h200.sh --budget 200 --tier-cap 190 --no-bench > $R/tier-driver.log 2>&1
cp /tmp/cuda-h200-out/summary.txt $OUT/tier-summary.txt 2>/dev/null; cp /tmp/cuda-h200-out/tier.log $R/tier.log 2>/dev/null
echo "tier done at $(el)s" >> $OUT/log.txt
N=$PWD/.gpu O=$PWD/.gpu/old
b() { # name plugin-dir parallel
  MUSER_CUDA_PLUGIN=$2/muser-cuda.so timeout 40 $N/muser bench -m $F --backend cuda --depths 512,2048,8192 --gen 128 --parallel $3 2>&1 | grep tok/s | sed "s/peak RSS.*//; s/^/$1 p$3 /" >> $OUT/ab.txt
}
b new $N 4; b old $O 4; b old $O 1; b new $N 1; b old $O 4; b new $N 4
echo "ab done at $(el)s" >> $OUT/log.txt
for v in new old; do
  d=$N; [ $v = old ] && d=$O
  MUSER_CUDA_PLUGIN=$d/muser-cuda.so VERIFYBENCH_BACKEND=cuda timeout 40 $N/verifybench /tmp/m1b.gguf 1 512 7 1,3,7,8,11,15 | sed "s/^/$v /" >> $R/verify-1b-512.txt 2>&1
done
MUSER_CUDA_PLUGIN=$N/muser-cuda.so VERIFYBENCH_BACKEND=cuda timeout 50 $N/verifybench $F 1 512 5 7,8,15 | sed "s/^/new /" >> $R/verify-full-512.txt 2>&1
echo "verify done at $(el)s" >> $OUT/log.txt
echo "all done at $(el)s" >> $OUT/log.txt
tar -cJf $OUT/r.tar.xz -C /tmp r
