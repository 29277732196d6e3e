/*-------------------------------------------------------------------------
 *
 * sign.c
 *	  Standard Webhooks 1.0 signing.  With a symmetric secret (whsec_) the
 *	  signature of a request is "v1," followed by the base64 of
 *	  HMAC-SHA256(key, "id.timestamp.body"); with an asymmetric signing
 *	  key (whsk_, an ed25519 private key) it is "v1a," followed by the
 *	  base64 of the 64-byte ed25519 signature of the same content.  Both
 *	  are computed over the exact bytes that are sent.
 *
 * A relay signs every request of a handler with the same key (two during a
 * rotation), so the keyed HMAC contexts of the last few secrets, and the
 * expanded ed25519 keys (seed and public key) of the last few signing keys,
 * are kept and reused: a message whose key is among them costs no key
 * setup, only the hashing (HMAC) or the signing itself (ed25519; pure
 * ed25519 hashes the whole content twice, so it is signed in one call over
 * one buffer).  Those keep the keys for as long as the process lives or
 * until newer keys push them out.
 *
 * ed25519 is computed by libsodium, not OpenSSL: both implement RFC 8032
 * (the signature of a key and message is the same bytes, checked against
 * the RFC's vectors in the unit tests), and libsodium's signing takes less
 * than half the time of OpenSSL 3.0's, which is most of a v1a delivery's
 * cost in the relay.  HMAC stays with OpenSSL.
 *
 * Also here, for the SQL functions and the validation trigger: the check
 * of a whsk_ key (its public half, when given, must be the seed's) and the
 * derivation of its public key, whpk_.
 *
 * Uses OpenSSL, libsodium and the C library only, so unit tests link it
 * alone.
 *
 *-------------------------------------------------------------------------
 */
#include "sign.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <sodium.h>

#include "edge.h"

/* How many keyed contexts are kept, and the longest key kept. */
#define SIGN_KEYS		4
#define SIGN_KEY_MAX	GRELOUT_SECRET_MAX_BYTES

/* One HMAC-SHA256 context and the key it was last set up with. */
typedef struct SignKey
{
	EVP_MAC_CTX *ctx;			/* NULL until first used */
	bool		valid;			/* ctx is keyed with key[0..keylen) */
	size_t		keylen;
	unsigned char key[SIGN_KEY_MAX];
	uint64_t	used;			/* sign_clock at its last use */
} SignKey;

static SignKey sign_keys[SIGN_KEYS];
static uint64_t sign_clock;

/*
 * One ed25519 key ready to sign with: made from seed, its public key
 * derived once, both in libsodium's secret-key form (seed, then public key).
 */
typedef struct EdKey
{
	bool		valid;			/* false while the slot is empty */
	unsigned char seed[GRELOUT_ED25519_SEED_BYTES];
	unsigned char secret_key[crypto_sign_SECRETKEYBYTES];
	unsigned char public_key[GRELOUT_ED25519_PUBLIC_BYTES];
	uint64_t	used;			/* sign_clock at its last use */
} EdKey;

_Static_assert(GRELOUT_ED25519_SEED_BYTES == crypto_sign_SEEDBYTES,
			   "an ed25519 seed is libsodium's seed");
_Static_assert(GRELOUT_ED25519_PUBLIC_BYTES == crypto_sign_PUBLICKEYBYTES,
			   "an ed25519 public key is libsodium's");
_Static_assert(GRELOUT_ED25519_SIGNATURE_BYTES == crypto_sign_BYTES,
			   "an ed25519 signature is libsodium's");

static EdKey ed_keys[SIGN_KEYS];

/*
 * keyed_context: a context set up for this key, ready for its updates:
 * a kept one when the key is among the last few, otherwise the least
 * recently used one, keyed anew.  NULL if OpenSSL fails.
 */
