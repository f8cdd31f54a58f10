# call 2 of stop 40: per-kernel durations (ncu) of verifybench's decode steps and DFlash drafter passes (K = 15), bundled model, depth 256
set -u
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so
for g in 0 1; do
MUSER_CUDA_DRAFT_GRAPH=$g VERIFYBENCH_MODES=0 VERIFYBENCH_BACKEND=cuda VERIFYBENCH_DRAFT=models/muser-default.dflash.gguf \
  timeout 200 ncu --metrics gpu__time_duration.sum --csv --print-units base --clock-control none \
  build/bench/verifybench models/muser-default.gguf 1 256 1 15 > /tmp/ncu$g.csv 2>/tmp/ncu$g.err
tail -5 /tmp/ncu$g.err; xz -c /tmp/ncu$g.csv > $OUT/ncu-g$g.csv.xz
done
