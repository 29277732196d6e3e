/*-------------------------------------------------------------------------
 *
 * publish.c
 *	  The producer side of grelout: outbox_publish, which stages a message
 *	  in the caller's transaction, and outbox_message_status, a publisher's
 *	  view of its own message; the operator functions outbox_redrive and
 *	  outbox_purge; and the wake-up of the relays when a transaction that
 *	  published (or redrove) commits.
 *
 * outbox_publish never opens, commits or rolls back anything: its INSERT is
 * part of the caller's transaction, savepoints included.  The capture
 * triggers (capture.c) stage their messages through the same path,
 * grelout_publish_change.  The statements are planned once per backend and
 * kept.
 *
 * Two schemas are served.  The SQL functions of the 1.0 schema point at
 * grelout_publish and grelout_purge, which run the 1.0 statements; those of
 * the 1.1 schema point at the _1_1 symbols, which run the 1.1 statements.
 * So the statements a backend uses follow pg_proc: after ALTER EXTENSION
 * grelout UPDATE commits, its next call is a 1.1 call.
 *
 * Under 1.1 outbox_publish runs as its caller (SECURITY INVOKER), records
 * current_user as the message's published_by and deduplicates per
 * publishing role, and raises its privileges to the owner of grelout.outbox
 * only around its own statements.
 *
 * A message carries its publisher's W3C trace context as its traceparent
 * and tracestate headers (message_headers): from the message's own headers,
 * else the settings grelout.traceparent and grelout.tracestate, else a
 * sqlcommenter comment of the statement the client sent.  Malformed
 * values are dropped, never refused; webhook.c sends each attempt with a
 * span id of its own.
 *
 * Every SQL-callable function here that runs a statement pins search_path
 * (grelout_pin_search_path) for its whole call, so that the caller's path
 * never decides which operator or function a statement runs.
 *
 *-------------------------------------------------------------------------
 */
#include "grelout.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "edge.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "outcome.h"
#include "topic_pattern.h"
#include "tracectx.h"
#include "hooks.h"
#include "store.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(grelout_publish);
PG_FUNCTION_INFO_V1(grelout_publish_1_1);
PG_FUNCTION_INFO_V1(grelout_message_status_1_1);
PG_FUNCTION_INFO_V1(grelout_redrive);
PG_FUNCTION_INFO_V1(grelout_redrive_1_1);
PG_FUNCTION_INFO_V1(grelout_purge);
PG_FUNCTION_INFO_V1(grelout_purge_1_1);
PG_FUNCTION_INFO_V1(grelout_wake);

#define MAX_KEY_BYTES		255

/* Set when the current transaction staged work for the relays. */
static bool wake_at_commit = false;

/* The statements of outbox_publish under one schema version. */
typedef struct PublishPlans
{
	SPIPlanPtr	insert;			/* a message without dedup_key */
	SPIPlanPtr	insert_dedup;	/* with one, unless the key is stored */
	SPIPlanPtr	lookup_dedup;	/* the stored message of a key */
	SPIPlanPtr	lookup_legacy;	/* 1.1: a key stored under 1.0 */
} PublishPlans;

/* Plans kept for the life of the backend. */
static PublishPlans plans_1_0;
static PublishPlans plans_1_1;
static SPIPlanPtr status_plan = NULL;

/*
 * Parameters of the publish statements: $1 id, $2 topic, $3 key,
 * $4 payload, $5 headers, $6 dedup_key, $7 available_at, $8 published_by.
 */
#define PUBLISH_NARGS	8
static Oid	publish_argtypes[PUBLISH_NARGS] = {
	UUIDOID, TEXTOID, TEXTOID, JSONBOID, JSONBOID, TEXTOID, TIMESTAMPTZOID, OIDOID
};

/*
 * publish_at_xact_end: after a commit that staged messages, wake the
 * relays; forget the flag when the transaction aborts or is prepared
 * (hooks.c calls it at the end of every transaction).
 */
void
publish_at_xact_end(XactEvent event)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (wake_at_commit)
			{
				wake_at_commit = false;
				grelout_wake_relays();
			}
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			wake_at_commit = false;
			break;
		default:
			break;
	}
}

/*
 * publish_after_utility: COMMIT PREPARED makes the messages of a prepared
 * transaction visible without a commit callback of the session that
 * published them, so wake the relays when it succeeds (hooks.c calls it
 * after every utility command that did not fail).
 */
void
publish_after_utility(Node *parsetree)
{
	if (IsA(parsetree, TransactionStmt) &&
		((TransactionStmt *) parsetree)->kind == TRANS_STMT_COMMIT_PREPARED)
		grelout_wake_relays();
}

