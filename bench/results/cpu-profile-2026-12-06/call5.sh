# call 5 (issue 20): three builds interleaved, muser bench --profile --backend cpu on the 1B shape Q4_K_M at
# depth 512, 4 / 8 / 16 threads, three rounds: "old" the pack's muser (b512beb's CPU code), "vt" with the
# V scatter split by rows (job_vt), "g" also with the matmul owners' last claims halving down to one
# block (mm_take); then the full shape at 16 threads, old and g, twice each.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz; tar -xJf .gpu/ab.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
{ nproc; grep -m1 "model name" /proc/cpuinfo; } > $OUT/log.txt
./muser-g gen --preset 1b --type q4_k_m --threads 16 -o /tmp/m1b.gguf > /tmp/gen1b.log 2>&1; el gen1b rc $?
b() { # label binary model args...
  local n=$1 m=$2 f=$3; shift 3
  timeout 90 $m bench -m $f --depths 512 --profile --backend cpu "$@" 2>&1 | sed "s/^/$n /"
}
for r in 1 2 3; do
  for t in 4 8 16; do
    b "r$r t$t old" .gpu/muser /tmp/m1b.gguf --gen 16 --threads $t >> $OUT/prof1b.txt
    b "r$r t$t vt" ./muser-vt /tmp/m1b.gguf --gen 16 --threads $t >> $OUT/prof1b.txt
    b "r$r t$t g" ./muser-g /tmp/m1b.gguf --gen 16 --threads $t >> $OUT/prof1b.txt
  done
  el round $r
done
timeout 150 ./muser-g gen --preset full --type q4_k_m --quant fast --threads 16 -o /tmp/full.gguf > /tmp/genf.log 2>&1; el genf rc $?
for r in 1 2; do
  b "r$r old" .gpu/muser /tmp/full.gguf --gen 4 --threads 16 >> $OUT/proffull.txt
  b "r$r g" ./muser-g /tmp/full.gguf --gen 4 --threads 16 >> $OUT/proffull.txt
  el full $r
done
el all done
