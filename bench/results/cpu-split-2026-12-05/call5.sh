set -u
O=$OUT
{ date; lscpu | grep -i "model name\|mhz"; grep "^cpu " /proc/stat; } > $O/machine.txt 2>&1
timeout 80 .gpu/cb/corebench 0.3 > $O/corebench.jsonl 2>> $O/machine.txt
grep "^cpu " /proc/stat >> $O/machine.txt
for rep in 1 2; do for t in 1 4 8 16; do
  a=$(grep "^cpu " /proc/stat)
  timeout 30 .gpu/cb/kernbench $t 0 512 2048 Q4_K avx512 | sed "s/^{/{\"rep\": $rep, /"
  b=$(grep "^cpu " /proc/stat)
  echo "{\"rep\": $rep, \"threads\": $t, \"stat_before\": \"$a\", \"stat_after\": \"$b\"}"
done; done > $O/kernbench.jsonl 2>&1
grep "^cpu " /proc/stat >> $O/machine.txt
ls $O
