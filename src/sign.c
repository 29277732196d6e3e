/*-------------------------------------------------------------------------
 *
 * sign.c
 *	  Standard Webhooks 1.0 signing: the signature of a request is
 *	  "v1," followed by the base64 of HMAC-SHA256(key, "id.timestamp.body"),
 *	  computed over the exact bytes that are sent.
 *
 * Uses OpenSSL and the C library only, so unit tests link it alone.
 *
 *-------------------------------------------------------------------------
 */
#include "sign.h"

#include <stdio.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "edge.h"

/*
 * grelout_sign: write "v1,<base64>" for the message into out, which holds
 * GRELOUT_SIGNATURE_LEN bytes.  Returns 0, or -1 if OpenSSL fails.
 */
int
grelout_sign(const unsigned char *key, size_t keylen,
			 const char *msg_id, int64_t timestamp,
			 const char *body, size_t bodylen, char *out)
{
	static EVP_MAC *hmac = NULL;
	EVP_MAC_CTX *ctx;
	OSSL_PARAM	params[2];
	char		prefix[128];
	int			plen;
	unsigned char mac[EVP_MAX_MD_SIZE];
	size_t		maclen = 0;
	int			ok;

	plen = snprintf(prefix, sizeof(prefix), "%s.%lld.", msg_id,
					(long long) timestamp);
	if (plen < 0 || plen >= (int) sizeof(prefix))
		return -1;

	/* the algorithm is fetched once a process */
	if (hmac == NULL)
		hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	if (hmac == NULL)
		return -1;
	ctx = EVP_MAC_CTX_new(hmac);
	if (ctx == NULL)
		return -1;
	params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
												 (char *) "SHA256", 0);
	params[1] = OSSL_PARAM_construct_end();
	ok = EVP_MAC_init(ctx, key, keylen, params) &&
		EVP_MAC_update(ctx, (const unsigned char *) prefix, (size_t) plen) &&
		EVP_MAC_update(ctx, (const unsigned char *) body, bodylen) &&
		EVP_MAC_final(ctx, mac, &maclen, sizeof(mac));
	EVP_MAC_CTX_free(ctx);
	if (!ok || maclen != 32)
		return -1;

	memcpy(out, "v1,", 3);
	edge_base64_encode(mac, maclen, out + 3);
	return 0;
}
