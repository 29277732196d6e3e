/*-------------------------------------------------------------------------
 *
 * secret.c
 *	  libFuzzer target: base64 (edge_base64_decode, edge_base64_encode),
 *	  Standard Webhooks secrets (edge_secret_decode) and signing
 *	  (grelout_sign) with whatever key a secret decodes to; asymmetric
 *	  signing keys (edge_signing_key_decode, grelout_signing_key_check)
 *	  and v1a signing (grelout_sign_secret) with whatever key a whsk_ text
 *	  decodes to.
 *
 * Invariants: decoding never writes past its room; whatever decodes
 * encodes back to the same text (with padding restored), so no two texts
 * give one key; encoding any bytes decodes back to them; an accepted
 * secret starts with "whsec_" and gives 24 to 64 bytes, the same bytes as
 * decoding its base64 part; its signature of the input equals OpenSSL's
 * HMAC-SHA256 of "id.timestamp.body".  An accepted signing key starts with
 * "whsk_" and its base64 part decodes to 32 bytes (the seed) or 64 (seed
 * and public key); the 64-byte form is accepted exactly when its public
 * half is the seed's (derived here by OpenSSL directly); an accepted key
 * signs the input with a "v1a," signature that OpenSSL verifies with the
 * public key alone, and a refused one signs nothing.
 *
 *-------------------------------------------------------------------------
 */
#include <stdbool.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "edge.h"
#include "fuzz.h"
#include "sign.h"

/* check_round_trip: text decodes to bytes that encode back to the text. */
static void
check_round_trip(const char *text, size_t len)
{
	size_t		cap = len;	/* more than enough: 3 bytes per 4 chars */
	unsigned char *dec = malloc(cap ? cap : 1);
	long		n = edge_base64_decode(text, len, dec, cap);

	if (n >= 0)
	{
		char	   *enc = malloc(4 * ((size_t) n + 2) / 3 + 8);
		size_t		elen = edge_base64_encode(dec, (size_t) n, enc);
		size_t		body = len;

		CHECK((size_t) n <= cap);
		/* the text without its padding equals the encoding without its padding */
		while (body > 0 && text[body - 1] == '=')
			body--;
		while (elen > 0 && enc[elen - 1] == '=')
			elen--;
		CHECK(body == elen);
		CHECK(memcmp(text, enc, elen) == 0);
		/* exact room suffices; one byte less does not */
		if (n > 0)
		{
			unsigned char *tight = malloc((size_t) n);

			CHECK(edge_base64_decode(text, len, tight, (size_t) n) == n);
			CHECK(memcmp(tight, dec, (size_t) n) == 0);
			CHECK(edge_base64_decode(text, len, tight, (size_t) n - 1) == -1);
			free(tight);
		}
		free(enc);
	}
	free(dec);
}

/* check_encode: the input's bytes encode and decode back. */
static void
check_encode(const uint8_t *data, size_t size)
{
	char	   *enc = malloc(4 * ((size + 2) / 3) + 1);
	unsigned char *dec = malloc(size ? size : 1);
	size_t		elen = edge_base64_encode(data, size, enc);

	CHECK(elen == 4 * ((size + 2) / 3));
	CHECK(enc[elen] == '\0');
	CHECK(edge_base64_decode(enc, elen, dec, size) == (long) size);
	CHECK(size == 0 || memcmp(dec, data, size) == 0);
	free(enc);
	free(dec);
}

/* check_secret: secret decoding and signing with its key. */
static void
check_secret(const char *text, size_t len)
{
	unsigned char key[GRELOUT_SECRET_MAX_BYTES];
	size_t		keylen = 0;
	EdgeSecretError err = edge_secret_decode(text, len, key, &keylen);

	if (len < 6 || memcmp(text, "whsec_", 6) != 0)
	{
		CHECK(err == EDGE_SECRET_NO_PREFIX);
		return;
	}
	CHECK(err != EDGE_SECRET_NO_PREFIX);
	if (err == EDGE_SECRET_OK)
	{
		unsigned char again[GRELOUT_SECRET_MAX_BYTES];
		char		sig[GRELOUT_SIGNATURE_LEN];
		char		ref[GRELOUT_SIGNATURE_LEN + 8];
		const char *id = "msg_fuzz";
		const char *body = text + 6;
		size_t		blen = len - 6;
		unsigned char *msg = malloc(32 + blen);
		int			mlen = sprintf((char *) msg, "%s.%d.", id, 1614265330);
		unsigned char mac[EVP_MAX_MD_SIZE];
		unsigned int maclen;

		CHECK(keylen >= GRELOUT_SECRET_MIN_BYTES && keylen <= GRELOUT_SECRET_MAX_BYTES);
		CHECK(edge_base64_decode(text + 6, len - 6, again, sizeof(again)) == (long) keylen);
		CHECK(memcmp(again, key, keylen) == 0);

		/* sign the base64 part as a body, against OpenSSL's HMAC() */
		CHECK(grelout_sign(key, keylen, id, 1614265330, body, blen, sig) == 0);
		memcpy(msg + mlen, body, blen);
		HMAC(EVP_sha256(), key, (int) keylen, msg, mlen + blen, mac, &maclen);
		strcpy(ref, "v1,");
		EVP_EncodeBlock((unsigned char *) ref + 3, mac, (int) maclen);
		CHECK(strcmp(sig, ref) == 0);
		free(msg);
	}
	else if (err == EDGE_SECRET_BAD_LENGTH)
	{
		/* valid base64 of the wrong size */
		unsigned char *big = malloc(len);
		long		n = edge_base64_decode(text + 6, len - 6, big, len);

		CHECK(n >= 0);
		CHECK(n < GRELOUT_SECRET_MIN_BYTES || n > GRELOUT_SECRET_MAX_BYTES);
		free(big);
	}
	else
	{
		unsigned char *big = malloc(len);

		CHECK(err == EDGE_SECRET_BAD_BASE64);
		/* refused as base64: it must not decode at any size we allow */
		CHECK(edge_base64_decode(text + 6, len - 6, big, GRELOUT_SECRET_MAX_BYTES) < 0);
		free(big);
	}
}

