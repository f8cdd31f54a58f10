// llama.cpp's greedy tokens across context shifts, as its server makes them
// with --context-shift: for each case of shift-cases.json, the prompt (BOS
// first, then the case's ids) is evaluated in a context of `ctx` cells and
// tokens are generated one decode at a time; before a decode, when the
// sequence holds n_past tokens with n_past + 1 >= ctx, the server's shift
// runs: n_keep = (keep < 0 ? prompt tokens : keep) + 1 (the model adds BOS),
// at most ctx - 4; n_left = n_past - n_keep; n_discard = (discard or
// n_left / 2) clamped to [0, n_left - 1]; positions [n_keep, n_keep +
// n_discard) are erased and the later ones move back (llama_memory_seq_rm,
// then llama_memory_seq_add with -n_discard). Records, per step, the token
// and the 8 most probable next tokens, and the shifts made (step, n_keep,
// n_discard). A case with "cont" then evaluates, in one decode, the last
// token and cont.extra new ones on top of what the sequence holds (what a
// follow-up request with cache_prompt does on the server) and generates
// cont.n more tokens, shifting again. Runs llama.cpp through node-llama-cpp (CPU backend, zen4
// variant, 2 threads, flash attention off, F16 cache).
//
//   node llamacpp-shift.mjs MODEL.gguf shift-cases.json OUT.json
//
// The erase is node-llama-cpp's LlamaContextSequence.eraseContextTokenRanges,
// which calls exactly those two (removeTokenCellsFromSequence then
// shiftSequenceTokenCells over [end, nextTokenIndex)). One guard of it is
// lifted: it re-evaluates the whole sequence instead when the range starts
// at or below llama_memory_seq_pos_min, which on this model is the sliding
// cache's oldest position (llama_kv_cache_iswa::seq_pos_min). The server
// shifts regardless, so this script makes that minimum read 0 for the
// sequence (the range starts at n_keep >= 1): the erase then runs seq_rm and
// seq_add as the server does.
import {getLlama} from "node-llama-cpp";
import fs from "node:fs";

const [modelPath, casesPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node llamacpp-shift.mjs MODEL.gguf shift-cases.json OUT.json");
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

function promptIds(c) {
  // a deterministic walk over the vocabulary (no specials: ids below 256+)
  const ids = [];
  let x = c.seed >>> 0;
  for (let i = 0; i < c.prompt_len; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    ids.push(3 + (x >>> 8) % (c.vocab_hi - 3));
  }
  return ids;
}

for (const c of spec.cases) {
  const prompt = [bos, ...promptIds(c)];
  const ctx = await model.createContext({contextSize: c.ctx, batchSize: 512, flashAttention: false, threads: 2});
  if (ctx.contextSize !== c.ctx) throw new Error(`context size ${ctx.contextSize}, wanted ${c.ctx}`);
  const native = ctx._ctx; // the addon's object; its methods are read-only, so a proxy reads the minimum as 0
  ctx._ctx = new Proxy(native, {get(t, p) {
    if (p === "getSequenceKvCacheMinPosition") return (id) => Math.min(0, t.getSequenceKvCacheMinPosition(id));
    const v = t[p];
    return typeof v === "function" ? v.bind(t) : v;
  }});
  const seq = ctx.getSequence();
  // greedy steps from `input` (evaluated in one decode), one decode per
  // token after it, shifting as the server does; taskLen: the request's
  // prompt length (n_keep -1)
  async function generate(input, n, taskLen, steps, shifts) {
    while (steps.length < n) {
      const nPast = seq.nextTokenIndex;
      if (steps.length > 0 && nPast + 1 >= c.ctx) {
        let nKeep = (c.keep < 0 ? taskLen : c.keep) + 1; // the server: the task's tokens (BOS included), + 1 for add_bos
        nKeep = Math.min(c.ctx - 4, nKeep);
        const nLeft = nPast - nKeep;
        let nDiscard = c.discard ? c.discard : Math.trunc(nLeft / 2);
        nDiscard = Math.min(Math.max(nDiscard, 0), Math.max(0, nLeft - 1));
        await seq.eraseContextTokenRanges([{start: nKeep, end: nKeep + nDiscard}]);
        if (seq.nextTokenIndex !== nPast - nDiscard) throw new Error("erase did not shift");
        shifts.push({step: steps.length, n_keep: nKeep, n_discard: nDiscard});
      }
      let got = null;
      for await (const r of seq.evaluateWithMetadata(input, {probabilities: true}, {temperature: 0, yieldEogToken: true})) {
        got = r;
        break;
      }
      const top = [...got.probabilities.entries()].sort((a, b) => b[1] - a[1]).slice(0, 8);
      steps.push({id: got.token, top: top.map(([id, p]) => [id, Number(p.toPrecision(7))])});
      input = [got.token];
    }
  }
  const steps = [], shifts = [];
  await generate(prompt, c.n, prompt.length, steps, shifts);
  const out = {name: c.name, ctx: c.ctx, keep: c.keep, discard: c.discard ?? 0, prompt_ids: prompt,
               shifts, ids: steps.map(s => s.id), steps};
  if (c.cont) {
    // a follow-up request that extends what the slot holds (the server's
    // cache_prompt): the sequence's tokens, the last generated token and
    // c.cont.extra new ones, evaluated in one decode into the shifted cache
    const kv = seq.contextTokens.slice();
    const extra = promptIds({seed: c.cont.seed, prompt_len: c.cont.extra, vocab_hi: c.vocab_hi});
    const input = [steps[steps.length - 1].id, ...extra];
    if (kv.length + input.length >= c.ctx) throw new Error("the continuation does not fit");
    const steps2 = [], shifts2 = [];
    await generate(input, c.cont.n, kv.length + input.length, steps2, shifts2);
    out.cont = {kv_ids: kv, new_ids: input, shifts: shifts2, ids: steps2.map(s => s.id), steps: steps2};
  }
  result.cases.push(out);
  await ctx.dispose();
}
fs.writeFileSync(outPath, JSON.stringify(result));
console.log(`wrote ${outPath}: ${result.cases.length} cases`);
