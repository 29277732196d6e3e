/*-------------------------------------------------------------------------
 *
 * signing_key.c
 *	  The SQL face of asymmetric signing keys (Standard Webhooks "v1a",
 *	  ed25519): grelout.new_signing_key(), a whsk_ key made from the
 *	  server's strong random source, and grelout.handler_public_key(name),
 *	  the whpk_ public key of a handler's whsk_ secret, to give to its
 *	  receiver.  Parsing, checking and deriving keys is sign.c's (pure C);
 *	  what is here is the randomness, the handler's row and the errors.
 *
 * Neither ever shows a secret: new_signing_key returns the key it made to
 * its caller only, and handler_public_key returns public data or an error
 * that names the handler, never its key.
 *
 *-------------------------------------------------------------------------
 */
#include "grelout.h"

#include "catalog/pg_type.h"
#include "edge.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "port.h"
#include "sign.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(grelout_new_signing_key_1_2);
PG_FUNCTION_INFO_V1(grelout_handler_public_key_1_2);

/* "whsk_" + base64 of a 32-byte seed + NUL */
#define SIGNING_KEY_TEXT_LEN	(5 + 44 + 1)

/* Bytes of a handler's name an error quotes at most. */
#define QUOTED_NAME_MAX	64

/*
 * grelout_new_signing_key_1_2: grelout.new_signing_key() RETURNS text.
 * A new ed25519 signing key, "whsk_" + base64 of a 32-byte seed from
 * pg_strong_random (the seed form: the public key is derived from it
 * whenever it is needed, so it is not stored twice).
 */
Datum
grelout_new_signing_key_1_2(PG_FUNCTION_ARGS)
{
	unsigned char seed[GRELOUT_ED25519_SEED_BYTES];
	char		key[SIGNING_KEY_TEXT_LEN];
	text	   *result;
	size_t		n;

	if (!pg_strong_random(seed, sizeof(seed)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate random bytes for a signing key")));
	memcpy(key, "whsk_", 5);
	n = 5 + edge_base64_encode(seed, sizeof(seed), key + 5);
	explicit_bzero(seed, sizeof(seed));
	result = cstring_to_text_with_len(key, (int) n);
	explicit_bzero(key, sizeof(key));
	PG_RETURN_TEXT_P(result);
}

/*
 * grelout_handler_public_key_1_2: grelout.handler_public_key(name text)
 * RETURNS text, strict.  The "whpk_<base64>" public key of the handler's
 * secret when that is a whsk_ signing key; NULL when the handler has no
 * secret or an HMAC (whsec_) one; an error when no handler has this name,
 * or when its whsk_ key is malformed (a row written around the
 * validation trigger).  Only the current secret counts, not
 * previous_secret.  Runs as the extension's owner (SECURITY DEFINER,
 * search_path pinned): a role granted EXECUTE learns public keys without
 * reading grelout.handlers.
 */
Datum
grelout_handler_public_key_1_2(PG_FUNCTION_ARGS)
{
	text	   *name = PG_GETARG_TEXT_PP(0);
	Oid			argtypes[1] = {TEXTOID};
	Datum		args[1] = {PointerGetDatum(name)};
	unsigned char public_key[GRELOUT_ED25519_PUBLIC_BYTES];
	char		out[GRELOUT_PUBLIC_KEY_TEXT_LEN];
	int			outlen = 0;
	bool		isnull;
	Datum		d;
	int			ret;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	ret = SPI_execute_with_args("SELECT h.secret FROM grelout.handlers AS h WHERE h.name = $1",
								1, argtypes, args, NULL, true, 1);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not read the handler: %s", SPI_result_code_string(ret));
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("handler \"%.*s\" does not exist",
						pg_mbcliplen(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name),
									 QUOTED_NAME_MAX),
						VARDATA_ANY(name)),
				 errhint("Give the handler's name, as in grelout.handlers.name.")));

	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (!isnull)
	{
		text	   *secret = DatumGetTextPP(d);
		const char *s = VARDATA_ANY(secret);
		size_t		len = VARSIZE_ANY_EXHDR(secret);

		if (len >= 5 && memcmp(s, "whsk_", 5) == 0)
		{
			EdgeSecretError err = grelout_signing_key_check(s, len, public_key);

			if ((Pointer) secret != DatumGetPointer(d))
				explicit_bzero(VARDATA_ANY(secret), len);
			if (err != EDGE_SECRET_OK)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("the signing key of handler \"%.*s\" is not valid",
								pg_mbcliplen(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name),
											 QUOTED_NAME_MAX),
								VARDATA_ANY(name)),
						 errhint("Set a new one, made by grelout.new_signing_key().")));
			outlen = grelout_public_key_text(public_key, out);
		}
	}
	SPI_finish();

	if (outlen == 0)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text_with_len(out, outlen));
}
