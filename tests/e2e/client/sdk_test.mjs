// sdk_test.mjs: the official `openai` npm SDK against a running muser serve.
// usage: node sdk_test.mjs BASE_URL MODEL_ID   (prints "N passed, N failed")
import OpenAI from "openai";

const [base, modelId] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "unused-on-loopback", maxRetries: 0, timeout: 120000 });
let passed = 0, failed = 0;
async function check(name, fn) {
  try { await fn(); console.log("ok   sdk " + name); passed++; }
  catch (e) { console.log("FAIL sdk " + name + ": " + (e && e.stack || e)); failed++; }
}
function assert(c, m) { if (!c) throw new Error(m); }

await check("models.list", async () => {
  const page = await client.models.list();
  const ids = page.data.map((m) => m.id);
  assert(ids.length === 1 && ids[0] === modelId, "ids " + JSON.stringify(ids));
});
await check("chat.completions.create", async () => {
  const r = await client.chat.completions.create({ model: modelId, messages: [{ role: "user", content: "Hello" }], max_tokens: 5, temperature: 0 });
  assert(r.object === "chat.completion", r.object);
  assert(r.choices[0].message.role === "assistant", "role");
  assert(typeof r.choices[0].message.content === "string", "content");
  assert(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 5, "usage " + JSON.stringify(r.usage));
});
await check("chat.completions.create stream", async () => {
  const stream = await client.chat.completions.create({ model: modelId, messages: [{ role: "user", content: "Hello" }], max_tokens: 6, temperature: 0, stream: true, stream_options: { include_usage: true } });
  let text = "", finish = null, usage = null, n = 0;
  for await (const chunk of stream) {
    n++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) { text += c.delta.content || ""; if (c.finish_reason) finish = c.finish_reason; }
  }
  assert(n >= 2, "chunks " + n);
  assert(finish === "length" || finish === "stop", "finish " + finish);
  assert(usage && usage.completion_tokens >= 1, "usage");
  // greedy: the streamed text equals the non-streamed text
  const r = await client.chat.completions.create({ model: modelId, messages: [{ role: "user", content: "Hello" }], max_tokens: 6, temperature: 0 });
  assert(r.choices[0].message.content === text, "stream " + JSON.stringify(text) + " vs " + JSON.stringify(r.choices[0].message.content));
});
await check("completions.create", async () => {
  const r = await client.completions.create({ model: modelId, prompt: "Once upon a time", max_tokens: 4, temperature: 0 });
  assert(r.object === "text_completion", r.object);
  assert(typeof r.choices[0].text === "string", "text");
});
await check("completions.create stream", async () => {
  const stream = await client.completions.create({ model: modelId, prompt: "Once upon a time", max_tokens: 4, temperature: 0, stream: true });
  let n = 0;
  for await (const chunk of stream) n += chunk.choices.length;
  assert(n >= 1, "chunks");
});
await check("unknown field -> BadRequestError naming it", async () => {
  try {
    await client.chat.completions.create({ model: modelId, messages: [{ role: "user", content: "x" }], max_tokenz: 3 });
    throw new Error("no error");
  } catch (e) {
    assert(e instanceof OpenAI.BadRequestError, "type " + e.constructor.name);
    assert(String(e.message).includes("max_tokenz"), e.message);
  }
});
await check("unknown model -> NotFoundError", async () => {
  try {
    await client.chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: "x" }] });
    throw new Error("no error");
  } catch (e) { assert(e instanceof OpenAI.NotFoundError, "type " + e.constructor.name); }
});
console.log(`openai sdk: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
