# call 4 (issue 20): the V rows' scatter into the transposed cache split by rows (job_vt) against the
# pack's muser (b512beb's CPU code: the scatter inside job_qk, split by tokens), muser bench --profile on
# the 1B shape Q4_K_M at depth 512, 4 and 16 threads, three rounds interleaved; then kernbench's Q4_K and
# Q6_K gemm (2048 weight rows x n, 512 activation rows) at 1 / 4 / 16 threads for n 2048 and 6144 (do
# the FFN down shape's activations, re-read from L3 by every 16-row group, limit its scaling?); then the
# full shape at 16 threads, old and new, once each. CPU only (--backend cpu).
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz; tar -xJf .gpu/new.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
O=.gpu/muser N=./muser
{ nproc; grep -m1 "model name" /proc/cpuinfo; } > $OUT/log.txt
$N gen --preset 1b --type q4_k_m --threads 16 -o /tmp/m1b.gguf > /tmp/gen1b.log 2>&1; el gen1b rc $?
b() { # label binary args...
  local n=$1 m=$2; shift 2
  timeout 60 $m bench -m /tmp/m1b.gguf --depths 512 --gen 16 --profile --backend cpu "$@" 2>&1 | sed "s/^/$n /" >> $OUT/prof1b.txt
}
for r in 1 2 3; do
  for t in 4 16; do b "r$r t$t old" $O --threads $t; b "r$r t$t new" $N --threads $t; done
  el round $r
done
for t in 1 4 16; do for n in 2048 6144; do
  timeout 60 build/bench/kernbench $t 0 512 $n Q4_K,Q6_K avx512 2>&1 | grep gemm | sed "s/^/t$t n$n /" >> $OUT/kb.txt
done; done
el kb
timeout 150 $N gen --preset full --type q4_k_m --quant fast --threads 16 -o /tmp/full.gguf > /tmp/genf.log 2>&1; el genf rc $?
for m in old new; do
  x=$O; [ $m = new ] && x=$N
  [ -f /tmp/full.gguf ] && timeout 90 $x bench -m /tmp/full.gguf --depths 512 --gen 4 --threads 16 --profile --backend cpu 2>&1 | sed "s/^/$m /" >> $OUT/proffull.txt
  el full $m
done
el all done
