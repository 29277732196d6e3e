/*-------------------------------------------------------------------------
 *
 * test_sign.c
 *	  Unit tests of src/pure/sign.c, Standard Webhooks 1.0 signatures: the
 *	  specification's published test vector, and agreement with an
 *	  independent computation (OpenSSL's one-shot HMAC and base64) over
 *	  the exact bytes of "id.timestamp.body", also while sign.c reuses
 *	  the contexts of keys it kept.  Then the asymmetric "v1a" (ed25519,
 *	  whsk_ keys): RFC 8032's test vectors 1 and 2, the parsing and
 *	  refusal of keys (edge.c and sign.c), signatures equal to a fresh
 *	  one-shot OpenSSL signing and verified with the public key alone
 *	  (while keys are kept and pushed out), and the header value of a
 *	  rotation in every mix of whsec_ and whsk_.  Prints TAP.
 *
 *-------------------------------------------------------------------------
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "edge.h"
#include "sign.h"
#include "tap.h"

/*
 * reference_sign: "v1," + base64(HMAC-SHA256(key, id "." ts "." body)),
 * built with OpenSSL's HMAC() and EVP_EncodeBlock(), sharing no code with
 * grelout_sign.
 */
static void
reference_sign(const unsigned char *key, size_t keylen, const char *id,
			   long long ts, const char *body, size_t bodylen, char *out)
{
	unsigned char *msg = malloc(strlen(id) + 32 + bodylen);
	int			n = sprintf((char *) msg, "%s.%lld.", id, ts);
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned int maclen = 0;

	memcpy(msg + n, body, bodylen);
	HMAC(EVP_sha256(), key, (int) keylen, msg, n + bodylen, mac, &maclen);
	strcpy(out, "v1,");
	EVP_EncodeBlock((unsigned char *) out + 3, mac, (int) maclen);
	free(msg);
}

/* test_vector: the example of the Standard Webhooks specification. */
static void
test_vector(void)
{
	const char *secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
	const char *id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
	const char *body = "{\"test\": 2432232314}";
	unsigned char key[GRELOUT_SECRET_MAX_BYTES];
	size_t		keylen = 0;
	char		sig[GRELOUT_SIGNATURE_LEN];
	char		other[GRELOUT_SIGNATURE_LEN];

	is_int(edge_secret_decode(secret, strlen(secret), key, &keylen), EDGE_SECRET_OK,
		   "test vector secret decodes");
	is_int(grelout_sign(key, keylen, id, 1614265330, body, strlen(body), sig), 0,
		   "grelout_sign succeeds");
	is_str(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
		   "signature matches the specification's test vector");
	is_int((long long) strlen(sig), GRELOUT_SIGNATURE_LEN - 1, "signature has the documented length");

	/* every signed part matters */
	grelout_sign(key, keylen, id, 1614265331, body, strlen(body), other);
	ok(strcmp(sig, other) != 0, "another timestamp gives another signature");
	grelout_sign(key, keylen, "msg_p5jXN8AQM9LWM0D4loKWxJel", 1614265330, body, strlen(body), other);
	ok(strcmp(sig, other) != 0, "another id gives another signature");
	grelout_sign(key, keylen, id, 1614265330, "{\"test\": 2432232315}", strlen(body), other);
	ok(strcmp(sig, other) != 0, "another body gives another signature");
	grelout_sign(key, keylen, id, 1614265330, body, strlen(body) - 1, other);
	ok(strcmp(sig, other) != 0, "a shorter body gives another signature");
	key[0] ^= 1;
	grelout_sign(key, keylen, id, 1614265330, body, strlen(body), other);
	ok(strcmp(sig, other) != 0, "another key gives another signature");
}

