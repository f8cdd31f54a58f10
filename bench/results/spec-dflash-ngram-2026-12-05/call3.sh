set -u
O=$OUT
tar -xJf .gpu/plugin.tar.xz
mkdir -p .gpu/b && tar -xJf .gpu/c3/dflash-bin.tar.xz -C .gpu/b && mv .gpu/b/muser .gpu/muser && mv .gpu/b/lib .gpu/lib
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
for rep in 1 2; do for g in 0 1; do for d in .gpu/prev-drafter.gguf models/muser-default.dflash.gguf; do
  echo "== MUSER_CUDA_DRAFT_GRAPH=$g rep $rep draft $d"
  MUSER_CUDA_DRAFT_GRAPH=$g VERIFYBENCH_MODES=0 VERIFYBENCH_BACKEND=cuda VERIFYBENCH_DRAFT=$d timeout 40 .gpu/cb/verifybench models/muser-default.gguf 1 256 15 1,15 | grep '"decode"\|"draft"'
done; done; done; } > $O/verifybench.txt 2>&1
mkdir -p /tmp/b
OUT=/tmp/b bash tools/device/spec-cuda.sh --no-check --budget 230 --reps 3 --variant "ngram ngram" --variant "old dflash -- --draft $PWD/.gpu/prev-drafter.gguf" --variant "new dflash" --variant "new-g dflash MUSER_CUDA_DRAFT_GRAPH=1" > $O/spec-stdout.log 2>&1
cp /tmp/b/spec-summary.txt $O/; (cd /tmp/b && tar -cJf $O/bench.tar.xz .)
ls $O
