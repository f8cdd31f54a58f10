set -u
O=$OUT
tar -xJf .gpu/plugin.tar.xz
mkdir -p .gpu/b && tar -xJf .gpu/c3/dflash-bin.tar.xz -C .gpu/b && mv .gpu/b/muser .gpu/muser && mv .gpu/b/lib .gpu/lib
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
mkdir -p /tmp/b
OUT=/tmp/b bash tools/device/spec-cuda.sh --no-check --budget 200 --reps 3 --variant "ngram ngram" --variant "dflash dflash" --variant "dflash-only dflash MUSER_DFLASH_NGRAM=0" --variant "dflash-old dflash -- --draft $PWD/.gpu/prev-drafter.gguf" --variant "dflash-16 dflash MUSER_CUDA_Q8D_T=16 MUSER_CUDA_GRAPH_T=16 -- --draft-max 15" --variant "ngram-16 ngram MUSER_CUDA_Q8D_T=16 MUSER_CUDA_GRAPH_T=16 -- --draft-max 15" > $O/spec-stdout.log 2>&1
cp /tmp/b/spec-summary.txt $O/; (cd /tmp/b && tar -cJf $O/bench.tar.xz .)
ls $O
