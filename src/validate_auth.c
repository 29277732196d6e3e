/*-------------------------------------------------------------------------
 *
 * validate_auth.c
 *	  The checks of a handler's endpoint authentication columns (1.2),
 *	  called by the handlers' trigger (validate.c) when a row is written:
 *
 *	tls_client_cert, tls_client_key	both or neither; the key the
 *								certificate's, unencrypted; the
 *								certificate valid now when it is
 *								written (tls_pem.c)
 *	tls_ca						one or more PEM certificates, nothing else
 *	oauth						{"token_url", "client_id", "client_secret",
 *								"scope", "audience"}: an object of string
 *								members, the first three required,
 *								token_url an http(s) URL; no
 *								Authorization among the handler's
 *								headers (the token's)
 *
 * No error quotes a key, a certificate, a client secret or a token URL
 * (which may carry credentials).  On a 1.0 or 1.1 schema (a library newer
 * than the installed extension) the columns are absent and nothing is
 * checked.
 *
 *-------------------------------------------------------------------------
 */
#include "grelout.h"

#include <time.h>

#include "access/htup_details.h"
#include "mb/pg_wchar.h"
#include "spi_helpers.h"
#include "tcop/tcopprot.h"
#include "tls_pem.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

/* Bytes of an oauth string member, at most (a secret, an id, a scope). */
#define OAUTH_VALUE_MAX		4096

/*
 * auth_value: the text of column name of a handler row, or NULL when it
 * is NULL or the schema has no such column.
 */
static text *
auth_value(HeapTuple tuple, TupleDesc desc, const char *name)
{
	int			attnum = grelout_attnum(desc, name, true);
	bool		isnull;
	Datum		d;

	if (attnum == InvalidAttrNumber)
		return NULL;
	d = heap_getattr(tuple, attnum, desc, &isnull);
	return isnull ? NULL : DatumGetTextPP(d);
}

/* same_text: two column values (NULL: none) hold the same bytes. */
static bool
same_text(text *a, text *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/*
 * restoring: is the statement a COPY (as pg_dump writes a table's rows)?
 * A certificate valid when it was dumped may have expired by the restore,
 * which must not fail for it.
 */
static bool
restoring(void)
{
	const char *q = debug_query_string;

	if (q == NULL)
		return false;
	while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')
		q++;
	return pg_strncasecmp(q, "copy", 4) == 0;
}

/*
 * check_client_tls: the client certificate and key, both or neither, as
 * tls_pem_check_client wants them; valid now only when they are new (an
 * INSERT, or an UPDATE that changes them, but for a COPY): a row whose
 * certificate expired since it was written can still be changed otherwise
 * (disabled by the relay, given a new secret), and its requests fail at
 * the endpoint's handshake.
 */
static void
check_client_tls(text *cert, text *key, bool is_new)
{
	TlsPemError err;
	time_t		now = time(NULL);

	if (cert == NULL && key == NULL)
		return;
	if (cert == NULL || key == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("handler tls_client_cert and tls_client_key must be set together"),
				 errdetail("Mutual TLS needs the certificate and its private key.")));
	err = tls_pem_check_client(VARDATA_ANY(cert), VARSIZE_ANY_EXHDR(cert),
							   VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key),
							   now, NULL);
	if (err == TLS_PEM_OK ||
		((err == TLS_PEM_EXPIRED || err == TLS_PEM_NOT_YET_VALID) &&
		 (!is_new || restoring())))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid handler %s",
					err == TLS_PEM_NO_KEY || err == TLS_PEM_MORE_THAN_A_KEY ?
					"tls_client_key" : "tls_client_cert"),
			 errdetail("%s.", tls_pem_error_text(err)),
			 errhint("tls_client_cert is the PEM certificate (then its chain, if any); tls_client_key its unencrypted PEM private key.")));
}

/* check_ca: tls_ca is PEM certificates and nothing else. */
static void
check_ca(text *ca)
{
	TlsPemError err;

	if (ca == NULL)
		return;
	err = tls_pem_check_ca(VARDATA_ANY(ca), VARSIZE_ANY_EXHDR(ca), NULL);
	if (err != TLS_PEM_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid handler tls_ca"),
				 errdetail("%s.", tls_pem_error_text(err)),
				 errhint("tls_ca is a bundle of PEM certificates, trusted for this handler's endpoint instead of grelout.ca_file.")));
}

/*
 * oauth_member: what oauth says of one member: a string (a copy), or NULL
 * when absent.  Refused: a member that is not a string, empty, too long,
 * or with a control character (it goes into a form and a header).
 */
