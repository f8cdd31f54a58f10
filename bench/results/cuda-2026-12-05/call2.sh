# call 2 of stop 35: gpu tier on k_pv_dt (tiled V pass for several lone tokens), q4_mma_block deleted;
# A/B k_pv_dt vs k_pv_dm at four slots; ncu durations and full sections of k_softmax and k_pv_dt; SASS
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
R=/tmp/r; mkdir -p $R
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
F=/tmp/full-q4_k_m.gguf
if [ ! -f $F ]; then .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 16 -o $F.tmp > $R/gen.log 2>&1 && mv $F.tmp $F; fi
echo "gen done at $(el)s" >> $OUT/log.txt
OUT=/tmp/cuda-h200-out bash tools/device/cuda-h200.sh --budget 230 --tier-cap 220 --no-bench > $R/tier-driver.log 2>&1
cp /tmp/cuda-h200-out/summary.txt $OUT/tier-summary.txt 2>/dev/null; cp /tmp/cuda-h200-out/tier.log $R/tier.log 2>/dev/null
grep -E "FAIL|failed|passed|ok$" /tmp/cuda-h200-out/tier.log | grep -v "^ok" | tail -30 > $R/tier-grep.txt
echo "tier done at $(el)s" >> $OUT/log.txt
N=$PWD/.gpu
b() { # name parallel [env...]
  local n=$1 p=$2; shift 2
  env "$@" MUSER_CUDA_PLUGIN=$N/muser-cuda.so timeout 40 $N/muser bench -m $F --backend cuda --depths 512,2048,8192 --gen 128 --parallel $p 2>&1 | grep tok/s | sed "s/peak RSS.*//; s/^/$n p$p /" >> $OUT/ab.txt
}
b dt 4; b dm 4 MUSER_CUDA_PVD_M=1; b dt 1; b dm 4 MUSER_CUDA_PVD_M=1; b dt 4; b dt 1
echo "ab done at $(el)s" >> $OUT/log.txt
export MUSER_CUDA_PLUGIN=$N/muser-cuda.so
timeout 100 ncu --kernel-name-base demangled --kernel-name 'regex:k_scores_d|k_softmax<\(bool\)1>|k_pv_dt|k_pv_comb' --metrics gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread \
  --cache-control none --clock-control none --csv $N/muser bench -m $F --backend cuda --depths 8192 --gen 3 --parallel 4 > $R/ncu8k.csv 2>$R/ncu8k.err
echo "ncu8k rc $? at $(el)s" >> $OUT/log.txt
timeout 150 ncu --kernel-name-base demangled --kernel-name 'regex:k_softmax<\(bool\)1>|k_pv_dt' --launch-skip 400 --launch-count 8 --set full --import-source no \
  -o /tmp/full $N/muser bench -m $F --backend cuda --depths 8192 --gen 3 --parallel 4 > $R/ncufull.log 2>&1
echo "ncu full rc $? at $(el)s" >> $OUT/log.txt
ncu -i /tmp/full.ncu-rep --page details > $R/ncufull-details.txt 2>&1
ncu -i /tmp/full.ncu-rep --page source --csv --print-source sass > $R/ncufull-source.csv 2>&1 || true
CO=$(dirname $(command -v ncu))/cuobjdump; [ -x $CO ] || CO=/usr/local/cuda/bin/cuobjdump
$CO -sass -fun k_pv_dt $N/muser-cuda.so > $R/sass-pv_dt.txt 2>&1
$CO -sass $N/muser-cuda.so 2>/dev/null | awk '/Function : .*k_softmax/{f=1} /Function : /&&!/k_softmax/{f=0} f' > $R/sass-softmax.txt
echo "all done at $(el)s" >> $OUT/log.txt
tar -cJf $OUT/r.tar.xz -C /tmp r
