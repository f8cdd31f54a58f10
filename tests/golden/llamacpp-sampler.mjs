// llama.cpp's tokens with its sampler chain's stages on: for each case of
// sampler-cases.json, the prompt (BOS first, then the case's ids) and the
// tokens llama.cpp generates with the case's settings, and at each step the
// 8 most probable tokens after the chain's history stages (what greedy picks
// from; for the tie rule of compare.py). Runs llama.cpp through node-llama-cpp
// (CPU backend, zen4 variant, 2 threads, flash attention off, F16 cache).
//
//   npm i -E node-llama-cpp@3.22.1      (once, in this folder)
//   node llamacpp-sampler.mjs MODEL.gguf sampler-cases.json OUT.json
//
// A case's "opts" use muser's CLI names (they are what sampler-check.py
// passes to `muser run`), mapped here onto node-llama-cpp's options:
//   temp top_k top_p min_p seed           temperature topK topP minP seed
//   repeat_penalty repeat_last_n          repeatPenalty.penalty / maxPunishTokens
//   frequency_penalty presence_penalty    repeatPenalty.frequencyPenalty / presencePenalty
//   dry_multiplier dry_base               dryRepeatPenalty.strength / base
//   dry_allowed_length dry_penalty_last_n dryRepeatPenalty.allowedLength / lastTokens
//   dry_sequence_breakers [...]           dryRepeatPenalty.sequenceBreakers ([]: none)
//   logit_bias [[id, bias], ...]          tokenBias (set to {logit: bias})
//   xtc_probability xtc_threshold         xtc
// What node-llama-cpp feeds the stages' histories, and how the cases keep
// it equal to what llama.cpp's server (and muser) feeds:
// - penalties: the tokens given by punishTokens. It is given the last
//   repeat_last_n tokens of prompt + generated, the server's window.
// - DRY: only the tokens generated since the sampler was made (the server
//   also feeds the prompt). DRY cases therefore use the one-token prompt
//   [BOS]: a token that never comes back cannot be part of a repeat, so it
//   changes nothing.
// Node-llama-cpp's non-greedy chain is bias -> penalties -> DRY -> top-k ->
// top-p -> min-p -> XTC -> temperature -> draw, the order of llama.cpp's
// common chain for these stages, with the same seed for the draw and XTC.
import {getLlama, TokenBias} from "node-llama-cpp";
import fs from "node:fs";

const [modelPath, casesPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node llamacpp-sampler.mjs MODEL.gguf sampler-cases.json OUT.json");
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

function nodeOptions(o, hist) {
  // yieldEogToken: end-of-generation tokens are generated through, as
  // `muser run --ignore-eos` does
  const r = {temperature: o.temp ?? 0, topK: o.top_k ?? 40, topP: o.top_p ?? 0.95, minP: o.min_p ?? 0.05,
             yieldEogToken: true};
  if (o.seed != null) r.seed = o.seed;
  if (o.repeat_penalty != null || o.frequency_penalty != null || o.presence_penalty != null) {
    const n = o.repeat_last_n ?? 64;
    r.repeatPenalty = {
      punishTokens: () => hist.slice(Math.max(0, hist.length - n)),
      maxPunishTokens: n,
      penalty: o.repeat_penalty ?? 1,
      frequencyPenalty: o.frequency_penalty ?? 0,
      presencePenalty: o.presence_penalty ?? 0,
    };
  }
  if (o.dry_multiplier != null) {
    r.dryRepeatPenalty = {
      strength: o.dry_multiplier, base: o.dry_base ?? 1.75, allowedLength: o.dry_allowed_length ?? 2,
      lastTokens: o.dry_penalty_last_n ?? 64,
    };
    if (o.dry_sequence_breakers) r.dryRepeatPenalty.sequenceBreakers = o.dry_sequence_breakers;
  }
  if (o.logit_bias) {
    const tb = new TokenBias(model.tokenizer);
    for (const [id, b] of o.logit_bias) tb.set(id, {logit: b === "-inf" ? -Infinity : b});
    r.tokenBias = tb;
  }
  if (o.xtc_probability != null) r.xtc = {probability: o.xtc_probability, threshold: o.xtc_threshold ?? 0.1};
  return r;
}

for (const c of spec.cases) {
  const prompt = [bos, ...c.prompt];
  const ctx = await model.createContext({contextSize: spec.ctx ?? 4096, batchSize: 512, flashAttention: false, threads: 2});
  const seq = ctx.getSequence();
  const hist = prompt.slice();
  const steps = [];
  const opts = nodeOptions(c.opts, hist);
  for await (const r of seq.evaluateWithMetadata(prompt, {probabilities: true}, opts)) {
    const top = [...r.probabilities.entries()].sort((a, b) => b[1] - a[1]).slice(0, 8);
    steps.push({id: r.token, top: top.map(([id, p]) => [id, Number(p.toPrecision(7))])});
    hist.push(r.token);
    if (steps.length >= c.n) break;
  }
  result.cases.push({name: c.name, opts: c.opts, prompt_ids: prompt, ids: steps.map(s => s.id), steps});
  await ctx.dispose();
}
fs.writeFileSync(outPath, JSON.stringify(result));
console.log(`wrote ${outPath}: ${result.cases.length} cases`);
