#!/usr/bin/env python3
"""slow_clients.py: idle and slow clients against `muser serve` (loopback).

Modes (each prints "ok ..." / "FAIL ..." lines; exit 1 on any failure):

  PORT hold      1000 idle connections (half send nothing, half half a
                 request line) and 50 clients sending one byte a second of a
                 head that never ends; once the server counts them all open
                 (/metrics), /health and a short chat completion must
                 succeed, every one of the 1050 must still be open, and after
                 they close /health and chat must succeed again. Run it on a
                 server whose head deadline and idle timeout are far beyond
                 the run (600 s), so "still open" is not a race.
  PORT deadline  the same clients on a server with a short --head-timeout:
                 every slow client's connection must end with a close by the
                 server (all 50 counted; the idle ones too), then /health and
                 chat must succeed.
  PORT body      20 clients send a complete POST head, then one byte of the
                 body a second, on a server with a short --body-timeout: all
                 20 are closed by the body deadline; then /health and chat
                 succeed.
  PORT limit MAX N   N > MAX idle connections on a server with --max-conns
                 MAX: exactly N - MAX are closed by the server and MAX stay
                 open; after they close /health succeeds.
  PORT perip MAX N   N > MAX idle connections from 127.0.0.2 on a server
                 with --max-conns-per-ip MAX: N - MAX are closed, MAX stay
                 open, and /health from 127.0.0.1 succeeds meanwhile.

No verdict depends on timing: counts decide, and every wait ends on its
condition; the 600 s limits only turn a hang into a failure. The one-byte-a-
second pace is the load, not a measurement.
"""
import http.client
import json
import resource
import select
import socket
import sys
import threading
import time

HANG = 600  # s: hang detector for every wait

fails = 0


def ok(msg):
    print("ok   " + msg, flush=True)


