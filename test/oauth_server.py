#!/usr/bin/python3
"""A local OAuth2 token server and protected webhook endpoint for grelout's
tests (issue 34: OAuth2 client credentials, RFC 6749 section 4.4).

One process, on 127.0.0.1, serves the token endpoint POST /token and, on
every other path, test/receiver.py's webhook receiver (imported from it, so
recording, scripting and all of /_control/ work as there), except that a
webhook request must carry "Authorization: Bearer <token>" with a token this
server issued that has neither expired nor been revoked: otherwise it is
answered 401 (WWW-Authenticate: Bearer error="invalid_token") before any
script, kept apart (/_oauth/unauthorized) and not among the receiver's
recorded requests.  Standard library only; run with Debian's
/usr/bin/python3.

    oauth_server.py --port-file FILE --client-id ID --client-secret SECRET
                    [--expires-in N] [--port N] [--log FILE.jsonl]

POST /token (application/x-www-form-urlencoded): grant_type must be
client_credentials (else 400 unsupported_grant_type); the client
authenticates with HTTP Basic (id and secret form-encoded, then base64:
section 2.3.1) or with client_id and client_secret in the body, not both
(else 400 invalid_request); wrong or missing credentials get 401
invalid_client (with WWW-Authenticate: Basic when Basic was used); a
parameter given twice gets 400 invalid_request.  Success: 200
{"access_token": <random>, "token_type": "Bearer", "expires_in": N}, with
Cache-Control: no-store.  Every token request is recorded (time, how the
client authenticated, grant_type, scope, audience, status).

Control endpoints (all under /_oauth/; the receiver's are under /_control/):
    GET  /_oauth/stats            {"token_requests", "tokens_issued",
                                   "tokens_refused" (token requests not
                                   answered 200), "webhooks_accepted",
                                   "webhooks_unauthorized", "live_tokens"}
    GET  /_oauth/token_requests   the token requests, oldest first: {"at",
                                   "auth" ("basic", "body", "both", "none"),
                                   "client_id", "grant_type", "scope",
                                   "audience", "content_type", "status",
                                   "outcome" ("issued", "invalid_client",
                                   ..., "503", "closed")}
    GET  /_oauth/unauthorized     the webhook requests answered 401: {"at",
                                   "path", "reason" ("no bearer", "unknown",
                                   "expired", "revoked"), "webhook_id"}
    POST /_oauth/config           change how tokens are answered (the keys
                                   given; see C below)
    POST /_oauth/revoke           revoke every token issued so far: the next
                                   webhook request with one gets 401;
                                   {"revoked": how many were live}
    POST /_oauth/reset            forget tokens, token requests, 401s and
                                   configuration (back to the command line's)

A configuration C (POST /_oauth/config) has optional keys:
    expires_in   seconds announced (int or float); null: no expires_in
    expires_as_string  true: send expires_in as a JSON string ("3600")
    lifetime     seconds the token really lasts here (default: expires_in;
                 null with no expires_in: until revoked)
    token_type   (default "Bearer")
    status       answer this status instead (e.g. 503, with {"error":
                 "temporarily_unavailable"}), issuing no token
    close        true: close the connection without answering
    delay        seconds to wait before answering (or closing)
    body         send this text as the 200 answer's body instead (a
                 malformed response; no token is issued)
    responses    [C, ...]: one-shot configurations, used in order by the
                 next token requests (each over the standing one)
"""

import argparse
import base64
import json
import os
import secrets
import sys
import time
from http.server import ThreadingHTTPServer
from urllib.parse import parse_qs, unquote_plus, urlparse

import receiver

TOKEN_PATH = "/token"
CLIENT_ID = None
CLIENT_SECRET = None
DEFAULTS = {}
CONFIG = {}
ONE_SHOT = []
TOKENS = {}            # token -> {"expires_at": monotonic or None, "revoked": bool}
TOKEN_REQUESTS = []
UNAUTHORIZED = []
COUNTS = {"webhooks_accepted": 0}
LOCK = receiver.LOCK   # one lock for the receiver's state and ours


