#!/usr/bin/python3
"""A scriptable webhook receiver for grelout's tests.

Listens on 127.0.0.1, records every request it receives, and answers as
scripted (204 by default).  Standard library only; run with Debian's
/usr/bin/python3.

    receiver.py --port-file FILE [--port N] [--log FILE.jsonl]

Control endpoints (all under /_control/):
    GET  /_control/requests[?path=/x]   recorded requests, oldest first, as JSON
    GET  /_control/count[?path=/x]      number of recorded requests
    POST /_control/script               {"path": "/x", "responses": [R, ...],
                                         "default": R}
    POST /_control/reset                forget requests and scripts

A response R is an object with optional keys:
    status   (int, default 204)
    body     (string)
    headers  (object of strings)
    delay    (seconds to wait before answering)
    size     (send a body of this many bytes)
    endless  (true: stream a body forever, until the client hangs up)
Scripted responses for a path are used in order; once they run out, the
path's "default" (or 204) answers.
"""

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

LOCK = threading.Lock()
REQUESTS = []
SCRIPTS = {}
LOG = None


def next_response(path):
    with LOCK:
        script = SCRIPTS.get(path)
        if script is None:
            return {}
        if script["responses"]:
            return script["responses"].pop(0)
        return script.get("default") or {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _send_json(self, obj, status=200):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _control(self, method, url, body):
        query = parse_qs(url.query)
        path = query.get("path", [None])[0]
        if url.path == "/_control/requests" and method == "GET":
            with LOCK:
                items = [r for r in REQUESTS if path is None or r["path"] == path]
            return self._send_json(items)
        if url.path == "/_control/count" and method == "GET":
            with LOCK:
                n = sum(1 for r in REQUESTS if path is None or r["path"] == path)
            return self._send_json({"count": n})
        if url.path == "/_control/script" and method == "POST":
            spec = json.loads(body or b"{}")
            with LOCK:
                SCRIPTS[spec["path"]] = {
                    "responses": list(spec.get("responses", [])),
                    "default": spec.get("default"),
                }
            return self._send_json({"ok": True})
        if url.path == "/_control/reset" and method == "POST":
            with LOCK:
                REQUESTS.clear()
                SCRIPTS.clear()
            return self._send_json({"ok": True})
        return self._send_json({"error": "unknown control endpoint"}, 404)

    def _handle(self, method):
        url = urlparse(self.path)
        body = self._read_body()
        if url.path.startswith("/_control/"):
            return self._control(method, url, body)

        record = {
            "method": method,
            "path": url.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body.decode("utf-8", "replace"),
            "received_at": time.time(),
            "peer_port": self.client_address[1],
        }
        with LOCK:
            REQUESTS.append(record)
            if LOG is not None:
                LOG.write(json.dumps(record) + "\n")
                LOG.flush()

        resp = next_response(url.path)
        if resp.get("delay"):
            time.sleep(float(resp["delay"]))
        status = int(resp.get("status", 204))
        headers = resp.get("headers") or {}
        try:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            if resp.get("endless"):
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                chunk = b"x" * 65536
                while True:
                    self.wfile.write(chunk)
            elif resp.get("size"):
                size = int(resp["size"])
                self.send_header("Content-Length", str(size))
                self.end_headers()
                chunk = b"y" * 65536
                sent = 0
                while sent < size:
                    n = min(len(chunk), size - sent)
                    self.wfile.write(chunk[:n])
                    sent += n
            else:
                data = (resp.get("body") or "").encode()
                if status not in (204, 304):
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if data and status not in (204, 304):
                    self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def do_POST(self):
        self._handle("POST")

    def do_GET(self):
        self._handle("GET")

    def do_PUT(self):
        self._handle("PUT")


def main():
    global LOG
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file")
    parser.add_argument("--log")
    args = parser.parse_args()
    if args.log:
        LOG = open(args.log, "a", encoding="utf-8")
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.request_queue_size = 1024
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    port = server.server_address[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.replace(tmp, args.port_file)
    print(f"receiver listening on 127.0.0.1:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
