# call 1 of stop 38's device session: issue 19's GPU figure (muser's CUDA
# encoder against mtmd on CUDA, tools/device/cuda-vision-mtmd.sh) and, while
# libmtmd builds, an nsys kernel summary of muser's encoder (test_gpu_vision).
set -u
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
{ which nsys ncu; nvidia-smi; } >$OUT/tools.txt 2>&1
OUT=$OUT REPS=2 BUDGET=470 bash tools/device/cuda-vision-mtmd.sh >$OUT/mtmd-stdout.txt 2>&1 &
mkdir -p /tmp/tv/rows
if command -v nsys >/dev/null; then
  nsys profile -t cuda -o /tmp/tv/muser -f true .gpu/test_gpu_vision /tmp/tv >/tmp/tv/tgv.log 2>&1
  nsys stats -q --report cuda_gpu_kern_sum --format csv /tmp/tv/muser.nsys-rep >/tmp/tv/muser-kern.csv 2>&1
fi
wait
if command -v nsys >/dev/null && [ -x /tmp/cuda-vision-work/mtmd_ref ]; then
  MTMD_GPU=1 MTMD_REPEAT=2 timeout 60 nsys profile -t cuda -o /tmp/tv/mtmd -f true /tmp/cuda-vision-work/mtmd_ref \
    /tmp/cuda-vision-work/text-6656.gguf /tmp/cuda-vision-work/vision-full-f16.gguf /tmp/tv/rows 896 896 1 >/tmp/tv/mtmd.log 2>&1
  nsys stats -q --report cuda_gpu_kern_sum --format csv /tmp/tv/mtmd.nsys-rep >/tmp/tv/mtmd-kern.csv 2>&1
fi
tar -cJf $OUT/prof.tar.xz -C /tmp/tv tgv.log muser-kern.csv mtmd.log mtmd-kern.csv 2>/dev/null
ls -la $OUT
