# call 3 (issue 20): where prefill's time goes as threads grow, on the device's 16-vCPU Xeon. muser bench
# --profile (per-phase times, ms a token) on the 1B shape Q4_K_M at depth 512, 4 / 8 / 16 threads, three
# rounds interleaved, the avx512 kernels (auto's choice) and at 16 threads amx too; then (after the 1B runs, so that nothing else runs beside them) the full shape at
# 16 threads once; perf's symbols at 16 threads if perf is there. No GPU work.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
M=.gpu/muser
{ nproc; grep -m1 "model name" /proc/cpuinfo; } > $OUT/log.txt
$M gen --preset 1b --type q4_k_m --threads 16 -o /tmp/m1b.gguf > /tmp/gen1b.log 2>&1; el gen1b rc $?
b() { # label args...
  local n=$1; shift
  timeout 60 $M bench -m /tmp/m1b.gguf --depths 512 --gen 16 --profile --backend cpu "$@" 2>&1 | sed "s/^/$n /" >> $OUT/prof1b.txt
}
for r in 1 2 3; do
  for t in 4 8 16; do b "r$r t$t avx512" --threads $t --kern avx512; done
  b "r$r t16 amx" --threads 16 --kern amx
  el round $r
done
if command -v perf >/dev/null; then
  perf record -q -g -o /tmp/perf.data $M bench -m /tmp/m1b.gguf --depths 512 --gen 4 --threads 16 --backend cpu > /dev/null 2>&1
  perf report -i /tmp/perf.data --no-children --sort sym 2>/dev/null | grep -v '^#' | head -60 > $OUT/perf16.txt
  el perf
else echo "no perf" >> $OUT/log.txt; fi
timeout 150 $M gen --preset full --type q4_k_m --quant fast --threads 16 -o /tmp/full.gguf > /tmp/genf.log 2>&1; el genf rc $?
[ -f /tmp/full.gguf ] && timeout 90 $M bench -m /tmp/full.gguf --depths 512 --gen 4 --threads 16 --profile --backend cpu > $OUT/proffull.txt 2>&1
el all done
