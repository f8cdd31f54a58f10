// llama.cpp's embeddings for the embedding parity test: for each prompt of
// a spec (token ids, BOS first), the vector llama.cpp's context returns
// with the model's pooling type (none: the last token's row, as
// node-llama-cpp and Ollama take it; mean when the GGUF says so), not
// normalized. Runs llama.cpp through node-llama-cpp (CPU, 2 threads, flash
// attention off, batch 512).
//
//   npm i -E node-llama-cpp@3.22.1      (once, in this folder)
//   node llamacpp-embd.mjs MODEL.gguf SPEC.json OUT.json
//
// SPEC: {"ctx": C, "prompts": [{"name": "...", "ids": [...]}]}
import {getLlama} from "node-llama-cpp";
import fs from "node:fs";

const [modelPath, specPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node llamacpp-embd.mjs MODEL.gguf SPEC.json OUT.json");
  process.exit(2);
}
const spec = JSON.parse(fs.readFileSync(specPath, "utf8"));
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
// flash attention off, as the generation goldens (createEmbeddingContext takes no such option)
const model = await llama.loadModel({modelPath, defaultContextFlashAttention: false});
const result = {
  reference: "llama.cpp via node-llama-cpp 3.22.1 (CPU zen4 variant, 2 threads, flash attention off, batch 512), getEmbeddingFor",
  model: modelPath.split("/").pop(), embeddings: [],
};
for (const p of spec.prompts) {
  const ctx = await model.createEmbeddingContext({contextSize: spec.ctx ?? 2048, batchSize: 512, threads: 2});
  if (ctx.calculateInputLength(p.ids) !== p.ids.length) throw new Error(`${p.name}: node-llama-cpp changed the input`);
  const e = await ctx.getEmbeddingFor(p.ids);
  result.embeddings.push({name: p.name, ids: p.ids, vector: Array.from(e.vector, v => Number(v.toPrecision(8)))});
  await ctx.dispose();
}
fs.writeFileSync(outPath, JSON.stringify(result));
console.log(`wrote ${outPath}: ${result.embeddings.length} prompts`);