/* test_reference: agreement with the independent computation. */
static void
test_reference(void)
{
	unsigned char key[GRELOUT_SECRET_MAX_BYTES];
	char		body[3000];
	char		sig[GRELOUT_SIGNATURE_LEN];
	char		ref[GRELOUT_SIGNATURE_LEN + 8];
	int			mismatches = 0;
	uint32_t	seed = 99;

	for (int round = 0; round < 200; round++)
	{
		size_t		keylen = 24 + round % 41;	/* 24 .. 64 */
		size_t		bodylen = (size_t) (round * 13) % sizeof(body);
		long long	ts = 1700000000LL + round * 7919;
		char		id[40];

		for (size_t i = 0; i < keylen; i++)
		{
			seed = seed * 1664525 + 1013904223;
			key[i] = (unsigned char) (seed >> 24);
		}
		for (size_t i = 0; i < bodylen; i++)
		{
			seed = seed * 1664525 + 1013904223;
			body[i] = (char) (seed >> 24);	/* any bytes, NUL included */
		}
		snprintf(id, sizeof(id), "0190f7c2-%04x-7000-8000-%012x", round, round * 31);
		if (grelout_sign(key, keylen, id, ts, body, bodylen, sig) != 0)
			mismatches++;
		reference_sign(key, keylen, id, ts, body, bodylen, ref);
		if (strcmp(sig, ref) != 0)
			mismatches++;
	}
	is_int(mismatches, 0, "200 signatures (keys of 24..64 bytes, binary bodies) agree with OpenSSL's HMAC()");

	{
		const char *body2 = "caf\xc3\xa9 \xf0\x9f\x98\x80 {\"a\":\"\\u0000\"}";

		memset(key, 0x42, 64);
		grelout_sign(key, 64, "id", 0, body2, strlen(body2), sig);
		reference_sign(key, 64, "id", 0, body2, strlen(body2), ref);
		is_str(sig, ref, "UTF-8 body signed over its exact bytes, timestamp 0");
	}
	{
		char		longid[200];

		memset(longid, 'i', sizeof(longid) - 1);
		longid[sizeof(longid) - 1] = '\0';
		is_int(grelout_sign(key, 32, longid, 1, "{}", 2, sig), -1,
			   "an id too long for the signing prefix is refused, not truncated");
	}
}

/*
 * test_kept_keys: sign.c keeps the keyed contexts of its last few keys.
 * Many keys in turn, more than it keeps, some repeating at once and some
 * after others pushed them out, keys that are prefixes of one another and
 * a key longer than any kept, each signature against the reference: a kept
 * context used for the wrong key, or one left mid-message, would differ.
 */
static void
test_kept_keys(void)
{
	unsigned char keys[7][100];
	size_t		lens[7] = {32, 31, 64, 24, 33, 100, 32};
	char		sig[GRELOUT_SIGNATURE_LEN];
	char		ref[GRELOUT_SIGNATURE_LEN + 8];
	int			mismatches = 0;
	uint32_t	seed = 7;

	for (int k = 0; k < 7; k++)
		for (size_t i = 0; i < sizeof(keys[k]); i++)
		{
			seed = seed * 1664525 + 1013904223;
			keys[k][i] = (unsigned char) (seed >> 24);
		}
	/* key 1 is key 0 less its last byte; key 4 is key 0 and one more */
	memcpy(keys[1], keys[0], 31);
	memcpy(keys[4], keys[0], 32);
	/* key 6 differs from key 0 in its last byte only */
	memcpy(keys[6], keys[0], 32);
	keys[6][31] ^= 0x80;

	for (int round = 0; round < 400; round++)
	{
		int			k = (round % 5 == 0) ? (round / 5) % 7 : (round * 3 + round / 7) % 7;
		char		id[40];
		char		body[64];

		snprintf(id, sizeof(id), "msg-%d", round);
		snprintf(body, sizeof(body), "{\"n\": %d}", round);
		if (grelout_sign(keys[k], lens[k], id, 1700000000 + round, body, strlen(body), sig) != 0)
			mismatches++;
		reference_sign(keys[k], lens[k], id, 1700000000 + round, body, strlen(body), ref);
		if (strcmp(sig, ref) != 0)
			mismatches++;
		/* the same message again at once: the kept context, reused */
		if (grelout_sign(keys[k], lens[k], id, 1700000000 + round, body, strlen(body), sig) != 0 ||
			strcmp(sig, ref) != 0)
			mismatches++;
	}
	is_int(mismatches, 0, "800 signatures over 7 keys in turn (prefixes, a last byte apart, one of 100 bytes) agree with OpenSSL's HMAC()");
}

