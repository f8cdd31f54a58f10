#!/usr/bin/env python3
"""load_serve.py: load test for `muser serve` on loopback.

N concurrent clients loop for D seconds over the three streaming protocols
(OpenAI SSE chat, llama.cpp SSE /completion, Ollama NDJSON /api/chat); a
share of them hang up mid-stream on purpose. Checks: every status is 200 or
429 (429 must carry Retry-After), every stream that was read to the end is
well-formed (OpenAI: JSON events then `data: [DONE]`; llama.cpp: JSON events,
the last with stop=true; Ollama: JSON lines, the last with done=true and
counts), the server stays alive, and its resident memory (from /proc) does
not keep growing. Traffic goes only to the given loopback port.

usage: load_serve.py PORT SERVER_PID [--clients 32] [--seconds 180]
                     [--disconnect 0.25] [--max-tokens 24]
Prints a summary and "N passed, N failed"; exit 1 on any failure.
"""
import argparse
import http.client
import json
import random
import threading
import time

p = argparse.ArgumentParser()
p.add_argument("port", type=int)
p.add_argument("pid", type=int)
p.add_argument("--clients", type=int, default=32)
p.add_argument("--seconds", type=float, default=180)
p.add_argument("--disconnect", type=float, default=0.25)
p.add_argument("--max-tokens", type=int, default=24)
a = p.parse_args()

lock = threading.Lock()
stats = dict(requests=0, ok=0, busy=0, disconnected=0, malformed=0, bad_status=0, errors=0, tokens=0)
ttft = []
problems = []
stop_at = time.time() + a.seconds


def rss_kib():
    try:
        with open(f"/proc/{a.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return -1
    return -1


def note(key, n=1, problem=None):
    with lock:
        stats[key] += n
        if problem and len(problems) < 20:
            problems.append(problem)


def one(rng, kind):
    prompt = "".join(rng.choice("abcdefgh ") for _ in range(rng.randint(4, 40)))
    n = rng.randint(4, a.max_tokens)
    if kind == 0:
        path = "/v1/chat/completions"
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": n, "stream": True,
                "temperature": rng.choice([0, 0.8]), "stream_options": {"include_usage": True}}
    elif kind == 1:
        path = "/completion"
        body = {"prompt": prompt, "n_predict": n, "stream": True, "temperature": rng.choice([0, 0.8])}
    else:
        path = "/api/chat"
        body = {"messages": [{"role": "user", "content": prompt}], "options": {"num_predict": n}}
    hang_up = rng.random() < a.disconnect
    c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=300)
    t0 = time.time()
    try:
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        note("requests")
        if r.status == 429:
            if not r.getheader("Retry-After"):
                note("bad_status", problem="429 without Retry-After")
            r.read()
            note("busy")
            time.sleep(float(r.getheader("Retry-After") or 1) * rng.random())
            return
        if r.status != 200:
            note("bad_status", problem=f"{path} -> {r.status} {r.read()[:200]!r}")
            return
        first = True
        data = b""
        while True:
            chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1024)
            if not chunk:
                break
            if first:
                with lock:
                    ttft.append(time.time() - t0)
                first = False
            data += chunk
            if hang_up and len(data) > 200:
                c.close()
                note("disconnected")
                return
        text = data.decode("utf-8")
        try:
            if kind == 2:
                objs = [json.loads(l) for l in text.splitlines() if l]
                assert objs[-1]["done"] and all(not o["done"] for o in objs[:-1])
                assert objs[-1]["eval_count"] >= 1 and "total_duration" in objs[-1]
                toks = objs[-1]["eval_count"]
            else:
                assert text.endswith("\n\n")
                ev = [e for e in text.split("\n\n") if e]
                assert all(e.startswith("data: ") for e in ev)
                if kind == 0:
                    assert ev[-1] == "data: [DONE]"
                    objs = [json.loads(e[6:]) for e in ev[:-1]]
                    toks = objs[-1]["usage"]["completion_tokens"]
                else:
                    objs = [json.loads(e[6:]) for e in ev]
                    assert objs[-1]["stop"] is True and all(o["stop"] is False for o in objs[:-1])
                    toks = objs[-1]["tokens_predicted"]
            note("ok")
            note("tokens", toks)
        except Exception as e:  # noqa: BLE001
            note("malformed", problem=f"{path}: {e!r}: {text[-300:]!r}")
    except Exception as e:  # noqa: BLE001
        note("errors", problem=f"{path}: {e!r}")
    finally:
        c.close()


def client(i):
    rng = random.Random(1000 + i)
    while time.time() < stop_at:
        one(rng, i % 3)


rss = [rss_kib()]
threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(a.clients)]
for t in threads:
    t.start()
t_start = time.time()
while any(t.is_alive() for t in threads):
    time.sleep(5)
    rss.append(rss_kib())
    if rss[-1] < 0:
        problems.append("server process is gone")
        break
    if time.time() > stop_at + 600:
        problems.append("clients did not finish within 10 minutes after the deadline")
        break
elapsed = time.time() - t_start
ttft.sort()
q = lambda v, f: v[min(len(v) - 1, int(f * len(v)))] if v else float("nan")  # noqa: E731
half = rss[len(rss) // 2:] or rss
print(f"load: {a.clients} clients, {elapsed:.0f} s, {stats}")
print(f"load: completed streams/s {stats['ok'] / elapsed:.2f}, generated tokens/s {stats['tokens'] / elapsed:.1f}, "
      f"first byte p50 {q(ttft, 0.5):.2f} s p95 {q(ttft, 0.95):.2f} s")
print(f"load: server RSS KiB start {rss[0]} max {max(rss)} end {rss[-1]} (second-half min {min(half)} max {max(half)})")
for pr in problems:
    print("problem:", pr)
checks = {
    "only 200/429 answers": stats["bad_status"] == 0,
    "no transport errors": stats["errors"] == 0,
    "every completed stream well-formed": stats["malformed"] == 0,
    "some streams completed": stats["ok"] > 0,
    "server alive": rss[-1] > 0,
    # stable memory: the second half of the run grows by less than 32 MiB
    "memory stable": rss[-1] > 0 and max(half) - min(half) < 32 * 1024,
}
npass = sum(checks.values())
for k, v in checks.items():
    print(("ok   " if v else "FAIL ") + k)
print(f"{npass} passed, {len(checks) - npass} failed")
raise SystemExit(0 if npass == len(checks) else 1)
