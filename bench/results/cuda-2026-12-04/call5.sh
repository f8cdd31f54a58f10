# call 5 of stop 34: n choices on CUDA through serve: greedy n=4 gives four identical choices equal to n=1 (the members copy the leader's session on the device)
set -u
[ -d .gpu/lib ] || tar -xJf .gpu/cuda.tar.xz
MUSER_CUDA_PLUGIN=$PWD/.gpu/muser-cuda.so LD_LIBRARY_PATH=$PWD/.gpu/lib .gpu/muser serve -m models/muser-default.gguf --backend cuda --parallel 4 --port 18080 > /tmp/serve.log 2>&1 &
SP=$!
for i in $(seq 60); do curl -sf http://127.0.0.1:18080/health >/dev/null && break; sleep 1; done
for p in "GREP(1)\n\nNAME\n       grep - print lines that match patterns\n\nSYNOPSIS\n" "import os\nimport sys\n\ndef main():\n"; do
 for n in 4 1; do
  curl -s http://127.0.0.1:18080/v1/completions -H 'Content-Type: application/json' -d "{\"prompt\":\"$p\",\"temperature\":0,\"n\":$n,\"max_tokens\":48}" > /tmp/serve-n$n.json
 done
 python3 - /tmp/serve-n4.json /tmp/serve-n1.json <<'PY' | tee -a $OUT/serve-check.txt
import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
t = [c["text"] for c in a["choices"]]
print("n=4:", len(t), "choices, all equal to n=1:", all(x == b["choices"][0]["text"] for x in t), "| n=1 text:", repr(b["choices"][0]["text"][:80]))
PY
done
curl -s http://127.0.0.1:18080/metrics | grep "^llamacpp:prompt_tokens_total\|^llamacpp:n_decode_total" | tee -a $OUT/serve-check.txt
kill $SP; wait $SP 2>/dev/null
tail -2 /tmp/serve.log >> $OUT/serve-check.txt
