# call 6 (issue 15): four busy slots on a GPU. bench/spec-slots with muser serve on CUDA (backend auto
# on the device), the bundled model and its drafter, main d6e3216's muser and plugin (stop 45's busy
# rule and shadow drafts: not yet measured on a GPU): plain, --spec ngram, --spec dflash, rotated
# order; then bench/spec-ngram --backend cuda on its four prompts, single slot.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz; mkdir -p /tmp/sp && tar -xJf .gpu/spec.tar.xz -C /tmp/sp
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=/tmp/sp/muser-cuda.so
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
/tmp/sp/muser info -m models/muser-default.gguf 2>&1 | grep -E "gpu|backend" >> $OUT/log.txt
timeout 200 python3 bench/spec-slots models/muser-default.gguf --muser /tmp/sp/muser --reps 9 --n 128 --parallel 4 \
  --draft models/muser-default.dflash.gguf > $OUT/slots.jsonl 2> $OUT/slots.err; el slots rc $?
timeout 150 python3 bench/spec-ngram models/muser-default.gguf --muser /tmp/sp/muser --reps 5 --n 256 --threads 2 \
  --backend cuda > $OUT/ngram.jsonl 2> $OUT/ngram.err; el ngram rc $?
el all done
