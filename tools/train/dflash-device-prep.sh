#!/usr/bin/env bash
# Prepares what tools/train/dflash-device.sh needs on the GPU machine, here
# on the build machine (same architecture), in DIR: dflash-bin.tar.xz
# (muser, stripped, CPU build, and lib/: every shared library it links but
# glibc's own) and corpus-{train,heldout}.jsonl.xz, manifest.json (the
# project's corpus, tools/train/make-corpus.sh, made when absent).
# usage (repository root, after `make muser`): tools/train/dflash-device-prep.sh [DIR]   (default .gpu/dflash)
# Then carry DIR (the run tool's carry: [".gpu/dflash"]); with the tracked
# tree it must stay under the carry limit (64 MiB in all): this prints its
# size (about 16 MB).
set -euo pipefail
D=${1:-.gpu/dflash}
[ -x muser ] || { echo "dflash-device-prep: build muser first (make muser)" >&2; exit 1; }
C=.devcarry/train/corpus
if [ ! -s $C/corpus-train.jsonl.xz ] || [ ! -s $C/corpus-heldout.jsonl.xz ]; then
    tools/train/make-corpus.sh $C
fi
S=$(mktemp -d)
trap 'rm -rf "$S"' EXIT
mkdir -p "$S/lib" "$D"
cp muser "$S/muser"
strip "$S/muser"
tools/device/libs.sh "$S/lib" muser
tar -cJf "$D/dflash-bin.tar.xz" -C "$S" muser lib
cp $C/corpus-train.jsonl.xz $C/corpus-heldout.jsonl.xz "$D/"
[ -f $C/manifest.json ] && cp $C/manifest.json "$D/"
ls -la "$D"
du -sh "$D"
