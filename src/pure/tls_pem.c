/*-------------------------------------------------------------------------
 *
 * tls_pem.c
 *	  Checks of the PEM a handler carries for its HTTPS endpoint, made
 *	  when its row is written (validate.c) so that a handler that cannot
 *	  work is refused at once rather than failing each delivery:
 *
 *	- tls_client_cert and tls_client_key (mutual TLS): the certificate,
 *	  followed by its chain if any, and an unencrypted private key (the
 *	  relay has no passphrase to give) that is the certificate's; the
 *	  certificate valid now.
 *	- tls_ca: one or more certificates and nothing else.
 *
 * libcurl reads the same PEM again for each new connection
 * (CURLOPT_SSLCERT_BLOB, CURLOPT_SSLKEY_BLOB, CURLOPT_CAINFO_BLOB; http.c)
 * with the same OpenSSL.  Plain C with OpenSSL, no PostgreSQL: the unit
 * tests (test/unit/test_tls_pem.c) build it alone.  No result or error
 * text quotes the PEM: a key is a secret.
 *
 *-------------------------------------------------------------------------
 */
/* memmem, timegm */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "tls_pem.h"

#include <string.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

/*
 * only_whitespace_left: nothing but whitespace is left to read in bio
 * (what follows the last PEM block a reader took).
 */
static int
only_whitespace_left(BIO *bio)
{
	char		buf[256];
	int			n;

	while ((n = BIO_read(bio, buf, sizeof(buf))) > 0)
	{
		for (int i = 0; i < n; i++)
			if (buf[i] != ' ' && buf[i] != '\t' && buf[i] != '\r' && buf[i] != '\n')
				return 0;
	}
	return 1;
}

/*
 * read_certificates: the PEM certificates of pem, all of them; *count is
 * how many.  TLS_PEM_NOT_ONLY_CERTIFICATES when anything but whitespace
 * stands between, before or after them.  *first, when not NULL, gets the
 * first certificate (the caller frees it).
 */
static TlsPemError
read_certificates(const char *pem, size_t len, int *count, X509 **first)
{
	BIO		   *bio;
	X509	   *cert;
	TlsPemError result = TLS_PEM_OK;

	*count = 0;
	if (first)
		*first = NULL;
	if (len > TLS_PEM_MAX_LEN)
		return TLS_PEM_TOO_LONG;
	bio = BIO_new_mem_buf(pem, (int) len);
	if (bio == NULL)
		return TLS_PEM_NO_CERTIFICATE;
	for (;;)
	{
		unsigned long e;

		cert = PEM_read_bio_X509(bio, NULL, NULL, NULL);
		if (cert == NULL)
		{
			/* the end of the input is the only good reason to stop */
			e = ERR_peek_last_error();
			if (ERR_GET_REASON(e) != PEM_R_NO_START_LINE)
				result = *count ? TLS_PEM_NOT_ONLY_CERTIFICATES : TLS_PEM_NO_CERTIFICATE;
			break;
		}
		if (first && *first == NULL)
			*first = cert;
		else
			X509_free(cert);
		(*count)++;
	}
	ERR_clear_error();
	BIO_free(bio);
	if (result == TLS_PEM_OK && *count == 0)
		result = TLS_PEM_NO_CERTIFICATE;
	/*
	 * PEM_read_bio_X509 skips text outside its blocks, but a private key
	 * or a request among the certificates is no certificate: count the
	 * blocks by their lines and compare.
	 */
	if (result == TLS_PEM_OK)
	{
		int			blocks = 0;
		const char *p = pem;
		const char *end = pem + len;
		static const char begin[] = "-----BEGIN ";

		while (p < end)
		{
			const char *hit = memmem(p, end - p, begin, sizeof(begin) - 1);

			if (hit == NULL)
				break;
			blocks++;
			p = hit + sizeof(begin) - 1;
		}
		if (blocks != *count)
			result = TLS_PEM_NOT_ONLY_CERTIFICATES;
	}
	if (result != TLS_PEM_OK && first && *first)
	{
		X509_free(*first);
		*first = NULL;
	}
	return result;
}