def reset_state():
    """Forget every token, request and one-shot configuration."""
    TOKENS.clear()
    TOKEN_REQUESTS.clear()
    UNAUTHORIZED.clear()
    ONE_SHOT.clear()
    CONFIG.clear()
    CONFIG.update(DEFAULTS)
    COUNTS["webhooks_accepted"] = 0


def check_bearer(header):
    """None when the Authorization header value carries a live token of
    ours, else why not."""
    if not header:
        return "no bearer"
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return "no bearer"
    info = TOKENS.get(token.strip())
    if info is None:
        return "unknown"
    if info["revoked"]:
        return "revoked"
    if info["expires_at"] is not None and time.monotonic() >= info["expires_at"]:
        return "expired"
    return None


def client_credentials(headers, params):
    """(how the client authenticated, client id, secret) from the Basic
    header (section 2.3.1: each part form-decoded after base64) and the
    body's client_id and client_secret; None when malformed."""
    basic = None
    auth = headers.get("Authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            raw = base64.b64decode(value.strip(), validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            return None
        if ":" not in raw:
            return None
        cid, _, csecret = raw.partition(":")
        basic = (unquote_plus(cid), unquote_plus(csecret))
    in_body = "client_id" in params or "client_secret" in params
    if basic and in_body:
        return ("both", None, None)
    if basic:
        return ("basic",) + basic
    if in_body:
        return ("body", params.get("client_id", [""])[0],
                params.get("client_secret", [""])[0])
    return ("none", None, None)


class Handler(receiver.Handler):
    """receiver.py's handler, with /token, /_oauth/ and the Bearer check."""

    def _send_raw(self, status, data, headers=None):
        """An answer with a body of bytes; a client gone (a timeout) is no
        error here."""
        try:
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _oauth_error(self, status, code, headers=None):
        h = {"Content-Type": "application/json", "Cache-Control": "no-store"}
        h.update(headers or {})
        self._send_raw(status, json.dumps({"error": code}).encode(), h)

    def _handle(self, method):
        url = urlparse(self.path)
        if url.path == TOKEN_PATH:
            return self._token(method, self._read_body())
        if url.path.startswith("/_oauth/"):
            return self._oauth_control(method, url, self._read_body())
        if url.path.startswith("/_control/"):
            return super()._handle(method)
        with LOCK:
            reason = check_bearer(self.headers.get("Authorization"))
            if reason is not None:
                UNAUTHORIZED.append({
                    "at": time.time(), "path": url.path, "reason": reason,
                    "webhook_id": self.headers.get("webhook-id")})
            else:
                COUNTS["webhooks_accepted"] += 1
        if reason is not None:
            self._read_body()
            return self._send_raw(
                401, b"", {"WWW-Authenticate": 'Bearer error="invalid_token"'})
        return super()._handle(method)

    def _token(self, method, body):
        with LOCK:
            conf = dict(CONFIG)
            if ONE_SHOT:
                conf.update(ONE_SHOT.pop(0))
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        try:
            params = parse_qs(body.decode("ascii"), keep_blank_values=True,
                              strict_parsing=bool(body))
        except (ValueError, UnicodeDecodeError):
            params = None
        creds = client_credentials(self.headers, params or {})
        rec = {
            "at": time.time(),
            "auth": creds[0] if creds else "malformed",
            "client_id": creds[1] if creds else None,
            "grant_type": (params or {}).get("grant_type", [None])[0],
            "scope": (params or {}).get("scope", [None])[0],
            "audience": (params or {}).get("audience", [None])[0],
            "content_type": ctype,
        }

        def done(status, outcome):
            rec["status"] = status
            rec["outcome"] = outcome
            with LOCK:
                TOKEN_REQUESTS.append(rec)

        if conf.get("delay"):
            time.sleep(float(conf["delay"]))
        if conf.get("close"):
            done(None, "closed")
            self.close_connection = True
            try:
                self.connection.shutdown(2)
            except OSError:
                pass
            return None
        if conf.get("status") and int(conf["status"]) != 200:
            status = int(conf["status"])
            done(status, str(status))
            return self._oauth_error(status, "temporarily_unavailable")
        if method != "POST" or ctype != "application/x-www-form-urlencoded" \
                or params is None or creds is None or creds[0] == "both" \
                or any(len(v) > 1 for v in params.values()):
            done(400, "invalid_request")
            return self._oauth_error(400, "invalid_request")
        if creds[0] == "none" or creds[1] != CLIENT_ID or creds[2] != CLIENT_SECRET:
            done(401, "invalid_client")
            extra = {"WWW-Authenticate": 'Basic realm="grelout-test"'} \
                if creds[0] == "basic" else {}
            return self._oauth_error(401, "invalid_client", extra)
        if rec["grant_type"] != "client_credentials":
            done(400, "unsupported_grant_type")
            return self._oauth_error(400, "unsupported_grant_type")
        headers = {"Content-Type": "application/json;charset=UTF-8",
                   "Cache-Control": "no-store", "Pragma": "no-cache"}
        if conf.get("body") is not None:
            done(200, "body")
            return self._send_raw(200, str(conf["body"]).encode(), headers)
        token = secrets.token_urlsafe(32)
        expires_in = conf.get("expires_in")
        lifetime = conf.get("lifetime", expires_in)
        answer = {"access_token": token,
                  "token_type": conf.get("token_type", "Bearer")}
        if expires_in is not None:
            answer["expires_in"] = str(expires_in) if conf.get("expires_as_string") \
                else expires_in
        with LOCK:
            TOKENS[token] = {
                "expires_at": None if lifetime is None
                else time.monotonic() + float(lifetime),
                "revoked": False}
        done(200, "issued")
        return self._send_raw(200, json.dumps(answer).encode(), headers)

    def _oauth_control(self, method, url, body):
        if url.path == "/_oauth/stats" and method == "GET":
            with LOCK:
                now = time.monotonic()
                live = sum(1 for t in TOKENS.values() if not t["revoked"] and
                           (t["expires_at"] is None or now < t["expires_at"]))
                return self._send_json({
                    "token_requests": len(TOKEN_REQUESTS),
                    "tokens_issued": len(TOKENS),
                    "tokens_refused": sum(1 for r in TOKEN_REQUESTS
                                          if r["status"] != 200),
                    "webhooks_accepted": COUNTS["webhooks_accepted"],
                    "webhooks_unauthorized": len(UNAUTHORIZED),
                    "live_tokens": live})
        if url.path == "/_oauth/token_requests" and method == "GET":
            with LOCK:
                items = [dict(r) for r in TOKEN_REQUESTS]
            return self._send_json(items)
        if url.path == "/_oauth/unauthorized" and method == "GET":
            with LOCK:
                items = [dict(r) for r in UNAUTHORIZED]
            return self._send_json(items)
        if url.path == "/_oauth/config" and method == "POST":
            spec = json.loads(body or b"{}")
            with LOCK:
                if "responses" in spec:
                    ONE_SHOT[:] = list(spec.pop("responses") or [])
                CONFIG.update(spec)
                return self._send_json({"ok": True, "config": CONFIG,
                                        "responses": len(ONE_SHOT)})
        if url.path == "/_oauth/revoke" and method == "POST":
            with LOCK:
                now = time.monotonic()
                n = 0
                for t in TOKENS.values():
                    if not t["revoked"] and (t["expires_at"] is None
                                             or now < t["expires_at"]):
                        n += 1
                    t["revoked"] = True
            return self._send_json({"ok": True, "revoked": n})
        if url.path == "/_oauth/reset" and method == "POST":
            with LOCK:
                reset_state()
            return self._send_json({"ok": True})
        return self._send_json({"error": "unknown control endpoint"}, 404)


def main():
    global CLIENT_ID, CLIENT_SECRET
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file")
    parser.add_argument("--log")
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--client-secret", required=True)
    parser.add_argument("--expires-in", type=float, default=3600)
    args = parser.parse_args()
    CLIENT_ID = args.client_id
    CLIENT_SECRET = args.client_secret
    expires = int(args.expires_in) if args.expires_in == int(args.expires_in) \
        else args.expires_in
    DEFAULTS["expires_in"] = expires
    reset_state()
    if args.log:
        receiver.LOG = open(args.log, "a", encoding="utf-8")
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.request_queue_size = 1024
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    port = server.server_address[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.replace(tmp, args.port_file)
    print(f"oauth server listening on 127.0.0.1:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
