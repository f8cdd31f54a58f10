#!/usr/bin/env python3
"""up_server.py: the HTTP server tests/e2e/test_up.sh downloads from.

Serves the files of one folder with behaviours chosen by the URL's first
path segment, and counts what it sends:
  /ok/NAME         the file; honours Range (206 with Content-Range)
  /drop/K/NAME     as /ok, but every response closes the connection after K
                   body bytes (the headers promise the whole range)
  /corrupt/NAME    as /ok, with the byte at offset len/2 flipped
  /norange/NAME    the whole file (200) whatever the Range header says
  /short/NAME      a file 1000 bytes shorter, consistently (Content-Length
                   and Content-Range say so)
  /_stats          JSON {"body_bytes": N, "requests": N, "ranges": [start, ...]}
  /_reset          zeroes the counters
Usage: up_server.py DIR PORTFILE   (binds 127.0.0.1, any free port, and
writes the port to PORTFILE once it listens)."""
import http.server
import json
import os
import socket
import sys
import threading

ROOT = sys.argv[1]
lock = threading.Lock()
stats = {"body_bytes": 0, "requests": 0, "ranges": []}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def reply_json(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        parts = self.path.split("/")[1:]
        if parts == ["_stats"]:
            with lock:
                return self.reply_json(stats)
        if parts == ["_reset"]:
            with lock:
                stats.update(body_bytes=0, requests=0, ranges=[])
            return self.reply_json({})
        mode, drop = parts[0] if parts else "", None
        if mode == "drop" and len(parts) == 3:
            drop, name = int(parts[1]), parts[2]
        elif mode in ("ok", "corrupt", "norange", "short") and len(parts) == 2:
            name = parts[1]
        else:
            return self.send_error(404)
        path = os.path.join(ROOT, name)
        if "/" in name or not os.path.isfile(path):
            return self.send_error(404)
        data = bytearray(open(path, "rb").read())
        if mode == "corrupt":
            data[len(data) // 2] ^= 0x01
        if mode == "short":
            data = data[:-1000]
        start = 0
        rng = self.headers.get("Range")
        with lock:
            stats["requests"] += 1
        if rng and mode != "norange":
            if not rng.startswith("bytes=") or not rng.endswith("-"):
                return self.send_error(400)
            start = int(rng[6:-1])
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % len(data))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
        else:
            self.send_response(200)
        if mode != "norange":
            self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        body = bytes(data[start:])
        if drop is not None and drop < len(body):
            body = body[:drop]
            self.close_connection = True
        with lock:
            stats["ranges"].append(start)
        sent = 0
        while sent < len(body):
            n = self.wfile.write(body[sent:sent + 65536])
            sent += n
            with lock:
                stats["body_bytes"] += n
        if self.close_connection:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
srv.daemon_threads = True
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
srv.serve_forever()
