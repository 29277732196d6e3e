#!/usr/bin/env node
// test/webhooks/verify_v1a.js: verify requests recorded from grelout's
// relay that carry Standard Webhooks asymmetric ("v1a", ed25519)
// signatures, independently of grelout: Node's own crypto.verify with the
// specification's algorithm (ed25519 over `${webhook-id}.${webhook-timestamp}.${body}`,
// the public key from the whpk_ key's base64).
//
//   node verify_v1a.js REQUESTS.json KEY [PREVIOUS_KEY]
//
// KEY and PREVIOUS_KEY are what a receiver holds: a whpk_ public key (its
// signature is "v1a,...") or, for a rotation between the two kinds, a
// whsec_ secret (its signature is "v1,...", checked with the official
// "standardwebhooks" library).  REQUESTS.json is an array of recorded
// requests ({headers, body}, header names in lower case), as
// test/receiver.py returns them.  For each one: the webhook-signature
// header holds one signature, or two with PREVIOUS_KEY, the current
// key's first; each verifies with its own key and not with the other; a
// v1a signature is "v1a," + base64 of 64 bytes; and verification fails
// with the body, id or timestamp changed, or with another key, so that a
// pass means something.
//
// The official library (standardwebhooks 1.1.1) verifies "v1" only: it
// skips every signature whose version is not "v1" and has no way to take a
// public key.  Whether the installed version verifies v1a is tried on each
// request (a whpk_ key given to its Webhook); when it cannot, that is said
// once ("# standardwebhooks does not verify v1a") and the verification
// rests on crypto.verify.  In a rotation with a whsec_ secret, the library
// does verify the v1 signature in the mixed header (it skips the v1a one).
"use strict";

const fs = require("fs");
const crypto = require("crypto");
const { Webhook, WebhookVerificationError } = require("standardwebhooks");

const [file, key, previous] = process.argv.slice(2);
if (!file || !key) {
  console.error("usage: node verify_v1a.js REQUESTS.json KEY [PREVIOUS_KEY]");
  process.exit(2);
}

const requests = JSON.parse(fs.readFileSync(file, "utf8"));
let failures = 0;
let checks = 0;
let libraryVerifiesV1a = false;

function check(cond, what) {
  checks++;
  if (!cond) failures++;
  console.log(`${cond ? "ok" : "not ok"} - ${what}`);
}

// publicKey: the KeyObject of a whpk_ key (base64 of the 32-byte key).
function publicKey(whpk) {
  const raw = Buffer.from(whpk.slice("whpk_".length), "base64");
  if (!whpk.startsWith("whpk_") || raw.length !== 32) {
    throw new Error(`not a whpk_ key of 32 bytes: ${whpk}`);
  }
  return crypto.createPublicKey({
    key: { kty: "OKP", crv: "Ed25519", x: raw.toString("base64url") },
    format: "jwk",
  });
}

// signedContent: the bytes the specification signs.
function signedContent(id, timestamp, body) {
  return Buffer.concat([Buffer.from(`${id}.${timestamp}.`, "utf8"), body]);
}

// verifiesOne: does this one signature ("v1a,..." or "v1,...") verify for
// the request with this key (whpk_ or whsec_)?
function verifiesOne(k, signature, id, timestamp, body) {
  if (k.startsWith("whpk_")) {
    const m = /^v1a,([A-Za-z0-9+/]{86}==)$/.exec(signature);
    if (!m) return false;
    return crypto.verify(null, signedContent(id, timestamp, body), publicKey(k),
      Buffer.from(m[1], "base64"));
  }
  if (!signature.startsWith("v1,")) return false;
  try {
    new Webhook(k).verify(body, {
      "webhook-id": id,
      "webhook-timestamp": timestamp,
      "webhook-signature": signature,
    });
    return true;
  } catch (e) {
    if (!(e instanceof WebhookVerificationError)) throw e;
    return false;
  }
}

// libraryVerifies: does the official library verify the header with a
// whpk_ key?  (false when it refuses the key or skips v1a)
function libraryVerifies(k, headers, body) {
  try {
    new Webhook(k).verify(body, headers);
    return true;
  } catch (e) {
    return false;
  }
}

// anotherKey: a key of the same kind that is not k.
function anotherKey(k) {
  if (k.startsWith("whpk_")) {
    const { publicKey: pk } = crypto.generateKeyPairSync("ed25519");
    return "whpk_" + Buffer.from(pk.export({ format: "jwk" }).x, "base64url").toString("base64");
  }
  return "whsec_" + crypto.randomBytes(32).toString("base64");
}

const keys = previous ? [key, previous] : [key];
const strangers = keys.map(anotherKey);

if (!Array.isArray(requests) || requests.length === 0) {
  check(false, "there are recorded requests to verify");
}

for (const [i, r] of requests.entries()) {
  const h = r.headers;
  const name = `request ${i + 1} (webhook-id ${h["webhook-id"]})`;
  const id = h["webhook-id"];
  const ts = h["webhook-timestamp"];
  // the exact bytes received: the body as UTF-8, as it was sent
  const body = Buffer.from(r.body, "utf8");
  const sigs = (h["webhook-signature"] || "").split(" ");

  check(sigs.length === keys.length,
    `${name}: ${keys.length} signature(s) in webhook-signature (got ${sigs.length})`);
  for (const [j, k] of keys.entries()) {
    const which = j === 0 ? "the current key" : "the previous key";
    const sig = sigs[j] || "";
    const version = k.startsWith("whpk_") ? "v1a" : "v1";
    check(sig.startsWith(`${version},`), `${name}: signature ${j + 1} is ${version}, of ${which}`);
    check(verifiesOne(k, sig, id, ts, body), `${name}: signature ${j + 1} verifies with ${which}`);
    for (const [o, other] of keys.entries()) {
      if (o !== j) {
        check(!verifiesOne(other, sig, id, ts, body),
          `${name}: signature ${j + 1} does not verify with the other key`);
      }
    }
    // a verification that cannot fail proves nothing
    check(!verifiesOne(k, sig, id, ts, Buffer.concat([body, Buffer.from(" ")])),
      `${name}: signature ${j + 1} refused with a changed body`);
    check(!verifiesOne(k, sig, id + "0", ts, body),
      `${name}: signature ${j + 1} refused with a changed id`);
    check(!verifiesOne(k, sig, id, String(Number(ts) - 1), body),
      `${name}: signature ${j + 1} refused with a changed timestamp`);
    check(!verifiesOne(strangers[j], sig, id, ts, body),
      `${name}: signature ${j + 1} refused with another key of its kind`);

    if (k.startsWith("whpk_")) {
      const headers = { "webhook-id": id, "webhook-timestamp": ts, "webhook-signature": sig };
      if (libraryVerifies(k, headers, body)) {
        libraryVerifiesV1a = true;
        check(!libraryVerifies(strangers[j], headers, body),
          `${name}: standardwebhooks refuses signature ${j + 1} with another public key`);
      }
    } else {
      // the official library, given the whole (mixed) header, finds its v1
      check(libraryVerifies(k, { "webhook-id": id, "webhook-timestamp": ts,
        "webhook-signature": h["webhook-signature"] }, body),
      `${name}: standardwebhooks verifies the whole header with the whsec_ secret`);
    }
  }
}

if (!libraryVerifiesV1a) {
  console.log("# standardwebhooks does not verify v1a: verified with node:crypto (ed25519) only");
}
console.log(`# ${requests.length} requests, ${checks} checks, ${failures} failed`);
process.exit(failures === 0 ? 0 : 1);