/* prepare_plans_1_0: the statements of outbox_publish on a 1.0 schema. */
static PublishPlans *
prepare_plans_1_0(void)
{
	PublishPlans *p = &plans_1_0;

	grelout_keep_plan(&p->insert,
					  "INSERT INTO grelout.outbox"
					  " (id, topic, key, payload, headers, available_at)"
					  " VALUES ($1, $2, $3, $4, $5, $7)",
					  7, publish_argtypes, 0);
	grelout_keep_plan(&p->insert_dedup,
					  "INSERT INTO grelout.outbox"
					  " (id, topic, key, payload, headers, dedup_key, available_at)"
					  " VALUES ($1, $2, $3, $4, $5, $6, $7)"
					  " ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL"
					  " DO NOTHING",
					  7, publish_argtypes, 0);
	grelout_keep_plan(&p->lookup_dedup,
					  "SELECT id FROM grelout.outbox"
					  " WHERE dedup_key = $6",
					  PUBLISH_NARGS, publish_argtypes, 0);
	return p;
}

/*
 * prepare_plans_1_1: the statements of outbox_publish on a 1.1 schema.
 * The dedup index is (published_by, dedup_key): an insert waits only on a
 * transaction that inserted or deleted the same key for the same role.
 */
static PublishPlans *
prepare_plans_1_1(void)
{
	PublishPlans *p = &plans_1_1;

	grelout_keep_plan(&p->insert,
					  "INSERT INTO grelout.outbox"
					  " (id, topic, key, payload, headers, available_at, published_by)"
					  " VALUES ($1, $2, $3, $4, $5, $7, $8)",
					  PUBLISH_NARGS, publish_argtypes, 0);
	grelout_keep_plan(&p->insert_dedup,
					  "INSERT INTO grelout.outbox"
					  " (id, topic, key, payload, headers, dedup_key, available_at, published_by)"
					  " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
					  " ON CONFLICT (published_by, dedup_key) WHERE dedup_key IS NOT NULL"
					  " DO NOTHING",
					  PUBLISH_NARGS, publish_argtypes, 0);
	grelout_keep_plan(&p->lookup_dedup,
					  "SELECT id FROM grelout.outbox"
					  " WHERE published_by = $8 AND dedup_key = $6",
					  PUBLISH_NARGS, publish_argtypes, 0);
	grelout_keep_plan(&p->lookup_legacy,
					  "SELECT id FROM grelout.outbox"
					  " WHERE published_by IS NULL AND dedup_key = $6",
					  PUBLISH_NARGS, publish_argtypes, 0);
	return p;
}

/*
 * outbox_owner: the owner of grelout.outbox, whose rights outbox_publish
 * takes for its own statements.
 */
static Oid
outbox_owner(void)
{
	Oid			nsp = get_namespace_oid("grelout", true);
	Oid			relid = OidIsValid(nsp) ? get_relname_relid("outbox", nsp) : InvalidOid;

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("table grelout.outbox does not exist"),
				 errhint("Run CREATE EXTENSION grelout.")));
	return grelout_relation_owner(relid);
}

/*
 * lookup_id: run a lookup plan; true and *id set when it found a message.
 */
static bool
lookup_id(SPIPlanPtr plan, Datum *values, const char *nulls, pg_uuid_t *id)
{
	int			ret = SPI_execute_plan(plan, values, nulls, false, 1);
	bool		isnull;
	Datum		d;

	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not look up dedup_key: %s", SPI_result_code_string(ret));
	if (SPI_processed != 1)
		return false;
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	memcpy(id, DatumGetUUIDP(d), sizeof(pg_uuid_t));
	return true;
}

/*
 * stage: run the insert of one message (values/nulls as publish_argtypes)
 * inside SPI, deduplicating when it has a dedup_key; *id is the new
 * message's id on entry and the stored message's id on return.
 */
static void
stage(PublishPlans *plans, Datum *values, char *nulls, pg_uuid_t *id)
{
	int			ret;

	if (nulls[5] == 'n')
	{
		ret = SPI_execute_plan(plans->insert, values, nulls, false, 0);
		if (ret != SPI_OK_INSERT || SPI_processed != 1)
			elog(ERROR, "could not stage message: %s", SPI_result_code_string(ret));
		return;
	}

	/* 1.1: a key stored under 1.0 (no publisher recorded) matches any role */
	if (plans->lookup_legacy != NULL &&
		lookup_id(plans->lookup_legacy, values, nulls, id))
		return;

	/*
	 * A conflict means a message with this dedup_key is stored: return its
	 * id.  If that row is deleted between the two statements (it was
	 * delivered meanwhile), the insert is tried again.
	 */
	for (int tries = 0;; tries++)
	{
		ret = SPI_execute_plan(plans->insert_dedup, values, nulls, false, 0);
		if (ret != SPI_OK_INSERT)
			elog(ERROR, "could not stage message: %s", SPI_result_code_string(ret));
		if (SPI_processed == 1)
			return;
		if (lookup_id(plans->lookup_dedup, values, nulls, id))
			return;
		if (tries >= 10)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not stage message with dedup_key: the stored message kept changing"),
					 errhint("Retry the transaction.")));
	}
}

/* check_length: a text argument's byte length within max, or an error. */
static void
check_length(text *value, const char *what, int max)
{
	if (VARSIZE_ANY_EXHDR(value) > max)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("%s is longer than %d bytes", what, max)));
}

