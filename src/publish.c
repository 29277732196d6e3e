/*-------------------------------------------------------------------------
 *
 * publish.c
 *	  The producer side of grelout: outbox_publish, which stages a message
 *	  in the caller's transaction; the operator functions outbox_redrive and
 *	  outbox_purge; and the wake-up of the relays when a transaction that
 *	  published (or redrove) commits.
 *
 * outbox_publish never opens, commits or rolls back anything: its INSERT is
 * part of the caller's transaction, savepoints included.  Its statements
 * are planned once per backend and kept.
 *
 *-------------------------------------------------------------------------
 */
#include "grelout.h"

#include "access/xact.h"
#include "common/int.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(grelout_publish);
PG_FUNCTION_INFO_V1(grelout_redrive);
PG_FUNCTION_INFO_V1(grelout_purge);

#define MAX_TOPIC_BYTES		255
#define MAX_KEY_BYTES		255

/* Set when the current transaction staged work for the relays. */
static bool wake_at_commit = false;

static ProcessUtility_hook_type prev_process_utility = NULL;

/* Plans kept for the life of the backend. */
static SPIPlanPtr insert_plan = NULL;
static SPIPlanPtr insert_dedup_plan = NULL;
static SPIPlanPtr lookup_dedup_plan = NULL;

/*
 * publish_xact_callback: after a commit that staged messages, wake the
 * relays; forget the flag when the transaction aborts or is prepared.
 */
static void
publish_xact_callback(XactEvent event, void *arg)
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
 * publish_process_utility: COMMIT PREPARED makes the messages of a
 * prepared transaction visible without a commit callback of the session
 * that published them, so wake the relays when it succeeds.
 */
static void
publish_process_utility(PlannedStmt *pstmt, const char *queryString,
						bool readOnlyTree, ProcessUtilityContext context,
						ParamListInfo params, QueryEnvironment *queryEnv,
						DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;

	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context,
							 params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);

	if (IsA(parsetree, TransactionStmt) &&
		((TransactionStmt *) parsetree)->kind == TRANS_STMT_COMMIT_PREPARED)
		grelout_wake_relays();
}

/* grelout_publish_init: install the commit callback and utility hook. */
void
grelout_publish_init(void)
{
	RegisterXactCallback(publish_xact_callback, NULL);
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = publish_process_utility;
}

/* keep_plan: prepare a statement once and keep it for the backend's life. */
static SPIPlanPtr
keep_plan(const char *sql, int nargs, Oid *argtypes)
{
	SPIPlanPtr	plan = SPI_prepare(sql, nargs, argtypes);

	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s",
			 sql, SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	return plan;
}

