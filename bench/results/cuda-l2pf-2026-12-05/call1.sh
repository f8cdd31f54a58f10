# call 1: L2 prefetch of the next matmul's weights on a side stream (MUSER_CUDA_L2PF megabytes a fork, 0 off):
# engine tests (CPU vs CUDA, bit for bit, graphs with the forked stream), then an A/B of decode at one and
# four slots, full shape Q4_K_M, and Nsight Compute sections of k_post_add at one token
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
F=/tmp/full.gguf
(.gpu/muser gen --preset full --type q4_k_m --quant fast --threads 12 -o $F > /tmp/gen.log 2>&1; touch /tmp/gen.done) &
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv > $OUT/machine.txt 2>&1
mkdir -p build/tests/gpu /tmp/g; cp .gpu/test_gpu_* build/tests/gpu/
{
  for v in 24 0; do
    echo "== MUSER_CUDA_L2PF=$v"
    MUSER_CUDA_L2PF=$v timeout 60 .gpu/test_gpu_engine models/muser-default.gguf 2>&1 | tail -3
    for name in g3-q4_k_m g2-q8_0 g8-1b-q4_k_m; do
      opts=$(grep "^$name " tests/golden/models.txt | cut -d' ' -f2-)
      [ -f /tmp/g/$name.gguf ] || .gpu/muser gen -o /tmp/g/$name.gguf $opts --name $name > /dev/null 2>&1
      MUSER_CUDA_L2PF=$v timeout 90 .gpu/test_gpu_engine /tmp/g/$name.gguf 2>&1 | tail -2
    done
  done
} > $OUT/engine.txt 2>&1
el engine tests done
while [ ! -f /tmp/gen.done ]; do sleep 2; done
el gen done
b() { # L2PF parallel depths
  MUSER_CUDA_L2PF=$1 timeout 70 .gpu/muser bench -m $F --backend cuda --depths $3 --gen 128 --parallel $2 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/pf$1 p$2 /" >> $OUT/ab.txt
}
for r in 1 2; do
  for v in 0 24 40; do b $v 1 512,8192; done
  el rep $r p1
  for v in 24 0; do b $v 4 512; done
  el rep $r p4
done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
if [ -n "$NCU" ]; then
  MUSER_CUDA_L2PF=0 timeout 150 $NCU -k regex:k_post_add --launch-skip 200 --launch-count 2 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis .gpu/muser bench -m $F --backend cuda --depths 512 --gen 4 > $OUT/ncu-post-add.txt 2>&1
  el ncu done
fi
el all done
