#!/usr/bin/env bash
# One-shot DFlash drafter pipeline for the bundled model (issue 15 item 4),
# meant for one device call on the H200 machine (docs/speculative.md,
# "The bundled model's drafter"):
#   1. the training data: the bundled model's own continuations (greedy, a
#      quarter sampled) of prompts from the project's corpus, with the
#      features of the target layers, by the PyTorch target read from
#      models/muser-default.gguf (tools/train/dflash_model.py); muser's own
#      greedy tokens are compared with it on a few held-out prompts first;
#   2. training (tools/train/dflash_train.py) until the deadline, a held-out
#      evaluation and, when best, a GGUF in llama.cpp's dflash layout every
#      60 s, so a killed run still leaves a drafter (a run that fails
#      before its first checkpoint is retried once in float32 with less
#      data, when two minutes of training remain);
#   3. held-out acceptance with muser's own `--spec dflash` on the CPU
#      (tools/train/dflash_accept.py), checking the output is unchanged.
# $OUT gets six files (the device tool brings back at most eight):
# muser-default.dflash.gguf and summary.json (rewritten at every better
# checkpoint, so they are there even when the run is killed), train.log
# (written as it goes), accept.md, accept.json, and dflash-logs.tar.xz
# (everything: env.txt, check.log, train.log, train/log.jsonl,
# train/summary.json, train/heldout-prompts.json, train/hf/config.json,
# accept.log, accept.json, accept.md). Work files stay in $WORK (default
# /tmp/dflash-work).
#
# usage (repository root): tools/train/dflash-device.sh [BUDGET_S [dflash_train.py options...]]
#   BUDGET_S: wall-clock seconds for the whole script (default 480); the
#   acceptance run gets the last ACCEPT_S (default 75) of them.
# A muser that cannot run there (missing libraries) does not stop the
# training: it tokenizes with tools/train/tokenizer/tokenizer.json instead,
# and the muser comparison and the acceptance run are skipped (exit 1).
# Needs: $GPU_DIR (default .gpu/dflash, made by tools/train/dflash-device-prep.sh):
#   dflash-bin.tar.xz (muser and lib/, its shared libraries; or muser and
#   lib/ unpacked), corpus-{train,heldout}.jsonl.xz;
#   python3 with torch and numpy. No network.
# Environment: OUT (default /tmp/dflash-out), PYTHON (default python3), DEVICE (cuda|cpu, default
#   cuda when torch sees a GPU), ACCEPT_S, ACCEPT_ARGS (dflash_accept.py
#   options), DATA_S (seconds of data making, default BUDGET_S / 5).
set -euo pipefail
BUDGET=${1:-480}
[ $# -gt 0 ] && shift
t0=$(date +%s)
deadline=$((t0 + BUDGET))
G=${GPU_DIR:-.gpu/dflash}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/dflash-out}
W=${WORK:-/tmp/dflash-work}
rm -rf "$W"
mkdir -p "$OUT" "$W"
L=$PWD/$G
if [ -f "$G/dflash-bin.tar.xz" ]; then
    L=$W/bin
    mkdir -p "$L" && tar -xJf "$G/dflash-bin.tar.xz" -C "$L"
fi
export LD_LIBRARY_PATH=$L/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PYTHONUNBUFFERED=1
M=$L/muser
[ -x "$M" ] || M=./muser
T=models/muser-default.gguf
C=$G
for f in "$T" "$C/corpus-train.jsonl.xz" "$C/corpus-heldout.jsonl.xz"; do
    [ -e "$f" ] || { echo "dflash-device: missing $f (run tools/train/dflash-device-prep.sh and carry $G)" >&2; exit 1; }
done
if ldd "$M" | grep "not found" || ! "$M" --version >/dev/null 2>&1; then
    # train anyway (tokenizing with tools/train/tokenizer/tokenizer.json); no muser checks
    echo "dflash-device: WARNING: $M cannot run here (above): no muser comparison, no acceptance run" >&2
    M=
