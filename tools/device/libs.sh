#!/usr/bin/env bash
# libs.sh: copies into DIR every shared library the named programs link,
# but glibc's own and the compiler's runtime (the GPU machine has those;
# it lacks the -dev packages and several runtime libraries), following links.
# usage: tools/device/libs.sh DIR PROGRAM...
set -euo pipefail
d=${1:?usage: tools/device/libs.sh DIR PROGRAM...}
shift
mkdir -p "$d"
for l in $(ldd "$@" | awk '/=>/ {print $3}' | sort -u); do
  case $(basename "$l") in
  libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|libutil.so*|libanl.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) ;;
  *) cp -L "$l" "$d/" ;;
  esac
done