/* prepare_plans: the statements of outbox_publish. */
static void
prepare_plans(void)
{
	Oid			types[7] = {UUIDOID, TEXTOID, TEXTOID, JSONBOID, JSONBOID,
	TEXTOID, TIMESTAMPTZOID};

	if (insert_plan == NULL)
		insert_plan = keep_plan(
								"INSERT INTO grelout.outbox"
								" (id, topic, key, payload, headers, available_at)"
								" VALUES ($1, $2, $3, $4, $5, $7)",
								7, types);
	if (insert_dedup_plan == NULL)
		insert_dedup_plan = keep_plan(
									  "INSERT INTO grelout.outbox"
									  " (id, topic, key, payload, headers, dedup_key, available_at)"
									  " VALUES ($1, $2, $3, $4, $5, $6, $7)"
									  " ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL"
									  " DO NOTHING",
									  7, types);
	if (lookup_dedup_plan == NULL)
		lookup_dedup_plan = keep_plan(
									  "SELECT id FROM grelout.outbox WHERE dedup_key = $1",
									  1, &types[5]);
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
 * check_no_control: refuse ASCII control characters, which could not be
 * sent in a request header.
 */
static void
check_no_control(text *value, const char *what)
{
	const char *p = VARDATA_ANY(value);

	for (int i = 0; i < VARSIZE_ANY_EXHDR(value); i++)
	{
		unsigned char c = (unsigned char) p[i];

		if (c < 0x20 || c == 0x7F)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s must not contain control characters", what)));
	}
}

/*
 * grelout_publish: outbox_publish(topic, payload, key, headers, delay,
 * dedup_key) RETURNS uuid.
 */
Datum
grelout_publish(PG_FUNCTION_ARGS)
{
	text	   *topic;
	Jsonb	   *payload;
	Jsonb	   *headers;
	TimestampTz available_at = GetCurrentTransactionStartTimestamp();
	pg_uuid_t  *id = palloc(sizeof(pg_uuid_t));
	Datum		values[7];
	char		nulls[7] = {' ', ' ', 'n', ' ', ' ', 'n', ' '};
	bool		has_dedup = !PG_ARGISNULL(5);
	int			ret;

	/* topic */
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("topic must not be null")));
	topic = PG_GETARG_TEXT_PP(0);
	if (VARSIZE_ANY_EXHDR(topic) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("topic must not be empty")));
	check_length(topic, "topic", MAX_TOPIC_BYTES);
	check_no_control(topic, "topic");

	/* payload */
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("payload must not be null"),
				 errhint("Use the JSON value 'null'::jsonb for an empty body.")));
	payload = PG_GETARG_JSONB_P(1);
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

	/* key and dedup_key */
	if (!PG_ARGISNULL(2))
	{
		check_length(PG_GETARG_TEXT_PP(2), "key", MAX_KEY_BYTES);
		/* the key travels in the grelout-key request header */
		check_no_control(PG_GETARG_TEXT_PP(2), "key");
		values[2] = PG_GETARG_DATUM(2);
		nulls[2] = ' ';
	}
	if (has_dedup)
	{
		text	   *dedup = PG_GETARG_TEXT_PP(5);

		check_length(dedup, "dedup_key", MAX_KEY_BYTES);
		if (VARSIZE_ANY_EXHDR(dedup) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("dedup_key must not be empty"),
					 errhint("Pass NULL for no deduplication.")));
		values[5] = PointerGetDatum(dedup);
		nulls[5] = ' ';
	}

	/* headers */
	if (PG_ARGISNULL(3))
		headers = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")));
	else
	{
		headers = PG_GETARG_JSONB_P(3);
		grelout_check_headers(headers, "message headers");
	}

	/*
	 * delay: converted once, overflow-checked, and stored as the time it
	 * gives, so that what is checked is what the relay sees.
	 */
	if (!PG_ARGISNULL(4))
	{
		int64		usecs = grelout_interval_usecs(PG_GETARG_INTERVAL_P(4), "delay");

		if (usecs < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("delay must not be negative")));
		if (pg_add_s64_overflow(available_at, usecs, &available_at) ||
			!IS_VALID_TIMESTAMP(available_at))
			ereport(ERROR,
					(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
					 errmsg("delay is too large"),
					 errdetail("The message would be due after the last timestamp PostgreSQL can store.")));
	}

	grelout_uuid7(id);
	values[0] = UUIDPGetDatum(id);
	values[1] = PointerGetDatum(topic);
	values[3] = JsonbPGetDatum(payload);
	values[4] = JsonbPGetDatum(headers);
	values[6] = TimestampTzGetDatum(available_at);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	prepare_plans();

	if (!has_dedup)
	{
		ret = SPI_execute_plan(insert_plan, values, nulls, false, 0);
		if (ret != SPI_OK_INSERT || SPI_processed != 1)
			elog(ERROR, "could not stage message: %s", SPI_result_code_string(ret));
	}
	else
	{
		/*
		 * A conflict means a message with this dedup_key is stored: return
		 * its id.  If that row is deleted between the two statements (it was
		 * delivered meanwhile), the insert is tried again.
		 */
		for (int tries = 0;; tries++)
		{
			ret = SPI_execute_plan(insert_dedup_plan, values, nulls, false, 0);
			if (ret != SPI_OK_INSERT)
				elog(ERROR, "could not stage message: %s", SPI_result_code_string(ret));
			if (SPI_processed == 1)
				break;

			ret = SPI_execute_plan(lookup_dedup_plan, &values[5], &nulls[5], false, 1);
			if (ret != SPI_OK_SELECT)
				elog(ERROR, "could not look up dedup_key: %s", SPI_result_code_string(ret));
			if (SPI_processed == 1)
			{
				bool		isnull;
				Datum		d = SPI_getbinval(SPI_tuptable->vals[0],
											  SPI_tuptable->tupdesc, 1, &isnull);

				memcpy(id, DatumGetUUIDP(d), sizeof(pg_uuid_t));
				break;
			}
			if (tries >= 10)
				ereport(ERROR,
						(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						 errmsg("could not stage message with dedup_key: the stored message kept changing"),
						 errhint("Retry the transaction.")));
		}
	}
	SPI_finish();

	wake_at_commit = true;
	PG_RETURN_UUID_P(id);
}

/*
 * run_counted: run one statement with one (possibly null) argument and
 * return how many rows it changed.
 */
static uint64
run_counted(const char *sql, Oid argtype, Datum arg, bool argnull,
			int expected, const char *what)
{
	char		nulls[1] = {argnull ? 'n' : ' '};
	int			ret;
	uint64		n;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	ret = SPI_execute_with_args(sql, 1, &argtype, &arg, nulls, false, 0);
	if (ret != expected)
		elog(ERROR, "could not %s: %s", what, SPI_result_code_string(ret));
	n = SPI_processed;
	SPI_finish();
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
	uint64		n;

	n = run_counted("UPDATE grelout.outbox"
					" SET state = 'pending', attempts = 0, available_at = now(),"
					" dead_at = NULL, lease = NULL"
					" WHERE state = 'dead' AND ($1::text IS NULL OR topic = $1)",
					TEXTOID, PG_ARGISNULL(0) ? (Datum) 0 : PG_GETARG_DATUM(0),
					PG_ARGISNULL(0), SPI_OK_UPDATE, "redrive");
	if (n > 0)
		wake_at_commit = true;
	PG_RETURN_INT64((int64) n);
}

/*
 * grelout_purge: outbox_purge(older_than) RETURNS bigint.  Deletes
 * delivered and dead messages, all or those delivered or dead longer ago
 * than older_than; never pending or processing ones.
 */
Datum
grelout_purge(PG_FUNCTION_ARGS)
{
	uint64		n;

	if (!PG_ARGISNULL(0) &&
		grelout_interval_usecs(PG_GETARG_INTERVAL_P(0), "older_than") < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("older_than must not be negative")));

	n = run_counted("DELETE FROM grelout.outbox"
					" WHERE state IN ('delivered', 'dead')"
					" AND ($1::interval IS NULL OR"
					" coalesce(CASE state WHEN 'delivered' THEN delivered_at"
					" ELSE dead_at END, created_at) < now() - $1)",
					INTERVALOID, PG_ARGISNULL(0) ? (Datum) 0 : PG_GETARG_DATUM(0),
					PG_ARGISNULL(0), SPI_OK_DELETE, "purge");
	PG_RETURN_INT64((int64) n);
}