/* from_hex: hex text into bytes; returns the number of bytes. */
static size_t
from_hex(const char *hex, unsigned char *out)
{
	size_t		n = strlen(hex) / 2;

	for (size_t i = 0; i < n; i++)
	{
		unsigned int b;

		sscanf(hex + 2 * i, "%2x", &b);
		out[i] = (unsigned char) b;
	}
	return n;
}

/* to_hex: bytes into hex text (out holds 2 * len + 1). */
static char *
to_hex(const unsigned char *in, size_t len, char *out)
{
	for (size_t i = 0; i < len; i++)
		sprintf(out + 2 * i, "%02x", in[i]);
	out[2 * len] = '\0';
	return out;
}

/* whsk: "whsk_" + base64 of len bytes, with EVP_EncodeBlock (not edge.c). */
static char *
whsk(const unsigned char *raw, size_t len, char *out)
{
	strcpy(out, "whsk_");
	EVP_EncodeBlock((unsigned char *) out + 5, raw, (int) len);
	return out;
}

/*
 * test_rfc8032: RFC 8032 section 7.1, TEST 1 (the empty message) and
 * TEST 2 (one byte): the public key of the seed and the signature.
 */
static void
test_rfc8032(void)
{
	static const struct
	{
		const char *seed;
		const char *public_key;
		const char *message;
		const char *signature;
	}			vectors[] = {
		{"9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
			"d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
			"",
			"e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"},
		{"4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
			"3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
			"72",
			"92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"},
	};

	for (int v = 0; v < 2; v++)
	{
		unsigned char seed[32];
		unsigned char pub[32];
		unsigned char msg[8];
		unsigned char sig[64];
		size_t		mlen;
		char		hex[129];
		char		key[128];
		char		pubtext[GRELOUT_PUBLIC_KEY_TEXT_LEN];
		char		want[GRELOUT_PUBLIC_KEY_TEXT_LEN];
		char		name[96];

		from_hex(vectors[v].seed, seed);
		mlen = from_hex(vectors[v].message, msg);
		snprintf(name, sizeof(name), "RFC 8032 TEST %d: the public key of the seed", v + 1);
		is_int(grelout_ed25519_public_key(seed, pub), 0, "grelout_ed25519_public_key succeeds");
		is_str(to_hex(pub, 32, hex), vectors[v].public_key, name);
		snprintf(name, sizeof(name), "RFC 8032 TEST %d: the signature", v + 1);
		is_int(grelout_ed25519_sign_message(seed, msg, mlen, sig), 0, "grelout_ed25519_sign_message succeeds");
		is_str(to_hex(sig, 64, hex), vectors[v].signature, name);
		/* the same again: the kept key */
		memset(sig, 0, sizeof(sig));
		grelout_ed25519_sign_message(seed, msg, mlen, sig);
		is_str(to_hex(sig, 64, hex), vectors[v].signature, "... and again with the kept key");

		/* its whsk_ key gives the whpk_ of the public key */
		from_hex(vectors[v].public_key, pub);
		whsk(seed, 32, key);
		memset(pub, 0, sizeof(pub));
		is_int(grelout_signing_key_check(key, strlen(key), pub), EDGE_SECRET_OK, "its whsk_ key is accepted");
		grelout_public_key_text(pub, pubtext);
		from_hex(vectors[v].public_key, pub);
		strcpy(want, "whpk_");
		EVP_EncodeBlock((unsigned char *) want + 5, pub, 32);
		is_str(pubtext, want, "its whpk_ is the base64 of the public key");
		is_int((long long) strlen(pubtext), GRELOUT_PUBLIC_KEY_TEXT_LEN - 1, "whpk_ has the documented length");
	}
}