def bad(msg):
    global fails
    fails += 1
    print("FAIL " + msg, flush=True)


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def request(port, method, path, body=None):
    """(status, body bytes); raises on transport errors."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG)
    try:
        hdr = {"Content-Type": "application/json"} if body is not None else {}
        c.request(method, path, body=json.dumps(body) if body is not None else None, headers=hdr)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def request_retry(port, method, path, body=None):
    """Like request, but a connection the server closes at once (it is still
    over a limit while our closes reach it) is tried again, until HANG."""
    end = time.monotonic() + HANG
    while True:
        try:
            return request(port, method, path, body)
        except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine, OSError):
            if time.monotonic() > end:
                raise
            time.sleep(0.05)


def metric(port, name, conn=None):
    """A /metrics value; conn: a kept-alive connection to reuse (so polling
    adds one connection, not one per poll, to what the server counts)."""
    if conn is None:
        st, b = request(port, "GET", "/metrics")
    else:
        conn.request("GET", "/metrics")
        b = conn.getresponse().read()
    for line in b.decode().splitlines():
        if line.startswith("llamacpp:" + name + " "):
            return float(line.split()[1])
    return None


def wait_metric(port, name, at_least):
    end = time.monotonic() + HANG
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG)
    try:
        while True:
            v = metric(port, name, c)
            if (v is not None and v >= at_least) or time.monotonic() > end:
                return v
            time.sleep(0.1)
    finally:
        c.close()


CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, "temperature": 0}


def check_service(port, when):
    try:
        st, b = request(port, "GET", "/health")
        if st == 200 and json.loads(b).get("status") == "ok":
            ok("/health " + when)
        else:
            bad("/health %s: status %d" % (when, st))
    except Exception as e:  # noqa: BLE001
        bad("/health %s: %r" % (when, e))
    try:
        st, b = request(port, "POST", "/v1/chat/completions", CHAT)
        j = json.loads(b) if st == 200 else {}
        if st == 200 and j.get("object") == "chat.completion" and j["choices"][0]["finish_reason"]:
            ok("chat completion %s (%d tokens)" % (when, j["usage"]["completion_tokens"]))
        else:
            bad("chat completion %s: status %d %r" % (when, st, b[:200]))
    except Exception as e:  # noqa: BLE001
        bad("chat completion %s: %r" % (when, e))


def connect(port, src=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if src:
        s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def closed_by_server(s):
    """True once the server closed s (end of stream or reset); never blocks."""
    p = select.poll()
    p.register(s, select.POLLIN | select.POLLHUP | select.POLLERR)
    if not p.poll(0):
        return False
    try:
        s.setblocking(False)
        d = s.recv(4096)
        return d == b""  # data would be a reply: not a close by itself
    except BlockingIOError:
        return False
    except OSError:
        return True


def open_idle(port, n, src=None):
    socks = []
    for i in range(n):
        s = connect(port, src)
        if i % 2:
            s.sendall(b"GET /hea")  # half a request line
        socks.append(s)
    return socks


class Slow:
    """n clients sending one byte a second of a head that never ends; a
    client is done when the server closes its connection."""

    HEAD = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100000

    def __init__(self, port, n):
        self.socks = [connect(port) for _ in range(n)]
        self.sent = [0] * n
        self.closed = [False] * n
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.is_set():
            with self.lock:
                for i, s in enumerate(self.socks):
                    if self.closed[i]:
                        continue
                    if closed_by_server(s):
                        self.closed[i] = True
                        continue
                    try:
                        s.send(self.HEAD[self.sent[i]:self.sent[i] + 1])
                        self.sent[i] += 1
                    except OSError:
                        self.closed[i] = True
            self.stop.wait(1.0)

    def n_closed(self):
        with self.lock:
            return sum(self.closed)

    def close(self):
        self.stop.set()
        self.t.join()
        for s in self.socks:
            s.close()


def count_closed(socks):
    return sum(1 for s in socks if closed_by_server(s))


def wait_closed(socks, n):
    end = time.monotonic() + HANG
    while True:
        k = count_closed(socks)
        if k >= n or time.monotonic() > end:
            return k
        time.sleep(0.05)


def main():
    port = int(sys.argv[1])
    mode = sys.argv[2]
    nofile = raise_nofile()
    if mode in ("hold", "deadline"):
        n_idle, n_slow = 1000, 50
        if nofile < n_idle + n_slow + 64:
            bad("open-file limit %d is below %d" % (nofile, n_idle + n_slow + 64))
            return
        idle = open_idle(port, n_idle)
        slow = Slow(port, n_slow)
        if mode == "hold":
            v = wait_metric(port, "http_connections_open", n_idle + n_slow + 1)
            if v is not None and v >= n_idle + n_slow + 1:
                ok("server counts %d open connections (%d idle, %d slow, this one)" % (v, n_idle, n_slow))
            else:
                bad("server counts %r open connections, expected %d" % (v, n_idle + n_slow + 1))
            check_service(port, "while %d idle and %d slow clients are connected" % (n_idle, n_slow))
            k_idle, k_slow = count_closed(idle), slow.n_closed()
            if k_idle == 0 and k_slow == 0:
                ok("all %d idle and %d slow connections still open after the requests" % (n_idle, n_slow))
            else:
                bad("%d idle and %d slow connections were closed (expected none)" % (k_idle, k_slow))
            slow.close()
            for s in idle:
                s.close()
            check_service(port, "after they left")
        else:
            end = time.monotonic() + HANG
            while slow.n_closed() < n_slow and time.monotonic() < end:
                time.sleep(0.1)
            k = slow.n_closed()
            (ok if k == n_slow else bad)("%d of %d slow clients closed by the head deadline (bytes sent: %d..%d)"
                                         % (k, n_slow, min(slow.sent), max(slow.sent)))
            k = wait_closed(idle, n_idle)
            (ok if k == n_idle else bad)("%d of %d idle connections closed by the head deadline" % (k, n_idle))
            v = metric(port, "http_head_timeouts_total")
            (ok if v is not None and v >= n_idle + n_slow else bad)(
                "/metrics http_head_timeouts_total = %r (>= %d)" % (v, n_idle + n_slow))
            check_service(port, "after the deadline closed them")
            slow.close()
            for s in idle:
                s.close()
    elif mode == "body":
        n = 20
        head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100000\r\n\r\n")
        slow = Slow(port, 0)
        with slow.lock:
            for _ in range(n):
                s = connect(port)
                s.sendall(head)
                slow.socks.append(s)
                slow.sent.append(len(head))
                slow.closed.append(False)
            slow.HEAD = head + b" " * 100000  # then one byte of the body a second
        end = time.monotonic() + HANG
        while slow.n_closed() < n and time.monotonic() < end:
            time.sleep(0.1)
        k = slow.n_closed()
        (ok if k == n else bad)("%d of %d slow bodies closed by the body deadline" % (k, n))
        v = metric(port, "http_body_timeouts_total")
        (ok if v is not None and v >= n else bad)("/metrics http_body_timeouts_total = %r (>= %d)" % (v, n))
        check_service(port, "after the body deadline closed them")
        slow.close()
    elif mode in ("limit", "perip"):
        mx, n = int(sys.argv[3]), int(sys.argv[4])
        src = "127.0.0.2" if mode == "perip" else None
        socks = [connect(port, src) for _ in range(n)]
        k = wait_closed(socks, n - mx)
        (ok if k == n - mx else bad)("%s: %d of %d connections closed at once (limit %d)" % (mode, k, n, mx))
        if mode == "perip":
            check_service(port, "from 127.0.0.1 while 127.0.0.2 is at its limit")
        k2 = count_closed(socks)
        (ok if k2 == n - mx else bad)("%s: %d connections stay open" % (mode, n - k2))
        for s in socks:
            s.close()
        st, _ = request_retry(port, "GET", "/health")
        (ok if st == 200 else bad)("%s: /health after the connections left: %d" % (mode, st))
        if mode == "limit":
            v = metric(port, "http_connections_refused_total")
            # at least: a retry of /health above may itself have come too early
            (ok if v is not None and v >= n - mx else bad)(
                "limit: /metrics http_connections_refused_total = %r (>= %d)" % (v, n - mx))
    else:
        bad("unknown mode " + mode)


if __name__ == "__main__":
    main()
    sys.exit(1 if fails else 0)
