/*-------------------------------------------------------------------------
 *
 * validate.c
 *	  Validation of what users store: request headers (of messages and of
 *	  handlers) and the rows of grelout.handlers, checked by a trigger so
 *	  that a bad URL, secret (whsec_) or signing key (whsk_), header,
 *	  timeout or attempt count is refused at INSERT or UPDATE with a clear
 *	  error.  Under the 1.1 schema the trigger also gives a handler without
 *	  a name its topic as name, refuses a rename, and checks the topic
 *	  pattern, filter, caps and on_dead; under 1.2, validate_auth.c checks
 *	  the endpoint authentication columns.
 *
 *-------------------------------------------------------------------------
 */
#include "grelout.h"

#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "edge.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "sign.h"
#include "spi_helpers.h"
#include "topic_pattern.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(grelout_handlers_validate);
PG_FUNCTION_INFO_V1(grelout_set_secret_1_2);

/* Most headers one message or handler may carry. */
#define MAX_HEADERS		64

/* Bytes of a header name an error quotes at most (never half a character). */
#define QUOTED_NAME_MAX	64

/*
 * check_header_name: one header name, for grelout_check_headers.  seen
 * holds the names before it (count of them): with message_rules a name
 * may appear once whatever its letter case.
 */
static void
check_header_name(const char *name, int len, const char *what,
				  bool message_rules, const JsonbValue *seen, int count)
{
	int			quoted = pg_mbcliplen(name, len, QUOTED_NAME_MAX);

	if (!edge_header_name_valid(name, len))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid header name \"%.*s\" in %s", quoted, name, what),
				 errdetail("A header name is 1 to %d characters of letters, digits and !#$%%&'*+-.^_`|~.",
						   GRELOUT_HEADER_NAME_MAX)));
	if (edge_header_name_reserved(name, len))
		ereport(ERROR,
				(errcode(ERRCODE_RESERVED_NAME),
				 errmsg("header \"%.*s\" in %s is reserved", quoted, name, what),
				 errdetail("grelout sets content-type, content-length, host, connection, transfer-encoding, user-agent, the webhook-* headers and every grelout-* header itself.")));
	if (!message_rules)
		return;
	if (edge_header_name_message_reserved(name, len))
		ereport(ERROR,
				(errcode(ERRCODE_RESERVED_NAME),
				 errmsg("header \"%.*s\" in %s is reserved", quoted, name, what),
				 errdetail("A message may not set the credentials a handler sends (authorization, proxy-authorization, cookie), a webhook-* header, or a hop-by-hop or framing header (keep-alive, proxy-connection, te, trailer, upgrade, expect, content-encoding).")));
	for (int i = 0; i < count; i++)
		if (seen[i].val.string.len == len &&
			pg_strncasecmp(seen[i].val.string.val, name, len) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("header \"%.*s\" appears twice in %s", quoted, name, what),
					 errdetail("Header names are case-insensitive: \"%.*s\" and \"%.*s\" are one header.",
							   pg_mbcliplen(seen[i].val.string.val, len, QUOTED_NAME_MAX),
							   seen[i].val.string.val, quoted, name),
					 errhint("Send each header once.")));
}

/*
 * grelout_check_headers: headers must be a JSON object whose keys are HTTP
 * tokens that the relay does not set itself and whose values are strings
 * with no control character but HTAB.  With message_rules (message headers
 * under the 1.1 schema and later) the names edge_header_name_message_reserved
 * gives are reserved too, a name appears once whatever its letter case,
 * and an empty or blank value is refused, so that a message can neither
 * replace nor remove what the handler or the relay sends.  "what" names
 * the headers in errors, which quote at most QUOTED_NAME_MAX bytes of a
 * name.
 */