/*
 * test_key_parsing: whsk_ keys of 32 bytes (seed) and 64 (seed and public
 * key) are accepted, the public half checked; anything else is refused
 * with the right reason.
 */
static void
test_key_parsing(void)
{
	unsigned char raw[200];
	unsigned char seed[32];
	unsigned char pub[32];
	unsigned char given[32];
	bool		has_public = true;
	char		key[400];

	from_hex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60", raw);
	from_hex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", raw + 32);

	whsk(raw, 32, key);
	is_int(edge_signing_key_decode(key, strlen(key), seed, given, &has_public), EDGE_SECRET_OK,
		   "a 32-byte seed decodes");
	ok(!has_public && memcmp(seed, raw, 32) == 0, "... to the seed, without a public half");
	/* padding is optional, as for whsec_ */
	key[strlen(key) - 1] = '\0';
	is_int(grelout_signing_key_check(key, strlen(key), pub), EDGE_SECRET_OK, "... also without its padding");

	whsk(raw, 64, key);
	is_int(edge_signing_key_decode(key, strlen(key), seed, given, &has_public), EDGE_SECRET_OK,
		   "a 64-byte seed || public key decodes");
	ok(has_public && memcmp(seed, raw, 32) == 0 && memcmp(given, raw + 32, 32) == 0,
	   "... to the seed and the public half");
	is_int(grelout_signing_key_check(key, strlen(key), pub), EDGE_SECRET_OK, "... whose public half is the seed's");
	ok(memcmp(pub, raw + 32, 32) == 0, "... and gives that public key");

	raw[63] ^= 1;
	whsk(raw, 64, key);
	is_int(edge_signing_key_decode(key, strlen(key), seed, given, &has_public), EDGE_SECRET_OK,
		   "a 64-byte key with another public half decodes (edge.c cannot tell)");
	is_int(grelout_signing_key_check(key, strlen(key), pub), EDGE_SECRET_KEY_MISMATCH,
		   "... but is refused: its public half is not the seed's");
	raw[63] ^= 1;
	memcpy(raw + 32, raw, 32);	/* the seed twice */
	whsk(raw, 64, key);
	is_int(grelout_signing_key_check(key, strlen(key), pub), EDGE_SECRET_KEY_MISMATCH,
		   "a 64-byte key that repeats the seed is refused");

	{
		static const size_t bad[] = {0, 1, 16, 24, 31, 33, 48, 63, 65, 96, 128};

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		{
			char		name[80];

			whsk(raw, bad[i], key);
			snprintf(name, sizeof(name), "a key of %zu bytes is refused for its length", bad[i]);
			is_int(grelout_signing_key_check(key, strlen(key), pub), EDGE_SECRET_BAD_LENGTH, name);
		}
	}
	memset(raw, 'A', 150);
	whsk(raw, 150, key);
	is_int(grelout_signing_key_check(key, strlen(key), pub), EDGE_SECRET_BAD_LENGTH,
		   "valid base64 too long for any key is a length problem");

	whsk(raw, 32, key);
	key[10] = '*';
	is_int(grelout_signing_key_check(key, strlen(key), pub), EDGE_SECRET_BAD_BASE64,
		   "a key with a character outside base64 is refused as base64");
	whsk(raw, 32, key);
	strcat(key, "\n");
	is_int(grelout_signing_key_check(key, strlen(key), pub), EDGE_SECRET_BAD_BASE64,
		   "a key with a trailing newline is refused");
	is_int(grelout_signing_key_check("whsk_", 5, pub), EDGE_SECRET_BAD_LENGTH,
		   "\"whsk_\" alone is refused");
	is_int(grelout_signing_key_check("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 38, pub),
		   EDGE_SECRET_NO_PREFIX, "a whsec_ secret is no signing key");
	is_int(grelout_signing_key_check("WHSK_AAAA", 9, pub), EDGE_SECRET_NO_PREFIX,
		   "the prefix is lower case");
	is_int(grelout_signing_key_check("whsk", 4, pub), EDGE_SECRET_NO_PREFIX, "\"whsk\" is no prefix");
	is_int(grelout_signing_key_check("", 0, pub), EDGE_SECRET_NO_PREFIX, "the empty text is no key");
	{
		/* a NUL inside: the length rules, not the NUL */
		char		nul[64];
		size_t		n;

		whsk(raw, 32, nul);
		n = strlen(nul);
		nul[8] = '\0';
		is_int(grelout_signing_key_check(nul, n, pub), EDGE_SECRET_BAD_BASE64,
			   "a key with a NUL inside is refused");
	}
	{
		/* whsk_ keys are no whsec_ secrets and the other way round */
		unsigned char hkey[GRELOUT_SECRET_MAX_BYTES];
		size_t		hlen;

		whsk(raw, 32, key);
		is_int(edge_secret_decode(key, strlen(key), hkey, &hlen), EDGE_SECRET_NO_PREFIX,
			   "edge_secret_decode refuses a whsk_ key");
	}
}

/*
 * reference_v1a: "v1a," + base64 of the ed25519 signature of
 * "id.ts.body", made by a fresh OpenSSL key and context (nothing kept)
 * and EVP_EncodeBlock, sharing no code with sign.c.
 */
static void
reference_v1a(const unsigned char *seed, const char *id, long long ts,
			  const char *body, size_t bodylen, char *out)
{
	unsigned char *msg = malloc(strlen(id) + 32 + bodylen);
	int			n = sprintf((char *) msg, "%s.%lld.", id, ts);
	EVP_PKEY   *pkey = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, 32);
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char sig[64];
	size_t		siglen = sizeof(sig);

	memcpy(msg + n, body, bodylen);
	if (!EVP_DigestSignInit(ctx, NULL, NULL, NULL, pkey) ||
		!EVP_DigestSign(ctx, sig, &siglen, msg, n + bodylen))
		strcpy(out, "reference failed");
	else
	{
		strcpy(out, "v1a,");
		EVP_EncodeBlock((unsigned char *) out + 4, sig, (int) siglen);
	}
	EVP_MD_CTX_free(ctx);
	EVP_PKEY_free(pkey);
	free(msg);
}

