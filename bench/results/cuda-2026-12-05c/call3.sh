# call 3 of stop 40: the drafter's attention rewritten (a thread a key) and Q8_0/NVFP4 ring kernels for up to 16 tokens;
# verifybench A/B (MUSER_CUDA_Q8D_T=4: the old limit), then the gpu tier and the spec variants (spec-cuda.sh)
set -u
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
F=models/muser-default.gguf D=models/muser-default.dflash.gguf
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/verify.txt
v() { echo "== $1" >> $OUT/verify.txt; env $2 VERIFYBENCH_BACKEND=cuda VERIFYBENCH_DRAFT=$D timeout 60 build/bench/verifybench $F 1 256 9 1,2,3,4,7,8,11,15 >> $OUT/verify.txt 2>&1; }
v "q8d_t 16, graph_t 16, draft graph 1" "MUSER_CUDA_DRAFT_GRAPH=1 MUSER_CUDA_GRAPH_T=16"
v "q8d_t 4, graph_t 16, draft graph 1" "MUSER_CUDA_Q8D_T=4 MUSER_CUDA_DRAFT_GRAPH=1 MUSER_CUDA_GRAPH_T=16"
v "q8d_t 16, graph_t 8, draft graph 0" "MUSER_CUDA_DRAFT_GRAPH=0"
A="MUSER_DRAFT_COST_PASS=0.4 MUSER_SPEC_ROW_COST=0.05"
bash tools/device/spec-cuda.sh --tier --budget 500 \
  --variant "ngram ngram" --variant "ngram-r05 ngram MUSER_SPEC_ROW_COST=0.05 MUSER_CUDA_GRAPH_T=16" \
  --variant "dflash dflash" --variant "dflash-a8 dflash $A" \
  --variant "dflash-a dflash $A MUSER_CUDA_GRAPH_T=16 -- --draft-max 15" \
  --variant "dflash-ag dflash $A MUSER_CUDA_GRAPH_T=16 MUSER_CUDA_DRAFT_GRAPH=1 -- --draft-max 15" \
  --variant "dflash-agq4 dflash $A MUSER_CUDA_GRAPH_T=16 MUSER_CUDA_DRAFT_GRAPH=1 MUSER_CUDA_Q8D_T=4 -- --draft-max 15" 2>&1 | tail -5
