#!/usr/bin/env bash
# Enforces the layering table of HACKING.md:
#   1. a file under src/ includes only headers of a lower level, or of its
#      own directory (directories of one level never include each other);
#   2. src/http and cmd/ are clients of the public API: they include only
#      include/, src/base and headers of their own directory;
#   3. every header compiles on its own.
# Levels: base < kern < gguf, gpu < tok, chat < model, vision < engine, synth
#         < kv, net < gen < http < cmd
set -u
cd "$(dirname "$0")/.."
level() {
  case $1 in
    base) echo 0 ;; kern) echo 1 ;; gguf|gpu) echo 2 ;; tok|chat) echo 3 ;;
    model|vision) echo 4 ;; engine|synth) echo 5 ;; kv|net) echo 6 ;; gen) echo 7 ;;
    http) echo 8 ;; cmd) echo 9 ;; *) echo 99 ;;
  esac
}
rc=0
for f in $(find src cmd -name '*.c' -o -name '*.h' -o -name '*.cu'); do
  dir=$(echo "$f" | cut -d/ -f2)
  [ "${f%%/*}" = cmd ] && dir=cmd
  mine=$(level "$dir")
  [ "$mine" = 99 ] && { echo "layering: $f is in a directory without a level ($dir)"; rc=1; continue; }
  client=0
  [ "$dir" = http ] || [ "$dir" = cmd ] && client=1
  while IFS= read -r inc; do
    target=$(realpath -m --relative-to=. "$(dirname "$f")/$inc")
    case $target in
      include/*) continue ;; # the public API: muser.h depends on base only
      src/*) tdir=$(echo "$target" | cut -d/ -f2) ;;
      cmd/*) tdir=cmd ;;
      *) echo "layering: $f includes $inc, outside src/, cmd/ and include/"; rc=1; continue ;;
    esac
    [ "$tdir" = "$dir" ] && continue
    if [ $client = 1 ] && [ "$tdir" != base ]; then
      echo "layering: $f includes $inc (src/http and cmd/ use include/ and src/base only)"; rc=1; continue
    fi
    tl=$(level "$tdir")
    if [ "$tl" -ge "$mine" ]; then
      echo "layering: $f includes $inc ($tdir is not below $dir)"; rc=1
    fi
  done < <(grep -oE '^#include "[^"]+"' "$f" | sed -E 's/#include "(.*)"/\1/')
done
# The public headers depend on src/base and each other only.
for h in include/*.h; do
  if grep -oE '^#include "[^"]+"' "$h" | grep -vE '"(\.\./src/base/[^/"]+|[^/"]+)"' >/dev/null; then
    echo "layering: $h includes more than src/base and include/"; rc=1
  fi
done
# Each header compiles alone.
for h in $(find src include cmd -name '*.h'); do
  if ! echo "#include \"$PWD/$h\"" | gcc -std=c11 -D_GNU_SOURCE -fsyntax-only -x c - 2>/tmp/hdr.$$; then
    echo "header does not compile alone: $h"; cat /tmp/hdr.$$; rc=1
  fi
done
rm -f /tmp/hdr.$$
[ $rc -eq 0 ] && echo "check: layering and headers OK"
exit $rc