/*
 * verify_v1a: does "v1a,<base64>" verify for "id.ts.body" with the public
 * key alone?  EVP_DecodeBlock and EVP_DigestVerify.
 */
static bool
verify_v1a(const unsigned char *public_key, const char *sig, const char *id,
		   long long ts, const char *body, size_t bodylen)
{
	unsigned char raw[100];
	unsigned char *msg;
	int			n;
	EVP_PKEY   *pkey;
	EVP_MD_CTX *ctx;
	bool		good;

	if (strncmp(sig, "v1a,", 4) != 0 || strlen(sig) != 92 ||
		EVP_DecodeBlock(raw, (const unsigned char *) sig + 4, 88) != 66)
		return false;			/* 64 bytes and 2 of padding */
	msg = malloc(strlen(id) + 32 + bodylen);
	n = sprintf((char *) msg, "%s.%lld.", id, ts);
	memcpy(msg + n, body, bodylen);
	pkey = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, public_key, 32);
	ctx = EVP_MD_CTX_new();
	good = EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, pkey) == 1 &&
		EVP_DigestVerify(ctx, raw, 64, msg, n + bodylen) == 1;
	EVP_MD_CTX_free(ctx);
	EVP_PKEY_free(pkey);
	free(msg);
	return good;
}

/*
 * test_v1a: request signatures with whsk_ keys, over more keys than
 * sign.c keeps, in both key forms, with binary bodies: each equal to the
 * reference (ed25519 is deterministic) and verified with the public key;
 * a verification that cannot fail would prove nothing, so changed parts
 * must fail it.
 */
