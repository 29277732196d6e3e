/*-------------------------------------------------------------------------
 *
 * test_tls_pem.c
 *	  Unit tests of src/pure/tls_pem.c, the checks of a handler's client
 *	  certificate, key and CA bundle: certificates and keys made here with
 *	  OpenSSL (ed25519, EC and RSA; valid, expired, not yet valid), then
 *	  each refusal: a key of another certificate, an encrypted key, no
 *	  key, text after the key, a key among CA certificates, garbage, an
 *	  empty value, a chain after the client certificate.  Prints TAP.
 *
 *-------------------------------------------------------------------------
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "tap.h"
#include "tls_pem.h"

/* Every key and certificate made here, freed at the end. */
static EVP_PKEY *keys[32];
static int	nkeys = 0;
static X509 *certs[32];
static int	ncerts = 0;

/* make_key: a new key of the given kind ("ed25519", "ec", "rsa"). */
static EVP_PKEY *
make_key(const char *kind)
{
	EVP_PKEY   *k;

	if (strcmp(kind, "ec") == 0)
		k = EVP_EC_gen("P-256");
	else if (strcmp(kind, "rsa") == 0)
		k = EVP_RSA_gen(2048);
	else
		k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	if (k == NULL || nkeys == (int) (sizeof(keys) / sizeof(keys[0])))
	{
		fprintf(stderr, "could not make a key\n");
		exit(1);
	}
	keys[nkeys++] = k;
	return k;
}

/*
 * make_cert: a certificate of key, signed by signer (itself when NULL),
 * valid from now + from_s to now + to_s.
 */
static X509 *
make_cert(EVP_PKEY *key, EVP_PKEY *signer, const char *cn, long from_s, long to_s)
{
	X509	   *x = X509_new();
	X509_NAME  *name = X509_NAME_new();
	const EVP_MD *md;

	X509_set_version(x, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(x), rand() & 0x7fffffff);
	X509_gmtime_adj(X509_getm_notBefore(x), from_s);
	X509_gmtime_adj(X509_getm_notAfter(x), to_s);
	X509_set_pubkey(x, key);
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *) cn, -1, -1, 0);
	X509_set_subject_name(x, name);
	X509_set_issuer_name(x, name);
	X509_NAME_free(name);
	signer = signer ? signer : key;
	md = EVP_PKEY_get_base_id(signer) == EVP_PKEY_ED25519 ? NULL : EVP_sha256();
	if (X509_sign(x, signer, md) <= 0)
	{
		fprintf(stderr, "X509_sign failed\n");
		exit(1);
	}
	if (ncerts == (int) (sizeof(certs) / sizeof(certs[0])))
		exit(1);
	certs[ncerts++] = x;
	return x;
}

/* Every string made here, freed at the end (the sanitizer finds leaks). */
static char *made[256];
static int	nmade = 0;

/* keep: s, remembered to be freed at the end. */
static char *
keep(char *s)
{
	if (nmade == (int) (sizeof(made) / sizeof(made[0])))
	{
		fprintf(stderr, "too many strings\n");
		exit(1);
	}
	made[nmade++] = s;
	return s;
}

/* bio_text: what a memory BIO holds, as a string; the BIO is freed. */
static char *
bio_text(BIO *bio)
{
	char	   *data;
	long		n = BIO_get_mem_data(bio, &data);
	char	   *out = keep(malloc(n + 1));

	memcpy(out, data, n);
	out[n] = '\0';
	BIO_free(bio);
	return out;
}

/* pem_of_cert: a certificate's PEM. */
static char *
pem_of_cert(X509 *x)
{
	BIO		   *bio = BIO_new(BIO_s_mem());

	PEM_write_bio_X509(bio, x);
	return bio_text(bio);
}

/* pem_of_key: a key's PEM, encrypted with passphrase unless NULL. */
static char *
pem_of_key(EVP_PKEY *k, const char *passphrase)
{
	BIO		   *bio = BIO_new(BIO_s_mem());

	if (passphrase)
		PEM_write_bio_PrivateKey(bio, k, EVP_aes_128_cbc(),
								 (const unsigned char *) passphrase,
								 (int) strlen(passphrase), NULL, NULL);
	else
		PEM_write_bio_PrivateKey(bio, k, NULL, NULL, 0, NULL, NULL);
	return bio_text(bio);
}

/* cat: a + b */
static char *
cat(const char *a, const char *b)
{
	char	   *out = keep(malloc(strlen(a) + strlen(b) + 1));

	strcpy(out, a);
	strcat(out, b);
	return out;
}

/* client: tls_pem_check_client of two strings, now. */
static TlsPemError
client(const char *cert, const char *key)
{
	return tls_pem_check_client(cert, strlen(cert), key, strlen(key), time(NULL), NULL);
}