/*
 * grelout_check_publish_topic: a topic outbox_publish of the 1.1 schema
 * (and later) and the capture triggers take: grelout_check_topic's rules,
 * and not one of grelout's own, whose first segment is "grelout" in any
 * letter case (edge_topic_reserved).
 */
void
grelout_check_publish_topic(text *topic)
{
	grelout_check_topic(topic, "topic");
	if (edge_topic_reserved(VARDATA_ANY(topic), VARSIZE_ANY_EXHDR(topic)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("topics whose first segment is \"grelout\" are reserved"),
				 errdetail("grelout publishes its own operational events there; the first segment is compared in any letter case, and the topic \"grelout\" alone is reserved too.")));
}

/*
 * check_payload: the payload's JSON text within grelout.max_payload_size,
 * or an error (54000).
 */
static void
check_payload(Jsonb *payload)
{
	char	   *json = JsonbToCString(NULL, &payload->root, VARSIZE(payload));
	size_t		len = strlen(json);

	if (len > (size_t) grelout_max_payload_size)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("payload is %zu bytes, over the limit of %d bytes",
						len, grelout_max_payload_size),
				 errhint("Raise grelout.max_payload_size, or send a reference to the data instead.")));
	pfree(json);
}

/* check_key: a message key within MAX_KEY_BYTES and control-free. */
static void
check_key(text *key)
{
	check_length(key, "key", MAX_KEY_BYTES);
	/* the key travels in the grelout-key request header and in logs */
	if (!edge_control_free(VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key), false))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("key must not contain control characters"),
				 errdetail("C0 and C1 control characters (U+0000 to U+001F, U+007F to U+009F) are refused.")));
}

/*
 * stage_as_publisher: stage one message (values/nulls as publish_argtypes)
 * with the 1.1 statements.  The caller may not touch grelout.outbox: take
 * the rights of its owner for our own statements only, and give them back
 * whatever happens.  The caller has pinned search_path.
 */
static void
stage_as_publisher(Datum *values, char *nulls, pg_uuid_t *id)
{
	Oid			save_userid;
	int			save_sec_context;

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(outbox_owner(),
						   save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	PG_TRY();
	{
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		stage(prepare_plans_1_1(), values, nulls, id);
		SPI_finish();
	}
	PG_FINALLY();
	{
		SetUserIdAndSecContext(save_userid, save_sec_context);
	}
	PG_END_TRY();
}

/*
 * check_dedup_key: a message's dedup_key is at most MAX_KEY_BYTES and not
 * empty (NULL, not '', means no deduplication).
 */
static void
check_dedup_key(text *dedup)
{
	check_length(dedup, "dedup_key", MAX_KEY_BYTES);
	if (VARSIZE_ANY_EXHDR(dedup) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("dedup_key must not be empty"),
				 errhint("Pass NULL for no deduplication.")));
}

/*
 * The sqlcommenter trace context of the statement last read
 * (statement_context), so that a capture trigger fired for every row of
 * one long statement reads its text once.  The statement is known by its
 * text's address and its start time (statement_timestamp(), set for each
 * query, parse, bind and execute message): not by its text, which would
 * be read again for every row.
 */
static const char *sql_seen = NULL;
static TimestampTz sql_seen_at = 0;
static bool sql_found = false;
static TraceContext sql_context;

/* Which trace context header a message header name is, in any letter case. */
typedef enum TraceHeader
{
	TRACE_NONE,
	TRACE_PARENT,
	TRACE_STATE
} TraceHeader;

/* trace_header: is name (len bytes) traceparent, tracestate or neither? */
static TraceHeader
trace_header(const char *name, int len)
{
	if (len == 11 && pg_strncasecmp(name, "traceparent", 11) == 0)
		return TRACE_PARENT;
	if (len == 10 && pg_strncasecmp(name, "tracestate", 10) == 0)
		return TRACE_STATE;
	return TRACE_NONE;
}

/*
 * headers_context: the trace context of a message's headers object, when
 * it has one traceparent member (in any letter case) with a valid value;
 * its tracestate (one member, a valid value) goes with it.  *present says
 * whether any member of either name is there, valid or not.
 */
static bool
headers_context(Jsonb *headers, TraceContext *ctx, bool *present)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	TraceHeader current = TRACE_NONE;
	JsonbValue	tp = {0};
	JsonbValue	ts = {0};
	int			ntp = 0;
	int			nts = 0;

	*present = false;
	it = JsonbIteratorInit(&headers->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
			current = trace_header(v.val.string.val, v.val.string.len);
		else if (tok == WJB_VALUE && current == TRACE_PARENT)
			tp = v, ntp++;
		else if (tok == WJB_VALUE && current == TRACE_STATE)
			ts = v, nts++;
	}
	*present = ntp > 0 || nts > 0;
	if (ntp != 1 || tp.type != jbvString)
		return false;
	return tracectx_set(ctx, tp.val.string.val, tp.val.string.len,
						(nts == 1 && ts.type == jbvString) ? ts.val.string.val : NULL,
						(nts == 1 && ts.type == jbvString) ? ts.val.string.len : 0);
}

