#!/usr/bin/env bash
# Builds the default model's training corpus from Debian packages (see make_corpus.py).
# usage: tools/train/make-corpus.sh [OUTDIR]   (default .devcarry/train/corpus, git-ignored)
# Needs (Debian 12): apt-get install python3.11-doc manpages manpages-dev man-db groff-base git-man perl-doc
set -euo pipefail
out=${1:-.devcarry/train/corpus}
exec python3 "$(dirname "$0")/make_corpus.py" "$out"
