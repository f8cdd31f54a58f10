// dash_test.mjs: the dashboard in a real browser (Debian's chromium driven by
// puppeteer-core), run by tests/e2e/test_dashboard.sh.
//   node dash_test.mjs MODE BASE OUTDIR [STALL_N]
// MODE "chat": the page loads without console errors, follows /telemetry, shows
//   an honesty tag beside every tagged number, streams a chat reply in more
//   than one chunk whose text equals the non-streamed answer, and, once idle,
//   shows exactly what /snapshot reports; a screenshot goes to OUTDIR.
// MODE "live": the server stalls every job after STALL_N tokens
//   (MUSER_TEST_STALL_AFTER): while the page's chat request runs, the page
//   renders a busy slot, one request processing and STALL_N generated tokens.
// MODE "key": the server has an API key (and, on a LAN-style bind, TLS with
//   a self-signed certificate): the page shows a login form and no data,
//   /snapshot and /telemetry answer 401, a wrong key is refused; after the
//   login the page follows /telemetry, the session cookie is HttpOnly,
//   SameSite=Strict (and Secure under TLS), the chat streams with the CSRF
//   token and a POST without it gets 403; screenshots of both states go to
//   OUTDIR; after logging out /snapshot is 401 again.
// Verdicts wait on page state (data attributes), never on elapsed time.
import puppeteer from "puppeteer-core";
import fs from "node:fs";

const [mode, base, outdir, stallArg] = process.argv.slice(2);
let failed = 0;
const ok = (m) => console.log("ok   " + m);
const bad = (m) => { console.log("FAIL " + m); failed = 1; };
const check = (c, m) => (c ? ok(m) : bad(m));

