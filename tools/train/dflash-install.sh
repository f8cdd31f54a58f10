#!/usr/bin/env bash
# Installs the result of tools/train/dflash-device.sh (its $OUT, brought
# back from the GPU machine) into the repository: the drafter as
# muser-default.dflash.gguf in models/ (what `--spec dflash` uses with the
# bundled model when no --draft is named), the logs under
# dflash/ in tools/train/logs/, and the figures into docs/speculative.md
# between the "dflash-figures" markers (tools/train/dflash_figures.py).
# usage (repository root): tools/train/dflash-install.sh OUT_DIR
set -euo pipefail
S=${1:?usage: tools/train/dflash-install.sh OUT_DIR}
for f in muser-default.dflash.gguf train/summary.json train/log.jsonl train.log; do
    [ -f "$S/$f" ] || { echo "dflash-install: missing $S/$f" >&2; exit 1; }
done
./muser info "$S/muser-default.dflash.gguf" >/dev/null 2>&1 || true
cp "$S/muser-default.dflash.gguf" models/muser-default.dflash.gguf
L=tools/train/logs/dflash
mkdir -p $L
cp "$S/train/summary.json" "$S/train/log.jsonl" "$S/train.log" $L/
cp "$S/train/hf/config.json" $L/drafter-config.json
for f in accept.json accept.md accept.log env.txt; do
    [ -f "$S/$f" ] && cp "$S/$f" $L/
done
python3 tools/train/dflash_figures.py $L docs/speculative.md
ls -la models/muser-default.dflash.gguf $L
echo "dflash-install: now check with: ./muser run -p 'def f(x):' -n 64 --temp 0 --spec dflash; bash tests/e2e/test_spec.sh"
