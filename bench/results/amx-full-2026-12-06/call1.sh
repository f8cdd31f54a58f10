# The amx table against avx512 on the full shape's matrix widths (n 6656: q, k, v, gate, FFN gate and
# up; 19968: FFN down) and in muser bench on the full shape Q4_K_M at 16 threads (CPU of the GPU machine,
# the pack of tools/device/amx-xeon-pack.sh from main 1b41ffe: the CPU code of 617abb3).
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/amx.tar.xz -C .gpu; D=$PWD/.gpu/amx; export LD_LIBRARY_PATH=$D/lib
lscpu | grep -E 'Model name|^CPU\(s\)|Flags' | cut -c1-150 > $OUT/log.txt
F=/tmp/full.gguf
for r in 1 2; do for n in 6656 19968; do for k in avx512 amx; do
  timeout 60 $D/kernbench 16 0 512 $n Q4_K,Q6_K $k | grep '^{' | sed "s/^{/{\"r\": $r, \"n\": $n, /" >> $OUT/kernbench.jsonl
done; done; done
el kernbench done
(nice $D/muser gen --preset full --type q4_k_m --quant fast --threads 16 -o $F > /tmp/gen.log 2>&1; touch /tmp/gen.done)
el gen done
for r in 1 2; do
  for k in avx512 amx; do
    timeout 60 $D/muser bench -m $F --backend cpu --kern $k --threads 16 --depths 512 --gen 4 2>&1 | grep 'tok/s' | sed "s/^/r$r $k /" >> $OUT/bench.txt
  done
  el bench $r
done
el all done
