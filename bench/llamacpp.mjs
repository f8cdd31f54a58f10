// llamacpp.mjs: times llama.cpp (node-llama-cpp 3.22.1, CPU backend) the way
// `muser bench` times muser, for bench/compare-llamacpp.
//   node bench/llamacpp.mjs MODEL.gguf DEPTH GEN THREADS [VOCAB_CAP]
// Prints one JSON line: prefill and decode seconds and tokens/s, and the
// greedy token ids. Prompt: BOS, then x = (x * 1103515245 + 12345) mod 2^31
// from 12345, token x % min(30000, VOCAB_CAP); prefill in batches of 512;
// decode starts from token 5, temperature 0 (greedy), GEN steps or fewer when
// the model picks an end-of-generation token (decode_tokens counts them).
// F16 KV cache; flash attention off (as in the project's fixtures) unless
// LLAMACPP_FA=1.
// Needs node-llama-cpp: `npm i -E node-llama-cpp@3.22.1` in bench/ (or set
// LLAMACPP_NODE_MODULES to a node_modules directory that has it).
import {createRequire} from "node:module";
import {existsSync} from "node:fs";
import {dirname, join} from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const nm = process.env.LLAMACPP_NODE_MODULES ||
    [join(here, "node_modules"), join(process.cwd(), "node_modules")].find((d) => existsSync(join(d, "node-llama-cpp")));
if (!nm) {
    console.error("llamacpp.mjs: node-llama-cpp not found: run `npm i -E node-llama-cpp@3.22.1` in bench/ or set LLAMACPP_NODE_MODULES");
    process.exit(1);
}
const {getLlama} = await import(pathToFileURL(createRequire(join(nm, "x.js")).resolve("node-llama-cpp")).href);

const [modelPath, depthS, genS, threadsS, capS] = process.argv.slice(2);
const depth = +depthS, gen = +genS, threads = +threadsS, cap = Math.min(30000, capS ? +capS : 30000);
if (!modelPath || !(depth > 0) || !(gen > 0) || !(threads > 0)) {
    console.error("usage: node bench/llamacpp.mjs MODEL.gguf DEPTH GEN THREADS [VOCAB_CAP]");
    process.exit(1);
}
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const flashAttention = process.env.LLAMACPP_FA === "1";
const ctx = await model.createContext({contextSize: depth + gen + 16, batchSize: 512, flashAttention, threads});
const seq = ctx.getSequence();
const prompt = [model.tokens.bos];
let x = 12345n; // BigInt: x * 1103515245 overflows a double's 53 bits
for (let i = 1; i < depth; i++) {
    x = (x * 1103515245n + 12345n) % 2147483648n;
    prompt.push(Number(x % BigInt(cap)));
}
const t0 = performance.now();
await seq.evaluateWithoutGeneratingNewTokens(prompt);
const t1 = performance.now();
const ids = [];
for await (const t of seq.evaluate([5], {temperature: 0})) {
    ids.push(t);
    if (ids.length >= gen) break;
}
const t2 = performance.now();
const ps = (t1 - t0) / 1000, ds = (t2 - t1) / 1000;
// node-llama-cpp ends the generation at an end-of-generation token without
// yielding it: that was one more forward pass
const steps = ids.length < gen ? ids.length + 1 : ids.length;
console.log(JSON.stringify({engine: "llama.cpp", depth, gen, threads, flash_attn: flashAttention, prefill_s: ps, decode_s: ds,
    prefill_tps: depth / ps, decode_tokens: steps, decode_tps: steps / ds, ids}));
await ctx.dispose();
await model.dispose();
await llama.dispose();
