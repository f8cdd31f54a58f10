#!/usr/bin/env bash
# test_vision.sh: images from the outside (issue 19): `muser gen --mmproj`,
# `muser run --mmproj P --image F` gives llama.cpp's greedy tokens after one
# or two images (tests/data/vision/greedy.tsv, made by tools/mtmd_ref/mtmd_gen.c
# on the same generated model, projector and PNGs: an image on the exact
# token grid, a resized one, two in one prompt, one of more than 512 rows),
# `chat` with /image answers as `run` does on the same rendered prompt, and
# bad input is one error line. MUSER_BACKEND=cuda (the gpu tier): those
# greedy runs on the CUDA backend.
set -u
cd "$(dirname "$0")/../.."
MUSER=${MUSER_BIN:-$PWD/muser}
[ -x "$MUSER" ] || { echo "test_vision: skipped: no muser binary"; exit 0; }
command -v python3 >/dev/null || { echo "test_vision: skipped: python3 is missing"; exit 0; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

"$MUSER" gen --preset tiny --type f16 --seed 7 -o "$T/tiny.gguf" >/dev/null 2>&1 || { bad "gen model"; exit 1; }
"$MUSER" gen --mmproj "$T/mm.gguf" --preset tiny --seed 1 2>/dev/null || { bad "gen --mmproj"; exit 1; }
python3 - "$T" <<'PY'
import random, struct, sys, zlib
def png(path, w, h, seed):
    r = random.Random(seed)
    raw = b''.join(b'\0' + bytes([(x * 3 + y * 5 + c * 80 + r.randrange(48)) % 256 for x in range(w) for c in range(3)])
                   for y in range(h))
    ck = lambda t, d: struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
    open(path, 'wb').write(b'\x89PNG\r\n\x1a\n' + ck(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) +
                           ck(b'IDAT', zlib.compress(raw)) + ck(b'IEND', b''))
d = sys.argv[1]
for name, w, h, seed in (('a', 112, 112, 1), ('b', 200, 90, 2), ('c', 300, 200, 3), ('d', 900, 640, 4)):
    png(f'{d}/{name}.png', w, h, seed)
PY
ids() { python3 -c "import sys,json; print(','.join(str(json.loads(l)['id']) for l in sys.stdin if l.startswith('{\"id')))"; }

while IFS=$'\t' read -r name prompt images want; do
  case $name in '#'*|'') continue ;; esac
  args=()
  for i in $images; do args+=(--image "$T/$i"); done
  got=$("$MUSER" run -m "$T/tiny.gguf" --mmproj "$T/mm.gguf" "${args[@]}" -p "$prompt" -n 24 --temp 0 --json \
        --threads 2 ${MUSER_BACKEND:+--backend "$MUSER_BACKEND"} 2>"$T/err" | ids)
  if [ "$got" = "$want" ]; then ok "run --image ($name): llama.cpp's greedy tokens"
  else bad "run --image ($name): $got, llama.cpp $want ($(cat "$T/err"))"; fi
done <tests/data/vision/greedy.tsv

# chat renders the template around the marker: the same prompt as "exact"
P='<|start|>user<|message|><__media__>describe this<|eot|><|start|>assistant'
a=$("$MUSER" run -m "$T/tiny.gguf" --mmproj "$T/mm.gguf" --image "$T/a.png" -p "$P" -n 24 --temp 0 --threads 2 2>/dev/null)
b=$(printf '/image %s\ndescribe this\n' "$T/a.png" | "$MUSER" chat -m "$T/tiny.gguf" --mmproj "$T/mm.gguf" -n 24 \
    --temp 0 --threads 2 2>/dev/null | grep -v '^\[image')
# (chat shows invalid UTF-8 as U+FFFD, run writes the bytes: compare the ASCII)
asc() { LC_ALL=C tr -cd ' -~'; }
if [ -n "$a" ] && [ "$(printf '%s' "$a" | asc)" = "$(printf '%s' "$b" | asc)" ]; then ok "chat /image: run's answer"
else bad "chat /image: '$b' vs run '$a'"; fi

# one error line each
err() { # EXPECTED ARGS...: the command fails with exactly that line on stderr
  local want=$1; shift
  if "$MUSER" "$@" >/dev/null 2>"$T/err"; then bad "$* succeeded"; return; fi
  if [ "$(cat "$T/err")" = "$want" ]; then ok "error: $want"; else bad "$*: '$(cat "$T/err")', wanted '$want'"; fi
}
"$MUSER" gen --preset tiny --embd 128 --heads 2 --kv-heads 1 --type f16 -o "$T/w128.gguf" >/dev/null 2>&1
err "muser run: --image needs a vision projector (--mmproj)" run -m "$T/tiny.gguf" --image "$T/a.png" -p x -n 1
err "muser run: mmproj: output width 256 differs from the model's embedding width 128" \
    run -m "$T/w128.gguf" --mmproj "$T/mm.gguf" --image "$T/a.png" -p x -n 1
err "muser run: mmproj: not a projector (no clip.projector_type)" \
    run -m "$T/tiny.gguf" --mmproj "$T/tiny.gguf" --image "$T/a.png" -p x -n 1
err "muser run: prompt: 2 media markers for 1 images" \
    run -m "$T/tiny.gguf" --mmproj "$T/mm.gguf" --image "$T/a.png" -p "<__media__><__media__>" -n 1
head -c 100 "$T/a.png" >"$T/cut.png"
if "$MUSER" run -m "$T/tiny.gguf" --mmproj "$T/mm.gguf" --image "$T/cut.png" -p x -n 1 >/dev/null 2>"$T/err"; then
  bad "a truncated PNG was accepted"
elif [ "$(wc -l <"$T/err")" = 1 ] && grep -q "^muser run: image: " "$T/err"; then ok "truncated PNG: $(cat "$T/err")"
else bad "truncated PNG: $(cat "$T/err")"; fi
exit $fail
