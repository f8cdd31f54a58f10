#!/usr/bin/env bash
# test_llama_server_shim.sh: tools/llama-server-shim.py turns llama-server's
# flags (as llama.cpp's server test suite passes them) into `muser serve`'s.
# The shim runs with MUSER_BIN=/bin/echo, so the command it would start is
# printed instead of run: no model, no server. Checks the mappings the suite
# relies on: the context split over the slots (whole per slot with
# --kv-unified), a draft model as muser's DFlash drafter with the draft
# bounds, an ngram --spec-type, a --host list carried over.
set -u
cd "$(dirname "$0")/../.."
command -v python3 >/dev/null || { echo "test_llama_server_shim: skipped: python3 is missing"; exit 0; }
pass=0 failn=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; failn=$((failn + 1)); }
shim() { MUSER_BIN=/bin/echo MUSER_SHIM_MODEL=m.gguf python3 tools/llama-server-shim.py "$@" 2>/dev/null; }
has() { # has NAME WORDS ARGS...: the printed command contains WORDS
  local name=$1 want=$2 got
  shift 2
  got=" $(shim "$@") "
  case "$got" in *" $want "*) ok "$name" ;; *) bad "$name: wanted '$want' in:$got" ;; esac
}
lacks() { # lacks NAME WORD ARGS...: the printed command does not contain WORD
  local name=$1 word=$2 got
  shift 2
  got=" $(shim "$@") "
  case "$got" in *" $word "*) bad "$name: '$word' in:$got" ;; *) ok "$name" ;; esac
}

has "--ctx-size is split over the slots" "--ctx 64" --ctx-size 256 --parallel 4
has "--kv-unified: the whole --ctx-size per slot" "--ctx 256" --ctx-size 256 --parallel 4 --kv-unified
has "--model-draft: the served model's DFlash drafter" "--spec dflash" --model-draft ./tmp/d.gguf --spec-type draft-simple
has "-md as --model-draft" "--spec dflash" -md ./tmp/d.gguf
has "--spec-draft-n-max -> --draft-max" "--draft-max 8" --model-draft d.gguf --spec-draft-n-max 8 --spec-draft-n-min 4
has "--spec-draft-n-min -> --draft-min" "--draft-min 4" --model-draft d.gguf --spec-draft-n-max 8 --spec-draft-n-min 4
has "an ngram --spec-type without a draft model: --spec ngram" "--spec ngram" --spec-type ngram-simple
lacks "a draft type without a draft model: no --spec" "--spec" --spec-type draft-simple
lacks "--spec-synth-rates (a llama.cpp test hook) is dropped" "--spec-synth-rates" --model-draft d.gguf --spec-synth-rates 0.0,0.0
has "a --host list is carried over" "--host 127.0.0.1,::1" --host 127.0.0.1,::1

echo "test_llama_server_shim: $pass passed, $failn failed"
[ "$failn" -eq 0 ]
