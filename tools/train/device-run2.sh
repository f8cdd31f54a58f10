#!/usr/bin/env bash
# Device call 2 (H200): the real run. Tokenizer, training (torch.compile,
# BUDGET seconds of training), transformers golden answers of the trained
# checkpoint, and a tiny random checkpoint saved as pytorch_model.bin (for the
# converter's torch-pickle reader). Needs carry: .devcarry/train (the corpus).
set -euo pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true
BUDGET=${BUDGET:-180}
W=/tmp/w; mkdir -p $W; T=tools/train; C=.devcarry/train/corpus
t0=$(date +%s)
python3 $T/train_tokenizer.py $C $W/tok 8192
mkdir -p $W/run; python3 $T/train.py --corpus $C --tokenizer $W/tok --out $W/run --budget $BUDGET --compile --eval-every 100 2>&1 | tee $W/run/train.log
python3 $T/golden.py $W/run/hf $T/golden-spec.json $W/run/golden-transformers.json | tee -a $W/run/train.log
python3 $T/tiny_random.py $W/tok $W/tinybin 12 && python3 - <<'PY'
import torch, sys
sys.path.insert(0, "tools/train")
from transformers import MuseGlimmerForConditionalGeneration
m = MuseGlimmerForConditionalGeneration.from_pretrained("/tmp/w/tinybin", dtype=torch.float32)
import os; os.remove("/tmp/w/tinybin/model.safetensors")
torch.save(m.state_dict(), "/tmp/w/tinybin/pytorch_model.bin")
PY
python3 $T/golden.py $W/tinybin $T/golden-spec.json $W/tinybin-golden.json
cp $W/tok/* $W/run/hf/ 2>/dev/null || true
tar cf - -C $W/run hf | split -b 15M - $OUT/ckpt.tar.part-
tar czf $OUT/logs.tgz -C $W run/loss.csv run/summary.json run/train.log run/golden-transformers.json tok
tar czf $OUT/tinybin.tgz -C $W tinybin tinybin-golden.json
ls -la $OUT; echo "device-run2 total $(( $(date +%s) - t0 ))s"