static SignKey *
keyed_context(const unsigned char *key, size_t keylen)
{
	static EVP_MAC *hmac = NULL;
	SignKey    *slot = &sign_keys[0];
	OSSL_PARAM	params[2];

	sign_clock++;
	for (int i = 0; i < SIGN_KEYS; i++)
	{
		SignKey    *k = &sign_keys[i];

		if (k->valid && k->keylen == keylen &&
			CRYPTO_memcmp(k->key, key, keylen) == 0)
		{
			k->used = sign_clock;
			/* a NULL key starts a new HMAC with the key already set */
			if (EVP_MAC_init(k->ctx, NULL, 0, NULL))
				return k;
			k->valid = false;
			return NULL;
		}
		if (k->used < slot->used)
			slot = k;
	}

	/* the algorithm is fetched once a process, a context once a slot */
	if (hmac == NULL)
		hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	if (hmac == NULL)
		return NULL;
	slot->valid = false;
	if (slot->ctx == NULL)
	{
		slot->ctx = EVP_MAC_CTX_new(hmac);
		if (slot->ctx == NULL)
			return NULL;
		params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
													 (char *) "SHA256", 0);
		params[1] = OSSL_PARAM_construct_end();
		if (!EVP_MAC_CTX_set_params(slot->ctx, params))
		{
			EVP_MAC_CTX_free(slot->ctx);
			slot->ctx = NULL;
			return NULL;
		}
	}
	if (!EVP_MAC_init(slot->ctx, key, keylen, NULL))
		return NULL;
	slot->used = sign_clock;
	if (keylen <= SIGN_KEY_MAX)
	{
		memcpy(slot->key, key, keylen);
		slot->keylen = keylen;
		slot->valid = true;
	}
	return slot;
}

/*
 * grelout_sign: write "v1,<base64>" for the message into out, which holds
 * GRELOUT_SIGNATURE_LEN bytes.  Returns 0, or -1 if OpenSSL fails.
 */
int
grelout_sign(const unsigned char *key, size_t keylen,
			 const char *msg_id, int64_t timestamp,
			 const char *body, size_t bodylen, char *out)
{
	SignKey    *k;
	char		prefix[128];
	int			plen;
	unsigned char mac[EVP_MAX_MD_SIZE];
	size_t		maclen = 0;
	int			ok;

	plen = snprintf(prefix, sizeof(prefix), "%s.%lld.", msg_id,
					(long long) timestamp);
	if (plen < 0 || plen >= (int) sizeof(prefix))
		return -1;

	k = keyed_context(key, keylen);
	if (k == NULL)
		return -1;
	ok = EVP_MAC_update(k->ctx, (const unsigned char *) prefix, (size_t) plen) &&
		EVP_MAC_update(k->ctx, (const unsigned char *) body, bodylen) &&
		EVP_MAC_final(k->ctx, mac, &maclen, sizeof(mac));
	if (!ok || maclen != 32)
	{
		k->valid = false;		/* set it up anew next time */
		return -1;
	}

	memcpy(out, "v1,", 3);
	edge_base64_encode(mac, maclen, out + 3);
	return 0;
}

/*
 * sodium_ready: libsodium set up for this process (once; later calls are
 * free).  false if it cannot be, which signs nothing.
 */
static bool
sodium_ready(void)
{
	static bool ready = false;

	if (!ready && sodium_init() >= 0)
		ready = true;
	return ready;
}

/* ed_key_clear: empty a slot of ed_keys, its key bytes wiped. */
static void
ed_key_clear(EdKey *k)
{
	k->valid = false;
	sodium_memzero(k->seed, sizeof(k->seed));
	sodium_memzero(k->secret_key, sizeof(k->secret_key));
}

/*
 * ed_key: the kept ed25519 key made from this seed, or the least recently
 * used slot made anew from it.  NULL if libsodium cannot be set up.
 */
static EdKey *
ed_key(const unsigned char *seed)
{
	EdKey	   *slot = &ed_keys[0];

	if (!sodium_ready())
		return NULL;
	sign_clock++;
	for (int i = 0; i < SIGN_KEYS; i++)
	{
		EdKey	   *k = &ed_keys[i];

		if (k->valid &&
			CRYPTO_memcmp(k->seed, seed, GRELOUT_ED25519_SEED_BYTES) == 0)
		{
			k->used = sign_clock;
			return k;
		}
		if (k->used < slot->used)
			slot = k;
	}

	ed_key_clear(slot);
	if (crypto_sign_seed_keypair(slot->public_key, slot->secret_key, seed) != 0)
	{
		ed_key_clear(slot);
		return NULL;
	}
	memcpy(slot->seed, seed, GRELOUT_ED25519_SEED_BYTES);
	slot->valid = true;
	slot->used = sign_clock;
	return slot;
}

/*
 * ed_sign: the ed25519 signature of msg with a kept key into signature
 * (GRELOUT_ED25519_SIGNATURE_BYTES).  Returns 0, or -1 if libsodium fails
 * (the slot is emptied, to be made anew next time).
 */
