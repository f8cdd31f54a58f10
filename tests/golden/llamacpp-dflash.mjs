// llamacpp-dflash.mjs: llama.cpp (node-llama-cpp 3.22.1) runs a DFlash drafter GGUF
// with its own embedding and head on blocks alone (no injected context):
// usage: node llamacpp-dflash.mjs DRAFTER.gguf MASK_ID BLOCK LAST... -> JSON
// [{last, drafts}] (check-dflash.sh compares them with the PyTorch drafter).
// argmax of every row of the block [last, mask x (B-1)] at positions 0.., one
// llama.cpp context per block (non-causal: the file says attention.causal false)
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
const [path, mask, B, ...lasts] = process.argv.slice(2).map((x, i) => i ? Number(x) : x);
const llama = await getLlama({gpu: false, logLevel: LlamaLogLevel.error, build: "never"});
const model = await llama.loadModel({modelPath: path});
const out = [];
for (const last of lasts) {
  const ctx = await model.createContext({contextSize: 64, batchSize: 64});
  const seq = ctx.getSequence();
  const toks = [last, ...Array(B - 1).fill(mask)];
  const items = toks.map(t => [t, {generateNext: {logits: true}}]);
  const res = await seq.controlledEvaluate(items);
  const rows = res.slice(1).map(r => { const l = r.next.logits; let b = 0, bv = -Infinity;
    for (const [id, v] of l) if (v > bv) { bv = v; b = id; } return b; });
  out.push({last, drafts: rows});
  await ctx.dispose();
}
console.log(JSON.stringify(out));
