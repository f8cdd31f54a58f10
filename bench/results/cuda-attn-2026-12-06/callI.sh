# NOT RUN (2026-12-06, seventh session): too little device time was left to start a machine.
# call I: the parts of the gpu tier that calls F-H never reached, on the committed code: the golden
# models' prompts with --backend cuda against llama.cpp's answers, and compute-sanitizer memcheck of
# a short run and of a prompt that wraps g3's sliding ring (skipped tiles, whole-ring spans).
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
cp .gpu/muser muser && cp .gpu/muser-cuda.so muser-cuda.so && mkdir -p build/golden
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
MUSER_BACKEND=cuda GOLDEN_WORK=$PWD/build/golden timeout 150 bash tests/golden/run.sh > /tmp/golden.log 2>&1
echo "golden rc $? (124: cut)" >> $OUT/tests.txt
grep -v '^ok' /tmp/golden.log | tail -25 >> $OUT/tests.txt; grep -c '^ok' /tmp/golden.log >> $OUT/tests.txt
xz -9 < /tmp/golden.log > $OUT/golden.log.xz
el golden done
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
ids=$(seq -s, 1 900)
timeout 60 $san --tool memcheck --error-exitcode 9 ./muser run -m build/golden/g3-q4_k_m.gguf --prompt-ids $ids -n 2 --temp 0 \
  --backend cuda > /dev/null 2> /tmp/mc.log; echo "memcheck g3, 900-token prompt: rc $?" >> $OUT/tests.txt; tail -5 /tmp/mc.log >> $OUT/tests.txt
el memcheck done
