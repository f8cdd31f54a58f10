# call 3 of stop 35: gpu tier on the merged code (logits rows' best on the device, ABI 10; attention kernels
# read their spans before waiting on the kernel before; the softmax's exponentials a cell a thread);
# A/B of MUSER_LOGITS_BEST=0/1 at one and four slots; verification cost on CUDA (1B shape)
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
R=/tmp/r; mkdir -p $R
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
F=/tmp/full-q4_k_m.gguf
if [ ! -f $F ]; then .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 16 -o $F.tmp > $R/gen.log 2>&1 && mv $F.tmp $F; fi
.gpu/muser gen --preset 1b --type q4_k_m -o /tmp/m1b.gguf > $R/gen1b.log 2>&1
echo "gen done at $(el)s" >> $OUT/log.txt
OUT=/tmp/cuda-h200-out bash tools/device/cuda-h200.sh --budget 230 --tier-cap 220 --no-bench > $R/tier-driver.log 2>&1
cp /tmp/cuda-h200-out/summary.txt $OUT/tier-summary.txt 2>/dev/null; cp /tmp/cuda-h200-out/tier.log $R/tier.log 2>/dev/null
echo "tier done at $(el)s" >> $OUT/log.txt
N=$PWD/.gpu
b() { # name parallel [env...]
  local n=$1 p=$2; shift 2
  env "$@" MUSER_CUDA_PLUGIN=$N/muser-cuda.so timeout 40 $N/muser bench -m $F --backend cuda --depths 512,2048,8192 --gen 128 --parallel $p 2>&1 | grep tok/s | sed "s/peak RSS.*//; s/^/$n p$p /" >> $OUT/ab.txt
}
b best 4; b nobest 4 MUSER_LOGITS_BEST=0; b best 1; b nobest 1 MUSER_LOGITS_BEST=0
b nobest 4 MUSER_LOGITS_BEST=0; b best 4; b nobest 1 MUSER_LOGITS_BEST=0; b best 1
echo "ab done at $(el)s" >> $OUT/log.txt
export MUSER_CUDA_PLUGIN=$N/muser-cuda.so
VERIFYBENCH_BACKEND=cuda timeout 60 $N/verifybench /tmp/m1b.gguf 1 512 9 1,2,3,4,7,8,15 > $R/verify-1b-512.jsonl 2>&1
VERIFYBENCH_BACKEND=cuda timeout 60 $N/verifybench $F 1 512 5 1,3,7,15 > $R/verify-full-512.jsonl 2>&1
echo "verify done at $(el)s" >> $OUT/log.txt
timeout 100 ncu --kernel-name-base demangled --kernel-name 'regex:k_scores_d|k_softmax<\(bool\)1>|k_pv_dt|k_pv_comb|k_best' --metrics gpu__time_duration.sum,launch__grid_size \
  --cache-control none --clock-control none --csv $N/muser bench -m $F --backend cuda --depths 8192 --gen 3 --parallel 4 > $R/ncu8k.csv 2>$R/ncu8k.err
echo "ncu8k rc $? at $(el)s" >> $OUT/log.txt
echo "all done at $(el)s" >> $OUT/log.txt
tar -cJf $OUT/r.tar.xz -C /tmp r