void
grelout_check_headers(Jsonb *headers, const char *what, bool message_rules)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	JsonbValue	seen[MAX_HEADERS];
	int			count = 0;

	if (!JB_ROOT_IS_OBJECT(headers) || JB_ROOT_IS_SCALAR(headers))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a JSON object", what),
				 errhint("Pass an object of string values, such as '{\"traceparent\": \"00-...\"}'.")));

	it = JsonbIteratorInit(&headers->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
		{
			if (count >= MAX_HEADERS)
				ereport(ERROR,
						(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						 errmsg("%s hold more than %d headers", what, MAX_HEADERS)));
			check_header_name(v.val.string.val, v.val.string.len, what,
							  message_rules, seen, count);
			seen[count++] = v;
		}
		else if (tok == WJB_VALUE)
		{
			if (v.type != jbvString)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("every value in %s must be a string", what)));
			if (message_rules && v.val.string.len == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("empty header value in %s", what),
						 errdetail("An empty value would remove a header the relay or the handler sends.")));
			if (message_rules && edge_header_value_blank(v.val.string.val, v.val.string.len))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("header value of only white space in %s", what),
						 errdetail("libcurl sends no header for such a value, and would drop a header the relay or the handler sends with it.")));
			if (!edge_header_value_valid(v.val.string.val, v.val.string.len))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("invalid header value in %s", what),
						 errdetail("A header value holds no control character but HTAB and is at most %d bytes.",
								   GRELOUT_HEADER_VALUE_MAX)));
		}
	}
}

/*
 * grelout_check_topic: a topic, of a message or of a handler, is 1 to
 * GRELOUT_TOPIC_MAX bytes without C0 or C1 control characters (it goes
 * into log lines and the grelout-topic request header).  "what" names it
 * in errors.
 */
void
grelout_check_topic(text *topic, const char *what)
{
	int			len = VARSIZE_ANY_EXHDR(topic);

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what)));
	if (len > GRELOUT_TOPIC_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("%s is longer than %d bytes", what, GRELOUT_TOPIC_MAX)));
	if (!edge_control_free(VARDATA_ANY(topic), len, false))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not contain control characters", what),
				 errdetail("C0 and C1 control characters (U+0000 to U+001F, U+007F to U+009F) are refused.")));
}

/*
 * grelout_interval_usecs: an interval as microseconds, counted as
 * extract(epoch FROM ...) counts it (edge_interval_usecs), or an error
 * naming it when it does not fit.  The one conversion of every interval
 * grelout takes: delays, handler timeouts, retention windows.
 */
int64
grelout_interval_usecs(const Interval *iv, const char *what)
{
	int64_t		usecs;

	if (!edge_interval_usecs(iv->month, iv->day, iv->time, &usecs))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("%s is out of range", what),
				 errdetail("grelout takes intervals of at most about 292,000 years either way.")));
	return (int64) usecs;
}

/*
 * grelout_check_url: an http:// or https:// URL with a host; what names it
 * in the errors ("handler url").  The URL is not echoed back: it may embed
 * credentials.
 */
void
grelout_check_url(text *url, const char *what)
{
	EdgeUrlError err = edge_url_check(VARDATA_ANY(url), VARSIZE_ANY_EXHDR(url));

	switch (err)
	{
		case EDGE_URL_OK:
			return;
		case EDGE_URL_TOO_LONG:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s is longer than %d bytes", what, GRELOUT_URL_MAX)));
			break;
		case EDGE_URL_BAD_SCHEME:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s must start with http:// or https://", what)));
			break;
		case EDGE_URL_NO_HOST:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s has no host", what)));
			break;
		case EDGE_URL_BAD_CHAR:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s contains white space or a control character", what),
					 errhint("Percent-encode such characters.")));
			break;
	}
}

/*
 * check_signing_key: a whsk_ key, "whsk_" + base64 of an ed25519 seed (32
 * bytes) or of seed and public key (64 bytes, the public half the seed's).
 * The key itself never appears in the error.
 */