fi
DEVICE=${DEVICE:-$($PY -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')}
{
    echo "start $(date -u +%FT%TZ) budget ${BUDGET}s device $DEVICE"
    $PY -c 'import torch, numpy; print("torch", torch.__version__, "numpy", numpy.__version__,
        torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no cuda")'
    nproc
    [ -n "$M" ] && "$M" --version 2>/dev/null || echo "no runnable muser"
} 2>&1 | tee "$W/env.txt"

# the PyTorch pieces on this device (not fatal: the acceptance run below
# measures the result with muser whatever happens)
$PY tools/train/dflash_check.py --target "$T" --device "$DEVICE" 2>&1 | tee "$W/check.log" || true

ACCEPT_S=${ACCEPT_S:-75}
DATA_S=${DATA_S:-$((BUDGET / 5))}
args=(--target "$T" --muser "$M" --corpus "$C/corpus-train.jsonl.xz" --heldout-corpus "$C/corpus-heldout.jsonl.xz"
      --out "$W/train" --mirror "$OUT" --mirror-name muser-default.dflash.gguf
      --deadline $((deadline - ACCEPT_S)) --device "$DEVICE" --data-budget "$DATA_S")
if [ "$DEVICE" = cuda ]; then
    args+=(--windows 24576 --gen 384 --batch 64 --blocks 16 --block 16 --layers 2 --heldout-windows 128 --ckpt-every 60
           --outtype q8_0)
fi
echo "== training: python3 tools/train/dflash_train.py ${args[*]} $*" | tee "$OUT/train.log"
set +e
$PY tools/train/dflash_train.py "${args[@]}" "$@" 2>&1 | tee -a "$OUT/train.log"
rc=${PIPESTATUS[0]}
set -e
if [ ! -f "$OUT/muser-default.dflash.gguf" ] && [ $((deadline - ACCEPT_S - $(date +%s))) -gt 120 ]; then
    # it failed before its first checkpoint: once more in float32, with less data
    echo "== training wrote no drafter (exit $rc): again with --amp 0" | tee -a "$OUT/train.log"
    set +e
    $PY tools/train/dflash_train.py "${args[@]}" "$@" --amp 0 --data-budget 30 --windows 4096 2>&1 | tee -a "$OUT/train.log"
    rc=${PIPESTATUS[0]}
    set -e
fi
if [ ! -f "$OUT/muser-default.dflash.gguf" ]; then
    echo "dflash-device: training wrote no drafter (exit $rc)" >&2
    exit 1
fi
echo "== training exit $rc; $(( $(date +%s) - t0 ))s so far" | tee -a "$OUT/train.log"

# acceptance with muser on the CPU: parallel single-thread runs
jobs=$(( $(nproc) > 2 ? $(nproc) - 1 : 1 ))
left=$((deadline - $(date +%s) - 8))
[ $left -lt 20 ] && left=20
echo "== acceptance ($left s at most, $jobs jobs)" | tee "$W/accept.log"
arc="skipped (no runnable muser)"
if [ -n "$M" ]; then
    set +e
    timeout "$left" $PY tools/train/dflash_accept.py --muser "$M" --model "$T" --draft "$OUT/muser-default.dflash.gguf" \
        --prompts "$W/train/heldout-prompts.json" --jobs "$jobs" --sampled --out "$W/accept.json" --md "$W/accept.md" \
        ${ACCEPT_ARGS:---max-prompts 32} 2>&1 | tee -a "$W/accept.log"
    arc=${PIPESTATUS[0]}
    set -e
fi
echo "== done: training exit $rc, acceptance exit $arc, $(( $(date +%s) - t0 ))s" | tee -a "$W/accept.log"
cp "$OUT/train.log" "$W/"
for f in accept.md accept.json; do [ -f "$W/$f" ] && cp "$W/$f" "$OUT/"; done
(cd "$W" && tar -cJf "$OUT/dflash-logs.tar.xz" --ignore-failed-read env.txt check.log train.log accept.log accept.json \
    accept.md train/log.jsonl train/summary.json train/heldout-prompts.json train/hf/config.json 2>/dev/null) || true
ls -la "$OUT"
[ "$rc" = 0 ] && [ "$arc" = 0 ]
