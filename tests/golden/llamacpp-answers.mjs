// llama.cpp's answers for the golden tests: for each prompt of a spec, the
// greedy continuation and, at every step, the most probable next tokens
// (softmax of the final logits). Runs llama.cpp through the npm package
// node-llama-cpp (CPU backend, 2 threads, flash attention off, F16 cache).
//
//   npm i -E node-llama-cpp@3.22.1      (once, in this folder)
//   node llamacpp-answers.mjs MODEL.gguf SPEC.json OUT.json
//
// SPEC: {"n_predict": N, "top": K, "ctx": C,
//        "prompts": [{"name": "...", "ids": [...]} | {"name": "...", "text": "..."}]}
// A text prompt is tokenized by llama.cpp with BOS per the GGUF.
import {getLlama} from "node-llama-cpp";
import fs from "node:fs";

const [modelPath, specPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node llamacpp-answers.mjs MODEL.gguf SPEC.json OUT.json");
  process.exit(2);
}
const spec = JSON.parse(fs.readFileSync(specPath, "utf8"));
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const nPredict = spec.n_predict ?? 32;
const top = spec.top ?? 8;
const result = {
  reference: "llama.cpp via node-llama-cpp 3.22.1 (CPU, 2 threads, flash attention off, F16 KV cache, greedy)",
  model: modelPath.split("/").pop(), n_predict: nPredict, generate: [],
};
for (const p of spec.prompts) {
  const prompt = p.ids ?? [...(model.tokens.bos != null ? [model.tokens.bos] : []), ...model.tokenize(p.text, false)];
  const ctx = await model.createContext({contextSize: spec.ctx ?? 8192, batchSize: 512, flashAttention: false, threads: 2});
  const seq = ctx.getSequence();
  const steps = [];
  for await (const r of seq.evaluateWithMetadata(prompt, {probabilities: true}, {temperature: 0})) {
    const best = [...r.probabilities.entries()].sort((a, b) => b[1] - a[1]).slice(0, top);
    steps.push({id: r.token, top: best.map(([id, pr]) => [id, Number(pr.toPrecision(7))])});
    if (steps.length >= nPredict) break;
  }
  result.generate.push({name: p.name, prompt_ids: Array.from(prompt), ids: steps.map(s => s.id), steps});
  await ctx.dispose();
}
fs.writeFileSync(outPath, JSON.stringify(result));
console.log(`wrote ${outPath}: ${result.generate.length} prompts`);