static void
test_v1a(void)
{
	unsigned char seeds[7][32];
	unsigned char pubs[7][32];
	char		keys[7][2][128];
	char		body[3000];
	char		sig[GRELOUT_SIGNATURE_MAX_LEN];
	char		ref[GRELOUT_SIGNATURE_MAX_LEN + 8];
	int			mismatches = 0;
	int			unverified = 0;
	uint32_t	seed = 2026;

	for (int k = 0; k < 7; k++)
	{
		unsigned char both[64];

		for (int i = 0; i < 32; i++)
		{
			seed = seed * 1664525 + 1013904223;
			seeds[k][i] = (unsigned char) (seed >> 24);
		}
		grelout_ed25519_public_key(seeds[k], pubs[k]);
		memcpy(both, seeds[k], 32);
		memcpy(both + 32, pubs[k], 32);
		whsk(seeds[k], 32, keys[k][0]);
		whsk(both, 64, keys[k][1]);
	}
	for (int round = 0; round < 300; round++)
	{
		int			k = (round % 4 == 0) ? (round / 4) % 7 : (round * 5 + round / 3) % 7;
		const char *text = keys[k][round % 2];
		size_t		bodylen = (size_t) (round * 37) % sizeof(body);
		long long	ts = 1700000000LL + round;
		char		id[40];

		for (size_t i = 0; i < bodylen; i++)
		{
			seed = seed * 1664525 + 1013904223;
			body[i] = (char) (seed >> 24);
		}
		snprintf(id, sizeof(id), "0190f7c2-%04x-7000-8000-%012x", round, round * 17);
		if (grelout_sign_secret(text, strlen(text), id, ts, body, bodylen, sig) != 0)
			mismatches++;
		reference_v1a(seeds[k], id, ts, body, bodylen, ref);
		if (strcmp(sig, ref) != 0)
			mismatches++;
		if (!verify_v1a(pubs[k], sig, id, ts, body, bodylen))
			unverified++;
		/* again at once: the kept key */
		if (grelout_sign_secret(text, strlen(text), id, ts, body, bodylen, sig) != 0 ||
			strcmp(sig, ref) != 0)
			mismatches++;
	}
	is_int(mismatches, 0, "600 v1a signatures over 7 keys in turn, both key forms, binary bodies, equal OpenSSL's one-shot signing");
	is_int(unverified, 0, "... and each verifies with the public key alone");

	{
		const char *id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
		const char *b = "{\"test\": 2432232314}";

		is_int(grelout_sign_secret(keys[0][0], strlen(keys[0][0]), id, 1614265330, b, strlen(b), sig), 0,
			   "a whsk_ key signs");
		ok(strncmp(sig, "v1a,", 4) == 0, "... a v1a signature");
		is_int((long long) strlen(sig), GRELOUT_SIGNATURE_V1A_LEN - 1, "... of the documented length");
		ok(verify_v1a(pubs[0], sig, id, 1614265330, b, strlen(b)), "... that verifies");
		ok(!verify_v1a(pubs[0], sig, id, 1614265331, b, strlen(b)), "... not with another timestamp");
		ok(!verify_v1a(pubs[0], sig, "msg_p5jXN8AQM9LWM0D4loKWxJel", 1614265330, b, strlen(b)),
		   "... not with another id");
		ok(!verify_v1a(pubs[0], sig, id, 1614265330, b, strlen(b) - 1), "... not with another body");
		ok(!verify_v1a(pubs[1], sig, id, 1614265330, b, strlen(b)), "... not with another public key");
		is_int(grelout_sign_ed25519(seeds[0], id, 1614265330, b, strlen(b), ref), 0,
			   "grelout_sign_ed25519 signs from the seed");
		is_str(ref, sig, "... the same signature");
		is_int(grelout_sign_secret(keys[0][0], strlen(keys[0][0]), id, 1614265330, "", 0, sig), 0,
			   "an empty body signs");
		ok(verify_v1a(pubs[0], sig, id, 1614265330, "", 0), "... and verifies");
	}
	{
		char		longid[200];

		memset(longid, 'i', sizeof(longid) - 1);
		longid[sizeof(longid) - 1] = '\0';
		is_int(grelout_sign_secret(keys[0][0], strlen(keys[0][0]), longid, 1, "{}", 2, sig), -1,
			   "an id too long for the signing prefix is refused, not truncated");
	}
	{
		unsigned char both[64];
		char		bad[128];

		memcpy(both, seeds[0], 32);
		memcpy(both + 32, pubs[1], 32);
		whsk(both, 64, bad);
		is_int(grelout_sign_secret(bad, strlen(bad), "id", 1, "{}", 2, sig), 1,
			   "a 64-byte key whose public half is another's signs nothing");
		is_int(grelout_sign_secret("whsk_AAAA", 9, "id", 1, "{}", 2, sig), 1,
			   "a malformed whsk_ key signs nothing");
		is_int(grelout_sign_secret("nope", 4, "id", 1, "{}", 2, sig), 1,
			   "a text of neither kind signs nothing");
	}
}

