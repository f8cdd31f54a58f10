# call 7 of stop 33: steady decode step at 1 and 4 slots from the difference of two generation lengths
set -u
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
M=$PWD/.gpu/muser F=/tmp/full-q4_k_m.gguf
[ -f $F ] || { echo "no $F (machine was not warm)"; exit 0; }
for rep in 1 2; do for p in 1 4; do for g in 64 256; do
  timeout 60 $M bench -m $F --backend cuda --depths 512 --gen $g --parallel $p 2>&1 | grep tok/s | sed "s/peak RSS.*//; s/^/rep $rep p$p gen$g /" | tee -a $OUT/steady.txt
done; done; done