/* setting_context: the trace context of grelout.traceparent and .tracestate. */
static bool
setting_context(TraceContext *ctx)
{
	const char *tp = grelout_traceparent;
	const char *ts = grelout_tracestate;

	if (tp == NULL || tp[0] == '\0')
		return false;
	return tracectx_set(ctx, tp, strlen(tp), ts, ts ? strlen(ts) : 0);
}

/*
 * statement_context: the trace context of a sqlcommenter comment in the
 * statement the client sent (debug_query_string: the top-level statement,
 * also when a trigger or a function publishes), read once a statement.
 */
static bool
statement_context(TraceContext *ctx)
{
	const char *sql = debug_query_string;
	TimestampTz at = GetCurrentStatementStartTimestamp();

	if (sql == NULL)
		return false;
	if (sql != sql_seen || at != sql_seen_at)
	{
		sql_found = tracectx_from_sql(sql, strlen(sql), &sql_context);
		sql_seen = sql;
		sql_seen_at = at;
	}
	if (sql_found)
		*ctx = sql_context;
	return sql_found;
}

/* push_string: one key and string value into a jsonb being built. */
static void
push_string(GreloutJsonbBuilder *state, const char *key, const char *value)
{
	JsonbValue	v;

	v.type = jbvString;
	v.val.string.val = (char *) key;
	v.val.string.len = strlen(key);
	grelout_jsonb_push(state, WJB_KEY, &v);
	v.val.string.val = (char *) value;
	v.val.string.len = strlen(value);
	grelout_jsonb_push(state, WJB_VALUE, &v);
}

/*
 * headers_with_context: a copy of a headers object (NULL: none) without
 * its traceparent and tracestate members, in any letter case, and with
 * ctx's (lower-case names; no tracestate if it has none) if ctx is given.
 */
static Jsonb *
headers_with_context(Jsonb *headers, const TraceContext *ctx)
{
	GreloutJsonbBuilder state = {0};
	JsonbValue	v;

	grelout_jsonb_push(&state, WJB_BEGIN_OBJECT, NULL);
	if (headers != NULL)
	{
		JsonbIterator *it = JsonbIteratorInit(&headers->root);
		JsonbIteratorToken tok;
		bool		skip = false;

		while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
		{
			if (tok == WJB_KEY)
			{
				skip = trace_header(v.val.string.val, v.val.string.len) != TRACE_NONE;
				if (!skip)
					grelout_jsonb_push(&state, WJB_KEY, &v);
			}
			else if (tok == WJB_VALUE && !skip)
				grelout_jsonb_push(&state, WJB_VALUE, &v);
		}
	}
	if (ctx != NULL)
	{
		push_string(&state, "traceparent", ctx->traceparent);
		if (ctx->tracestate[0] != '\0')
			push_string(&state, "tracestate", ctx->tracestate);
	}
	return JsonbValueToJsonb(grelout_jsonb_push(&state, WJB_END_OBJECT, NULL));
}

/*
 * trace_context: the publisher's trace context, from the first of: the
 * message's headers object (NULL: none), the settings grelout.traceparent
 * (and grelout.tracestate), a sqlcommenter comment of the client's
 * statement.  A malformed value is passed over for the next source; a
 * tracestate goes only with the traceparent of its source.  *present says
 * whether the headers have a traceparent or tracestate member at all.
 */
static bool
trace_context(Jsonb *headers, TraceContext *ctx, bool *present)
{
	*present = false;
	if (headers != NULL && headers_context(headers, ctx, present))
		return true;
	return setting_context(ctx) || statement_context(ctx);
}

/*
 * message_headers: the headers outbox_publish stores for the given ones
 * (NULL: none): their traceparent and tracestate members, in any letter
 * case, taken out and never refused; the rest checked
 * (grelout_check_headers, message rules under 1.1 and later); then the
 * trace context (trace_context), if any, added as "traceparent" and
 * "tracestate".  Headers that are not an object are only checked (which
 * refuses them).
 */
static Jsonb *
message_headers(Jsonb *given, bool v11)
{
	TraceContext ctx;
	bool		present = false;
	bool		found;
	Jsonb	   *rest = given;

	if (given != NULL &&
		(!JB_ROOT_IS_OBJECT(given) || JB_ROOT_IS_SCALAR(given)))
	{
		grelout_check_headers(given, "message headers", v11);
		return given;
	}
	found = trace_context(given, &ctx, &present);
	if (present)
		rest = headers_with_context(given, NULL);
	if (rest != NULL)
		grelout_check_headers(rest, "message headers", v11);
	if (found)
		return headers_with_context(rest, &ctx);
	return rest != NULL ? rest :
		DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")));
}

