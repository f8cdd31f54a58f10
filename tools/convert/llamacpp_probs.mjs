// llama.cpp's answers for a GGUF (through node-llama-cpp 3.22.1, CPU,
// flash attention off, F16 KV cache): tokenization, and greedy continuations
// with the top next-token probabilities at every step. Used to check the
// converter against transformers (tools/convert/compare.py).
//
// usage: node tools/convert/llamacpp_probs.mjs MODEL.gguf GOLDEN_OR_SPEC.json OUT.json
//   input: a transformers golden file (tools/train/golden.py output: prompts
//   are taken from its generate[].prompt_ids and tokenize[].text) or a spec
//   {"tokenize": [text], "generate": [{"name","ids"|"text"}], "n_predict", "top"}.
// Set up once: npm i -E node-llama-cpp@3.22.1 in the repository root (or set
// NODE_LLAMA_CPP_DIR to a folder whose node_modules holds it).
import fs from "node:fs";
import path from "node:path";
import {pathToFileURL} from "node:url";

const dir = process.env.NODE_LLAMA_CPP_DIR ?? process.cwd();
const {getLlama} = await import(pathToFileURL(path.join(dir, "node_modules/node-llama-cpp/dist/index.js")).href);
const [modelPath, inPath, outPath] = process.argv.slice(2);
const spec = JSON.parse(fs.readFileSync(inPath, "utf8"));
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const out = {model: path.basename(modelPath),
             reference: "llama.cpp via node-llama-cpp 3.22.1 (CPU, 2 threads, flash attention off, F16 KV cache, greedy)",
             tokenize: [], generate: []};
for (const t of spec.tokenize ?? []) {
  const text = typeof t === "string" ? t : t.text;
  out.tokenize.push({text, ids: Array.from(model.tokenize(text, false)), ids_special: Array.from(model.tokenize(text, true))});
}
const nPredict = spec.n_predict ?? 48, top = 2 * (spec.top ?? 8);  // twice the reference top-k, so the comparison sees all of it
for (const g of spec.generate ?? []) {
  // "special": true parses special-token texts in the prompt (chat prompts)
  const prompt = g.prompt_ids ?? g.ids ?? [model.tokens.bos, ...model.tokenize(g.text, g.special === true)];
  const n = g.steps ? g.steps.length : nPredict;
  const ctx = await model.createContext({contextSize: 2048, batchSize: 512, flashAttention: false, threads: 2});
  const seq = ctx.getSequence();
  const steps = [];
  for await (const r of seq.evaluateWithMetadata(prompt, {probabilities: true}, {temperature: 0})) {
    const probs = [...r.probabilities.entries()].sort((a, b) => b[1] - a[1]).slice(0, top);
    steps.push({id: r.token, top: probs.map(([id, p]) => [id, Number(p.toPrecision(7))])});
    if (steps.length >= n) break;
  }
  out.generate.push({name: g.name, prompt_ids: Array.from(prompt), ids: steps.map(s => s.id),
                     completion: model.detokenize(steps.map(s => s.id)), steps});
  await ctx.dispose();
}
fs.writeFileSync(outPath, JSON.stringify(out));
console.log(`wrote ${outPath}: ${out.tokenize.length} tokenize, ${out.generate.length} generate`);
