#!/usr/bin/python3
"""A scriptable webhook receiver for grelout's tests.

Listens on 127.0.0.1, records every request it receives, and answers as
scripted (204 by default).  Standard library only; run with Debian's
/usr/bin/python3.

    receiver.py --port-file FILE [--port N] [--log FILE.jsonl]

Control endpoints (all under /_control/):
    GET  /_control/requests[?path=/x]   recorded requests, oldest first, as JSON
    GET  /_control/count[?path=/x]      number of recorded requests
    GET  /_control/summary[?path=/x]    compact records, oldest first: a list
                                        of {id, attempt, path, received_at,
                                        peer_port, body} (id = webhook-id,
                                        attempt = grelout-attempt), for
                                        big bursts
    GET  /_control/stats[?path=/x]      {"count", "distinct_ids",
                                        "duplicated_ids", "max_in_flight"}
    GET  /_control/order?path=/x        per-key order check of the requests
                                        to /x, whose bodies are JSON objects
                                        {"key": K, "n": N} (N = 1, 2, ... the
                                        order a key's messages must arrive
                                        in): {"keys", "requests",
                                        "overlaps" (a request of a key came
                                        before the answer to the previous
                                        one of that key), "out_of_order" (a
                                        request other than the last success
                                        or the one after it), "repeats" (of
                                        the last success), "delivered"
                                        (key -> greatest N answered 2xx),
                                        "examples"}
    POST /_control/script               {"path": "/x", "responses": [R, ...],
                                         "default": R, "match": [M, ...]}
    POST /_control/reset                forget requests and scripts

A response R is an object with optional keys:
    status   (int, default 204)
    body     (string)
    headers  (object of strings)
    delay    (seconds to wait before answering)
    workers  (with delay: at most this many requests of the path are
             served at once, each for its delay; the others wait their
             turn, so the latency climbs with the load past this many, as
             an endpoint's with a knee does)
    size     (send a body of this many bytes)
    endless  (true: stream a body forever, until the client hangs up)
    retry_after_date  (seconds: send "Retry-After" as an HTTP date that
             many seconds after the moment the response is sent)
    fail_rate  (0 to 1: answer 500 instead, at random, this often)
    watch_hangup  (true: during the delay, watch the connection; if the
             client hangs up (a timeout, a relay that exits), the request
             stops counting as in flight at once, gets "hung_up_at" and
             is not answered)
Each recorded request also has "header_list" (the [name, value] pairs in
the order they came, names lower-cased) and, once answered, "done_at".
A request counts as in flight (stats' max_in_flight) from its arrival until
its answer starts.
Scripted responses for a path are used in order; once they run out, the
path's "default" (or 204) answers.  Before either, a request whose body
contains a match's "body_contains" string gets that match's "response"
(M = {"body_contains": S, "response": R}; the first match wins, and it
uses up no scripted response).
"""

import argparse
import json
import os
import random
import select
import socket
import sys
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

LOCK = threading.Lock()
REQUESTS = []
SCRIPTS = {}
LOG = None
IN_FLIGHT = {}      # path -> requests being answered now
MAX_IN_FLIGHT = {}  # path -> most requests answered at once
WORKERS = {}        # (path, n) -> semaphore of n workers ("workers")


def order_check(items):
    """The per-key order check of /_control/order, over requests oldest
    first.  A request of key K with number N is in order when N is one more
    than the greatest number of K answered 2xx so far (the next message),
    and a repeat when it is that number (at-least-once: a success whose
    outcome the relay did not record).  Overlap: it came before the previous
    request of K was answered."""
    last_done = {}
    delivered = {}
    overlaps = out_of_order = repeats = 0
    examples = []
    for r in items:
        try:
            body = json.loads(r["body"])
            key, n = str(body["key"]), int(body["n"])
        except (ValueError, KeyError, TypeError):
            continue
        done = r.get("done_at")
        if key in last_done and (last_done[key] is None
                                 or r["received_at"] < last_done[key]):
            overlaps += 1
            if len(examples) < 10:
                examples.append(f"overlap: key {key} n {n}")
        last_done[key] = done
        top = delivered.get(key, 0)
        if n == top:
            repeats += 1
        elif n != top + 1:
            out_of_order += 1
            if len(examples) < 10:
                examples.append(f"out of order: key {key} n {n} after {top}")
        if 200 <= r.get("status", 0) < 300:
            delivered[key] = max(top, n)
    return {"keys": len(last_done), "requests": len(items),
            "overlaps": overlaps, "out_of_order": out_of_order,
            "repeats": repeats, "delivered": delivered, "examples": examples}


