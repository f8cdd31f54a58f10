set -u
O=$OUT
tar -xJf .gpu/plugin.tar.xz
mkdir -p .gpu/b && tar -xJf .gpu/dflash/dflash-bin.tar.xz -C .gpu/b && mv .gpu/b/muser .gpu/muser && mv .gpu/b/lib .gpu/lib
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; git log -1 --format=%h 2>/dev/null; 
for g in 0 1; do for rep in 1; do
  echo "== MUSER_CUDA_CAPTURE_GRAPH=$g rep $rep"
  MUSER_CUDA_CAPTURE_GRAPH=$g VERIFYBENCH_BACKEND=cuda VERIFYBENCH_DRAFT=models/muser-default.dflash.gguf timeout 60 .gpu/cb/verifybench models/muser-default.gguf 1 256 15 1,15
done; done
if command -v nsys >/dev/null; then
  for md in 0 3; do
    echo "== nsys VERIFYBENCH_MODES=$md"
    VERIFYBENCH_MODES=$md VERIFYBENCH_BACKEND=cuda VERIFYBENCH_DRAFT=models/muser-default.dflash.gguf timeout 60 nsys profile -o /tmp/ns$md -t cuda --force-overwrite true .gpu/cb/verifybench models/muser-default.gguf 1 256 15 1 > /dev/null 2>&1
    timeout 30 nsys stats -r cuda_api_sum,cuda_gpu_kern_sum,cuda_gpu_mem_time_sum /tmp/ns$md.nsys-rep 2>&1 | head -80
  done
else echo "no nsys"; fi
} > $O/capture.txt 2>&1
mkdir -p /tmp/t; echo "train budget $((560 - SECONDS))" >> $O/capture.txt
DATA_S=$(( (560 - SECONDS) * 55 / 100 )) ACCEPT_S=40 OUT=/tmp/t bash tools/train/dflash-device.sh $((560 - SECONDS)) --init models/muser-default.dflash.gguf --seed 3 --lr 3e-4 --copy-frac 0.25 --prompt-min 6 > /tmp/t/stdout.log 2>&1
echo "train rc $?" >> $O/capture.txt
cp /tmp/t/muser-default.dflash.gguf $O/drafter.gguf; cp /tmp/t/summary.json /tmp/t/accept.md /tmp/t/dflash-logs.tar.xz $O/ 2>/dev/null
tail -c 200000 /tmp/t/stdout.log > $O/train-stdout.log
ls $O