static char *
oauth_member(Jsonb *oauth, const char *name, bool required)
{
	JsonbValue	k;
	JsonbValue *v;

	k.type = jbvString;
	k.val.string.val = (char *) name;
	k.val.string.len = strlen(name);
	v = findJsonbValueFromContainer(&oauth->root, JB_FOBJECT, &k);
	if (v == NULL)
	{
		if (required)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("handler oauth has no \"%s\"", name),
					 errhint("oauth is {\"token_url\", \"client_id\", \"client_secret\"} with \"scope\" and \"audience\" when the token server wants them.")));
		return NULL;
	}
	if (v->type != jbvString)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("handler oauth \"%s\" must be a string", name)));
	if (v->val.string.len == 0 || v->val.string.len > OAUTH_VALUE_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("handler oauth \"%s\" must be 1 to %d bytes", name, OAUTH_VALUE_MAX)));
	for (int i = 0; i < v->val.string.len; i++)
		if ((unsigned char) v->val.string.val[i] < 0x20 || v->val.string.val[i] == 0x7f)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("handler oauth \"%s\" contains a control character", name)));
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/* check_oauth: the oauth object, its members as the relay needs them. */
static void
check_oauth(Jsonb *oauth)
{
	static const char *const known[] =
	{"token_url", "client_id", "client_secret", "scope", "audience"};
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *url;

	if (!JB_ROOT_IS_OBJECT(oauth) || JB_ROOT_IS_SCALAR(oauth))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("handler oauth must be a JSON object")));

	/* no member grelout would not use: a misspelt "scopes" is no scope */
	it = JsonbIteratorInit(&oauth->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		bool		found = false;

		if (tok != WJB_KEY)
			continue;
		for (int i = 0; i < lengthof(known); i++)
			if (v.val.string.len == strlen(known[i]) &&
				memcmp(v.val.string.val, known[i], v.val.string.len) == 0)
				found = true;
		if (!found)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("handler oauth has an unknown member \"%.*s\"",
							pg_mbcliplen(v.val.string.val, v.val.string.len, 64),
							v.val.string.val),
					 errhint("Its members are token_url, client_id, client_secret, scope and audience.")));
	}

	url = oauth_member(oauth, "token_url", true);
	grelout_check_url(cstring_to_text(url), "handler oauth token_url");
	(void) oauth_member(oauth, "client_id", true);
	(void) oauth_member(oauth, "client_secret", true);
	(void) oauth_member(oauth, "scope", false);
	(void) oauth_member(oauth, "audience", false);
}

/* has_authorization: a headers object names Authorization, in any case. */
static bool
has_authorization(Jsonb *headers)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;

	if (!JB_ROOT_IS_OBJECT(headers) || JB_ROOT_IS_SCALAR(headers))
		return false;
	it = JsonbIteratorInit(&headers->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
		if (tok == WJB_KEY && v.val.string.len == 13 &&
			pg_strncasecmp(v.val.string.val, "authorization", 13) == 0)
			return true;
	return false;
}

/*
 * grelout_check_handler_auth: the endpoint authentication columns of a
 * grelout.handlers row about to be written, old the row it replaces (NULL
 * for an INSERT); nothing on a schema before 1.2.
 */
void
grelout_check_handler_auth(HeapTuple tuple, HeapTuple old, TupleDesc desc)
{
	int			oauth_att = grelout_attnum(desc, "oauth", true);
	bool		isnull;
	Datum		d;
	text	   *cert = auth_value(tuple, desc, "tls_client_cert");
	text	   *key = auth_value(tuple, desc, "tls_client_key");

	check_ca(auth_value(tuple, desc, "tls_ca"));
	check_client_tls(cert, key,
					 old == NULL ||
					 !same_text(cert, auth_value(old, desc, "tls_client_cert")) ||
					 !same_text(key, auth_value(old, desc, "tls_client_key")));
	if (oauth_att == InvalidAttrNumber)
		return;
	d = heap_getattr(tuple, oauth_att, desc, &isnull);
	if (isnull)
		return;
	check_oauth(DatumGetJsonbP(d));

	/* the Authorization header is the token's */
	d = heap_getattr(tuple, grelout_attnum(desc, "headers", false), desc, &isnull);
	if (!isnull && has_authorization(DatumGetJsonbP(d)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a handler with oauth cannot set an Authorization header"),
				 errdetail("Its requests carry \"Authorization: Bearer\" with the token from its token_url.")));
}
