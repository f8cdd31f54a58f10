# call 4 of stop 34: gpu tier on the final code (pinned logits rows, session copy for n choices); serve n=4 greedy on CUDA; A/B against main 969dc1b
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
tar -xJf .gpu/cuda.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
F=/tmp/full-q4_k_m.gguf
if [ ! -f $F ]; then .gpu/muser gen --preset full --type q4_k_m --quant fast --threads 16 -o $F.tmp > $OUT/gen.log 2>&1 && mv $F.tmp $F; fi
echo "gen done at $(el)s" >> $OUT/log.txt
OUT=/tmp/cuda-h200-out bash tools/device/cuda-h200.sh --budget 320 --tier-cap 300 --no-bench > $OUT/tier-driver.log 2>&1
cp /tmp/cuda-h200-out/summary.txt $OUT/tier-summary.txt 2>/dev/null; xz -c /tmp/cuda-h200-out/tier.log > $OUT/tier.log.xz 2>/dev/null
echo "tier done at $(el)s" >> $OUT/log.txt
# n choices on CUDA: greedy n=4 gives four identical choices equal to n=1
MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so .gpu/muser serve -m models/muser-default.gguf --backend cuda --parallel 4 --port 18080 > /tmp/serve.log 2>&1 &
SP=$!
for i in $(seq 60); do curl -sf http://127.0.0.1:18080/health >/dev/null && break; sleep 1; done
for n in 4 1; do
  curl -s http://127.0.0.1:18080/v1/completions -H 'Content-Type: application/json' -d "{\"prompt\":\"GREP(1)\n\nNAME\n       grep - print lines that match patterns\n\nSYNOPSIS\n\",\"temperature\":0,\"n\":$n,\"max_tokens\":48}" > $OUT/serve-n$n.json
done
kill $SP; wait $SP 2>/dev/null
python3 - $OUT/serve-n4.json $OUT/serve-n1.json >> $OUT/serve-check.txt 2>&1 <<'PY'
import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
t = [c["text"] for c in a["choices"]]
print("n=4 choices", len(t), "all equal to n=1:", all(x == b["choices"][0]["text"] for x in t), "prompt_shared timings:", a.get("timings", {}).get("prompt_shared"))
print(repr(b["choices"][0]["text"][:120]))
PY
tail -3 /tmp/serve.log >> $OUT/serve-check.txt
echo "serve done at $(el)s" >> $OUT/log.txt
for rep in 1 2; do
  for v in old new; do for p in 1 4; do
    if [ $v = old ]; then B=.gpu/old; else B=.gpu; fi
    MUSER_CUDA_PLUGIN=$PWD/$B/muser-cuda.so timeout 120 $B/muser bench -m $F --backend cuda --depths 512,2048,8192 --gen 64 --parallel $p 2>&1 | grep tok/s | sed "s/peak RSS.*//; s/^/rep $rep $v p$p /" >> $OUT/ab.txt
  done; done
done
echo "all done at $(el)s" >> $OUT/log.txt
