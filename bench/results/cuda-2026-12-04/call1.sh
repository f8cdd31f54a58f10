# call 1 of stop 34: where a four-slot step's time goes (instrumented build), and a stall profile of the four-token Q4_K ring
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
M=$PWD/.gpu/muser F=/tmp/full-q4_k_m.gguf
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv > $OUT/smi.txt 2>&1
if [ ! -f $F ]; then $M gen --preset full --type q4_k_m --quant fast --threads 16 -o $F.tmp > $OUT/gen.log 2>&1 && mv $F.tmp $F; fi
echo "gen done at $(el)s" >> $OUT/log.txt
I=$PWD/.gpu/instr
for rep in 1 2; do for p in 1 4; do for g in 64 256; do
  MUSER_STEP_TIMING=1 MUSER_CUDA_PLUGIN=$I/muser-cuda.so timeout 90 $I/muser bench -m $F --backend cuda --depths 512 --gen $g --parallel $p > /tmp/o.txt 2>&1
  tail -3 /tmp/o.txt | grep -v "tok/s\|STEPTIME\|SCHEDTIME" >> $OUT/errs.txt
  grep -h "tok/s\|STEPTIME\|SCHEDTIME" /tmp/o.txt | sed "s/peak RSS.*//; s/^/rep $rep p$p gen$g /" >> $OUT/steady.txt
done; done; done
echo "steady done at $(el)s" >> $OUT/log.txt
export MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
timeout 200 ncu --kernel-name-base demangled --kernel-name 'regex:k_mm_q4K_dec<\(bool\)0, \(int\)., \(bool\)1>' --launch-skip 8 --launch-count 4 \
  --clock-control none --set full --import-source no -o /tmp/q4mma -f $M bench -m $F --backend cuda --depths 512 --gen 4 --parallel 4 > $OUT/ncu-run.log 2>&1
echo "ncu rc $? at $(el)s" >> $OUT/log.txt
ncu --import /tmp/q4mma.ncu-rep --print-details all > $OUT/ncu-details.txt 2>&1
ncu --import /tmp/q4mma.ncu-rep --page source --print-source sass --csv > $OUT/ncu-sass.csv 2>&1
xz -9 $OUT/ncu-sass.csv
echo "all done at $(el)s" >> $OUT/log.txt
