set -u
O=$OUT
mkdir -p .gpu/b && tar -xJf .gpu/c3/dflash-bin.tar.xz -C .gpu/b
export LD_LIBRARY_PATH=$PWD/.gpu/b/lib
OLD=$PWD/.gpu/b/muser NEW=$PWD/.gpu/new/muser
{ date; $NEW --version 2>&1 | head -1; } > $O/split.txt
s=$SECONDS; timeout 120 $NEW gen --preset 1b --type q4_k_m --quant fast --threads 16 -o /tmp/m1b.gguf > /dev/null 2>> $O/split.txt; echo "gen rc $? in $((SECONDS-s)) s" >> $O/split.txt
for rep in 1 2 3; do for t in 4 8 16; do for b in $( [ $((rep % 2)) = 0 ] && echo NEW OLD || echo OLD NEW ); do
  [ $SECONDS -gt 200 ] && break 3
  eval bin=\$$b
  echo "{\"build\": \"$b\", \"rep\": $rep, \"threads\": $t, \"r\": $(timeout 40 $bin bench -m /tmp/m1b.gguf --depths 512 --gen 4 --threads $t --json 2>/dev/null | head -1)}"
done; done; done > $O/split.jsonl 2>&1
grep "^cpu " /proc/stat >> $O/split.txt
ls $O
