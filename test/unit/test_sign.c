/*-------------------------------------------------------------------------
 *
 * test_sign.c
 *	  Unit tests of src/pure/sign.c, Standard Webhooks 1.0 signatures: the
 *	  specification's published test vector, and agreement with an
 *	  independent computation (OpenSSL's one-shot HMAC and base64) over
 *	  the exact bytes of "id.timestamp.body", also while sign.c reuses
 *	  the contexts of keys it kept.  Prints TAP.
 *
 *-------------------------------------------------------------------------
 */
#include <stdint.h>
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

int
main(void)
{
	test_vector();
	test_reference();
	test_kept_keys();
	return done_testing();
}
