set -u
O=$OUT
{ date; nproc; lscpu | grep -i "model name\|thread\|core\|socket\|mhz\|cache"; cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list 2>&1; grep -m1 -o "amx[a-z_0-9]*\|avx512_vnni" /proc/cpuinfo | sort -u | tr '\n' ' '; } > $O/cores.txt 2>&1
timeout 60 .gpu/cb/corebench 0.3 > $O/corebench.jsonl 2>> $O/cores.txt
for t in 1 2 4 8 16; do timeout 30 .gpu/cb/kernbench $t 0 512 2048 Q4_K avx512; timeout 30 .gpu/cb/kernbench $t 0 512 6144 Q4_K avx512; done > $O/kernbench.jsonl 2>&1
echo "cpu part done $(date)" >> $O/cores.txt
tar -xJf .gpu/plugin.tar.xz
mkdir -p .gpu/b && tar -xJf .gpu/dflash/dflash-bin.tar.xz -C .gpu/b && mv .gpu/b/muser .gpu/muser && mv .gpu/b/lib .gpu/lib
mkdir -p /tmp/t
DATA_S=130 ACCEPT_S=45 OUT=/tmp/t bash tools/train/dflash-device.sh 420 --init models/muser-default.dflash.gguf --seed 2 --lr 3e-4 --copy-frac 0.25 --prompt-min 6 > /tmp/t/stdout.log 2>&1
echo "train rc $?" >> $O/cores.txt
cp /tmp/t/muser-default.dflash.gguf $O/drafter.gguf; cp /tmp/t/summary.json /tmp/t/accept.md /tmp/t/dflash-logs.tar.xz $O/ 2>/dev/null
tail -c 200000 /tmp/t/stdout.log > $O/train-stdout.log
ls $O
