// sdk_test.mjs: the official `openai` npm SDK against a running muser serve.
// usage: node sdk_test.mjs BASE_URL MODEL_ID   (prints "N passed, N failed")
import OpenAI from "openai";

const [base, modelId] = process.argv.slice(2);
// timeout: a hang detector only (10 min per request); a slow machine (ASan,
// a loaded 2-core CI runner) must never turn into a failure here
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "unused-on-loopback", maxRetries: 0, timeout: 600000 });
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
await check("structured output: response_format json_schema (strict)", async () => {
  const schema = {
    type: "object",
    properties: {
      kind: { enum: ["command", "function", "file"] },
      section: { type: "integer" },
      ok: { type: "boolean" },
      alt: { anyOf: [{ type: "integer" }, { type: "null" }] },
    },
    required: ["kind", "section", "ok", "alt"],
    additionalProperties: false,
  };
  const r = await client.chat.completions.create({
    model: modelId, messages: [{ role: "user", content: "What does tar do? Answer in JSON." }], max_tokens: 300, temperature: 0.7, seed: 3,
    response_format: { type: "json_schema", json_schema: { name: "answer", strict: true, schema } },
  });
  assert(r.choices[0].finish_reason === "stop", "finish " + r.choices[0].finish_reason);
  const v = JSON.parse(r.choices[0].message.content);
  assert(["command", "function", "file"].includes(v.kind), "kind " + JSON.stringify(v));
  assert(Number.isInteger(v.section) && typeof v.ok === "boolean", "types " + JSON.stringify(v));
  assert(v.alt === null || Number.isInteger(v.alt), "alt " + JSON.stringify(v));
  assert(Object.keys(v).sort().join() === "alt,kind,ok,section", "keys " + JSON.stringify(v));
});
await check("structured output: json_object, n=2", async () => {
  const r = await client.chat.completions.create({
    model: modelId, messages: [{ role: "user", content: "Give a JSON object." }], max_tokens: 300, temperature: 0, n: 2,
    response_format: { type: "json_object" },
  });
  assert(r.choices.length === 2 && r.choices[1].index === 1, "choices " + r.choices.length);
  assert(r.choices[0].message.content === r.choices[1].message.content, "greedy choices differ");
  if (r.choices[0].finish_reason === "stop") {
    const v = JSON.parse(r.choices[0].message.content);
    assert(v && typeof v === "object" && !Array.isArray(v), "not an object");
  } else {
    assert(r.choices[0].message.content.trimStart().startsWith("{"), "does not start an object");
  }
});
await check("structured output: unsupported keyword -> BadRequestError naming it", async () => {
  try {
    await client.chat.completions.create({ model: modelId, messages: [{ role: "user", content: "x" }],
      response_format: { type: "json_schema", json_schema: { name: "a", schema: { type: "string", pattern: "^a" } } } });
    throw new Error("no error");
  } catch (e) {
    assert(e instanceof OpenAI.BadRequestError, "type " + e.constructor.name);
    assert(String(e.message).includes("'pattern'"), e.message);
  }
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
// the routes issue 17 added (the server runs with --pooling mean --alias sdk-alias)
await check("models.retrieve (id and alias)", async () => {
  const m = await client.models.retrieve(modelId);
  assert(m.id === modelId && m.object === "model", JSON.stringify(m));
  const a = await client.models.retrieve("sdk-alias");
  assert(a.id === "sdk-alias", JSON.stringify(a));
  try { await client.models.retrieve("gpt-4o"); throw new Error("no error"); }
  catch (e) { assert(e instanceof OpenAI.NotFoundError, "type " + e.constructor.name); }
});
await check("embeddings.create (the SDK's default base64, and float, batched)", async () => {
  const b = await client.embeddings.create({ model: modelId, input: "The tar command" });
  const v = b.data[0].embedding;
  assert(Array.isArray(v) && v.length > 8, "length " + (v && v.length));
  const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  assert(Math.abs(norm - 1) < 1e-5, "L2 norm " + norm);
  const f = await client.embeddings.create({ model: modelId, input: ["The tar command", "ls lists files"], encoding_format: "float" });
  assert(f.data.length === 2 && f.data[1].index === 1, "data " + f.data.length);
  const d = Math.max(...f.data[0].embedding.map((x, i) => Math.abs(x - v[i])));
  assert(d < 1e-6, "base64 and float differ by " + d);
  assert(f.usage.prompt_tokens > 0 && f.usage.total_tokens === f.usage.prompt_tokens, JSON.stringify(f.usage));
});
await check("chat logprobs join to the content", async () => {
  const r = await client.chat.completions.create({ model: modelId, messages: [{ role: "user", content: "Hello" }], max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 2 });
  const c = r.choices[0];
  const joined = c.logprobs.content.map((t) => t.token).join("");
  assert(joined === c.message.content, JSON.stringify(joined) + " vs " + JSON.stringify(c.message.content));
  assert(c.logprobs.content.every((t) => t.top_logprobs.length === 2), "top_logprobs");
});
await check("responses.create", async () => {
  const r = await client.responses.create({ model: modelId, input: "Hello", instructions: "Be brief.", max_output_tokens: 8, temperature: 0 });
  assert(r.object === "response", r.object);
  assert(r.status === "completed" || r.status === "incomplete", r.status);
  assert(typeof r.output_text === "string", "output_text");
  assert(r.usage.output_tokens >= 1 && r.usage.output_tokens <= 8, JSON.stringify(r.usage));
  const chat = await client.chat.completions.create({ model: modelId, messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hello" }], max_tokens: 8, temperature: 0 });
  assert(r.output_text === chat.choices[0].message.content, JSON.stringify(r.output_text) + " vs chat " + JSON.stringify(chat.choices[0].message.content));
});
await check("responses.create stream", async () => {
  const stream = await client.responses.create({ model: modelId, input: "Hello", instructions: "Be brief.", max_output_tokens: 8, temperature: 0, stream: true });
  let text = "", types = [], last = null, seq = -1;
  for await (const ev of stream) {
    types.push(ev.type);
    assert(ev.sequence_number === seq + 1, "sequence " + ev.sequence_number);
    seq = ev.sequence_number;
    if (ev.type === "response.output_text.delta") text += ev.delta;
    if (ev.type === "response.completed" || ev.type === "response.incomplete") last = ev.response;
  }
  assert(types[0] === "response.created" && last, "events " + types.join(","));
  const r = await client.responses.create({ model: modelId, input: "Hello", instructions: "Be brief.", max_output_tokens: 8, temperature: 0 });
  assert(text === r.output_text, JSON.stringify(text) + " vs " + JSON.stringify(r.output_text));
});
await check("responses: previous_response_id -> BadRequestError", async () => {
  try { await client.responses.create({ model: modelId, input: "x", previous_response_id: "resp_1" }); throw new Error("no error"); }
  catch (e) { assert(e instanceof OpenAI.BadRequestError, "type " + e.constructor.name); }
});
// fields the API defines that have no effect here, and a conversation that
// sends the SDK's own message object back (greedy: a sampled answer may hold
// a NUL byte, which the server's JSON reader refuses when it comes back)
await check("chat: prediction, verbosity, prompt_cache_key, safety_identifier, modalities; the answer's message sent back", async () => {
  const extra = { prediction: { type: "content", content: "Hello" }, verbosity: "low", prompt_cache_key: "k1", safety_identifier: "s1", modalities: ["text"] };
  const r = await client.chat.completions.create({ model: modelId, messages: [{ role: "user", content: "Hello" }], max_tokens: 3, temperature: 0, ...extra });
  const back = { ...r.choices[0].message, refusal: null, annotations: [], audio: null, function_call: null };
  const r2 = await client.chat.completions.create({ model: modelId, messages: [{ role: "user", content: "Hello" }, back, { role: "user", content: "Again" }], max_tokens: 3 });
  assert(r2.object === "chat.completion", r2.object);
});
await check("chat: the deprecated functions API (functions, function_call, a function message)", async () => {
  const functions = [{ name: "search", parameters: { type: "object", properties: { q: { type: "string" } } } }];
  const messages = [{ role: "user", content: "Find it" }, { role: "assistant", content: null, function_call: { name: "search", arguments: "{\"q\":\"x\"}" } },
    { role: "function", name: "search", content: "found" }];
  const r = await client.chat.completions.create({ model: modelId, messages, functions, function_call: "auto", max_tokens: 3 });
  assert(r.object === "chat.completion" && !r.choices[0].message.tool_calls, JSON.stringify(r.choices[0]));
});
await check("chat: web_search_options -> BadRequestError saying why", async () => {
  try { await client.chat.completions.create({ model: modelId, messages: [{ role: "user", content: "x" }], web_search_options: {} }); throw new Error("no error"); }
  catch (e) {
    assert(e instanceof OpenAI.BadRequestError, "type " + e.constructor.name);
    assert(String(e.message).includes("web search is not supported"), e.message);
  }
});
await check("responses: an input_image without a projector -> BadRequestError naming --mmproj", async () => {
  const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
  try {
    await client.responses.create({ model: modelId, max_output_tokens: 3, input: [{ role: "user", content: [{ type: "input_text", text: "What is it?" }, { type: "input_image", image_url: "data:image/png;base64," + png, detail: "auto" }] }] });
    throw new Error("no error");
  } catch (e) {
    assert(e instanceof OpenAI.BadRequestError, "type " + e.constructor.name);
    assert(String(e.message).includes("--mmproj"), e.message);
  }
});
await check("responses: logprobs (include message.output_text.logprobs) join to the text", async () => {
  const r = await client.responses.create({ model: modelId, input: "Hello", max_output_tokens: 8, temperature: 0, top_logprobs: 1, include: ["message.output_text.logprobs"] });
  const part = r.output[r.output.length - 1].content[0];
  assert(part.logprobs.length > 0 && part.logprobs.map((e) => e.token).join("") === part.text, JSON.stringify(part).slice(0, 300));
});
console.log(`openai sdk: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