/* public_of: the public key of a seed, by OpenSSL alone. */
static void
public_of(const unsigned char *seed, unsigned char *pub)
{
	EVP_PKEY   *pkey = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, 32);
	size_t		len = 32;

	CHECK(pkey != NULL);
	CHECK(EVP_PKEY_get_raw_public_key(pkey, pub, &len) == 1 && len == 32);
	EVP_PKEY_free(pkey);
}

/* verifies: does "v1a,<base64>" verify for msg with the public key? */
static int
verifies(const unsigned char *pub, const char *sig, const unsigned char *msg, size_t len)
{
	unsigned char raw[100];
	EVP_PKEY   *pkey;
	EVP_MD_CTX *ctx;
	int			good;

	if (strlen(sig) != 92 || memcmp(sig, "v1a,", 4) != 0 ||
		EVP_DecodeBlock(raw, (const unsigned char *) sig + 4, 88) != 66)
		return 0;
	pkey = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, 32);
	ctx = EVP_MD_CTX_new();
	good = EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, pkey) == 1 &&
		EVP_DigestVerify(ctx, raw, 64, msg, len) == 1;
	EVP_MD_CTX_free(ctx);
	EVP_PKEY_free(pkey);
	return good;
}

/* check_signing_key: signing key decoding, checking and v1a signing. */
static void
check_signing_key(const char *text, size_t len)
{
	unsigned char seed[GRELOUT_ED25519_SEED_BYTES];
	unsigned char given[GRELOUT_ED25519_PUBLIC_BYTES];
	unsigned char pub[GRELOUT_ED25519_PUBLIC_BYTES];
	bool		has_public = false;
	char		sig[GRELOUT_SIGNATURE_MAX_LEN];
	EdgeSecretError err = edge_signing_key_decode(text, len, seed, given, &has_public);
	EdgeSecretError checked = grelout_signing_key_check(text, len, pub);
	int			signed_ = grelout_sign_secret(text, len, "msg_fuzz", 1614265330,
											  text, len, sig);

	if (len < 5 || memcmp(text, "whsk_", 5) != 0)
	{
		CHECK(err == EDGE_SECRET_NO_PREFIX && checked == EDGE_SECRET_NO_PREFIX);
		/* neither kind: nothing signed; a whsec_ secret signs v1 */
		if (len >= 6 && memcmp(text, "whsec_", 6) == 0 && signed_ == 0)
			CHECK(memcmp(sig, "v1,", 3) == 0);
		else
			CHECK(signed_ == 1);
		return;
	}
	CHECK(err != EDGE_SECRET_NO_PREFIX && err != EDGE_SECRET_KEY_MISMATCH);
	if (err == EDGE_SECRET_OK)
	{
		unsigned char again[64];
		long		n = edge_base64_decode(text + 5, len - 5, again, sizeof(again));
		unsigned char derived[32];
		unsigned char *msg = malloc(32 + len);
		int			mlen = sprintf((char *) msg, "%s.%d.", "msg_fuzz", 1614265330);

		CHECK(n == 32 || n == 64);
		CHECK(has_public == (n == 64));
		CHECK(memcmp(again, seed, 32) == 0);
		CHECK(!has_public || memcmp(again + 32, given, 32) == 0);
		public_of(seed, derived);
		if (has_public && memcmp(given, derived, 32) != 0)
		{
			CHECK(checked == EDGE_SECRET_KEY_MISMATCH);
			CHECK(signed_ == 1);
		}
		else
		{
			CHECK(checked == EDGE_SECRET_OK);
			CHECK(memcmp(pub, derived, 32) == 0);
			CHECK(signed_ == 0);
			memcpy(msg + mlen, text, len);
			CHECK(verifies(derived, sig, msg, mlen + len));
		}
		free(msg);
	}
	else
	{
		unsigned char *big = malloc(len);
		long		n = edge_base64_decode(text + 5, len - 5, big, len);

		CHECK(checked == err);
		CHECK(signed_ == 1);
		if (err == EDGE_SECRET_BAD_LENGTH)
			CHECK(n >= 0 && n != 32 && n != 64);
		else
			CHECK(err == EDGE_SECRET_BAD_BASE64 && n < 0);
		free(big);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *text = dup_exact(data, size);

	check_round_trip(text, size);
	check_encode(data, size);
	check_secret(text, size);
	check_signing_key(text, size);
	if (size < 4096)
	{
		/* the same bytes as a secret's base64 part, and a signing key's */
		char	   *s = malloc(size + 6);

		memcpy(s, "whsec_", 6);
		memcpy(s + 6, data, size);
		check_secret(s, size + 6);
		memcpy(s + 1, "whsk_", 5);
		check_signing_key(s + 1, size + 5);
		free(s);
	}
	free(text);
	return 0;
}
