/*-------------------------------------------------------------------------
 *
 * secret.c
 *	  libFuzzer target: base64 (edge_base64_decode, edge_base64_encode),
 *	  Standard Webhooks secrets (edge_secret_decode) and signing
 *	  (grelout_sign) with whatever key a secret decodes to.
 *
 * Invariants: decoding never writes past its room; whatever decodes
 * encodes back to the same text (with padding restored), so no two texts
 * give one key; encoding any bytes decodes back to them; an accepted
 * secret starts with "whsec_" and gives 24 to 64 bytes, the same bytes as
 * decoding its base64 part; its signature of the input equals OpenSSL's
 * HMAC-SHA256 of "id.timestamp.body".
 *
 *-------------------------------------------------------------------------
 */
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

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *text = dup_exact(data, size);

	check_round_trip(text, size);
	check_encode(data, size);
	check_secret(text, size);
	if (size < 4096)
	{
		/* the same bytes as a secret's base64 part */
		char	   *s = malloc(size + 6);

		memcpy(s, "whsec_", 6);
		memcpy(s + 6, data, size);
		check_secret(s, size + 6);
		free(s);
	}
	free(text);
	return 0;
}
