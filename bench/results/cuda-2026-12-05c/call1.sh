# call 1 of stop 40 (2026-12-05): where a --spec dflash step's time goes on CUDA, bundled model:
# verifybench (decode, solo K, drafter pass K, injection) with and without graphs; nsys of muser run --spec dflash
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
M=$PWD/.gpu/muser VB=$PWD/build/bench/verifybench F=models/muser-default.gguf D=models/muser-default.dflash.gguf
{ nvidia-smi --query-gpu=name --format=csv,noheader; command -v nsys ncu; } > $OUT/verify.txt 2>&1
v() { echo "== $1" >> $OUT/verify.txt; env $2 VERIFYBENCH_BACKEND=cuda VERIFYBENCH_DRAFT=$D timeout 60 $VB $F 1 256 9 1,2,3,4,7,8,11,15 >> $OUT/verify.txt 2>&1; }
v "graph_t 8, draft graph 0" "MUSER_CUDA_DRAFT_GRAPH=0"
v "graph_t 16, draft graph 1" "MUSER_CUDA_DRAFT_GRAPH=1 MUSER_CUDA_GRAPH_T=16"
v "graph_t 16, draft graph 0" "MUSER_CUDA_DRAFT_GRAPH=0 MUSER_CUDA_GRAPH_T=16"
echo "verify done $(el)s" >> $OUT/log.txt
P=$(python3 -c 'import json;print(json.load(open("bench/spec-prompts-dflash.json"))["man-question"])')
for g in 0 1; do
  MUSER_CUDA_DRAFT_GRAPH=$g MUSER_SPEC_ROW_COST=0.1 timeout 120 nsys profile -t cuda,osrt --cuda-graph-trace=node -o /tmp/p$g -f true \
    $M run -m $F --backend cuda --spec dflash -p "$P" -n 128 --temp 0 --ignore-eos --json > /tmp/run$g.json 2>/tmp/run$g.err
  tail -c 1500 /tmp/run$g.json >> $OUT/log.txt; tail -3 /tmp/run$g.err >> $OUT/log.txt
  timeout 90 nsys stats -q --report cuda_gpu_kern_sum,cuda_api_sum --format csv -o /tmp/s$g /tmp/p$g.nsys-rep >> $OUT/log.txt 2>&1
  cat /tmp/s$g* > $OUT/nsys-g$g.csv 2>/dev/null
  echo "nsys $g done $(el)s" >> $OUT/log.txt
done
# a trace of the kernels in time order for g=1 (first 4000 lines)
timeout 60 nsys stats -q --report cuda_gpu_trace --format csv /tmp/p1.nsys-rep 2>/dev/null | head -6000 | xz > $OUT/trace-g1.csv.xz
echo "all done $(el)s" >> $OUT/log.txt
