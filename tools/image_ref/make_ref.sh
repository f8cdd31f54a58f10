#!/usr/bin/env bash
# Remakes tests/data/image/ref.tsv (and the small JPEGs' stb pixels) from
# llama.cpp's own preprocessing: builds mtmd_preproc_ref (build.sh), writes
# the images of tests/unit/image_gen.h (gen_images.c) and runs each through
# stb_image + mtmd's muse-glimmer preprocessor.
#   tools/image_ref/make_ref.sh LLAMA_CPP_SRC
set -euo pipefail
cd "$(dirname "$0")/../.."
src=${1:?usage: make_ref.sh LLAMA_CPP_SRC}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ref=$(tools/image_ref/build.sh "$src" "$work")
gcc -std=c11 -O1 -Itests/unit -o "$work/gen_images" tools/image_ref/gen_images.c -lpng -ljpeg -lwebp -lwebpmux
mkdir -p "$work/img" tests/data/image
"$work/gen_images" "$work/img"
out=tests/data/image/ref.tsv
{
  echo "# name	max_tokens	result	w	h	nx	ny	sha256(rgb8)	sha256(f32 chw)"
  echo "# made by tools/image_ref/make_ref.sh from llama.cpp $(git -C "$src" describe --tags --always 2>/dev/null || echo '?')"
  for f in "$work"/img/*.img; do
    name=$(basename "$f" .img)
    for mt in 4096 64; do
      # the 64-token cap only where it changes the path taken
      case "$mt:$name" in 64:png_rgb_640x480|64:png_rgb_3000x20|64:png_rgb_37x1000|4096:*) ;; *) continue ;; esac
      set +e
      line=$("$ref" "$f" "$work/o" "$mt")
      rc=$?
      set -e
      if [ $rc = 0 ]; then
        read -r _ w h _ nx ny <<<"$line"
        printf '%s\t%s\tok\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$mt" "$w" "$h" "$nx" "$ny" \
          "$(sha256sum <"$work/o.rgb" | cut -d' ' -f1)" "$(sha256sum <"$work/o.f32" | cut -d' ' -f1)"
        # stb's pixels of the small JPEGs: the decoders differ, the test measures by how much
        case $name in jpeg_*) [ "$w" -le 200 ] && cp "$work/o.rgb" "tests/data/image/$name.stb.rgb" ;; esac
      else
        printf '%s\t%s\terror\t%s\n' "$name" "$mt" "$(echo "$line" | tr '\t' ' ')"
      fi
    done
  done
} >"$out"
echo "wrote $out"
