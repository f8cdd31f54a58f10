# call 2: where a decode step's time goes in the graph: MUSER_CUDA_SOL (an uncommitted experiment, sol.diff)
# leaves launches out of decode passes (results wrong, times a bound): 1 k_post_add, 2 attention, 4 k_qk,
# 8 SwiGLU, 16 the attention's matmuls (q/k/gate/v, wo), 32 the FFN's; L2 prefetch off (MUSER_CUDA_L2PF=0)
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so MUSER_CUDA_L2PF=0
F=/tmp/full.gguf
[ -f $F ] || .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 16 -o $F > /tmp/gen.log 2>&1
el gen done
b() { # SOL parallel depths
  MUSER_CUDA_SOL=$1 timeout 70 .gpu/muser bench -m $F --backend cuda --depths $3 --gen 128 --parallel $2 2>&1 | grep "tok/s" | sed "s/peak RSS.*//; s/^/sol$1 p$2 /" >> $OUT/sol.txt
}
for r in 1 2; do
  for v in 0 1 2 4 8 15 16 32 48 63; do b $v 1 512,8192; done
  el rep $r p1
done
for v in 0 15 48; do b $v 4 512; done
el all done
