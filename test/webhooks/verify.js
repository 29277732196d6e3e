#!/usr/bin/env node
// test/webhooks/verify.js: verify requests recorded from grelout's relay
// with the official Standard Webhooks library (npm "standardwebhooks").
//
//   node verify.js REQUESTS.json SECRET [PREVIOUS_SECRET]
//
// REQUESTS.json is an array of recorded requests ({headers, body}, header
// names in lower case), as test/receiver.py returns them.  For each one:
// the library must accept the request with SECRET (and with
// PREVIOUS_SECRET when given); the webhook-signature header must hold one
// v1 signature, or two during a rotation, each accepted with its own
// secret only; and the library must refuse the same request with its body,
// id or timestamp changed, or with another secret, so that a pass means
// something.  Prints one line per check and exits 1 if any failed.
"use strict";

const fs = require("fs");
const crypto = require("crypto");
const { Webhook, WebhookVerificationError } = require("standardwebhooks");

const [file, secret, previous] = process.argv.slice(2);
if (!file || !secret) {
  console.error("usage: node verify.js REQUESTS.json SECRET [PREVIOUS_SECRET]");
  process.exit(2);
}

const requests = JSON.parse(fs.readFileSync(file, "utf8"));
let failures = 0;
let checks = 0;

function check(cond, what) {
  checks++;
  if (!cond) failures++;
  console.log(`${cond ? "ok" : "not ok"} - ${what}`);
}

// accepts: does the library verify body+headers with this secret?
function accepts(sec, body, headers) {
  try {
    new Webhook(sec).verify(body, headers);
    return true;
  } catch (e) {
    if (!(e instanceof WebhookVerificationError)) throw e;
    return false;
  }
}

const current = new Webhook(secret);
const otherSecret = "whsec_" + crypto.randomBytes(32).toString("base64");

if (!Array.isArray(requests) || requests.length === 0) {
  check(false, "there are recorded requests to verify");
}

for (const [i, r] of requests.entries()) {
  const h = r.headers;
  const name = `request ${i + 1} (webhook-id ${h["webhook-id"]})`;
  // the exact bytes received: the body as UTF-8, as it was sent
  const body = Buffer.from(r.body, "utf8");
  const headers = {
    "webhook-id": h["webhook-id"],
    "webhook-timestamp": h["webhook-timestamp"],
    "webhook-signature": h["webhook-signature"],
  };

  let parsed;
  try {
    parsed = current.verify(body, headers);
    check(true, `${name}: verified with the secret`);
    check(JSON.stringify(parsed) === JSON.stringify(JSON.parse(r.body)),
      `${name}: the library returns the payload`);
  } catch (e) {
    check(false, `${name}: verified with the secret (${e.message})`);
  }

  const sigs = (h["webhook-signature"] || "").split(" ");
  check(sigs.every((s) => /^v1,[A-Za-z0-9+/]{43}=$/.test(s)),
    `${name}: every signature is v1,<base64 of 32 bytes>`);
  if (previous) {
    check(sigs.length === 2, `${name}: two signatures during a rotation`);
    check(accepts(previous, body, headers), `${name}: verified with the previous secret`);
    const one = (s) => ({ ...headers, "webhook-signature": s });
    check(accepts(secret, body, one(sigs[0])) && !accepts(previous, body, one(sigs[0])),
      `${name}: the first signature is the current secret's`);
    check(sigs.length > 1 && accepts(previous, body, one(sigs[1])) &&
      !accepts(secret, body, one(sigs[1])),
      `${name}: the second signature is the previous secret's`);
  } else {
    check(sigs.length === 1, `${name}: one signature`);
  }

  // the verification can fail: change any signed part and it must
  const tampered = Buffer.concat([body, Buffer.from(" ")]);
  check(!accepts(secret, tampered, headers), `${name}: a changed body is refused`);
  check(!accepts(secret, body, { ...headers, "webhook-id": headers["webhook-id"] + "0" }),
    `${name}: a changed id is refused`);
  check(!accepts(secret, body,
    { ...headers, "webhook-timestamp": String(Number(headers["webhook-timestamp"]) - 1) }),
  `${name}: a changed timestamp is refused`);
  check(!accepts(otherSecret, body, headers), `${name}: another secret is refused`);
}

console.log(`# ${requests.length} requests, ${checks} checks, ${failures} failed`);
process.exit(failures === 0 ? 0 : 1);