/*
 * due_after: when a message published at now with this delay is due:
 * now + delay, computed once with the calendar arithmetic of timestamptz +
 * interval (so '1 mon' is a month, as in 1.0) and stored as that time, so
 * that what is checked is what the relay sees.  An interval too large to
 * count (it would wrap) is refused as such before it can be mistaken for a
 * negative one.
 */
static TimestampTz
due_after(TimestampTz now, Interval *delay)
{
	TimestampTz due;

	(void) grelout_interval_usecs(delay, "delay");
	due = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
												  TimestampTzGetDatum(now),
												  IntervalPGetDatum(delay)));
	if (due < now)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("delay must not be negative"),
				 errdetail("The message would be due before now().")));
	return due;
}

/*
 * publish: outbox_publish(topic, payload, key, headers, delay, dedup_key)
 * under the 1.0 schema (v11 false: 1.0 statements, 1.0 naming rules) or
 * the 1.1 schema (published_by, dedup per role, reserved topics and
 * message header names, run as the caller with raised privileges).
 */
static Datum
publish(FunctionCallInfo fcinfo, bool v11)
{
	text	   *topic;
	Jsonb	   *payload;
	Jsonb	   *headers;
	TimestampTz available_at = GetCurrentTransactionStartTimestamp();
	pg_uuid_t  *id = palloc(sizeof(pg_uuid_t));
	Datum		values[PUBLISH_NARGS];
	char		nulls[PUBLISH_NARGS] = {' ', ' ', 'n', ' ', ' ', 'n', ' ', ' '};
	Oid			publisher = GetUserId();

	/* topic */
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("topic must not be null")));
	topic = PG_GETARG_TEXT_PP(0);
	if (v11)
		grelout_check_publish_topic(topic);
	else
		grelout_check_topic(topic, "topic");

	/* payload */
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("payload must not be null"),
				 errhint("Use the JSON value 'null'::jsonb for an empty body.")));
	payload = PG_GETARG_JSONB_P(1);
	check_payload(payload);

	/* key and dedup_key */
	if (!PG_ARGISNULL(2))
	{
		text	   *key = PG_GETARG_TEXT_PP(2);

		check_key(key);
		values[2] = PointerGetDatum(key);
		nulls[2] = ' ';
	}
	if (!PG_ARGISNULL(5))
	{
		text	   *dedup = PG_GETARG_TEXT_PP(5);

		check_dedup_key(dedup);
		values[5] = PointerGetDatum(dedup);
		nulls[5] = ' ';
	}

	/* headers, with the trace context, which is never refused */
	headers = message_headers(PG_ARGISNULL(3) ? NULL : PG_GETARG_JSONB_P(3), v11);

	/* delay */
	if (!PG_ARGISNULL(4))
		available_at = due_after(available_at, PG_GETARG_INTERVAL_P(4));

	grelout_uuid7(id);
	values[0] = UUIDPGetDatum(id);
	values[1] = PointerGetDatum(topic);
	values[3] = JsonbPGetDatum(payload);
	values[4] = JsonbPGetDatum(headers);
	values[6] = TimestampTzGetDatum(available_at);
	values[7] = ObjectIdGetDatum(publisher);

	if (!v11)
	{
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		stage(prepare_plans_1_0(), values, nulls, id);
		SPI_finish();
	}
	else
		stage_as_publisher(values, nulls, id);

	wake_at_commit = true;
	PG_RETURN_UUID_P(id);
}

/*
 * grelout_publish_change: stage one message under the 1.1 schema exactly
 * as outbox_publish(topic, payload, key) would (the same checks of the
 * payload and the key, the same statement, the relays woken at commit),
 * for the capture triggers of capture.c, with publisher as published_by
 * (the captured table's owner, whichever role wrote the row: capture.c,
 * build_entry).  The topic is the caller's to check; key may be NULL.
 * Its headers are the trace context of the writing statement, if any
 * (trace_context).  search_path is pinned for the checks and the insert.
 */
void
grelout_publish_change(text *topic, Jsonb *payload, text *key, Oid publisher)
{
	static Jsonb *no_headers = NULL;
	Jsonb	   *headers;
	pg_uuid_t	id;
	Datum		values[PUBLISH_NARGS];
	char		nulls[PUBLISH_NARGS] = {' ', ' ', 'n', ' ', ' ', 'n', ' ', ' '};
	int			pin = grelout_pin_search_path();

	check_payload(payload);
	if (key != NULL)
	{
		check_key(key);
		values[2] = PointerGetDatum(key);
		nulls[2] = ' ';
	}
	if (no_headers == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		no_headers = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")));
		MemoryContextSwitchTo(old);
	}

	{
		TraceContext ctx;
		bool		present;

		headers = trace_context(NULL, &ctx, &present) ?
			headers_with_context(NULL, &ctx) : NULL;
	}

	grelout_uuid7(&id);
	values[0] = UUIDPGetDatum(&id);
	values[1] = PointerGetDatum(topic);
	values[3] = JsonbPGetDatum(payload);
	values[4] = JsonbPGetDatum(headers ? headers : no_headers);
	values[6] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	values[7] = ObjectIdGetDatum(publisher);
	stage_as_publisher(values, nulls, &id);
	grelout_unpin_search_path(pin);
	wake_at_commit = true;
}