// the key mode's server may use a self-signed certificate (a LAN-style bind)
if (base.startsWith("https:")) process.env.NODE_TLS_REJECT_UNAUTHORIZED = "0";
const browser = await puppeteer.launch({
  acceptInsecureCerts: base.startsWith("https:"),
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
const page = await browser.newPage();
await page.setViewport({ width: 1280, height: 1000 });
const errors = [];
// the key mode asks for 401s and 403s on purpose (no login, a wrong key,
// no CSRF token)
const expected = (t) => mode === "key" && /status of 40[13]/.test(t);
page.on("pageerror", (e) => errors.push("pageerror: " + e.message));
page.on("console", (m) => { if (m.type() === "error" && !expected(m.text())) errors.push("console: " + m.text()); });
const polls = () => page.$eval("body", (b) => +b.dataset.polls);
const waitPolls = async (n) => page.waitForFunction((k) => +document.body.dataset.polls >= k, { timeout: 600000 }, n);
const snapshot = async (headers = {}) => (await fetch(base + "/snapshot", { headers })).json();
// every element with data-k: its key, raw value (JSON) and the tag beside it
const rendered = () => page.$$eval("[data-k]", (els) => els.map((e) => ({
  k: e.dataset.k, raw: e.dataset.raw, text: e.textContent,
  tag: e.nextElementSibling && e.nextElementSibling.classList.contains("tag") ? e.nextElementSibling.textContent : null,
})));
const at = (o, path) => path.split(".").reduce((x, p) => (x == null ? undefined : x[p]), o);

try {
  if (mode === "chat") {
    const resp = await page.goto(base + "/", { waitUntil: "load" });
    check(resp.status() === 200 && (resp.headers()["content-type"] || "").startsWith("text/html"), "page served as HTML");
    await waitPolls(2);
    const feed = await page.$eval("body", (b) => b.dataset.feed);
    check(feed === "sse", `page receives snapshots (feed ${feed}: /telemetry)`);
    // chat: streamed through the OpenAI route
    const text = "What does the tar command do?";
    await page.type("#chat-in", text);
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => document.getElementById("chat-out").dataset.done === "1", { timeout: 600000 });
    const reply = await page.$eval("#chat-out", (e) => e.dataset.reply);
    const chunks = await page.$eval("#chat-out", (e) => +e.dataset.chunks);
    const ref = await (await fetch(base + "/v1/chat/completions", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ messages: [{ role: "user", content: text }], temperature: 0, max_tokens: 64 }),
    })).json();
    const refText = ref.choices[0].message.content;
    check(chunks > 1, `chat reply streamed in ${chunks} chunks`);
    check(reply === refText && reply.length > 0, `streamed reply equals the non-streamed answer (${reply.length} chars)`);
    const logRows = await page.$$eval("#log tr", (r) => r.length);
    check(logRows === 2, "request log has the page's request");
    // idle now: once the next snapshot arrived, the page shows what /snapshot
    // says (for the keys that stay put while idle)
    const p0 = await polls();
    await waitPolls(p0 + 1);
    const els = await rendered();
    const snap = await snapshot();
    // compare the keys that do not change while idle (uptime, memory and the
    // HTTP counters do: the page's own polls count)
    const stable = ["model.id", "model.n_ctx", "model.file_bytes", "backend.kernels", "backend.engine", "requests.total",
      "requests.processing", "requests.queued", "requests.rejected_busy", "requests.cancelled", "tokens.prompt_total",
      "tokens.gen_total", "throughput.decode_tok_s", "throughput.prefill_tok_s", "throughput.ttft_s",
      "memory.kv_bytes", "memory.kv_used_bytes", "prefix_cache.bytes", "prefix_cache.hits", "remote_prefill.handoffs",
      "remote_prefill.breaker_open",
      "slots.0.state", "slots.0.n_gen", "slots.0.n_prompt", "slots.0.kv_used_bytes", "throughput.ttft_last_s",
      "tokens.prompt_reused", "recent.0.seq", "recent.0.ttft_s", "recent.0.n_gen", "recent.1.ttft_s", "recent.1.queue_s"];
    let mismatches = [];
    for (const k of stable) {
      const e = els.find((x) => x.k === k);
      const s = at(snap, k);
      const want = s !== null && typeof s === "object" && "tag" in s ? s.value : s;
      if (!e) { mismatches.push(k + ": not on the page"); continue; }
      if (JSON.stringify(want) !== e.raw) mismatches.push(`${k}: page ${e.raw}, /snapshot ${JSON.stringify(want)}`);
      if (s !== null && typeof s === "object" && "tag" in s && e.tag !== s.tag) mismatches.push(`${k}: tag ${e.tag}, /snapshot ${s.tag}`);
    }
    check(mismatches.length === 0,
      `rendered values equal /snapshot for ${stable.length} keys` + (mismatches.length ? ": " + mismatches.join("; ") : ""));
    check(snap.requests.total.value === 2 && snap.tokens.gen_total.value > 0, `the counts are the two chat requests' (${snap.tokens.gen_total.value} tokens)`);
    // time to first token: per request (the server's log), its average, the chart
    const rec = snap.recent;
    const sum = rec.reduce((a, q) => a + q.ttft_s.value, 0);
    check(rec.length === 2 && rec.every((q) => q.ttft_s.tag === "measured" &&
      Math.abs(q.ttft_s.value - (q.queue_s.value + q.prompt_s.value)) < 1e-6) &&
      Math.abs(snap.throughput.ttft_s.value - sum / 2) < 1e-9 && snap.throughput.ttft_last_s.value === rec[0].ttft_s.value,
      `time to first token: 2 requests logged, each queue + prefill, the average theirs (${snap.throughput.ttft_s.value.toFixed(4)} s)`);
    const pts = await page.$eval("#c-ttft", (c) => c.dataset.points);
    const rows = await page.$$eval("#recent tr", (r) => r.length);
    check(pts === "2" && rows === 3, `the TTFT chart has ${pts} bars and the request log ${rows - 1} rows (2)`);
    check(snap.memory.kv_used_bytes.value > 0 && snap.memory.kv_used_bytes.value <= snap.memory.kv_bytes.value &&
      snap.slots[0].kv_used_bytes.value === snap.memory.kv_used_bytes.value,
      `KV cache: ${snap.memory.kv_used_bytes.value} of ${snap.memory.kv_bytes.value} bytes in use`);
    const metrics = await (await fetch(base + "/metrics")).text();
    const mcount = +(/^llamacpp:time_to_first_token_requests_total (\S+)$/m.exec(metrics) || [])[1];
    const msum = +(/^llamacpp:time_to_first_token_seconds_total (\S+)$/m.exec(metrics) || [])[1];
    check(mcount === 2 && Math.abs(msum - sum) < 1e-9, `/metrics: time to first token of ${mcount} requests, sum as /snapshot's`);
    // honesty: every tagged field on the page shows its tag, and only the three exist
    const tagged = els.filter((x) => x.tag !== null);
    const tags = new Set(tagged.map((x) => x.tag));
    const untaggedNumbers = els.filter((x) => { const s = at(snap, x.k); return s && typeof s === "object" && "tag" in s && x.tag === null; });
    check(tagged.length >= 20 && untaggedNumbers.length === 0 && [...tags].every((t) => ["measured", "target", "unavailable"].includes(t)),
      `${tagged.length} numbers carry a tag (${[...tags].join(", ")})`);
    const na = els.filter((x) => x.tag === "unavailable");
    check(na.length > 0 && na.every((x) => x.text === "n/a"), `unavailable numbers show n/a, not a value (${na.length})`);
    fs.mkdirSync(outdir, { recursive: true });
    await page.screenshot({ path: outdir + "/dashboard.png", fullPage: true });
    ok("screenshot " + outdir + "/dashboard.png");
  } else if (mode === "live") {
    const n = +stallArg;
    await page.goto(base + "/", { waitUntil: "load" });
    await waitPolls(1);
    await page.type("#chat-in", "Hello");
    await page.keyboard.press("Enter");
    // the job stalls after n tokens and stays running: the page must show it
    await page.waitForFunction((k) => {
      const g = (key) => { const e = document.querySelector(`[data-k="${key}"]`); return e && e.dataset.raw; };
      return g("slots.0.state") === '"busy"' && g("requests.processing") === "1" && g("tokens.gen_total") === String(k);
    }, { timeout: 600000 }, n);
    ok(`while a request runs the page shows a busy slot, 1 processing, ${n} tokens generated`);
    const before = await polls();
    await waitPolls(before + 2);
    const tagOf = (k) => page.$eval(`[data-k="${k}"]`, (e) => e.nextElementSibling.textContent);
    const tl = await tagOf("live.decode_tok_s"), ta = await tagOf("throughput.decode_tok_s");
    check(tl === "measured" && ta === "unavailable",
      `while the first request runs: the interval rate is ${tl} (measured), the average ${ta} (unavailable: no request has finished)`);
    const snap = await snapshot();
    check(snap.slots[0].state === "busy" && snap.requests.processing.value === 1, "/snapshot agrees: busy, 1 processing");
  } else if (mode === "key") {
    const key = fs.readFileSync(stallArg, "utf8").trim();
    const tls = base.startsWith("https:");
    await page.goto(base + "/", { waitUntil: "load" });
    await page.waitForFunction(() => document.body.dataset.auth === "login" && !document.getElementById("login").hidden,
      { timeout: 600000 });
    check((await polls()) === 0, "without a login: the page shows the login form and no data");
    const fromPage = (path, init) => page.evaluate(async (p, i) => (await fetch(p, i)).status, path, init || {});
    const s0 = await fromPage("/snapshot"), t0 = await fromPage("/telemetry");
    check(s0 === 401 && t0 === 401, `without a login: /snapshot ${s0}, /telemetry ${t0} (401)`);
    fs.mkdirSync(outdir, { recursive: true });
    await page.screenshot({ path: outdir + "/login.png" });
    await page.type("#key", "not-the-key");
    await page.click("#key-go");
    await page.waitForFunction(() => document.body.dataset.loginFailures === "1", { timeout: 600000 });
    check((await polls()) === 0 && (await page.$eval("#login", (e) => !e.hidden)), "a wrong key: refused, still no data");
    await page.type("#key", key);
    await page.click("#key-go");
    await waitPolls(1);
    const feed = await page.$eval("body", (b) => b.dataset.feed);
    check(feed === "sse", `after the login: the page follows /telemetry (feed ${feed})`);
    const id = await page.$eval('[data-k="model.id"]', (e) => e.dataset.raw);
    const snap = await snapshot({ Authorization: "Bearer " + key });
    check(id === JSON.stringify(snap.model.id), `after the login: the page shows the model (${tls ? "https" : "http"})`);
    const cookies = await page.cookies();
    const c = cookies.find((x) => x.name.startsWith("muser_"));
    check(c && c.httpOnly && c.sameSite === "Strict" && c.secure === tls && c.path === "/",
      `session cookie: HttpOnly, SameSite=Strict, Secure ${tls}` + (c ? "" : ": none set"));
    check((await page.evaluate(() => document.cookie)) === "", "the page's script cannot read the session cookie");
    check(!(await page.evaluate(() => JSON.stringify(sessionStorage) + JSON.stringify(localStorage))).includes(key),
      "the key is kept nowhere in the page's storage");
    // chat through the cookie with the CSRF token
    await page.type("#chat-in", "Hello");
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => document.getElementById("chat-out").dataset.done === "1", { timeout: 600000 });
    const chunks = await page.$eval("#chat-out", (e) => +e.dataset.chunks);
    const out = await page.$eval("#chat-out", (e) => e.textContent);
    check(chunks > 0 && !out.includes("[HTTP"), `after the login: a chat reply streams (${chunks} chunks)`);
    const body = JSON.stringify({ messages: [{ role: "user", content: "x" }], max_tokens: 1 });
    const noCsrf = await fromPage("/v1/chat/completions", { method: "POST", headers: { "Content-Type": "application/json" }, body });
    const badCsrf = await fromPage("/v1/chat/completions",
      { method: "POST", headers: { "Content-Type": "application/json", "X-CSRF-Token": "0".repeat(64) }, body });
    check(noCsrf === 403 && badCsrf === 403, `the cookie without the CSRF token: ${noCsrf}, with a wrong one: ${badCsrf} (403)`);
    await page.screenshot({ path: outdir + "/dashboard-" + (tls ? "tls" : "key") + ".png", fullPage: true });
    ok("screenshots " + outdir + "/login.png, dashboard-" + (tls ? "tls" : "key") + ".png");
    await page.click("#logout");
    await page.waitForFunction(() => document.body.dataset.auth === "login", { timeout: 600000 });
    const s1 = await fromPage("/snapshot");
    check(s1 === 401, `after logging out: /snapshot ${s1} (401)`);
  } else {
    bad("unknown mode " + mode);
  }
  check(errors.length === 0, "no console errors" + (errors.length ? ": " + errors.join(" | ") : ""));
} catch (e) {
  bad(mode + ": " + e.message);
} finally {
  await browser.close();
}
process.exit(failed);