/*
 * tls_pem_check_client: cert (the client certificate, then its chain if
 * any) and key (one unencrypted private key) as mutual TLS needs them:
 * the key is the certificate's, and the certificate valid at now.
 * *not_after, when not NULL, gets the end of the certificate's validity
 * (on TLS_PEM_OK and TLS_PEM_EXPIRED).
 */
TlsPemError
tls_pem_check_client(const char *cert, size_t cert_len,
					 const char *key, size_t key_len,
					 time_t now, time_t *not_after)
{
	X509	   *x = NULL;
	EVP_PKEY   *pkey = NULL;
	BIO		   *bio = NULL;
	int			count;
	TlsPemError result;

	result = read_certificates(cert, cert_len, &count, &x);
	if (result != TLS_PEM_OK)
		return result;
	if (key_len > TLS_PEM_MAX_LEN)
	{
		result = TLS_PEM_TOO_LONG;
		goto done;
	}

	/* an encrypted key asks for a passphrase: give none ("" refuses) */
	bio = BIO_new_mem_buf(key, (int) key_len);
	if (bio != NULL)
		pkey = PEM_read_bio_PrivateKey(bio, NULL, NULL, (void *) "");
	if (pkey == NULL)
	{
		result = TLS_PEM_NO_KEY;
		goto done;
	}
	if (!only_whitespace_left(bio))
	{
		result = TLS_PEM_MORE_THAN_A_KEY;
		goto done;
	}
	if (X509_check_private_key(x, pkey) != 1)
	{
		result = TLS_PEM_KEY_MISMATCH;
		goto done;
	}

	if (not_after)
	{
		struct tm	tm;

		*not_after = 0;
		if (ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) == 1)
			*not_after = timegm(&tm);
	}
	if (X509_cmp_time(X509_get0_notAfter(x), &now) <= 0)
		result = TLS_PEM_EXPIRED;
	else if (X509_cmp_time(X509_get0_notBefore(x), &now) >= 0)
		result = TLS_PEM_NOT_YET_VALID;

done:
	ERR_clear_error();
	EVP_PKEY_free(pkey);
	BIO_free(bio);
	X509_free(x);
	return result;
}

/*
 * tls_pem_check_ca: pem is a CA bundle: one or more certificates and
 * nothing else; *count, when not NULL, gets how many.
 */
TlsPemError
tls_pem_check_ca(const char *pem, size_t len, int *count)
{
	int			n;
	TlsPemError result = read_certificates(pem, len, &n, NULL);

	if (count)
		*count = n;
	return result;
}

/* tls_pem_error_text: what an error means, a sentence for an errdetail. */
const char *
tls_pem_error_text(TlsPemError err)
{
	switch (err)
	{
		case TLS_PEM_OK:
			return "Valid";
		case TLS_PEM_NO_CERTIFICATE:
			return "No PEM certificate (\"-----BEGIN CERTIFICATE-----\") could be read";
		case TLS_PEM_NOT_ONLY_CERTIFICATES:
			return "It holds something other than PEM certificates";
		case TLS_PEM_NO_KEY:
			return "No unencrypted PEM private key could be read (an encrypted key is refused: the relay has no passphrase)";
		case TLS_PEM_MORE_THAN_A_KEY:
			return "Something follows the private key";
		case TLS_PEM_KEY_MISMATCH:
			return "The private key does not belong to the certificate";
		case TLS_PEM_EXPIRED:
			return "The certificate has expired";
		case TLS_PEM_NOT_YET_VALID:
			return "The certificate is not valid yet";
		case TLS_PEM_TOO_LONG:
			return "It is longer than 256 kB";
	}
	return "Unknown error";
}