/*
 * grelout_publish: outbox_publish of the 1.0 schema (SECURITY DEFINER).
 * Its SET clause pins search_path already; pinned here too, in case it
 * was ALTERed away.
 */
Datum
grelout_publish(PG_FUNCTION_ARGS)
{
	int			pin = grelout_pin_search_path();
	Datum		result = publish(fcinfo, false);

	grelout_unpin_search_path(pin);
	return result;
}

/* grelout_publish_1_1: outbox_publish of the 1.1 schema (SECURITY INVOKER). */
Datum
grelout_publish_1_1(PG_FUNCTION_ARGS)
{
	int			pin = grelout_pin_search_path();
	Datum		result = publish(fcinfo, true);

	grelout_unpin_search_path(pin);
	return result;
}

/*
 * status_row: one row of outbox_message_status from a row of status_plan
 * (state, attempts, last_error, available_at, created_at, topic, handler,
 * last_status): its last_error column is the outcome class of the last
 * attempt (outcome_class), never the stored text, which may quote the
 * endpoint's address or the start of its response (a token it echoes).
 */
static void
status_row(ReturnSetInfo *rsinfo, HeapTuple tuple, TupleDesc desc)
{
	Datum		values[8];
	bool		nulls[8];

	heap_deform_tuple(tuple, desc, values, nulls);
	if (!nulls[2] || !nulls[7])
	{
		char		cls[OUTCOME_CLASS_MAX];
		text	   *error = nulls[2] ? NULL : DatumGetTextPP(values[2]);
		int			status = nulls[7] ? 0 : DatumGetInt32(values[7]);

		if (outcome_class(status, error ? VARDATA_ANY(error) : NULL,
						  error ? VARSIZE_ANY_EXHDR(error) : 0,
						  cls, sizeof(cls)) > 0)
		{
			values[2] = CStringGetTextDatum(cls);
			nulls[2] = false;
		}
		else
			nulls[2] = true;
	}
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * grelout_message_status_1_1: outbox_message_status(id) RETURNS TABLE
 * (state, attempts, last_error, available_at, created_at, topic, handler):
 * the message with this id if the calling role (current_user) published
 * it, one row a delivery (its inline delivery, or each fan-out row; one
 * row with handler NULL while it is not routed or waits for a handler);
 * no row for another role's message or an unknown id.  last_error is the
 * outcome class of the delivery's last attempt (status_row).  Runs as its
 * caller and raises its privileges for its one query.
 */
Datum
grelout_message_status_1_1(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			argtypes[2] = {UUIDOID, OIDOID};
	Datum		args[2];
	Oid			save_userid;
	int			save_sec_context;
	int			pin;

	InitMaterializedSRF(fcinfo, 0);
	if (PG_ARGISNULL(0))
		return (Datum) 0;
	args[0] = PG_GETARG_DATUM(0);
	args[1] = ObjectIdGetDatum(GetUserId());
	pin = grelout_pin_search_path();

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(outbox_owner(),
						   save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	PG_TRY();
	{
		int			ret;

		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		grelout_keep_plan(&status_plan,
						  "SELECT d.state, d.attempts, d.last_error, d.available_at,"
						  " o.created_at, o.topic, d.handler, d.last_status"
						  " FROM grelout.outbox AS o CROSS JOIN LATERAL ("
						  "  SELECT o.state, o.attempts, o.last_error,"
						  "   o.available_at, o.handler, o.last_status"
						  "  WHERE o.route <> 'fanout'"
						  "  UNION ALL"
						  "  SELECT f.state, f.attempts, f.last_error,"
						  "   f.available_at, f.handler, f.last_status"
						  "  FROM grelout.fanout AS f"
						  "  WHERE o.route = 'fanout' AND f.message_id = o.id) AS d"
						  " WHERE o.id = $1 AND o.published_by = $2"
						  " ORDER BY d.handler",
						  2, argtypes, 0);
		ret = SPI_execute_plan(status_plan, args, NULL, true, 0);
		if (ret != SPI_OK_SELECT)
			elog(ERROR, "could not read message status: %s", SPI_result_code_string(ret));
		for (uint64 i = 0; i < SPI_processed; i++)
			status_row(rsinfo, SPI_tuptable->vals[i], SPI_tuptable->tupdesc);
		SPI_finish();
	}
	PG_FINALLY();
	{
		SetUserIdAndSecContext(save_userid, save_sec_context);
	}
	PG_END_TRY();
	grelout_unpin_search_path(pin);
	return (Datum) 0;
}

/*
 * run_counted: run one statement with nargs (possibly null) arguments and
 * return how many rows it changed, search_path pinned.
 */
static uint64
run_counted(const char *sql, int nargs, Oid *argtypes, Datum *args,
			const char *nulls, int expected, const char *what)
{
	int			pin = grelout_pin_search_path();
	int			ret;
	uint64		n;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	ret = SPI_execute_with_args(sql, nargs, argtypes, args, nulls, false, 0);
	if (ret != expected)
		elog(ERROR, "could not %s: %s", what, SPI_result_code_string(ret));
	n = SPI_processed;
	SPI_finish();
	grelout_unpin_search_path(pin);
	return n;
}

/*
 * grelout_redrive: outbox_redrive(topic) RETURNS bigint.  Dead messages go
 * back to pending, due now, with attempts reset and no lease, so no late
 * settle of an earlier claim can touch them.
 */
Datum
grelout_redrive(PG_FUNCTION_ARGS)
{
	Oid			argtype = TEXTOID;
	Datum		arg = PG_ARGISNULL(0) ? (Datum) 0 : PG_GETARG_DATUM(0);
	uint64		n;

	n = run_counted("UPDATE grelout.outbox"
					" SET state = 'pending', attempts = 0, available_at = now(),"
					" dead_at = NULL, lease = NULL"
					" WHERE state = 'dead' AND ($1::text IS NULL OR topic = $1)",
					1, &argtype, &arg, PG_ARGISNULL(0) ? "n" : " ",
					SPI_OK_UPDATE, "redrive");
	if (n > 0)
		wake_at_commit = true;
	PG_RETURN_INT64((int64) n);
}

/*
 * grelout_redrive_1_1: outbox_redrive(topic, handler, message_id) RETURNS
 * bigint of the 1.1 schema.  The dead deliveries matching every non-NULL
 * argument, inline or fan-out, go back to pending, due now, with attempts
 * reset and no lease; a fan-out message with a redriven delivery reads
 * pending again.  An inline delivery whose handler no longer exists (a
 * message dead-lettered under 1.0, say; or a dead message never routed)
 * is unrouted instead, to be routed to whatever handlers match it now; a dead fan-out delivery of a deleted
 * handler stays as it is.  Returns how many deliveries.
 */
Datum
grelout_redrive_1_1(PG_FUNCTION_ARGS)
{
	Oid			argtypes[3] = {TEXTOID, TEXTOID, UUIDOID};
	Datum		args[3];
	char		nulls[3];
	int			ret;
	int64		n;
	bool		isnull;
	int			pin = grelout_pin_search_path();

	for (int i = 0; i < 3; i++)
	{
		args[i] = PG_ARGISNULL(i) ? (Datum) 0 : PG_GETARG_DATUM(i);
		nulls[i] = PG_ARGISNULL(i) ? 'n' : ' ';
	}

	/*
	 * The redrive lock, exclusive, until commit: claims in progress, which
	 * chose the heads of keys without this redrive, commit first, and the
	 * claims that start before this commits leave ordered deliveries alone
	 * (store_claim).  So a redriven head of a 'skip' handler never goes
	 * out while a later message of its key is being claimed.
	 */
	(void) DirectFunctionCall2(pg_advisory_xact_lock_int4,
							   Int32GetDatum(ROUTING_LOCK_KEY1),
							   Int32GetDatum(REDRIVE_LOCK_KEY2));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	ret = SPI_execute_with_args("WITH fr AS ("
								" UPDATE grelout.fanout AS f"
								" SET state = 'pending', attempts = 0, available_at = now(),"
								"  dead_at = NULL, lease = NULL"
								" FROM grelout.outbox AS o"
								" WHERE f.state = 'dead' AND o.id = f.message_id"
								"  AND EXISTS (SELECT 1 FROM grelout.handlers AS h"
								"   WHERE h.name = f.handler)"
								"  AND ($1::text IS NULL OR o.topic = $1)"
								"  AND ($2::text IS NULL OR f.handler = $2)"
								"  AND ($3::uuid IS NULL OR f.message_id = $3)"
								" RETURNING f.message_id),"
								" fm AS ("
								" UPDATE grelout.outbox AS o"
								" SET state = 'pending', dead_at = NULL, delivered_at = NULL,"
								"  lease = NULL"
								" WHERE o.id IN (SELECT fr.message_id FROM fr)"
								"  AND o.route = 'fanout' AND o.state IN ('dead', 'delivered')),"
								" ir AS ("
								" UPDATE grelout.outbox AS o"
								" SET state = 'pending', attempts = 0, available_at = now(),"
								"  dead_at = NULL, lease = NULL,"
								"  route = CASE WHEN EXISTS (SELECT 1 FROM grelout.handlers AS h"
								"   WHERE h.name = o.handler) THEN 'single' ELSE 'new' END,"
								"  handler = (SELECT h.name FROM grelout.handlers AS h"
								"   WHERE h.name = o.handler)"
								" WHERE o.state = 'dead' AND o.route <> 'fanout'"
								"  AND ($1::text IS NULL OR o.topic = $1)"
								"  AND ($2::text IS NULL OR o.handler = $2)"
								"  AND ($3::uuid IS NULL OR o.id = $3)"
								" RETURNING 1)"
								" SELECT (SELECT count(*) FROM fr) + (SELECT count(*) FROM ir)",
								3, argtypes, args, nulls, false, 0);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not redrive: %s", SPI_result_code_string(ret));
	n = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
									1, &isnull));
	SPI_finish();
	grelout_unpin_search_path(pin);
	if (n > 0)
		wake_at_commit = true;
	PG_RETURN_INT64(n);
}

