# call 6 of stop 34: Nsight Compute (full set) of the decode attention kernels of a four-token step at depth 2048: layer 2 (sliding) and 3 (full)
set -u
[ -d .gpu/lib ] || tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
F=/tmp/full-q4_k_m.gguf
[ -f $F ] || { echo "no $F"; exit 0; }
timeout 200 ncu --kernel-name-base demangled --kernel-name 'regex:k_scores_d|k_softmax<\(bool\)1>|k_pv_d' --launch-skip ${SKIP:-318} --launch-count 6 \
  --clock-control none --set full -o /tmp/attn -f .gpu/muser bench -m $F --backend cuda --depths 2048 --gen 3 --parallel 4 > $OUT/ncu-run.log 2>&1
echo "ncu rc $?" >> $OUT/ncu-run.log
ncu --import /tmp/attn.ncu-rep --print-details all > $OUT/attn-details.txt 2>&1
xz -9 $OUT/attn-details.txt