static int
ed_sign(EdKey *k, const unsigned char *msg, size_t len, unsigned char *signature)
{
	/* pure ed25519: no digest of ours, the whole message in one call */
	if (crypto_sign_detached(signature, NULL, msg, (unsigned long long) len,
							 k->secret_key) != 0)
	{
		ed_key_clear(k);
		return -1;
	}
	return 0;
}

/*
 * grelout_ed25519_sign_message: the ed25519 signature of msg (any bytes)
 * with the key of this seed, into signature (64 bytes).  Returns 0, or -1
 * if libsodium fails.  The signing of requests goes through it; exposed for
 * the unit tests' RFC 8032 vectors.
 */
int
grelout_ed25519_sign_message(const unsigned char *seed, const unsigned char *msg,
							 size_t len, unsigned char *signature)
{
	EdKey	   *k = ed_key(seed);

	if (k == NULL)
		return -1;
	return ed_sign(k, msg, len, signature);
}

/*
 * sign_content_ed25519: "v1a,<base64>" of "id.timestamp.body" with a kept
 * key into out (GRELOUT_SIGNATURE_V1A_LEN bytes).  Returns 0 or -1.
 */
static int
sign_content_ed25519(EdKey *k, const char *msg_id, int64_t timestamp,
					 const char *body, size_t bodylen, char *out)
{
	char		prefix[128];
	int			plen;
	unsigned char *msg;
	unsigned char signature[GRELOUT_ED25519_SIGNATURE_BYTES];
	int			ret;

	plen = snprintf(prefix, sizeof(prefix), "%s.%lld.", msg_id,
					(long long) timestamp);
	if (plen < 0 || plen >= (int) sizeof(prefix) ||
		bodylen > SIZE_MAX - (size_t) plen)
		return -1;
	msg = malloc((size_t) plen + bodylen);
	if (msg == NULL)
		return -1;
	memcpy(msg, prefix, (size_t) plen);
	if (bodylen > 0)
		memcpy(msg + plen, body, bodylen);
	ret = ed_sign(k, msg, (size_t) plen + bodylen, signature);
	free(msg);
	if (ret != 0)
		return -1;
	memcpy(out, "v1a,", 4);
	edge_base64_encode(signature, sizeof(signature), out + 4);
	return 0;
}

/*
 * grelout_sign_ed25519: write "v1a,<base64>" for the message, signed with
 * the ed25519 key of this seed (GRELOUT_ED25519_SEED_BYTES), into out,
 * which holds GRELOUT_SIGNATURE_V1A_LEN bytes.  Returns 0, or -1 if
 * libsodium fails or the id is too long.
 */
int
grelout_sign_ed25519(const unsigned char *seed, const char *msg_id,
					 int64_t timestamp, const char *body, size_t bodylen,
					 char *out)
{
	EdKey	   *k = ed_key(seed);

	if (k == NULL)
		return -1;
	return sign_content_ed25519(k, msg_id, timestamp, body, bodylen, out);
}

/*
 * grelout_sign_secret: sign the message with a handler's secret as stored,
 * a whsec_ secret ("v1,...") or a whsk_ signing key ("v1a,..."), into out
 * (GRELOUT_SIGNATURE_MAX_LEN bytes).  Returns 0 when signed, 1 when the
 * text is no valid secret or key (a row written around the checks: it
 * signs nothing, as a whsk_ key whose public half is not its seed's), -1
 * when OpenSSL or libsodium fails.
 */
int
grelout_sign_secret(const char *secret, size_t len, const char *msg_id,
					int64_t timestamp, const char *body, size_t bodylen,
					char *out)
{
	unsigned char key[GRELOUT_SECRET_MAX_BYTES];
	unsigned char given[GRELOUT_ED25519_PUBLIC_BYTES];
	size_t		keylen;
	bool		has_public;
	EdKey	   *k;
	int			ret;

	if (edge_secret_decode(secret, len, key, &keylen) == EDGE_SECRET_OK)
	{
		ret = grelout_sign(key, keylen, msg_id, timestamp, body, bodylen, out);
		OPENSSL_cleanse(key, sizeof(key));
		return ret;
	}
	if (edge_signing_key_decode(secret, len, key, given, &has_public) != EDGE_SECRET_OK)
	{
		/* a whsec_ secret of a wrong length was decoded into key all the same */
		OPENSSL_cleanse(key, sizeof(key));
		return 1;
	}
	k = ed_key(key);
	OPENSSL_cleanse(key, sizeof(key));
	if (k == NULL)
		return -1;
	if (has_public &&
		CRYPTO_memcmp(given, k->public_key, GRELOUT_ED25519_PUBLIC_BYTES) != 0)
		return 1;
	return sign_content_ed25519(k, msg_id, timestamp, body, bodylen, out);
}

