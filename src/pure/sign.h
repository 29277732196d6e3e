/*-------------------------------------------------------------------------
 *
 * sign.h
 *	  Standard Webhooks 1.0 request signatures.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_SIGN_H
#define GRELOUT_SIGN_H

#include <stddef.h>
#include <stdint.h>

/* "v1," + base64 of a SHA-256 HMAC + NUL */
#define GRELOUT_SIGNATURE_LEN	(3 + 44 + 1)

extern int	grelout_sign(const unsigned char *key, size_t keylen,
						 const char *msg_id, int64_t timestamp,
						 const char *body, size_t bodylen,
						 char *out);

#endif							/* GRELOUT_SIGN_H */