/* check_older_than: a retention window is not negative. */
static void
check_older_than(FunctionCallInfo fcinfo)
{
	if (!PG_ARGISNULL(0) &&
		grelout_interval_usecs(PG_GETARG_INTERVAL_P(0), "older_than") < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("older_than must not be negative")));
}

/*
 * grelout_purge: outbox_purge(older_than) RETURNS bigint of the 1.0
 * schema.  Deletes delivered and dead messages, all or those delivered or
 * dead longer ago than older_than; never pending or processing ones.
 */
Datum
grelout_purge(PG_FUNCTION_ARGS)
{
	Oid			argtype = INTERVALOID;
	Datum		arg = PG_ARGISNULL(0) ? (Datum) 0 : PG_GETARG_DATUM(0);
	uint64		n;

	check_older_than(fcinfo);
	n = run_counted("DELETE FROM grelout.outbox"
					" WHERE state IN ('delivered', 'dead')"
					" AND ($1::interval IS NULL OR"
					" coalesce(CASE state WHEN 'delivered' THEN delivered_at"
					" ELSE dead_at END, created_at) < now() - $1)",
					1, &argtype, &arg, PG_ARGISNULL(0) ? "n" : " ",
					SPI_OK_DELETE, "purge");
	PG_RETURN_INT64((int64) n);
}

