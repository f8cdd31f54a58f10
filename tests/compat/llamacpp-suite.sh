#!/usr/bin/env bash
# llamacpp-suite.sh: runs llama.cpp's server test suite (the server tests of
# the llama.cpp source that node-llama-cpp 3.22.1 bundles) against `muser serve`
# through tools/llama-server-shim.py, and prints one line per test file and a
# closing count. Not part of `make test`: it needs that source, Debian's pytest,
# and about a quarter of an hour on two cores. Slow-marked tests are left out,
# as the suite's own tests.sh does by default.
#
#   bash tests/compat/llamacpp-suite.sh [FILE.py ...]     (default: every unit/ file)
#
# Environment: LCSRC (llama.cpp source; default /tmp/lcsrc), MUSER_BIN (default
# ./muser), MUSER_SHIM_MODEL (default models/muser-default.gguf), PORT (default
# 18080), SHIM (default tools/llama-server-shim.py), OUT (results folder;
# default /tmp/muser-lcsuite), FILE_TIMEOUT
# (seconds per file, default 1200). Getting the source, outside this repository:
#   (cd /tmp && npm i -E node-llama-cpp@3.22.1 && \
#    git clone node_modules/node-llama-cpp/llama/gitRelease.bundle /tmp/lcsrc)
#   apt-get install python3-pytest python3-requests python3-aiohttp \
#     python3-wget python3-filelock python3-prometheus-client python3-numpy
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
LCSRC=${LCSRC:-/tmp/lcsrc}
OUT=${OUT:-/tmp/muser-lcsuite}
suite=$LCSRC/tools/server/tests
if [ ! -d "$suite/unit" ]; then
    echo "llamacpp-suite: no llama.cpp server tests under $suite (see this script's header)" >&2
    exit 2
fi
export MUSER_BIN=${MUSER_BIN:-$here/muser}
export MUSER_SHIM_MODEL=${MUSER_SHIM_MODEL:-$here/models/muser-default.gguf}
export LLAMA_SERVER_BIN_PATH=${SHIM:-$here/tools/llama-server-shim.py}
export PORT=${PORT:-18080}
[ -x "$MUSER_BIN" ] || { echo "llamacpp-suite: no muser binary at $MUSER_BIN (make)" >&2; exit 2; }
py=/usr/bin/python3
$py -c 'import pytest, requests, wget, filelock' 2>/dev/null ||
    { echo "llamacpp-suite: Debian's python3-pytest, -requests, -wget, -filelock needed" >&2; exit 2; }
# the suite's five files that import the openai package: a stand-in that skips
# the tests using the client when the real package is absent
if ! $py -c 'import openai' 2>/dev/null; then
    export PYTHONPATH=$here/tests/compat/pystub${PYTHONPATH:+:$PYTHONPATH}
fi
rm -rf "$OUT" && mkdir -p "$OUT/work" || exit 2
cp -r "$suite/." "$OUT/work/"
cd "$OUT/work" || exit 2
# ./tmp: where the suite's download_file() keeps what it fetches (it creates
# no folder); the draft model it fetches is stood in for, as every model is,
# by the served model's DFlash drafter (the shim runs --spec dflash)
mkdir -p tmp
ln -sf "$here/models/muser-default.dflash.gguf" tmp/stories15M-q4_0.gguf
files=("$@")
[ ${#files[@]} -gt 0 ] || files=($(cd unit && ls test_*.py))
for f in "${files[@]}"; do
    f=${f#unit/}
    # -m "not slow": the suite's own default (its tests.sh); the slow tests
    # download 1-8 GB models from a hub
    timeout -k 10 "${FILE_TIMEOUT:-1200}" $py -m pytest -p no:cacheprovider -q -rA -m "not slow" \
        --junitxml="$OUT/${f%.py}.xml" "unit/$f" > "$OUT/${f%.py}.log" 2>&1
    echo "$f: exit $? ($(tail -1 "$OUT/${f%.py}.log"))"
done
$py "$here/tests/compat/suite-summary.py" "$OUT" --reasons "$here/tests/compat/suite-reasons.tsv"