int
main(void)
{
	const char *kinds[] = {"ed25519", "ec", "rsa"};
	EVP_PKEY   *ca_key = make_key("ec");
	X509	   *ca = make_cert(ca_key, NULL, "test ca", -3600, 86400);
	char	   *ca_pem = pem_of_cert(ca);
	char	   *other_key_pem;
	char	   *good_cert = NULL;
	char	   *good_key = NULL;
	time_t		not_after = 0;

	for (int i = 0; i < 3; i++)
	{
		EVP_PKEY   *k = make_key(kinds[i]);
		X509	   *x = make_cert(k, ca_key, "client", -60, 3600);
		char	   *cert = pem_of_cert(x);
		char	   *key = pem_of_key(k, NULL);
		time_t		now = time(NULL);

		is_int(tls_pem_check_client(cert, strlen(cert), key, strlen(key), now, &not_after),
			   TLS_PEM_OK, "%s: a certificate and its key", kinds[i]);
		ok(not_after >= now + 3500 && not_after <= now + 3700,
		   "%s: the certificate's notAfter is read back", kinds[i]);
		is_int(client(cat(cert, ca_pem), key), TLS_PEM_OK,
			   "%s: a certificate followed by its chain", kinds[i]);
		is_int(client(cert, cat(key, "\n\n")), TLS_PEM_OK,
			   "%s: blank lines after the key", kinds[i]);
		is_int(client(cert, cat(key, "garbage\n")), TLS_PEM_MORE_THAN_A_KEY,
			   "%s: text after the key", kinds[i]);
		is_int(client(cert, pem_of_key(k, "passphrase")), TLS_PEM_NO_KEY,
			   "%s: an encrypted key is refused", kinds[i]);
		is_int(tls_pem_check_client(cert, strlen(cert), key, strlen(key),
									now + 7200, NULL),
			   TLS_PEM_EXPIRED, "%s: the same pair an hour after its end", kinds[i]);
		is_int(tls_pem_check_client(cert, strlen(cert), key, strlen(key),
									now - 3600, NULL),
			   TLS_PEM_NOT_YET_VALID, "%s: the same pair before its start", kinds[i]);
		if (i == 1)
		{
			good_cert = cert;
			good_key = key;
		}
	}

	other_key_pem = pem_of_key(make_key("ec"), NULL);
	is_int(client(good_cert, other_key_pem), TLS_PEM_KEY_MISMATCH,
		   "the key of another certificate");
	is_int(client(good_cert, ""), TLS_PEM_NO_KEY, "no key");
	is_int(client(good_cert, good_cert), TLS_PEM_NO_KEY, "a certificate as the key");
	is_int(client(good_key, good_key), TLS_PEM_NO_CERTIFICATE, "a key as the certificate");
	is_int(client("", good_key), TLS_PEM_NO_CERTIFICATE, "no certificate");
	is_int(client("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", good_key),
		   TLS_PEM_NO_CERTIFICATE, "a broken certificate");
	is_int(client(cat(good_cert, good_key), good_key), TLS_PEM_NOT_ONLY_CERTIFICATES,
		   "the key inside the certificate column");

	{
		EVP_PKEY   *k = make_key("ec");
		X509	   *old = make_cert(k, NULL, "old", -7200, -3600);

		is_int(client(pem_of_cert(old), pem_of_key(k, NULL)), TLS_PEM_EXPIRED,
			   "an expired certificate");
		is_int(client(pem_of_cert(make_cert(k, NULL, "future", 3600, 7200)),
					  pem_of_key(k, NULL)),
			   TLS_PEM_NOT_YET_VALID, "a certificate not valid yet");
	}

	{
		int			n = 0;

		is_int(tls_pem_check_ca(ca_pem, strlen(ca_pem), &n), TLS_PEM_OK, "a CA certificate");
		is_int(n, 1, "one certificate counted");
		is_int(tls_pem_check_ca(cat(ca_pem, good_cert), strlen(ca_pem) + strlen(good_cert), &n),
			   TLS_PEM_OK, "a bundle of two");
		is_int(n, 2, "two certificates counted");
		is_int(tls_pem_check_ca(cat(ca_pem, good_key), strlen(ca_pem) + strlen(good_key), &n),
			   TLS_PEM_NOT_ONLY_CERTIFICATES, "a key in a CA bundle");
		is_int(tls_pem_check_ca("", 0, &n), TLS_PEM_NO_CERTIFICATE, "an empty bundle");
		is_int(tls_pem_check_ca("hello", 5, &n), TLS_PEM_NO_CERTIFICATE, "text");
		is_int(tls_pem_check_ca(ca_pem, TLS_PEM_MAX_LEN + 1, &n), TLS_PEM_TOO_LONG,
			   "a bundle over the size bound");
	}
	ok(strstr(tls_pem_error_text(TLS_PEM_KEY_MISMATCH), "does not belong") != NULL,
	   "an error's text says what is wrong");
	for (int i = 0; i < nmade; i++)
		free(made[i]);
	for (int i = 0; i < nkeys; i++)
		EVP_PKEY_free(keys[i]);
	for (int i = 0; i < ncerts; i++)
		X509_free(certs[i]);
	return done_testing();
}
