# call 7 (issue 15): call 6 found --spec dflash at 0.93x of plain with four busy slots on an H100, drafting
# nothing (every step busy). Here main d6e3216 ("old") against the same with no capture or injection of a
# dflash job's plain steps in busy batches ("new"): bench/spec-slots, the variants plain (old binary),
# dflash-old, dflash-new, ngram-new, rotated; then bench/spec-ngram --backend cuda on the dflash prompts
# (single slot): plain, dflash old and new.
set -u
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 ))s $*" >> $OUT/log.txt; }
tar -xJf .gpu/cuda.tar.xz; mkdir -p /tmp/sp && tar -xJf .gpu/spec.tar.xz -C /tmp/sp
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=/tmp/sp/muser-cuda.so
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/log.txt
D=models/muser-default.dflash.gguf
timeout 200 python3 bench/spec-slots models/muser-default.gguf --reps 11 --n 128 --parallel 4 --draft $D \
  --variant off=/tmp/sp/muser:none --variant dflash-old=/tmp/sp/muser:dflash --variant dflash-new=/tmp/sp/muser-new:dflash \
  --variant ngram-new=/tmp/sp/muser-new:ngram > $OUT/slots.jsonl 2> $OUT/slots.err; el slots rc $?
timeout 120 python3 bench/spec-ngram models/muser-default.gguf --reps 3 --n 128 --backend cuda --draft $D \
  --prompts bench/spec-prompts-dflash.json --variant plain=/tmp/sp/muser:none --variant dflash-old=/tmp/sp/muser:dflash \
  --variant dflash-new=/tmp/sp/muser-new:dflash > $OUT/single.jsonl 2> $OUT/single.err; el single rc $?
el all done