static void
check_signing_key(text *key, const char *column)
{
	EdgeSecretError err;

	err = grelout_signing_key_check(VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key), NULL);
	if (err == EDGE_SECRET_OK)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid handler %s", column),
			 err == EDGE_SECRET_BAD_BASE64 ?
			 errdetail("The part after \"whsk_\" is not valid base64.") :
			 err == EDGE_SECRET_BAD_LENGTH ?
			 errdetail("The part after \"whsk_\" must decode to an ed25519 key of %d bytes, or of %d bytes with its public key.",
					   GRELOUT_ED25519_SEED_BYTES,
					   GRELOUT_ED25519_SEED_BYTES + GRELOUT_ED25519_PUBLIC_BYTES) :
			 errdetail("The last %d bytes of the key are not the public key of its first %d.",
					   GRELOUT_ED25519_PUBLIC_BYTES, GRELOUT_ED25519_SEED_BYTES),
			 errhint("grelout.new_signing_key() makes a signing key.")));
}

/*
 * check_secret: "whsec_" + base64 of 24 to 64 bytes (an HMAC secret), or
 * a "whsk_" signing key (check_signing_key).  The secret itself never
 * appears in the error.
 */
static void
check_secret(text *secret, const char *column)
{
	unsigned char key[GRELOUT_SECRET_MAX_BYTES];
	size_t		keylen;
	EdgeSecretError err;

	if (VARSIZE_ANY_EXHDR(secret) >= 5 &&
		memcmp(VARDATA_ANY(secret), "whsk_", 5) == 0)
	{
		check_signing_key(secret, column);
		return;
	}
	err = edge_secret_decode(VARDATA_ANY(secret), VARSIZE_ANY_EXHDR(secret),
							 key, &keylen);
	explicit_bzero(key, sizeof(key));
	if (err == EDGE_SECRET_OK)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid handler %s", column),
			 err == EDGE_SECRET_NO_PREFIX ?
			 errdetail("A signing secret starts with \"whsec_\", or \"whsk_\" for an ed25519 signing key.") :
			 err == EDGE_SECRET_BAD_BASE64 ?
			 errdetail("The part after \"whsec_\" is not valid base64.") :
			 errdetail("The part after \"whsec_\" must decode to %d to %d bytes.",
					   GRELOUT_SECRET_MIN_BYTES, GRELOUT_SECRET_MAX_BYTES)));
}

/*
 * handler_value: the value of a column of a grelout.handlers row, by name
 * (an error when the installed schema has no such column).
 */
static Datum
handler_value(HeapTuple tuple, TupleDesc desc, const char *name, bool *isnull)
{
	return heap_getattr(tuple, grelout_attnum(desc, name, false), desc, isnull);
}

/* text_equal: two text datums hold the same bytes. */
static bool
text_equal(Datum a, Datum b)
{
	text	   *ta = DatumGetTextPP(a);
	text	   *tb = DatumGetTextPP(b);

	return VARSIZE_ANY_EXHDR(ta) == VARSIZE_ANY_EXHDR(tb) &&
		memcmp(VARDATA_ANY(ta), VARDATA_ANY(tb), VARSIZE_ANY_EXHDR(ta)) == 0;
}

/*
 * check_name: a handler's name is 1 to GRELOUT_HANDLER_NAME_MAX bytes
 * without control characters (it goes into the grelout-handler request
 * header and log lines).
 */
static void
check_name(text *name)
{
	int			len = VARSIZE_ANY_EXHDR(name);

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("handler name must not be empty")));
	if (len > GRELOUT_HANDLER_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("handler name is longer than %d bytes", GRELOUT_HANDLER_NAME_MAX)));
	if (!edge_control_free(VARDATA_ANY(name), len, false))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("handler name must not contain control characters"),
				 errdetail("C0 and C1 control characters (U+0000 to U+001F, U+007F to U+009F) are refused.")));
}

/*
 * check_pattern: a handler's topic is a pattern: segments split at '.',
 * none empty, '*' and '#' only as whole segments.  The pattern is quoted
 * cut to 64 bytes (its length and characters were checked before).
 */
