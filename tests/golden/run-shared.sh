#!/usr/bin/env bash
# The shared tier: the team's fixtures in ../shared/fixtures (llama.cpp's
# answers on three small Muse Glimmer GGUFs): tokenization and generation.
set -u
cd "$(dirname "$0")/../.."
fx=${SHARED_FIXTURES:-../shared/fixtures}
if [ ! -d "$fx" ]; then echo "skipped: $fx is absent"; exit 0; fi
bin=${MUSER_BIN:-$PWD/muser}
rc=0
bash tests/tokenizer/check-shared.sh || rc=1
for m in t1-f16 t2-q8_0 t3-q4_k_m; do
  echo "--- $m"
  python3 tests/golden/compare.py "$bin" "$fx/$m.gguf" "$fx/$m.ref.json" || rc=1
done
exit $rc
