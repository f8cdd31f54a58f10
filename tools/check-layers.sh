#!/usr/bin/env bash
# Enforces STYLE.md's layering: a file may include only headers of its own
# level or lower, and every header compiles on its own.
#   base < kern < model, gpu < engine < kv, net < http < cmd
set -u
cd "$(dirname "$0")/.."
level() {
  case $1 in
    base) echo 0 ;; kern) echo 1 ;; model|gpu) echo 2 ;; engine) echo 3 ;;
    kv|net) echo 4 ;; http) echo 5 ;; cmd|include) echo 6 ;; *) echo 99 ;;
  esac
}
rc=0
for f in $(find src -name '*.c' -o -name '*.h' -o -name '*.cu'); do
  dir=$(echo "$f" | cut -d/ -f2)
  mine=$(level "$dir")
  while IFS= read -r inc; do
    # resolve the include relative to the file
    target=$(realpath -m --relative-to=. "$(dirname "$f")/$inc")
    case $target in
      src/*) tdir=$(echo "$target" | cut -d/ -f2) ;;
      include/*) tdir=include ;;
      *) continue ;;
    esac
    tl=$(level "$tdir")
    if [ "$tdir" = include ]; then
      # the public header declares model-level and higher functions and only
      # depends on base: model and everything above may include it
      [ "$mine" -ge 2 ] && continue
    fi
    if [ "$tl" -gt "$mine" ] || { [ "$tl" -eq "$mine" ] && [ "$tdir" != "$dir" ] && [ "$mine" -ne 2 ] && [ "$mine" -ne 4 ]; }; then
      echo "layering: $f includes $inc ($tdir is not below $dir)"; rc=1
    fi
    if [ "$mine" -eq 2 ] || [ "$mine" -eq 4 ]; then
      if [ "$tl" -eq "$mine" ] && [ "$tdir" != "$dir" ]; then
        echo "layering: $f includes $inc ($tdir and $dir are siblings)"; rc=1
      fi
    fi
  done < <(grep -oE '^#include "[^"]+"' "$f" | sed -E 's/#include "(.*)"/\1/')
done
# Each header compiles alone.
for h in $(find src include -name '*.h'); do
  if ! echo "#include \"$PWD/$h\"" | gcc -std=c11 -D_GNU_SOURCE -fsyntax-only -x c - 2>/tmp/hdr.$$; then
    echo "header does not compile alone: $h"; cat /tmp/hdr.$$; rc=1
  fi
done
rm -f /tmp/hdr.$$
[ $rc -eq 0 ] && echo "check: layering and headers OK"
exit $rc
