/*-------------------------------------------------------------------------
 *
 * sign.h
 *	  Standard Webhooks 1.0 request signatures: "v1" (HMAC-SHA256 with a
 *	  whsec_ secret) and "v1a" (ed25519 with a whsk_ signing key).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_SIGN_H
#define GRELOUT_SIGN_H

#include <stddef.h>
#include <stdint.h>

#include "edge.h"

/* "v1," + base64 of a SHA-256 HMAC + NUL */
#define GRELOUT_SIGNATURE_LEN	(3 + 44 + 1)
/* "v1a," + base64 of a 64-byte ed25519 signature + NUL */
#define GRELOUT_SIGNATURE_V1A_LEN	(4 + 88 + 1)
/* room for either */
#define GRELOUT_SIGNATURE_MAX_LEN	GRELOUT_SIGNATURE_V1A_LEN
#define GRELOUT_ED25519_SIGNATURE_BYTES	64

/* "whpk_" + base64 of the 32-byte public key + NUL */
#define GRELOUT_PUBLIC_KEY_TEXT_LEN	(5 + 44 + 1)

extern int	grelout_sign(const unsigned char *key, size_t keylen,
						 const char *msg_id, int64_t timestamp,
						 const char *body, size_t bodylen,
						 char *out);
extern int	grelout_sign_ed25519(const unsigned char *seed,
								 const char *msg_id, int64_t timestamp,
								 const char *body, size_t bodylen,
								 char *out);
extern int	grelout_sign_secret(const char *secret, size_t len,
								const char *msg_id, int64_t timestamp,
								const char *body, size_t bodylen,
								char *out);
extern int	grelout_signature_value(const char *secret, const char *previous,
									const char *msg_id, int64_t timestamp,
									const char *body, size_t bodylen,
									char *out);

/* ed25519 keys and raw signatures (whsk_ keys, handler_public_key) */
extern int	grelout_ed25519_public_key(const unsigned char *seed,
									   unsigned char *public_key);
extern int	grelout_ed25519_sign_message(const unsigned char *seed,
										 const unsigned char *msg, size_t len,
										 unsigned char *signature);
extern EdgeSecretError grelout_signing_key_check(const char *key, size_t len,
												 unsigned char *public_key);
extern int	grelout_public_key_text(const unsigned char *public_key, char *out);

#endif							/* GRELOUT_SIGN_H */