/*
 * grelout_ed25519_public_key: the public key (32 bytes) of the ed25519 key
 * of this seed, into public_key.  Returns 0, or -1 if libsodium cannot be
 * set up.  Made here, not kept: it serves the checks of backends, which
 * sign nothing.
 */
int
grelout_ed25519_public_key(const unsigned char *seed, unsigned char *public_key)
{
	unsigned char secret_key[crypto_sign_SECRETKEYBYTES];
	int			ret;

	if (!sodium_ready())
		return -1;
	ret = crypto_sign_seed_keypair(public_key, secret_key, seed);
	sodium_memzero(secret_key, sizeof(secret_key));
	return ret == 0 ? 0 : -1;
}

/*
 * grelout_signing_key_check: a whsk_ signing key, decoded
 * (edge_signing_key_decode) and, in its 64-byte form, its public half
 * checked against the seed's.  With EDGE_SECRET_OK the public key goes to
 * public_key (32 bytes) unless that is NULL.  EDGE_SECRET_KEY_MISMATCH
 * also when libsodium cannot be set up: refused either
 * way.
 */
EdgeSecretError
grelout_signing_key_check(const char *key, size_t len, unsigned char *public_key)
{
	unsigned char seed[GRELOUT_ED25519_SEED_BYTES];
	unsigned char given[GRELOUT_ED25519_PUBLIC_BYTES];
	unsigned char derived[GRELOUT_ED25519_PUBLIC_BYTES];
	bool		has_public;
	EdgeSecretError err;
	int			ret;

	err = edge_signing_key_decode(key, len, seed, given, &has_public);
	if (err != EDGE_SECRET_OK)
		return err;
	ret = grelout_ed25519_public_key(seed, derived);
	OPENSSL_cleanse(seed, sizeof(seed));
	if (ret != 0 ||
		(has_public &&
		 CRYPTO_memcmp(given, derived, GRELOUT_ED25519_PUBLIC_BYTES) != 0))
		return EDGE_SECRET_KEY_MISMATCH;
	if (public_key != NULL)
		memcpy(public_key, derived, GRELOUT_ED25519_PUBLIC_BYTES);
	return EDGE_SECRET_OK;
}

/*
 * grelout_public_key_text: "whpk_<base64>" of a public key (32 bytes) into
 * out (GRELOUT_PUBLIC_KEY_TEXT_LEN bytes).  Returns its length.
 */
int
grelout_public_key_text(const unsigned char *public_key, char *out)
{
	memcpy(out, "whpk_", 5);
	return 5 + (int) edge_base64_encode(public_key, GRELOUT_ED25519_PUBLIC_BYTES,
										out + 5);
}

/*
 * grelout_signature_value: the value of a request's webhook-signature
 * header for a handler's secret and previous_secret (either NULL, each a
 * whsec_ secret or a whsk_ key, in any mix): the current one's signature,
 * then, during a rotation, a space and the previous one's.  A text that is
 * no valid secret is skipped.  out holds 2 * GRELOUT_SIGNATURE_MAX_LEN
 * bytes.  Returns the length written (0: nothing to sign with), or -1 if
 * OpenSSL or libsodium fails.
 */
int
grelout_signature_value(const char *secret, const char *previous,
						const char *msg_id, int64_t timestamp,
						const char *body, size_t bodylen, char *out)
{
	const char *secrets[2] = {secret, previous};
	int			len = 0;

	out[0] = '\0';
	for (int i = 0; i < 2; i++)
	{
		int			ret;

		if (secrets[i] == NULL)
			continue;
		if (len > 0)
			out[len++] = ' ';
		ret = grelout_sign_secret(secrets[i], strlen(secrets[i]), msg_id,
								  timestamp, body, bodylen, out + len);
		if (ret < 0)
			return -1;
		if (ret > 0)
		{
			/* not a secret: no signature, nor the space before it */
			if (len > 0)
				len--;
			out[len] = '\0';
			continue;
		}
		len += (int) strlen(out + len);
	}
	return len;
}
