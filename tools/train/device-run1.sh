#!/usr/bin/env bash
# Device call 1 (H200): transformers check, tokenizer training, tiny random
# checkpoint + transformers golden for converter tests, short training smoke
# tests (eager and torch.compile). Needs carry: .devcarry/train (the corpus).
set -euo pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true
W=/tmp/w; mkdir -p $W; T=tools/train; C=.devcarry/train/corpus
python3 -c "import transformers,torch;print('versions', transformers.__version__, torch.__version__, torch.cuda.get_device_name(0))"
TD=$(python3 -c "import transformers,os;print(os.path.dirname(transformers.__file__))")
tar czf $OUT/hf-src.tgz -C $TD/models muse_glimmer
t0=$(date +%s)
python3 $T/train_tokenizer.py $C $W/tok 8192; echo "tokenizer $(( $(date +%s) - t0 ))s"
python3 $T/tiny_random.py $W/tok $W/tiny
python3 $T/golden.py $W/tiny $T/golden-spec.json $W/tiny-golden.json
python3 $T/train.py --corpus $C --tokenizer $W/tok --out $W/smoke --budget 40 --max-docs 600 --warmup 20 --eval-every 100
python3 $T/golden.py $W/smoke/hf $T/golden-spec.json $W/smoke-golden.json
ls -la $W/smoke/hf
tar czf $OUT/run1.tgz -C $W tok tiny tiny-golden.json smoke/loss.csv smoke/summary.json smoke-golden.json
python3 $T/train.py --corpus $C --tokenizer $W/tok --out $W/smoke2 --budget 60 --max-docs 600 --warmup 20 --eval-every 100 --compile 2>&1 | grep -v Warning | tail -20 || true
echo done $(( $(date +%s) - t0 ))s
