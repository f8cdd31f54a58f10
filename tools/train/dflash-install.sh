#!/usr/bin/env bash
# Installs the result of tools/train/dflash-device.sh (its $OUT, brought
# back from the GPU machine) into the repository: the drafter as
# muser-default.dflash.gguf in models/ (what `--spec dflash` uses with the
# bundled model when no --draft is named), the logs under
# dflash/ in tools/train/logs/, and the figures into docs/speculative.md
# between the "dflash-figures" markers (tools/train/dflash_figures.py).
# A drafter without a shortlist head (what training writes) gets the
# previous drafter's (tools/train/dflash_shortlist.py --from).
# usage (repository root): tools/train/dflash-install.sh OUT_DIR
set -euo pipefail
S=${1:?usage: tools/train/dflash-install.sh OUT_DIR}
for f in muser-default.dflash.gguf summary.json; do
    [ -f "$S/$f" ] || { echo "dflash-install: missing $S/$f" >&2; exit 1; }
done
X=$(mktemp -d)
trap 'rm -rf "$X"' EXIT
if [ -f "$S/dflash-logs.tar.xz" ]; then
    tar -xJf "$S/dflash-logs.tar.xz" -C "$X"
else # a killed run: what came back
    mkdir -p "$X/train"
    cp "$S/summary.json" "$X/train/"
    [ -f "$S/train.log" ] && cp "$S/train.log" "$X/"
fi
cp "$S/summary.json" "$X/train/summary.json" # the mirror is the newest
[ -f "$X/train/log.jsonl" ] || : >"$X/train/log.jsonl"
[ -f models/muser-default.dflash.gguf ] && cp models/muser-default.dflash.gguf "$X/previous.gguf"
cp "$S/muser-default.dflash.gguf" models/muser-default.dflash.gguf
# the training writes no shortlist head: keep the one the previous drafter shipped with
if [ -f "$X/previous.gguf" ] && ! grep -q muser.dflash.shortlist models/muser-default.dflash.gguf &&
    grep -q muser.dflash.shortlist "$X/previous.gguf"; then
    python3 tools/train/dflash_shortlist.py --draft models/muser-default.dflash.gguf --from "$X/previous.gguf"
fi
L=tools/train/logs/dflash
mkdir -p $L
cp "$X/train/summary.json" "$X/train/log.jsonl" $L/
[ -f "$X/train/hf/config.json" ] && cp "$X/train/hf/config.json" $L/drafter-config.json
for f in train.log check.log accept.json accept.md accept.log env.txt; do
    [ -f "$X/$f" ] && cp "$X/$f" $L/
done
python3 tools/train/dflash_figures.py $L docs/speculative.md
ls -la models/muser-default.dflash.gguf $L
echo "dflash-install: now check with: ./muser run -p 'def f(x):' -n 64 --temp 0 --spec dflash; bash tests/e2e/test_spec.sh"
