# call 1: what stop 51 left unrun (callJ.sh of cuda-attn-2026-12-06): the kernel test with
# k_scores_t2 and k_pv_t2, the golden prompts with --backend cuda, the engine tests with the
# variants, memcheck of a ring-wrapping prefill both ways; then the copy rate (gpukernbench copy)
# and the full-shape Q8_0 decode against it (muser bench --gen 128, three reps).
# Carry .gpu/cuda.tar.xz (tools/device/cuda-h200-pack.sh).
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader > $OUT/log.txt
Q=/tmp/q8.gguf
(nice .gpu/muser gen --preset full --type q8_0 --threads 6 -o $Q.tmp > $OUT/gen-q8.log 2>&1 && mv $Q.tmp $Q) &
MUSER_CUDA_SCORES_T=2 MUSER_CUDA_PV_T=2 timeout 100 .gpu/test_gpu_kern > /tmp/kern.log 2>&1
echo "kern (scores t2, pv t2) rc $?: $(tail -1 /tmp/kern.log)" >> $OUT/tests.txt
grep -i -A3 fail /tmp/kern.log | head -30 >> $OUT/tests.txt
el kern done
cp .gpu/muser muser && cp .gpu/muser-cuda.so muser-cuda.so && mkdir -p build/tests/gpu build/golden &&
  cp .gpu/test_gpu_kern .gpu/test_gpu_engine .gpu/test_gpu_stream .gpu/test_gpu_vision .gpu/test_gpu_draft build/tests/gpu/
MUSER_BACKEND=cuda GOLDEN_WORK=$PWD/build/golden timeout 200 bash tests/golden/run.sh > /tmp/golden.log 2>&1
echo "golden rc $? (124: cut)" >> $OUT/tests.txt
grep -v '^ok' /tmp/golden.log | tail -25 >> $OUT/tests.txt; echo "ok lines: $(grep -c '^ok' /tmp/golden.log)" >> $OUT/tests.txt
cp /tmp/golden.log $OUT/golden.log
el golden done
for gm in g3-q4_k_m g8-1b-q4_k_m; do
  MUSER_CUDA_SCORES_T=2 MUSER_CUDA_PV_T=2 timeout 60 build/tests/gpu/test_gpu_engine build/golden/$gm.gguf 2>&1 |
    grep 'gpu engine' | sed 's/^/[t2] /' >> $OUT/tests.txt
done
el engine t2 done
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
for v in 1 2; do
  MUSER_CUDA_SCORES_T=$v MUSER_CUDA_PV_T=$v timeout 60 $san --tool memcheck --error-exitcode 9 ./muser run -m build/golden/g3-q4_k_m.gguf \
    --prompt-ids $(seq -s, 1 900) -n 2 --temp 0 --backend cuda > /dev/null 2> /tmp/mc.log
  echo "memcheck g3, 900-token prompt, scores and pv $v: rc $?" >> $OUT/tests.txt; tail -5 /tmp/mc.log >> $OUT/tests.txt
done
el memcheck done
for r in 1 2 3; do .gpu/gpukernbench copy 4096 --reps 20 >> $OUT/copy.txt 2>&1; .gpu/gpukernbench copy 1024 --reps 20 >> $OUT/copy.txt 2>&1; done
el copy done
while [ ! -f $Q ] && [ $(( $(date +%s) - T0 )) -lt 420 ]; do sleep 2; done
ls -la $Q >> $OUT/log.txt 2>&1; el q8 gen done
for r in 1 2 3; do
  timeout 60 .gpu/muser bench -m $Q --backend cuda --depths 512 --gen 128 2>&1 | grep "tok/s" | sed "s/^/q8 r$r /" >> $OUT/dec.txt
  el q8 rep $r
done
