#!/usr/bin/env bash
# check-dflash.sh: llama.cpp and the PyTorch drafter of
# tools/train/dflash_model.py (which tests/unit/test_dflash.c holds muser's
# drafts to) draft the same blocks from a random DFlash drafter with its own
# embedding and head (`muser gen --dflash --own-head`, attention.causal
# false, no injected context: llama.cpp's plain context runs the block
# path). Needs node-llama-cpp installed in tests/golden (README step 2), python3 with
# torch and numpy (Debian: python3-torch); skips without them.
set -u
cd "$(dirname "$0")/../.."
PY=${PYTHON:-/usr/bin/python3}
[ -d "tests/golden/node_modules/node-llama-cpp" ] || { echo "skip: node-llama-cpp is not installed in tests/golden"; exit 0; }
"$PY" -c "import torch, numpy" 2>/dev/null || { echo "skip: $PY has no torch/numpy"; exit 0; }
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
./muser gen --dflash -o "$T/d.gguf" --target tests/data/dflash/target.gguf --own-head --layers 2 --block-size 8 \
  --type f32 --seed 5 2>/dev/null || { echo "FAIL: muser gen --dflash"; exit 1; }
LASTS="3 7 11 100 250 17 42"
MASK=$("$PY" -c "import sys; sys.path.insert(0,'tools/convert'); import gguf; print(gguf.Reader('$T/d.gguf').kv['tokenizer.ggml.mask_token_id'])")
(cd tests/golden && node llamacpp-dflash.mjs "$T/d.gguf" "$MASK" 8 $LASTS) >"$T/llama.json" 2>"$T/err" || { echo "FAIL: node: $(tail -3 "$T/err")"; exit 1; }
(cd tools/train && "$PY" - "$T/d.gguf" $LASTS) >"$T/torch.json" <<'PYEOF'
import json, sys
from dflash_model import Target, drafter_from_gguf, draft_block, test_features
t = Target("../../tests/data/dflash/target.gguf")
d, tl = drafter_from_gguf(sys.argv[1], t)
f = test_features(1, len(tl) * t.n_embd)
print(json.dumps([dict(last=int(l), drafts=draft_block(d, f, 0, int(l), 7).argmax(-1).tolist()) for l in sys.argv[2:]]))
PYEOF
if "$PY" -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(a!=b)" "$T/llama.json" "$T/torch.json"; then
  echo "ok   llama.cpp and the PyTorch drafter draft the same blocks ($(wc -w <<<"$LASTS") blocks of 7)"
else
  echo "FAIL: llama.cpp $(cat "$T/llama.json") vs torch $(cat "$T/torch.json")"; exit 1
fi
