#!/usr/bin/env python3
"""load_serve.py: load test for `muser serve` on loopback.

N concurrent clients run R rounds; in each round every client sends M
requests over one of the three streaming protocols (OpenAI SSE chat,
llama.cpp SSE /completion, Ollama NDJSON /api/chat); a share of them hang up
mid-stream on purpose. A request answered 429 is sent again (same body)
after its Retry-After. Between rounds the clients stop and the server is
waited on until it is idle (/metrics: nothing processing, nothing queued);
its resident memory (from /proc) is read there.

No verdict depends on timing: the work is a fixed count of requests (which
of them hang up is drawn from a seeded generator before sending), and memory
is compared at the same quiet point of each round, not at moments of a
clock. Checks: every status is 200 or 429 (429 must carry Retry-After),
every request is answered (completed or deliberately dropped, exactly N x R x
M), every request that was not meant to hang up completed, every stream read
to the end is well-formed (OpenAI: JSON events then `data: [DONE]`;
llama.cpp: JSON events, the last with stop=true; Ollama: JSON lines, the last
with done=true and counts), the server stays alive, and its idle RSS after
the last round is within 32 MiB of its idle RSS after the first (warm-up)
round. Traffic goes only to the given loopback port.

--seconds D (a soak run, not for CI) keeps adding rounds until D seconds
have passed; the checks stay the same.

usage: load_serve.py PORT SERVER_PID [--clients 32] [--rounds 4]
                     [--requests 8] [--seconds 0] [--disconnect 0.25]
                     [--max-tokens 24]
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
p.add_argument("--rounds", type=int, default=4, help="rounds (at least 2: the first is the memory baseline)")
p.add_argument("--requests", type=int, default=8, help="requests per client per round")
p.add_argument("--seconds", type=float, default=0, help="soak: add rounds until this many seconds have passed")
p.add_argument("--disconnect", type=float, default=0.25)
p.add_argument("--max-tokens", type=int, default=24)
a = p.parse_args()
a.rounds = max(a.rounds, 2)

# Hang detectors only: they turn a stuck server into a failure; no amount of
# slowness that still makes progress comes near them.
SOCKET_TIMEOUT = 600   # s without a byte on one connection
IDLE_TIMEOUT = 600     # s for the server to become idle between rounds

lock = threading.Lock()
stats = dict(requests=0, ok=0, busy=0, disconnected=0, malformed=0, bad_status=0, errors=0, tokens=0)
ttft = []
problems = []


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


def metrics():
    c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=SOCKET_TIMEOUT)
    try:
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
    finally:
        c.close()
    vals = {}
    for line in text.splitlines():
        if line.startswith("llamacpp:"):
            k, v = line.split()
            vals[k[len("llamacpp:"):]] = float(v)
    return vals


def wait_idle():
    """Polls /metrics until no request is processing or queued (the jobs of
    clients that hung up end when the server notices). True when idle."""
    deadline = time.monotonic() + IDLE_TIMEOUT
    while True:
        try:
            m = metrics()
            if m.get("requests_processing", 1) == 0 and m.get("requests_deferred", 1) == 0:
                return True
        except (OSError, http.client.HTTPException, ValueError):
            if rss_kib() < 0:
                return False
        if time.monotonic() > deadline:
            problems.append(f"server not idle {IDLE_TIMEOUT} s after a round")
            return False
        time.sleep(0.05)


def plan(rng, kind):
    """One request, drawn before sending: (path, body, hang_up)."""
    prompt = "".join(rng.choice("abcdefgh ") for _ in range(rng.randint(4, 40)))
    n = rng.randint(4, a.max_tokens)
    temp = rng.choice([0, 0.8])
    if kind == 0:
        path = "/v1/chat/completions"
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": n, "stream": True,
                "temperature": temp, "stream_options": {"include_usage": True}}
    elif kind == 1:
        path = "/completion"
        body = {"prompt": prompt, "n_predict": n, "stream": True, "temperature": temp}
    else:
        path = "/api/chat"
        body = {"messages": [{"role": "user", "content": prompt}], "options": {"num_predict": n, "temperature": temp}}
    return path, json.dumps(body), rng.random() < a.disconnect


def once(kind, path, body, hang_up):
    """Sends one request; returns the Retry-After seconds on 429, else None."""
    c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=SOCKET_TIMEOUT)
    t0 = time.monotonic()
    try:
        c.request("POST", path, body, {"Content-Type": "application/json"})
        r = c.getresponse()
        note("requests")
        if r.status == 429:
            ra = r.getheader("Retry-After")
            if not ra:
                note("bad_status", problem="429 without Retry-After")
            r.read()
            note("busy")
            try:
                return float(ra or 1)
            except ValueError:
                note("bad_status", problem=f"429 with Retry-After {ra!r}")
                return 1.0
        if r.status != 200:
            note("bad_status", problem=f"{path} -> {r.status} {r.read()[:200]!r}")
            return None
        first = True
        data = b""
        while True:
            chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1024)
            if not chunk:
                break
            if first:
                with lock:
                    ttft.append(time.monotonic() - t0)
                first = False
            data += chunk
            if hang_up and len(data) > 200:
                c.close()
                note("disconnected")
                return None
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
    return None


planned = dict(total=0, complete=0)  # requests sent to completion (200) and those meant to stay to the end


def client(i, rnd):
    # the plan depends only on (client, round); 429 retries draw from their own generator
    rng = random.Random(f"{i}/{rnd}")
    jitter = random.Random(f"jitter {i}/{rnd}")
    kind = i % 3
    for _ in range(a.requests):
        path, body, hang_up = plan(rng, kind)
        with lock:
            planned["total"] += 1
            planned["complete"] += not hang_up
        while (ra := once(kind, path, body, hang_up)) is not None:
            time.sleep(ra * jitter.random())


rss = []  # idle RSS after each round
t_start = time.monotonic()
rnd = 0
while rnd < a.rounds or (a.seconds > 0 and time.monotonic() - t_start < a.seconds):
    threads = [threading.Thread(target=client, args=(i, rnd), daemon=True) for i in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rnd += 1
    if not wait_idle():
        break
    rss.append(rss_kib())
    if rss[-1] < 0:
        problems.append("server process is gone")
        break
elapsed = time.monotonic() - t_start
ttft.sort()
q = lambda v, f: v[min(len(v) - 1, int(f * len(v)))] if v else float("nan")  # noqa: E731
print(f"load: {a.clients} clients x {rnd} rounds x {a.requests} requests, {elapsed:.0f} s, {stats}")
print(f"load: completed streams/s {stats['ok'] / elapsed:.2f}, generated tokens/s {stats['tokens'] / elapsed:.1f}, "
      f"first byte p50 {q(ttft, 0.5):.2f} s p95 {q(ttft, 0.95):.2f} s (printed, not checked)")
print(f"load: server RSS KiB when idle after each round: {rss}")
for pr in problems:
    print("problem:", pr)
alive = len(rss) == rnd and rnd >= 2 and rss[-1] > 0
checks = {
    "only 200/429 answers": stats["bad_status"] == 0,
    "no transport errors": stats["errors"] == 0,
    "every completed stream well-formed": stats["malformed"] == 0,
    # counts fixed before the run: N x R x M requests, each completed or dropped on purpose
    f"every request answered ({planned['total']})":
        stats["ok"] + stats["disconnected"] + stats["malformed"] == planned["total"] == a.clients * rnd * a.requests,
    f"every request not meant to hang up completed ({planned['complete']})": stats["ok"] >= planned["complete"],
    "server alive and idle after every round": alive,
    # stable memory: idle RSS after the last round within 32 MiB of the first round's
    "memory stable": alive and rss[-1] - rss[0] < 32 * 1024,
}
npass = sum(checks.values())
for k, v in checks.items():
    print(("ok   " if v else "FAIL ") + k)
print(f"{npass} passed, {len(checks) - npass} failed")
raise SystemExit(0 if npass == len(checks) else 1)