static void
check_pattern(text *topic)
{
	const char *p = VARDATA_ANY(topic);
	int			len = VARSIZE_ANY_EXHDR(topic);

	switch (edge_topic_pattern_valid(p, len))
	{
		case EDGE_TOPIC_PATTERN_OK:
			return;
		case EDGE_TOPIC_PATTERN_EMPTY_SEGMENT:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("handler topic \"%.*s\" has an empty segment",
							pg_mbcliplen(p, len, 64), p),
					 errdetail("A topic pattern is segments separated by single dots, none empty.")));
			break;
		case EDGE_TOPIC_PATTERN_BAD_WILDCARD:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("handler topic \"%.*s\" has a wildcard inside a segment",
							pg_mbcliplen(p, len, 64), p),
					 errdetail("\"*\" (one segment) and \"#\" (zero or more segments) must each be a whole segment, as in \"orders.*\" or \"orders.#\".")));
			break;
	}
}

/* check_positive_cap: a cap column is NULL or positive. */
static void
check_positive_cap(HeapTuple tuple, TupleDesc desc, int attnum, const char *name)
{
	bool		isnull;
	Datum		d = heap_getattr(tuple, attnum, desc, &isnull);

	if (!isnull && DatumGetInt32(d) <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("handler %s must be positive", name),
				 errhint("Set it to NULL for the default.")));
}

/*
 * validate_1_1: the columns the 1.1 schema adds to grelout.handlers.
 * Returns the tuple to store: on INSERT without a name, a copy whose name
 * is the topic.
 */
static HeapTuple
validate_1_1(TriggerData *trigdata, HeapTuple tuple, TupleDesc desc, int name_att)
{
	bool		isnull;
	Datum		d;

	d = heap_getattr(tuple, name_att, desc, &isnull);
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
	{
		bool		old_isnull;
		Datum		old = heap_getattr(trigdata->tg_trigtuple, name_att, desc, &old_isnull);

		/* a rename: the other tables refer to handlers by name */
		if (isnull != old_isnull ||
			(!isnull && !text_equal(d, old)))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("a handler cannot be renamed"),
					 errdetail("Its deliveries refer to it by name."),
					 errhint("Delete the handler and insert it again under the new name: its unfinished deliveries are routed again.")));
	}
	else if (isnull)
	{
		/* an INSERT without a name: the topic text, as 1.0 named handlers */
		int			attnum = name_att;
		bool		topic_isnull;
		Datum		topic = handler_value(tuple, desc, "topic", &topic_isnull);

		if (!topic_isnull)
		{
			tuple = heap_modify_tuple_by_cols(tuple, desc, 1, &attnum,
											  &topic, &topic_isnull);
			d = topic;
			isnull = false;
		}
	}
	if (!isnull)
		check_name(DatumGetTextPP(d));

	d = handler_value(tuple, desc, "topic", &isnull);
	if (!isnull)
		check_pattern(DatumGetTextPP(d));

	d = handler_value(tuple, desc, "filter", &isnull);
	if (!isnull)
	{
		Jsonb	   *filter = DatumGetJsonbP(d);

		if (!JB_ROOT_IS_OBJECT(filter) || JB_ROOT_IS_SCALAR(filter))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("handler filter must be a JSON object"),
					 errdetail("A handler gets a message when its payload contains the filter (payload @> filter)."),
					 errhint("Use an object such as '{\"region\": \"eu\"}', or NULL for every message.")));
	}

	check_positive_cap(tuple, desc, grelout_attnum(desc, "max_in_flight", false), "max_in_flight");
	check_positive_cap(tuple, desc, grelout_attnum(desc, "max_per_second", false), "max_per_second");

	d = handler_value(tuple, desc, "on_dead", &isnull);
	if (!isnull)
	{
		char	   *on_dead = TextDatumGetCString(d);

		if (strcmp(on_dead, "block") != 0 && strcmp(on_dead, "skip") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("handler on_dead must be \"block\" or \"skip\""),
					 errdetail("It says what an ordered handler does when a key's first message goes dead.")));
	}
	return tuple;
}

/*
 * grelout_handlers_validate: BEFORE INSERT OR UPDATE trigger on
 * grelout.handlers.
 */
