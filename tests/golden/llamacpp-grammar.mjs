// llama.cpp's greedy tokens under GBNF grammars: for each grammar of
// grammar-cases.json (GBNF texts, and JSON schemas turned into GBNF by
// node-llama-cpp's createGrammarForJsonSchema) and each prompt (BOS first,
// then the prompt's ids), the tokens llama.cpp generates greedily with the
// grammar, up to the first end-of-generation token (included) or n tokens,
// and at each step the 8 most probable tokens after the grammar's mask (the
// softmax over the tokens the grammar allows: what greedy picks from; for
// the tie rule of compare.py). Runs llama.cpp through node-llama-cpp (CPU
// backend, zen4 variant, 2 threads, flash attention off, F16 cache).
//
//   npm i -E node-llama-cpp@3.22.1      (once, in this folder)
//   node llamacpp-grammar.mjs MODEL.gguf grammar-cases.json OUT.json
//
// How node-llama-cpp applies a grammar (llama/addon/AddonSampler.cpp in the
// package): temperature 0 makes its chain [token bias, penalties, DRY,]
// greedy, i.e. llama.cpp's llama_sampler_init_greedy (argmax); the grammar is
// llama.cpp's llama_sampler_init_grammar. When probabilities are asked for,
// the grammar is applied to all candidates first and then the chain
// (otherwise it samples, checks the token, and only on refusal masks and
// samples again: for greedy the same token either way). After each token it
// feeds the grammar every token but end-of-generation ones. So this is
// llama.cpp's grammar and greedy argmax, as its server applies them.
//
// Seeded cases ("sampled": options in muser's CLI names, temp top_k top_p
// min_p seed; node-llama-cpp's defaults top_k 40, top_p 0.95, min_p 0.05
// where left out), on the first prompt only, without probabilities: then
// node-llama-cpp samples as llama.cpp's common_sampler_sample does without
// grammar-first: the chain (top-k, top-p, min-p, temperature, draw) on the
// unmasked logits, the drawn token checked against the grammar, and on
// refusal the grammar's mask on all logits and the whole chain again (the
// generator drawing a second time). Their steps carry no probabilities.
// node-llama-cpp's topK 0 is llama.cpp's top-k with k = n_vocab, which sorts
// the candidates and so moves the draw; llama.cpp's (and muser's) top-k 0
// leaves them unsorted: a case without truncation says top_k >= n_vocab.
import {getLlama, LlamaGrammarEvaluationState} from "node-llama-cpp";
import fs from "node:fs";

const [modelPath, casesPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node llamacpp-grammar.mjs MODEL.gguf grammar-cases.json OUT.json");
  process.exit(2);
}
const spec = JSON.parse(fs.readFileSync(casesPath, "utf8"));
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const bos = model.tokens.bos;
const result = {
  reference: "llama.cpp via node-llama-cpp 3.22.1 (CPU zen4, 2 threads, flash attention off, F16 KV cache)",
  model: modelPath.split("/").pop(), cases: [],
};

const grammars = [];
for (const g of spec.grammars) grammars.push({name: g.name, gbnf: g.gbnf, grammar: await llama.createGrammar({grammar: g.gbnf})});
for (const s of spec.schemas) {
  const grammar = await llama.createGrammarForJsonSchema(s.schema);
  grammars.push({name: s.name, schema: s.schema, gbnf: grammar.grammar, grammar});
}

for (const g of grammars) {
  for (let pi = 0; pi < spec.prompts.length; pi++) {
    const prompt = [bos, ...spec.prompts[pi]];
    const ctx = await model.createContext({contextSize: spec.ctx ?? 4096, batchSize: 512, flashAttention: false, threads: 2});
    const seq = ctx.getSequence();
    const state = new LlamaGrammarEvaluationState({model, grammar: g.grammar});
    const steps = [];
    let eog = false;
    for await (const r of seq.evaluateWithMetadata(prompt, {probabilities: true},
                                                   {temperature: 0, grammarEvaluationState: state, yieldEogToken: true})) {
      const top = [...r.probabilities.entries()].filter(([, p]) => p > 0).sort((a, b) => b[1] - a[1]).slice(0, 8);
      steps.push({id: r.token, top: top.map(([id, p]) => [id, Number(p.toPrecision(7))])});
      if (model.isEogToken(r.token)) { eog = true; break; }
      if (steps.length >= spec.n) break;
    }
    const c = {name: `${g.name}/p${pi}`, gbnf: g.gbnf, prompt_ids: prompt, ids: steps.map(s => s.id), eog, steps};
    if (g.schema) c.schema = g.schema;
    result.cases.push(c);
    console.log(`${c.name}: ${c.ids.length} tokens${eog ? " (ends with end-of-generation)" : ""}: ${JSON.stringify(model.detokenize(c.ids.filter(t => !model.isEogToken(t))))}`);
    await ctx.dispose();
  }
  for (const o of spec.sampled ?? []) {
    const prompt = [bos, ...spec.prompts[0]];
    const ctx = await model.createContext({contextSize: spec.ctx ?? 4096, batchSize: 512, flashAttention: false, threads: 2});
    const seq = ctx.getSequence();
    const state = new LlamaGrammarEvaluationState({model, grammar: g.grammar});
    const ids = [];
    let eog = false;
    for await (const t of seq.evaluate(prompt, {temperature: o.temp, topK: o.top_k ?? 40, topP: o.top_p ?? 0.95,
                                                minP: o.min_p ?? 0.05, seed: o.seed, grammarEvaluationState: state,
                                                yieldEogToken: true})) {
      ids.push(t);
      if (model.isEogToken(t)) { eog = true; break; }
      if (ids.length >= spec.n) break;
    }
    const c = {name: `${g.name}/p0/temp${o.temp}-seed${o.seed}`, gbnf: g.gbnf, opts: o, prompt_ids: prompt, ids, eog,
               steps: ids.map(id => ({id}))};
    if (g.schema) c.schema = g.schema;
    result.cases.push(c);
    console.log(`${c.name}: ${ids.length} tokens${eog ? " (ends with end-of-generation)" : ""}: ${JSON.stringify(model.detokenize(ids.filter(t => !model.isEogToken(t))))}`);
    await ctx.dispose();
  }
}
fs.writeFileSync(outPath, JSON.stringify(result));
console.log(`wrote ${outPath}: ${result.cases.length} cases`);