/*
 * grelout_purge_1_1: outbox_purge(older_than, topic, pending, message_id)
 * RETURNS bigint of the 1.1 schema.  As in 1.0 it deletes delivered and
 * dead messages (of topic only, of the message message_id only, when
 * given); with pending => true it also deletes the undelivered (pending or
 * processing) messages of topic or the message, for messages no handler
 * will ever take, and then a topic or a message id is required.
 * older_than counts from delivery or dead-lettering, or from creation for
 * an undelivered message.  A fan-out message goes with its deliveries'
 * rows.  (Purging a dead head of an ordered handler's key lets the key's
 * next message go.)
 */
Datum
grelout_purge_1_1(PG_FUNCTION_ARGS)
{
	Oid			argtypes[4] = {INTERVALOID, TEXTOID, BOOLOID, UUIDOID};
	Datum		args[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	bool		pending = !PG_ARGISNULL(2) && PG_GETARG_BOOL(2);
	bool		has_id = PG_NARGS() > 3 && !PG_ARGISNULL(3);
	int			ret;
	int64		n;
	bool		isnull;
	int			pin;

	check_older_than(fcinfo);
	if (pending && PG_ARGISNULL(1) && !has_id)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("outbox_purge with pending => true needs a topic or a message id"),
				 errhint("Name the topic whose undelivered messages are to be deleted, or the message.")));
	for (int i = 0; i < 2; i++)
	{
		args[i] = PG_ARGISNULL(i) ? (Datum) 0 : PG_GETARG_DATUM(i);
		nulls[i] = PG_ARGISNULL(i) ? 'n' : ' ';
	}
	args[2] = BoolGetDatum(pending);
	args[3] = has_id ? PG_GETARG_DATUM(3) : (Datum) 0;
	nulls[3] = has_id ? ' ' : 'n';

	pin = grelout_pin_search_path();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	ret = SPI_execute_with_args("WITH d AS ("
								" DELETE FROM grelout.outbox"
								" WHERE (state IN ('delivered', 'dead')"
								" OR ($3 AND state IN ('pending', 'processing')))"
								" AND ($2::text IS NULL OR topic = $2)"
								" AND ($4::uuid IS NULL OR id = $4)"
								" AND ($1::interval IS NULL OR"
								" coalesce(CASE state WHEN 'delivered' THEN delivered_at"
								" WHEN 'dead' THEN dead_at END, created_at) < now() - $1)"
								" RETURNING id, route),"
								" r AS ("
								" DELETE FROM grelout.fanout AS f USING d"
								" WHERE d.route = 'fanout' AND f.message_id = d.id)"
								" SELECT count(*) FROM d",
								4, argtypes, args, nulls, false, 0);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not purge: %s", SPI_result_code_string(ret));
	n = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
									1, &isnull));
	SPI_finish();
	grelout_unpin_search_path(pin);
	PG_RETURN_INT64(n);
}

/*
 * grelout_wake: grelout._wake() RETURNS void.  Wake the relays when the
 * current transaction commits: the handler triggers call it after making
 * messages routable again.
 */
Datum
grelout_wake(PG_FUNCTION_ARGS)
{
	wake_at_commit = true;
	PG_RETURN_VOID();
}