Datum
grelout_handlers_validate(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	HeapTuple	tuple;
	TupleDesc	desc;
	bool		isnull;
	Datum		d;
	int			name_att;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("grelout._handlers_validate() must be a BEFORE ROW trigger")));

	tuple = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ?
		trigdata->tg_newtuple : trigdata->tg_trigtuple;
	desc = RelationGetDescr(trigdata->tg_relation);

	d = handler_value(tuple, desc, "topic", &isnull);
	if (!isnull)
		grelout_check_topic(DatumGetTextPP(d), "handler topic");

	d = handler_value(tuple, desc, "url", &isnull);
	if (!isnull)
		grelout_check_url(DatumGetTextPP(d), "handler url");

	d = handler_value(tuple, desc, "headers", &isnull);
	if (!isnull)
		grelout_check_headers(DatumGetJsonbP(d), "handler headers", false);

	d = handler_value(tuple, desc, "secret", &isnull);
	if (!isnull)
		check_secret(DatumGetTextPP(d), "secret");

	d = handler_value(tuple, desc, "previous_secret", &isnull);
	if (!isnull)
		check_secret(DatumGetTextPP(d), "previous_secret");

	d = handler_value(tuple, desc, "timeout", &isnull);
	if (!isnull)
	{
		Interval   *iv = DatumGetIntervalP(d);
		int64		usecs = grelout_interval_usecs(iv, "handler timeout");

		if (usecs <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("handler timeout must be positive")));
		if (usecs > (int64) 3600 * USECS_PER_SEC)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("handler timeout must be at most 1 hour")));
	}

	d = handler_value(tuple, desc, "max_attempts", &isnull);
	if (!isnull && DatumGetInt32(d) <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("handler max_attempts must be positive")));

	/* the 1.1 schema: a handler has a name (1.0's topic was its name) */
	name_att = SPI_fnumber(desc, "name");
	if (name_att > 0)
		tuple = validate_1_1(trigdata, tuple, desc, name_att);

	/* the 1.2 schema: mutual TLS, a CA of its own, OAuth2 (validate_auth.c) */
	grelout_check_handler_auth(tuple,
							   TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ?
							   trigdata->tg_trigtuple : NULL,
							   desc);

	return PointerGetDatum(tuple);
}

/*
 * grelout_set_secret_1_2: grelout.set_secret(handler text, secret text,
 * previous boolean DEFAULT false) RETURNS void.  Sets the handler's secret
 * (or, with previous, its previous_secret; NULL clears it), checked first
 * as the trigger checks it.  The point is where the secret travels: passed
 * as a bind parameter, it is in no statement's text, so PostgreSQL's own
 * error log line ("STATEMENT: ...") cannot carry it, and no error of ours
 * quotes it.  Runs as its caller (an administrator who may UPDATE
 * grelout.handlers), under a pinned search_path.
 */
Datum
grelout_set_secret_1_2(PG_FUNCTION_ARGS)
{
	Oid			argtypes[2] = {TEXTOID, TEXTOID};
	Datum		args[2];
	char		nulls[2] = {' ', ' '};
	bool		previous = !PG_ARGISNULL(2) && PG_GETARG_BOOL(2);
	int			ret;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("handler must not be null")));
	args[0] = PG_GETARG_DATUM(0);
	if (PG_ARGISNULL(1))
	{
		args[1] = (Datum) 0;
		nulls[1] = 'n';
	}
	else
	{
		check_secret(PG_GETARG_TEXT_PP(1), previous ? "previous_secret" : "secret");
		args[1] = PG_GETARG_DATUM(1);
	}

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	ret = SPI_execute_with_args(previous ?
								"UPDATE grelout.handlers SET previous_secret = $2 WHERE name = $1" :
								"UPDATE grelout.handlers SET secret = $2 WHERE name = $1",
								2, argtypes, args, nulls, false, 0);
	if (ret != SPI_OK_UPDATE)
		elog(ERROR, "could not set the secret: %s", SPI_result_code_string(ret));
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("handler \"%.*s\" does not exist",
						pg_mbcliplen(VARDATA_ANY(PG_GETARG_TEXT_PP(0)),
									 VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(0)), 64),
						VARDATA_ANY(PG_GETARG_TEXT_PP(0))),
				 errhint("Give the handler's name, as in grelout.handlers.name.")));
	SPI_finish();
	PG_RETURN_VOID();
}