/*
 * test_rotation: the header value for a secret and a previous secret of
 * either kind, in that order, space-separated; each part as the single
 * signature of its own key.
 */
static void
test_rotation(void)
{
	const char *hmac_a = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
	const char *hmac_b = "whsec_QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFB";
	char		ed_a[128];
	char		ed_b[128];
	unsigned char seed_a[32];
	unsigned char seed_b[32];
	const char *id = "msg_rotation";
	const char *b = "{\"r\": 1}";
	char		value[2 * GRELOUT_SIGNATURE_MAX_LEN];
	char		one[GRELOUT_SIGNATURE_MAX_LEN];
	char		two[GRELOUT_SIGNATURE_MAX_LEN];
	char		want[2 * GRELOUT_SIGNATURE_MAX_LEN];
	const char *pairs[][2] = {
		{NULL, NULL}, {NULL, NULL}, {NULL, NULL}, {NULL, NULL}, {NULL, NULL}, {NULL, NULL},
	};
	const char *names[] = {
		"whsk_ current, whsk_ previous", "whsk_ current, whsec_ previous",
		"whsec_ current, whsk_ previous", "whsec_ current, whsec_ previous",
		"whsk_ alone", "whsec_ alone",
	};

	memset(seed_a, 0x11, 32);
	memset(seed_b, 0x22, 32);
	whsk(seed_a, 32, ed_a);
	whsk(seed_b, 32, ed_b);
	pairs[0][0] = ed_a;
	pairs[0][1] = ed_b;
	pairs[1][0] = ed_a;
	pairs[1][1] = hmac_a;
	pairs[2][0] = hmac_a;
	pairs[2][1] = ed_b;
	pairs[3][0] = hmac_a;
	pairs[3][1] = hmac_b;
	pairs[4][0] = ed_a;
	pairs[5][0] = hmac_b;

	for (int i = 0; i < 6; i++)
	{
		int			len = grelout_signature_value(pairs[i][0], pairs[i][1], id, 1700000000,
												  b, strlen(b), value);

		grelout_sign_secret(pairs[i][0], strlen(pairs[i][0]), id, 1700000000, b, strlen(b), one);
		strcpy(want, one);
		if (pairs[i][1])
		{
			grelout_sign_secret(pairs[i][1], strlen(pairs[i][1]), id, 1700000000, b, strlen(b), two);
			strcat(want, " ");
			strcat(want, two);
		}
		is_str(value, want, names[i]);
		is_int(len, (long long) strlen(want), "... its length returned");
	}
	ok(strncmp(value, "v1,", 3) == 0, "a whsec_ secret signs v1");
	grelout_signature_value(ed_a, hmac_a, id, 1700000000, b, strlen(b), value);
	ok(strncmp(value, "v1a,", 4) == 0 && strstr(value, " v1,") != NULL,
	   "current v1a first, then the previous v1");

	is_int(grelout_signature_value(NULL, NULL, id, 1, b, strlen(b), value), 0, "no secret: no signature");
	is_str(value, "", "... an empty value");
	grelout_sign_secret(ed_a, strlen(ed_a), id, 1, b, strlen(b), one);
	is_int(grelout_signature_value(ed_a, "whsk_broken", id, 1, b, strlen(b), value), (long long) strlen(one),
		   "a malformed previous key is skipped");
	is_str(value, one, "... leaving the current signature alone, no trailing space");
	is_int(grelout_signature_value("whsk_broken", ed_a, id, 1, b, strlen(b), value), (long long) strlen(one),
		   "a malformed current key is skipped");
	is_str(value, one, "... leaving the previous signature alone, no leading space");
	is_int(grelout_signature_value(NULL, ed_a, id, 1, b, strlen(b), value), (long long) strlen(one),
		   "a previous key alone signs");
}

