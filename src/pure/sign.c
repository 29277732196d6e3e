/*-------------------------------------------------------------------------
 *
 * sign.c
 *	  Standard Webhooks 1.0 signing: the signature of a request is
 *	  "v1," followed by the base64 of HMAC-SHA256(key, "id.timestamp.body"),
 *	  computed over the exact bytes that are sent.
 *
 * A relay signs every request of a handler with the same key (two during a
 * rotation), so the keyed HMAC contexts of the last few keys are kept and
 * reused: a message whose key is among them costs no allocation and no
 * key setup, only the hashing.  Those contexts hold the keys (OpenSSL's
 * HMAC keeps a copy, and we keep one to recognize them) for as long as
 * the process lives or until newer keys push them out.
 *
 * Uses OpenSSL and the C library only, so unit tests link it alone.
 *
 *-------------------------------------------------------------------------
 */
#include "sign.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

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
