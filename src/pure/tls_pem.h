/*-------------------------------------------------------------------------
 *
 * tls_pem.h
 *	  Checks of the PEM a handler carries for its HTTPS endpoint: a client
 *	  certificate with its key (mutual TLS) and a CA bundle of its own.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_TLS_PEM_H
#define GRELOUT_TLS_PEM_H

#include <stddef.h>
#include <time.h>

/* What is wrong with a handler's PEM, if anything. */
typedef enum TlsPemError
{
	TLS_PEM_OK = 0,
	TLS_PEM_NO_CERTIFICATE,		/* no PEM certificate could be read */
	TLS_PEM_NOT_ONLY_CERTIFICATES,	/* something other than certificates */
	TLS_PEM_NO_KEY,				/* no unencrypted PEM private key */
	TLS_PEM_MORE_THAN_A_KEY,	/* something after the key */
	TLS_PEM_KEY_MISMATCH,		/* the key is not the certificate's */
	TLS_PEM_EXPIRED,			/* the client certificate's notAfter passed */
	TLS_PEM_NOT_YET_VALID,		/* its notBefore is still to come */
	TLS_PEM_TOO_LONG			/* longer than TLS_PEM_MAX_LEN */
} TlsPemError;

/* Bytes of PEM one column may hold at most. */
#define TLS_PEM_MAX_LEN		(256 * 1024)

extern TlsPemError tls_pem_check_client(const char *cert, size_t cert_len,
										const char *key, size_t key_len,
										time_t now, time_t *not_after);
extern TlsPemError tls_pem_check_ca(const char *pem, size_t len, int *count);
extern const char *tls_pem_error_text(TlsPemError err);

#endif							/* GRELOUT_TLS_PEM_H */
