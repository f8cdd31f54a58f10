# call 1 of stop 35: the gpu tier on the new decode attention (k_scores_d four heads a thread, softmax sums
# in double in shared memory, P.V fmaf), A/B against main b82fd6f, phase profile, ncu of decode kernels
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
F=/tmp/full-q4_k_m.gguf
if [ ! -f $F ]; then .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 16 -o $F.tmp > $OUT/gen.log 2>&1 && mv $F.tmp $F; fi
echo "gen done at $(el)s" >> $OUT/log.txt
OUT=/tmp/cuda-h200-out bash tools/device/cuda-h200.sh --budget 200 --tier-cap 190 --no-bench > $OUT/tier-driver.log 2>&1
cp /tmp/cuda-h200-out/summary.txt $OUT/tier-summary.txt 2>/dev/null; xz -c /tmp/cuda-h200-out/tier.log > $OUT/tier.log.xz 2>/dev/null
echo "tier done at $(el)s" >> $OUT/log.txt
b() { # variant-name dir parallel [env...]
  local n=$1 d=$2 p=$3; shift 3
  env "$@" MUSER_CUDA_PLUGIN=$d/muser-cuda.so timeout 40 $d/muser bench -m $F --backend cuda --depths 512,2048,8192 --gen 128 --parallel $p 2>&1 | grep tok/s | sed "s/peak RSS.*//; s/^/$n p$p /" >> $OUT/ab.txt
}
N=$PWD/.gpu O=$PWD/.gpu/old
for rep in 1 2; do
  if [ $rep = 1 ]; then b old $O 4; b new $N 4; b new $N 1; b old $O 1
  else b new $N 4; b old $O 4; b old $O 1; b new $N 1; fi
done
b new-mma1 $N 4 MUSER_CUDA_DEC_MMA=1
b new-pvd0 $N 4 MUSER_CUDA_PVD_M=0
echo "ab done at $(el)s" >> $OUT/log.txt
for p in 4 1; do
  MUSER_CUDA_PLUGIN=$N/muser-cuda.so timeout 40 $N/muser bench -m $F --backend cuda --depths 512,8192 --gen 32 --parallel $p --profile > /tmp/prof$p.txt 2>&1
  sed "s/^/p$p /" /tmp/prof$p.txt >> $OUT/profile.txt
done
echo "profile done at $(el)s" >> $OUT/log.txt
export MUSER_CUDA_PLUGIN=$N/muser-cuda.so
timeout 150 ncu --kernel-name-base demangled --kernel-name 'regex:k_scores_d|k_softmax<\(bool\)1>|k_pv_dm|k_pv_comb' --metrics gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread \
  --cache-control none --clock-control none --csv $N/muser bench -m $F --backend cuda --depths 8192 --gen 3 --parallel 4 > /tmp/ncu8k.csv 2>$OUT/ncu8k.err
echo "ncu8k rc $? at $(el)s" >> $OUT/log.txt
xz -c /tmp/ncu8k.csv > $OUT/ncu8k.csv.xz
timeout $(( 570 - $(el) )) ncu --kernel-name-base demangled --kernel-name 'regex:k_scores_d|k_softmax<\(bool\)1>|k_pv_dm|k_pv_comb|k_mm_q4K_dec|k_mm_q6K_dec|k_mm_dec|k_post_add|k_rms|k_qk|k_swiglu|k_quant|k_gather|k_get_rows|k_mm_q8_dec' --metrics gpu__time_duration.sum,launch__grid_size \
  --cache-control none --clock-control none --csv $N/muser bench -m $F --backend cuda --depths 512 --gen 2 --parallel 4 > /tmp/ncu512.csv 2>$OUT/ncu512.err
echo "ncu512 rc $? at $(el)s" >> $OUT/log.txt
xz -c /tmp/ncu512.csv > $OUT/ncu512.csv.xz
echo "all done at $(el)s" >> $OUT/log.txt
