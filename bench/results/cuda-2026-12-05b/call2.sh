# call 2: the tensor-core vision kernels (k_gemm_tc, k_attn_tc). In the
# background from the start, tools/device/cuda-vision-mtmd.sh (libmtmd with
# CUDA built here; then, once the jobs below are done, mtmd and muser timed
# at 896 in turn: the clean figures). Meanwhile: the sanitizers and the whole
# test_gpu_vision (tools/device/cuda-vision.sh), the kernels before
# (MUSER_CUDA_VIT_TC=0, the whole test again: timed while libmtmd builds,
# indicative only), and llama.cpp's greedy tokens after images with
# --backend cuda.
set -u
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
mkdir -p /tmp/mo
OUT=/tmp/mo REPS=3 BUDGET=560 WAIT_FOR=/tmp/mo/go VISION_WORK=/tmp/mw bash tools/device/cuda-vision-mtmd.sh \
  >/tmp/mo/stdout.txt 2>&1 &
OUT=$OUT bash tools/device/cuda-vision.sh
W=/tmp/cuda-vision-work
MUSER_CUDA_VIT_TC=0 timeout 150 .gpu/test_gpu_vision $W >$W/logs/vision-old.log 2>&1
echo "old (MUSER_CUDA_VIT_TC=0): rc $?" >>$OUT/ab.txt
grep -E "^bench|^FAIL|^gpu vision" $W/logs/vision-old.log | sed "s/^/old: /" >>$OUT/ab.txt
MUSER_BIN=$PWD/.gpu/muser MUSER_BACKEND=cuda timeout 200 bash tests/e2e/test_vision.sh >$OUT/e2e-vision.txt 2>&1
echo "e2e rc $?" >>$OUT/e2e-vision.txt
touch /tmp/mo/go
wait
cp /tmp/mo/vision-mtmd.txt /tmp/mo/vision-mtmd-logs.tar.xz /tmp/mo/stdout.txt $OUT/ 2>/dev/null