/*
 * test_v1a_openssl: v1a signatures of many messages (ids, timestamps and
 * bodies of 0 to 5,000 bytes, over four keys so that kept keys are pushed
 * out and made again) each verify with OpenSSL's ed25519, an implementation
 * that shares no code with libsodium's, which signs; and a changed byte of
 * the content fails that verification.
 */
static void
test_v1a_openssl(void)
{
	static char body[5001];
	int			verified = 0;
	int			tampered_refused = 0;
	int			total = 0;

	for (size_t i = 0; i < sizeof(body); i++)
		body[i] = (char) ('a' + (i * 7) % 26);
	for (int n = 0; n < 60; n++)
	{
		unsigned char seed[32];
		unsigned char pub[32];
		size_t		publen = sizeof(pub);
		size_t		bodylen = (size_t) (n * 83) % sizeof(body);
		char		id[64];
		char		out[GRELOUT_SIGNATURE_V1A_LEN];
		unsigned char sig[64];
		char		content[6000];
		int			clen;
		EVP_PKEY   *pkey;
		EVP_MD_CTX *ctx;

		for (int b = 0; b < 32; b++)
			seed[b] = (unsigned char) (n % 4 * 31 + b);
		snprintf(id, sizeof(id), "msg_%d", n);
		if (grelout_sign_ed25519(seed, id, 1700000000 + n, body, bodylen, out) != 0 ||
			strncmp(out, "v1a,", 4) != 0 ||
			EVP_DecodeBlock(sig, (const unsigned char *) out + 4, 88) != 66)
			continue;
		clen = snprintf(content, sizeof(content), "%s.%d.", id, 1700000000 + n);
		memcpy(content + clen, body, bodylen);
		pkey = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, 32);
		EVP_PKEY_get_raw_public_key(pkey, pub, &publen);
		EVP_PKEY_free(pkey);
		pkey = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, 32);
		total++;
		ctx = EVP_MD_CTX_new();
		if (EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, pkey) == 1 &&
			EVP_DigestVerify(ctx, sig, 64, (unsigned char *) content,
							 (size_t) clen + bodylen) == 1)
			verified++;
		EVP_MD_CTX_free(ctx);
		content[clen - 2] ^= 1;	/* a digit of the timestamp */
		ctx = EVP_MD_CTX_new();
		if (EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, pkey) == 1 &&
			EVP_DigestVerify(ctx, sig, 64, (unsigned char *) content,
							 (size_t) clen + bodylen) != 1)
			tampered_refused++;
		EVP_MD_CTX_free(ctx);
		EVP_PKEY_free(pkey);
	}
	is_int(total, 60, "60 v1a signatures made, of 4 keys taking turns");
	is_int(verified, 60, "... each verifies with OpenSSL's ed25519");
	is_int(tampered_refused, 60, "... and none verifies once the content changed");
}

int
main(void)
{
	test_vector();
	test_reference();
	test_kept_keys();
	test_rfc8032();
	test_key_parsing();
	test_v1a();
	test_v1a_openssl();
	test_rotation();
	return done_testing();
}