def next_response(path, body=""):
    with LOCK:
        script = SCRIPTS.get(path)
        if script is None:
            return {}
        for m in script.get("match") or []:
            if m.get("body_contains", "") in body:
                return m.get("response") or {}
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
                # copies: "done_at" is added to a record when it is answered
                items = [dict(r) for r in REQUESTS
                         if path is None or r["path"] == path]
            return self._send_json(items)
        if url.path == "/_control/count" and method == "GET":
            with LOCK:
                n = sum(1 for r in REQUESTS if path is None or r["path"] == path)
            return self._send_json({"count": n})
        if url.path == "/_control/summary" and method == "GET":
            with LOCK:
                items = [{"id": r["headers"].get("webhook-id"),
                          "attempt": r["headers"].get("grelout-attempt"),
                          "path": r["path"],
                          "received_at": r["received_at"],
                          "peer_port": r["peer_port"],
                          "body": r["body"]}
                         for r in REQUESTS if path is None or r["path"] == path]
            return self._send_json(items)
        if url.path == "/_control/stats" and method == "GET":
            with LOCK:
                ids = {}
                n = 0
                for r in REQUESTS:
                    if path is None or r["path"] == path:
                        n += 1
                        i = r["headers"].get("webhook-id")
                        ids[i] = ids.get(i, 0) + 1
                if path is None:
                    most = max(MAX_IN_FLIGHT.values(), default=0)
                else:
                    most = MAX_IN_FLIGHT.get(path, 0)
            return self._send_json({
                "count": n,
                "distinct_ids": len(ids),
                "duplicated_ids": sum(1 for c in ids.values() if c > 1),
                "max_in_flight": most,
            })
        if url.path == "/_control/order" and method == "GET":
            with LOCK:
                items = [dict(r) for r in REQUESTS if r["path"] == path]
            return self._send_json(order_check(items))
        if url.path == "/_control/script" and method == "POST":
            spec = json.loads(body or b"{}")
            with LOCK:
                SCRIPTS[spec["path"]] = {
                    "responses": list(spec.get("responses", [])),
                    "default": spec.get("default"),
                    "match": list(spec.get("match", [])),
                }
            return self._send_json({"ok": True})
        if url.path == "/_control/reset" and method == "POST":
            with LOCK:
                REQUESTS.clear()
                SCRIPTS.clear()
                MAX_IN_FLIGHT.clear()
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
            "header_list": [[k.lower(), v] for k, v in self.headers.items()],
            "body": body.decode("utf-8", "replace"),
            "received_at": time.time(),
            "peer_port": self.client_address[1],
        }
        with LOCK:
            REQUESTS.append(record)
            if LOG is not None:
                LOG.write(json.dumps(record) + "\n")
                LOG.flush()
            IN_FLIGHT[url.path] = IN_FLIGHT.get(url.path, 0) + 1
            MAX_IN_FLIGHT[url.path] = max(MAX_IN_FLIGHT.get(url.path, 0),
                                          IN_FLIGHT[url.path])
        try:
            self._answer(url, record)
        finally:
            self._done(url, record)

    def _done(self, url, record):
        """The request stops counting as in flight (once)."""
        with LOCK:
            if "done_at" not in record:
                IN_FLIGHT[url.path] -= 1
                record["done_at"] = time.time()

    def _wait_or_hangup(self, delay, url, record):
        """Wait DELAY seconds unless the client hangs up first: then the
        request is done (not answered) and this returns True."""
        deadline = time.time() + delay
        sock = self.connection
        while True:
            left = deadline - time.time()
            if left <= 0:
                return False
            try:
                readable, _, _ = select.select([sock], [], [], left)
            except (OSError, ValueError):
                readable = [sock]
            if not readable:
                continue
            try:
                data = sock.recv(1, socket.MSG_PEEK)
            except OSError:
                data = b""
            if data:
                # the client sent more (not a hang-up): just wait
                time.sleep(max(0.0, deadline - time.time()))
                return False
            with LOCK:
                record["hung_up_at"] = time.time()
            self._done(url, record)
            self.close_connection = True
            return True

    def _answer(self, url, record):
        resp = next_response(url.path, record["body"])
        if resp.get("delay") and resp.get("workers"):
            key = (url.path, int(resp["workers"]))
            with LOCK:
                sem = WORKERS.setdefault(key, threading.Semaphore(key[1]))
            with sem:
                time.sleep(float(resp["delay"]))
        elif resp.get("delay"):
            if resp.get("watch_hangup"):
                if self._wait_or_hangup(float(resp["delay"]), url, record):
                    return
            else:
                time.sleep(float(resp["delay"]))
        # done before the first byte of the answer: the client cannot
        # send its next request while this one still counts
        self._done(url, record)
        status = int(resp.get("status", 204))
        if resp.get("fail_rate") and random.random() < float(resp["fail_rate"]):
            status = 500
        record["status"] = status
        headers = dict(resp.get("headers") or {})
        if resp.get("retry_after_date") is not None:
            headers["Retry-After"] = formatdate(
                time.time() + float(resp["retry_after_date"]), usegmt=True)
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
