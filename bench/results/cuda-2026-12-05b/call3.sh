# call 3: 9e71d7c+ (the tensor-core kernels, the position grid resized straight into the permuted rows
# with the AVX-512 blend, test_gpu_vision --bench). In the background from the start,
# tools/device/cuda-vision-mtmd.sh (libmtmd with CUDA built here; after the jobs below, mtmd and muser
# --bench in turn, REPS=3: the clean figures). Meanwhile: the whole test_gpu_vision with
# MUSER_CUDA_VIT_PROF=1 (verdicts, and the device time of each phase of every image on stderr).
set -u
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
mkdir -p /tmp/mo /tmp/cv
OUT=/tmp/mo REPS=3 BUDGET=520 WAIT_FOR=/tmp/mo/go VISION_WORK=/tmp/mw bash tools/device/cuda-vision-mtmd.sh \
  >/tmp/mo/stdout.txt 2>&1 &
.gpu/muser gen --mmproj /tmp/cv/vision-full-f16.gguf --preset full >/tmp/cv/gen.log 2>&1
MUSER_CUDA_VIT_PROF=1 timeout 200 .gpu/test_gpu_vision /tmp/cv >$OUT/vision-prof.txt 2>&1
echo "test_gpu_vision (MUSER_CUDA_VIT_PROF=1): rc $?" >>$OUT/vision-prof.txt
touch /tmp/mo/go
wait
cp /tmp/mo/vision-mtmd.txt /tmp/mo/vision-mtmd-logs.tar.xz /tmp/mo/stdout.txt $OUT/ 2>/dev/null
