// ollama_test.mjs: the `ollama` npm package (Ollama's JavaScript client) against
// a running muser serve, as a second real client of the Ollama routes.
// usage: node ollama_test.mjs BASE_URL MODEL_ID   (prints "N passed, N failed")
import { Ollama } from "ollama";

const [base, modelId] = process.argv.slice(2);
const ollama = new Ollama({ host: base });
const model = modelId + ":latest";
let passed = 0, failed = 0;
async function check(name, fn) {
  try { await fn(); console.log("ok   ollama " + name); passed++; }
  catch (e) { console.log("FAIL ollama " + name + ": " + (e && e.stack || e)); failed++; }
}
function assert(c, m) { if (!c) throw new Error(m); }

await check("list, ps, show, version", async () => {
  const l = await ollama.list();
  assert(l.models.length === 1 && l.models[0].name === model, JSON.stringify(l));
  const p = await ollama.ps();
  assert(p.models.length === 1 && p.models[0].name === model, JSON.stringify(p));
  const s = await ollama.show({ model });
  assert(typeof s.template === "string" && s.details.format === "gguf", "show");
  const v = await ollama.version();
  assert(typeof v.version === "string", "version");
});
await check("generate (stream false)", async () => {
  const r = await ollama.generate({ model, prompt: "Hello", stream: false, options: { num_predict: 6, temperature: 0 } });
  assert(r.done === true && typeof r.response === "string", JSON.stringify(r));
  assert(r.eval_count >= 1 && r.eval_count <= 6, "eval_count " + r.eval_count);
  assert(r.done_reason === "length" || r.done_reason === "stop", r.done_reason);
});
await check("generate (stream) equals generate (stream false)", async () => {
  const it = await ollama.generate({ model, prompt: "Hello", stream: true, options: { num_predict: 6, temperature: 0 } });
  let text = "", done = null;
  for await (const part of it) { text += part.response; if (part.done) done = part; }
  assert(done && done.eval_count >= 1, "no done record");
  const r = await ollama.generate({ model, prompt: "Hello", stream: false, options: { num_predict: 6, temperature: 0 } });
  assert(text === r.response, JSON.stringify(text) + " vs " + JSON.stringify(r.response));
});
await check("generate's deprecated context: returned, and continued from", async () => {
  const a = await ollama.generate({ model, prompt: "Hello", stream: false, options: { num_predict: 4, temperature: 0 } });
  assert(Array.isArray(a.context) && a.context.length === a.prompt_eval_count + a.eval_count - (a.done_reason === "stop" ? 1 : 0),
         "context " + JSON.stringify(a.context));
  const plain = await ollama.generate({ model, prompt: "Again", stream: false, options: { num_predict: 2, temperature: 0 } });
  const b = await ollama.generate({ model, prompt: "Again", context: a.context, stream: false, options: { num_predict: 2, temperature: 0 } });
  assert(b.prompt_eval_count > plain.prompt_eval_count && b.context.length > a.context.length, "continued " + JSON.stringify(b));
});
await check("chat (stream)", async () => {
  const it = await ollama.chat({ model, messages: [{ role: "user", content: "Hello" }], stream: true, options: { num_predict: 6, temperature: 0 } });
  let text = "", n = 0;
  for await (const part of it) { n++; text += part.message.content; }
  assert(n >= 1 && typeof text === "string", "parts " + n);
});
await check("chat with logprobs: the tokens join to the content", async () => {
  const r = await ollama.chat({ model, messages: [{ role: "user", content: "Hello" }], stream: false, logprobs: true, top_logprobs: 1, options: { num_predict: 12, temperature: 0 } });
  const joined = (r.logprobs || []).map((t) => t.token).join("");
  assert(joined === r.message.content, JSON.stringify(joined) + " vs " + JSON.stringify(r.message.content));
});
await check("chat format: a JSON schema", async () => {
  const r = await ollama.chat({ model, messages: [{ role: "user", content: "A number in JSON." }], stream: false,
    format: { type: "object", properties: { n: { type: "integer" } }, required: ["n"], additionalProperties: false },
    options: { num_predict: 40, temperature: 0 } });
  if (r.done_reason === "stop") assert(Number.isInteger(JSON.parse(r.message.content).n), r.message.content);
  else assert(r.message.content.trimStart().startsWith("{"), r.message.content);
});
await check("embed (batch, L2-normalized) and embeddings (one, raw)", async () => {
  const e = await ollama.embed({ model, input: ["The tar command", "ls lists files"] });
  assert(e.embeddings.length === 2 && e.embeddings[0].length > 8, "embeddings");
  const norm = Math.sqrt(e.embeddings[0].reduce((s, x) => s + x * x, 0));
  assert(Math.abs(norm - 1) < 1e-5, "norm " + norm);
  const o = await ollama.embeddings({ model, prompt: "The tar command" });
  const on = Math.sqrt(o.embedding.reduce((s, x) => s + x * x, 0));
  const d = Math.max(...o.embedding.map((x, i) => Math.abs(x / on - e.embeddings[0][i])));
  assert(d < 1e-5, "raw / |raw| vs normalized: " + d);
});
await check("unknown model -> error naming it", async () => {
  try { await ollama.generate({ model: "llama3", prompt: "x", stream: false }); throw new Error("no error"); }
  catch (e) { assert(String(e.message).includes("llama3") && e.status_code === 404, e.message + " " + e.status_code); }
});
await check("chat with a client's usual options (num_ctx 32768, num_thread, num_gpu, use_mmap, a dozen stops) and think \"low\"", async () => {
  const stop = ["<|im_end|>", "</s>", "\n\n\n", "```", "<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<file_sep>", "</code>", "/src/", "#- coding", "<|endoftext|>"];
  const r = await ollama.chat({ model, messages: [{ role: "user", content: "Hi" }], stream: false, think: "low",
    options: { num_predict: 3, num_ctx: 32768, num_thread: 2, num_gpu: 0, use_mmap: true, stop } });
  assert(r.done === true && r.message.role === "assistant", JSON.stringify(r));
});
console.log(`ollama client: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
