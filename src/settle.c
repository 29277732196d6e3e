/*-------------------------------------------------------------------------
 *
 * settle.c
 *	  The end of a delivery: the batched settle of many outcomes (inline
 *	  rows and fan-out rows, fenced by their lease), the finalize of fan-out
 *	  messages whose deliveries are all finished (for the relay, and for the
 *	  handler triggers of the 1.2 schema through grelout._finalize_fanout),
 *	  the lease recovery at start, the next due time, and the retention
 *	  purges of delivered messages and (1.2) of the attempt log, whose
 *	  rows the settle writes.
 *
 * Each statement is planned once per backend and kept; each has a 1.0
 * form (every delivery inline in its outbox row) and a 1.1 one (inline
 * deliveries and grelout.fanout rows), chosen by the StoreSchema the
 * caller passes.  Every function here runs inside a transaction that the
 * relay opened (or the trigger's), with SPI connected and a snapshot
 * pushed.
 *
 *-------------------------------------------------------------------------
 */
#include "store.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/datum.h"

/* Delivered and not kept: delete, only while the row holds our lease. */
static const char *delete_sql =
"DELETE FROM grelout.outbox o"
" USING unnest($1::uuid[], $2::int8[]) AS s(id, lease)"
" WHERE o.id = s.id AND o.lease = s.lease";

/*
 * Every other outcome, fenced the same way.  'release' hands back a claim
 * whose request a stopping relay could not finish: pending, due after
 * delay_ms (0: now), the attempt given back.
 */
static const char *update_sql =
"UPDATE grelout.outbox o SET"
" state = CASE WHEN s.state = 'release' THEN 'pending' ELSE s.state END,"
" attempts = CASE WHEN s.state = 'release' THEN greatest(o.attempts - 1, 0)"
"  ELSE o.attempts END,"
" available_at = CASE WHEN s.state IN ('pending', 'release')"
"  THEN now() + s.delay_ms * interval '1 millisecond' ELSE o.available_at END,"
" last_error = CASE WHEN s.state IN ('delivered', 'release') THEN o.last_error"
"  ELSE s.error END,"
" delivered_at = CASE WHEN s.state = 'delivered' THEN now() END,"
" dead_at = CASE WHEN s.state = 'dead' THEN now() END,"
" lease = NULL"
" FROM unnest($1::uuid[], $2::int8[], $3::text[], $4::float8[], $5::text[])"
"  AS s(id, lease, state, delay_ms, error)"
" WHERE o.id = s.id AND o.lease = s.lease";

/* How long until the next message or lease comes due. */
static const char *next_due_sql =
"SELECT (extract(epoch FROM min(available_at) - now()) * 1000)::int8"
" FROM grelout.outbox"
" WHERE state IN ('pending', 'processing') AND available_at > now()";

/* A small batch of delivered rows past their retention window. */
static const char *purge_sql =
"DELETE FROM grelout.outbox WHERE id IN ("
" SELECT id FROM grelout.outbox"
" WHERE state = 'delivered'"
"  AND delivered_at < now() - $1 * interval '1 millisecond'"
" LIMIT $2)";

/* Claims made before this server started: their relays are gone. */
static const char *release_sql =
"UPDATE grelout.outbox SET available_at = now()"
" WHERE state = 'processing' AND available_at > now()";


/*
 * 1.1: the inline outcomes, as in 1.0, with the attempt's status and
 * duration (also the first part of update_log_sql_12).
 */
#define INLINE_UPDATE_SQL \
"UPDATE grelout.outbox o SET" \
" state = CASE WHEN s.state IN ('release', 'hold') THEN 'pending'" \
"  ELSE s.state END," \
" attempts = CASE WHEN s.state IN ('release', 'hold')" \
"  THEN greatest(o.attempts - 1, 0) ELSE o.attempts END," \
" available_at = CASE WHEN s.state IN ('pending', 'release', 'hold')" \
"  THEN now() + s.delay_ms * interval '1 millisecond' ELSE o.available_at END," \
" last_error = CASE WHEN s.state IN ('delivered', 'release') THEN o.last_error" \
"  ELSE s.error END," \
" last_status = CASE WHEN s.state = 'release' THEN o.last_status ELSE s.status END," \
" last_duration_ms = CASE WHEN s.state = 'release' THEN o.last_duration_ms" \
"  ELSE s.duration_ms END," \
" delivered_at = CASE WHEN s.state = 'delivered' THEN now() END," \
" dead_at = CASE WHEN s.state = 'dead' THEN now() END," \
" lease = NULL" \
" FROM unnest($1::uuid[], $2::int8[], $3::text[], $4::float8[], $5::text[]," \
"  $6::int4[], $7::int4[])" \
"  AS s(id, lease, state, delay_ms, error, status, duration_ms)" \
" WHERE o.id = s.id AND o.lease = s.lease"

static const char *update_sql_11 = INLINE_UPDATE_SQL;

/* 1.1: the messages of fan-out rows that changed (see lock_messages). */
static const char *fanout_lock_sql_11 =
"SELECT 1 FROM grelout.outbox o WHERE o.id = ANY ($1::uuid[])"
" ORDER BY o.id FOR UPDATE OF o";

/*
 * The fan-out outcomes' UPDATE, on the rows of s (the statements below):
 * fanout_update_sql_11 and fanout_update_log_sql_12.
 */
#define FANOUT_UPDATE_SQL \
"UPDATE grelout.fanout f SET" \
" state = CASE WHEN s.state IN ('release', 'hold') THEN 'pending'" \
"  ELSE s.state END," \
" attempts = CASE WHEN s.state IN ('release', 'hold')" \
"  THEN greatest(f.attempts - 1, 0) ELSE f.attempts END," \
" available_at = CASE WHEN s.state IN ('pending', 'release', 'hold')" \
"  THEN now() + s.delay_ms * interval '1 millisecond' ELSE f.available_at END," \
" last_error = CASE WHEN s.state IN ('delivered', 'release') THEN f.last_error" \
"  ELSE s.error END," \
" last_status = CASE WHEN s.state = 'release' THEN f.last_status ELSE s.status END," \
" last_duration_ms = CASE WHEN s.state = 'release' THEN f.last_duration_ms" \
"  ELSE s.duration_ms END," \
" delivered_at = CASE WHEN s.state = 'delivered' THEN now() END," \
" dead_at = CASE WHEN s.state = 'dead' THEN now() END," \
" lease = NULL" \
" FROM s" \
" WHERE ($9 OR s.state <> 'delivered')" \
"  AND f.message_id = s.id AND f.handler = s.handler AND f.lease = s.lease"

/*
 * 1.1: the fan-out outcomes, fenced by (message, handler, lease).  A
 * delivered row is deleted at once unless delivered rows are kept ($9), as
 * an inline delivery is: its message's fanout_delivered (finalize_sql_11)
 * keeps the fact that it was delivered.  Returns the messages of the rows
 * so deleted.
 */
static const char *fanout_update_sql_11 =
"WITH s AS MATERIALIZED ("
" SELECT * FROM unnest($1::uuid[], $2::text[], $3::int8[], $4::text[],"
"  $5::float8[], $6::text[], $7::int4[], $8::int4[])"
"  AS s(id, handler, lease, state, delay_ms, error, status, duration_ms)),"
" gone AS ("
" DELETE FROM grelout.fanout f USING s"
" WHERE NOT $9 AND s.state = 'delivered'"
"  AND f.message_id = s.id AND f.handler = s.handler AND f.lease = s.lease"
" RETURNING f.message_id),"
" u AS ("
FANOUT_UPDATE_SQL ")"
" SELECT array_agg(DISTINCT gone.message_id) FROM gone";

/*
 * 1.1: finalize the fan-out messages among $1 whose deliveries are all
 * finished: dead if one is dead, else delivered, and then, unless
 * delivered messages are kept ($2), deleted with their rows.  A message
 * with no row left had them all delivered and deleted by the settle.  The
 * unfinished messages among $3, whose delivered rows the settle deleted,
 * keep that fact in fanout_delivered (for the handler triggers, which
 * finish a message whose last unfinished delivery they delete only if
 * another was delivered).  A message finished dead here keeps it too, in
 * the same update that finishes it (one statement cannot update a row
 * twice): a redrive makes it unfinished again, and deleting the redriven
 * handler then must not take it for a message that nobody delivered.
 */
static const char *finalize_sql_11 =
"WITH t AS (SELECT DISTINCT x.id FROM unnest($1::uuid[]) AS x(id)),"
" a AS MATERIALIZED ("
" SELECT t.id, bool_or(f.state = 'dead') IS TRUE AS any_dead"
" FROM t LEFT JOIN grelout.fanout f ON f.message_id = t.id"
" GROUP BY t.id"
" HAVING NOT bool_or(f.state IN ('pending', 'processing')) IS TRUE),"
" marked AS ("
" UPDATE grelout.outbox o SET fanout_delivered = true"
" WHERE o.id = ANY ($3::uuid[]) AND NOT o.fanout_delivered"
"  AND o.route = 'fanout' AND o.state IN ('pending', 'processing')"
"  AND o.id NOT IN (SELECT a.id FROM a)),"
" gone AS ("
" DELETE FROM grelout.outbox o USING a"
" WHERE NOT $2 AND NOT a.any_dead AND o.id = a.id"
"  AND o.route = 'fanout' AND o.state IN ('pending', 'processing')"
" RETURNING o.id),"
" gone_rows AS ("
" DELETE FROM grelout.fanout f USING gone WHERE f.message_id = gone.id)"
" UPDATE grelout.outbox o SET"
"  state = CASE WHEN a.any_dead THEN 'dead' ELSE 'delivered' END,"
"  delivered_at = CASE WHEN a.any_dead THEN NULL ELSE now() END,"
"  dead_at = CASE WHEN a.any_dead THEN now() END,"
"  fanout_delivered = o.fanout_delivered OR coalesce(o.id = ANY ($3::uuid[]), false),"
"  lease = NULL"
" FROM a"
" WHERE o.id = a.id AND o.route = 'fanout'"
"  AND o.state IN ('pending', 'processing') AND (a.any_dead OR $2)";

/*
 * 1.1: how long until the next delivery or lease of an enabled handler
 * comes due, per handler through the claim indexes.
 */
static const char *next_due_sql_11 =
"SELECT (extract(epoch FROM least("
" (SELECT min(x.at) FROM grelout.handlers h CROSS JOIN LATERAL ("
"   SELECT min(o.available_at) AS at FROM grelout.outbox o"
"   WHERE o.handler = h.name AND o.route = 'single'"
"    AND o.state IN ('pending', 'processing') AND o.available_at > now()) x"
"  WHERE h.enabled),"
" (SELECT min(x.at) FROM grelout.handlers h CROSS JOIN LATERAL ("
"   SELECT min(f.available_at) AS at FROM grelout.fanout f"
"   WHERE f.handler = h.name"
"    AND f.state IN ('pending', 'processing') AND f.available_at > now()) x"
"  WHERE h.enabled)"
" ) - now()) * 1000)::int8";

/* 1.1: the retention purge, a message with its fan-out rows. */
static const char *purge_sql_11 =
"WITH d AS ("
" DELETE FROM grelout.outbox WHERE id IN ("
"  SELECT id FROM grelout.outbox"
"  WHERE state = 'delivered'"
"   AND delivered_at < now() - $1 * interval '1 millisecond'"
"  LIMIT $2)"
" RETURNING id, route),"
" r AS ("
" DELETE FROM grelout.fanout f USING d"
" WHERE d.route = 'fanout' AND f.message_id = d.id)"
" SELECT count(*) FROM d";

/* 1.1: claims of both kinds made before this server started. */
static const char *release_sql_11 =
"WITH f AS ("
" UPDATE grelout.fanout SET available_at = now()"
" WHERE state = 'processing' AND available_at > now() RETURNING 1),"
" o AS ("
" UPDATE grelout.outbox SET available_at = now()"
" WHERE state = 'processing' AND available_at > now() RETURNING 1)"
" SELECT (SELECT count(*) FROM f) + (SELECT count(*) FROM o)";

/*
 * 1.2: the settle statements of a batch with logged attempts: each writes
 * the rows of grelout.attempts of the outcomes it settled (those whose
 * delivery still carried their lease), in the same statement, so that an
 * attempt whose settle changes nothing leaves no row and one whose settle
 * commits always does.  The attempts' columns follow the statement's own
 * parameters, as unnest() takes them: id, handler, attempt, started_at,
 * duration_ms, status, error, response_body, content_type.
 *
 * Delivered inline rows not kept: delete_sql, and the rows it deleted.
 */
static const char *delete_log_sql_12 =
"WITH d AS ("
" DELETE FROM grelout.outbox o"
" USING unnest($1::uuid[], $2::int8[]) AS s(id, lease)"
" WHERE o.id = s.id AND o.lease = s.lease"
" RETURNING o.id)"
" INSERT INTO grelout.attempts (message_id, handler, attempt, started_at,"
"  duration_ms, status, error, response_body, content_type)"
" SELECT a.* FROM unnest($3::uuid[], $4::text[], $5::int4[],"
"  $6::timestamptz[], $7::int4[], $8::int4[], $9::text[], $10::text[],"
"  $11::text[])"
"  AS a(id, handler, attempt, started_at, duration_ms, status, error,"
"  response_body, content_type)"
" WHERE a.id IN (SELECT d.id FROM d)";

/* 1.2: every other inline outcome: update_sql_11, and the rows it updated. */
static const char *update_log_sql_12 =
"WITH u AS (" INLINE_UPDATE_SQL
" RETURNING o.id)"
" INSERT INTO grelout.attempts (message_id, handler, attempt, started_at,"
"  duration_ms, status, error, response_body, content_type)"
" SELECT a.* FROM unnest($8::uuid[], $9::text[], $10::int4[],"
"  $11::timestamptz[], $12::int4[], $13::int4[], $14::text[], $15::text[],"
"  $16::text[])"
"  AS a(id, handler, attempt, started_at, duration_ms, status, error,"
"  response_body, content_type)"
" WHERE a.id IN (SELECT u.id FROM u)";

/*
 * 1.2: the fan-out outcomes: fanout_update_sql_11, and the rows of the
 * (message, handler) pairs it deleted or updated.
 */
static const char *fanout_update_log_sql_12 =
"WITH s AS MATERIALIZED ("
" SELECT * FROM unnest($1::uuid[], $2::text[], $3::int8[], $4::text[],"
"  $5::float8[], $6::text[], $7::int4[], $8::int4[])"
"  AS s(id, handler, lease, state, delay_ms, error, status, duration_ms)),"
" gone AS ("
" DELETE FROM grelout.fanout f USING s"
" WHERE NOT $9 AND s.state = 'delivered'"
"  AND f.message_id = s.id AND f.handler = s.handler AND f.lease = s.lease"
" RETURNING f.message_id, f.handler),"
" u AS ("
FANOUT_UPDATE_SQL
" RETURNING f.message_id, f.handler),"
" logged AS ("
" INSERT INTO grelout.attempts (message_id, handler, attempt, started_at,"
"  duration_ms, status, error, response_body, content_type)"
" SELECT a.* FROM unnest($10::uuid[], $11::text[], $12::int4[],"
"  $13::timestamptz[], $14::int4[], $15::int4[], $16::text[], $17::text[],"
"  $18::text[])"
"  AS a(id, handler, attempt, started_at, duration_ms, status, error,"
"  response_body, content_type)"
" WHERE (a.id, a.handler) IN (SELECT gone.message_id, gone.handler FROM gone"
"  UNION ALL SELECT u.message_id, u.handler FROM u))"
" SELECT array_agg(DISTINCT gone.message_id) FROM gone";

/* 1.2: a small batch of the attempts' rows past grelout.keep_attempts. */
static const char *purge_attempts_sql_12 =
"DELETE FROM grelout.attempts WHERE ctid = ANY (ARRAY("
" SELECT ctid FROM grelout.attempts"
" WHERE started_at < now() - $1 * interval '1 millisecond'"
" LIMIT $2))";

static SPIPlanPtr delete_log_plan_12 = NULL;
static SPIPlanPtr update_log_plan_12 = NULL;
static SPIPlanPtr fanout_update_log_plan_12 = NULL;
static SPIPlanPtr purge_attempts_plan_12 = NULL;
static SPIPlanPtr delete_plan = NULL;
static SPIPlanPtr update_plan = NULL;
static SPIPlanPtr next_due_plan = NULL;
static SPIPlanPtr purge_plan = NULL;
static SPIPlanPtr update_plan_11 = NULL;
static SPIPlanPtr fanout_lock_plan_11 = NULL;
static SPIPlanPtr fanout_update_plan_11 = NULL;
static SPIPlanPtr finalize_plan_11 = NULL;
static SPIPlanPtr next_due_plan_11 = NULL;
static SPIPlanPtr purge_plan_11 = NULL;

/* The attempt log's rows of one batch's logged outcomes (1.2). */
typedef struct AttemptRows
{
	int			n;
	Datum	   *ids;
	Datum	   *handlers;
	Datum	   *attempts;
	Datum	   *started;
	Datum	   *durations;
	bool	   *duration_nulls;
	Datum	   *statuses;
	bool	   *status_nulls;
	Datum	   *errors;
	bool	   *error_nulls;
	Datum	   *bodies;
	bool	   *body_nulls;
	Datum	   *ctypes;
	bool	   *ctype_nulls;
} AttemptRows;

/* The attempts' columns a settle statement takes after its own. */
#define ATTEMPT_COLUMNS 9

/* The columns of one batch of outcomes, as arrays are built from them. */
typedef struct SettleBatch
{
	int			n;
	int			size;
	Datum	   *ids;
	Datum	   *handlers;
	Datum	   *leases;
	Datum	   *states;
	Datum	   *delays;
	Datum	   *errors;
	bool	   *error_nulls;
	Datum	   *statuses;
	bool	   *status_nulls;
	Datum	   *durations;
	bool	   *duration_nulls;
	AttemptRows log;			/* its logged attempts; log.n 0: none */
} SettleBatch;

/* batch_init: room for n outcomes. */
static void
batch_init(SettleBatch *b, int n)
{
	b->n = 0;
	b->size = n;
	b->ids = palloc(sizeof(Datum) * n);
	b->handlers = palloc(sizeof(Datum) * n);
	b->leases = palloc(sizeof(Datum) * n);
	b->states = palloc(sizeof(Datum) * n);
	b->delays = palloc(sizeof(Datum) * n);
	b->errors = palloc(sizeof(Datum) * n);
	b->error_nulls = palloc(sizeof(bool) * n);
	b->statuses = palloc(sizeof(Datum) * n);
	b->status_nulls = palloc(sizeof(bool) * n);
	b->durations = palloc(sizeof(Datum) * n);
	b->duration_nulls = palloc(sizeof(bool) * n);
	memset(&b->log, 0, sizeof(b->log));
}

/*
 * log_add: the attempt log's row of an outcome, in its batch (the arrays
 * made at the batch's first logged outcome).
 */
static void
log_add(AttemptRows *r, int size, SettleItem *it)
{
	int			i;

	if (r->ids == NULL)
	{
		r->ids = palloc(sizeof(Datum) * size);
		r->handlers = palloc(sizeof(Datum) * size);
		r->attempts = palloc(sizeof(Datum) * size);
		r->started = palloc(sizeof(Datum) * size);
		r->durations = palloc(sizeof(Datum) * size);
		r->duration_nulls = palloc(sizeof(bool) * size);
		r->statuses = palloc(sizeof(Datum) * size);
		r->status_nulls = palloc(sizeof(bool) * size);
		r->errors = palloc(sizeof(Datum) * size);
		r->error_nulls = palloc(sizeof(bool) * size);
		r->bodies = palloc(sizeof(Datum) * size);
		r->body_nulls = palloc(sizeof(bool) * size);
		r->ctypes = palloc(sizeof(Datum) * size);
		r->ctype_nulls = palloc(sizeof(bool) * size);
	}
	i = r->n++;
	r->ids[i] = UUIDPGetDatum(&it->id);
	r->handlers[i] = CStringGetTextDatum(it->handler ? it->handler : "");
	r->attempts[i] = Int32GetDatum(it->attempts);
	r->started[i] = TimestampTzGetDatum(it->started_at);
	r->duration_nulls[i] = (it->duration_ms < 0);
	r->durations[i] = Int32GetDatum(it->duration_ms);
	r->status_nulls[i] = (it->status <= 0);
	r->statuses[i] = Int32GetDatum(it->status);
	r->error_nulls[i] = (it->error == NULL);
	r->errors[i] = it->error ? CStringGetTextDatum(it->error) : (Datum) 0;
	r->body_nulls[i] = (it->response_body == NULL);
	r->bodies[i] = it->response_body ? CStringGetTextDatum(it->response_body) : (Datum) 0;
	r->ctype_nulls[i] = (it->content_type == NULL);
	r->ctypes[i] = it->content_type ? CStringGetTextDatum(it->content_type) : (Datum) 0;
}

/*
 * log_params: the attempts' ATTEMPT_COLUMNS arrays, as the *_log_sql_12
 * statements take them after their own parameters, into types and values.
 */
static void
log_params(AttemptRows *r, Oid *types, Datum *values)
{
	static const Oid log_types[ATTEMPT_COLUMNS] = {UUIDARRAYOID, TEXTARRAYOID,
		INT4ARRAYOID, TIMESTAMPTZARRAYOID, INT4ARRAYOID, INT4ARRAYOID,
	TEXTARRAYOID, TEXTARRAYOID, TEXTARRAYOID};

	memcpy(types, log_types, sizeof(log_types));
	values[0] = store_array(r->ids, NULL, r->n, UUIDOID);
	values[1] = store_array(r->handlers, NULL, r->n, TEXTOID);
	values[2] = store_array(r->attempts, NULL, r->n, INT4OID);
	values[3] = store_array(r->started, NULL, r->n, TIMESTAMPTZOID);
	values[4] = store_array(r->durations, r->duration_nulls, r->n, INT4OID);
	values[5] = store_array(r->statuses, r->status_nulls, r->n, INT4OID);
	values[6] = store_array(r->errors, r->error_nulls, r->n, TEXTOID);
	values[7] = store_array(r->bodies, r->body_nulls, r->n, TEXTOID);
	values[8] = store_array(r->ctypes, r->ctype_nulls, r->n, TEXTOID);
}

/* batch_add: one outcome, and its attempt's row when it is logged (1.2). */
static void
batch_add(SettleBatch *b, SettleItem *it, bool log)
{
	int			i = b->n++;

	b->ids[i] = UUIDPGetDatum(&it->id);
	b->handlers[i] = CStringGetTextDatum(it->handler ? it->handler : "");
	b->leases[i] = Int64GetDatum(it->lease);
	b->states[i] = CStringGetTextDatum(it->state == SETTLE_DELIVERED ? "delivered" :
									   it->state == SETTLE_RETRY ? "pending" :
									   it->state == SETTLE_RELEASE ? "release" :
									   it->state == SETTLE_HOLD ? "hold" : "dead");
	b->delays[i] = Float8GetDatum((double) it->delay_ms);
	b->error_nulls[i] = (it->error == NULL);
	b->errors[i] = it->error ? CStringGetTextDatum(it->error) : (Datum) 0;
	b->status_nulls[i] = (it->status <= 0);
	b->statuses[i] = Int32GetDatum(it->status);
	b->duration_nulls[i] = (it->duration_ms < 0);
	b->durations[i] = Int32GetDatum(it->duration_ms);
	if (log && it->log_attempt)
		log_add(&b->log, b->size, it);
}

/*
 * settle_delete: delivered inline rows not kept, fenced by their lease
 * (1.2: with the rows of their logged attempts).
 */
static void
settle_delete(SettleBatch *b)
{
	Oid			types[2 + ATTEMPT_COLUMNS] = {UUIDARRAYOID, INT8ARRAYOID};
	Datum		values[2 + ATTEMPT_COLUMNS];
	SPIPlanPtr	plan;
	int			ret;

	values[0] = store_array(b->ids, NULL, b->n, UUIDOID);
	values[1] = store_array(b->leases, NULL, b->n, INT8OID);
	if (b->log.n > 0)
	{
		log_params(&b->log, types + 2, values + 2);
		plan = grelout_keep_plan(&delete_log_plan_12, delete_log_sql_12,
								 2 + ATTEMPT_COLUMNS, types, 0);
	}
	else
		plan = grelout_keep_plan(&delete_plan, delete_sql, 2, types, 0);
	ret = SPI_execute_plan(plan, values, NULL, false, 0);
	if (ret != (b->log.n > 0 ? SPI_OK_INSERT : SPI_OK_DELETE))
		elog(ERROR, "settle failed: %s", SPI_result_code_string(ret));
}

/*
 * settle_update: every other inline outcome (1.1: with status, duration;
 * 1.2: with the rows of their logged attempts).
 */
static void
settle_update(StoreSchema schema, SettleBatch *b)
{
	Oid			types[7 + ATTEMPT_COLUMNS] = {UUIDARRAYOID, INT8ARRAYOID, TEXTARRAYOID,
	FLOAT8ARRAYOID, TEXTARRAYOID, INT4ARRAYOID, INT4ARRAYOID};
	Datum		values[7 + ATTEMPT_COLUMNS];
	SPIPlanPtr	plan;
	int			ret;

	if (b->log.n > 0)
	{
		log_params(&b->log, types + 7, values + 7);
		plan = grelout_keep_plan(&update_log_plan_12, update_log_sql_12,
								 7 + ATTEMPT_COLUMNS, types, 0);
	}
	else if (schema >= STORE_SCHEMA_1_1)
		plan = grelout_keep_plan(&update_plan_11, update_sql_11, 7, types, 0);
	else
		plan = grelout_keep_plan(&update_plan, update_sql, 5, types, 0);
	values[0] = store_array(b->ids, NULL, b->n, UUIDOID);
	values[1] = store_array(b->leases, NULL, b->n, INT8OID);
	values[2] = store_array(b->states, NULL, b->n, TEXTOID);
	values[3] = store_array(b->delays, NULL, b->n, FLOAT8OID);
	values[4] = store_array(b->errors, b->error_nulls, b->n, TEXTOID);
	values[5] = store_array(b->statuses, b->status_nulls, b->n, INT4OID);
	values[6] = store_array(b->durations, b->duration_nulls, b->n, INT4OID);
	ret = SPI_execute_plan(plan, values, NULL, false, 0);
	if (ret != (b->log.n > 0 ? SPI_OK_INSERT : SPI_OK_UPDATE))
		elog(ERROR, "settle failed: %s", SPI_result_code_string(ret));
}

/*
 * lock_messages: lock the outbox rows of these messages, in id order, after
 * their fan-out rows changed and before the finalize.  Two relays finishing
 * the last rows of one message so take turns, and the finalize of the
 * second (a statement of its own, whose snapshot is taken after the lock)
 * sees the first's rows.  Fan-out rows first, then messages: the order the
 * handler triggers take them in.
 */
static void
lock_messages(Datum ids)
{
	Oid			types[1] = {UUIDARRAYOID};
	Datum		values[1] = {ids};
	int			ret;

	grelout_keep_plan(&fanout_lock_plan_11, fanout_lock_sql_11, 1, types, 0);
	ret = SPI_execute_plan(fanout_lock_plan_11, values, NULL, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not lock fan-out messages: %s", SPI_result_code_string(ret));
}

/*
 * finalize: finish the messages among ids whose rows are all finished;
 * mark the others among delivered (nullable: none), whose delivered rows
 * are gone, as delivered by some handler.
 */
static void
finalize(Datum ids, bool keep_delivered, Datum delivered)
{
	Oid			types[3] = {UUIDARRAYOID, BOOLOID, UUIDARRAYOID};
	Datum		values[3];
	char		nulls[3] = {' ', ' ', delivered == (Datum) 0 ? 'n' : ' '};
	int			ret;

	grelout_keep_plan(&finalize_plan_11, finalize_sql_11, 3, types, 0);
	values[0] = ids;
	values[1] = BoolGetDatum(keep_delivered);
	values[2] = delivered;
	ret = SPI_execute_plan(finalize_plan_11, values, nulls, false, 0);
	if (ret != SPI_OK_UPDATE)
		elog(ERROR, "finalize failed: %s", SPI_result_code_string(ret));
}

/*
 * store_finalize_fanout: after the claim dead-lettered fan-out rows (a list
 * of pg_uuid_t pointers, their message ids), finalize their messages.
 */
void
store_finalize_fanout(List *ids, bool keep_delivered)
{
	Datum	   *elems = palloc(sizeof(Datum) * list_length(ids));
	int			n = 0;
	ListCell   *lc;
	Datum		arr;

	foreach(lc, ids)
		elems[n++] = UUIDPGetDatum((pg_uuid_t *) lfirst(lc));
	arr = store_array(elems, NULL, n, UUIDOID);
	lock_messages(arr);
	finalize(arr, keep_delivered, (Datum) 0);
}

PG_FUNCTION_INFO_V1(grelout_finalize_fanout_1_2);

/*
 * grelout_finalize_fanout_1_2: grelout._finalize_fanout(ids uuid[]) RETURNS
 * void, strict: the relay's finalize of fan-out messages (lock_messages,
 * then finalize, keeping delivered messages as grelout.keep_delivered
 * says), for the handler triggers of the 1.2 schema, so that the rule that
 * finishes a fan-out message is written once, here.  The caller has locked
 * the messages' fan-out rows (the order the relay takes them in) and runs
 * with the search_path pinned (the function's SET clause).
 */
Datum
grelout_finalize_fanout_1_2(PG_FUNCTION_ARGS)
{
	Datum		ids = PG_GETARG_DATUM(0);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	lock_messages(ids);
	finalize(ids, grelout_keep_mode != GRELOUT_KEEP_OFF, (Datum) 0);
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * settle_fanout: the fan-out outcomes (1.1): update their rows (delete the
 * delivered ones not kept; 1.2: with the rows of their logged attempts),
 * lock their messages, then finalize the messages that have no unfinished
 * row left.
 */
static void
settle_fanout(SettleBatch *b, bool keep_delivered)
{
	Oid			types[9 + ATTEMPT_COLUMNS] = {UUIDARRAYOID, TEXTARRAYOID, INT8ARRAYOID,
		TEXTARRAYOID, FLOAT8ARRAYOID, TEXTARRAYOID, INT4ARRAYOID, INT4ARRAYOID,
	BOOLOID};
	Datum		ids = store_array(b->ids, NULL, b->n, UUIDOID);
	Datum		values[9 + ATTEMPT_COLUMNS];
	SPIPlanPtr	plan;
	Datum		deleted;
	bool		isnull;
	int			ret;

	if (b->log.n > 0)
	{
		log_params(&b->log, types + 9, values + 9);
		plan = grelout_keep_plan(&fanout_update_log_plan_12, fanout_update_log_sql_12,
								 9 + ATTEMPT_COLUMNS, types, 0);
	}
	else
		plan = grelout_keep_plan(&fanout_update_plan_11, fanout_update_sql_11, 9,
								 types, 0);
	values[0] = ids;
	values[1] = store_array(b->handlers, NULL, b->n, TEXTOID);
	values[2] = store_array(b->leases, NULL, b->n, INT8OID);
	values[3] = store_array(b->states, NULL, b->n, TEXTOID);
	values[4] = store_array(b->delays, NULL, b->n, FLOAT8OID);
	values[5] = store_array(b->errors, b->error_nulls, b->n, TEXTOID);
	values[6] = store_array(b->statuses, b->status_nulls, b->n, INT4OID);
	values[7] = store_array(b->durations, b->duration_nulls, b->n, INT4OID);
	values[8] = BoolGetDatum(keep_delivered);
	ret = SPI_execute_plan(plan, values, NULL, false, 0);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "settle failed: %s", SPI_result_code_string(ret));
	deleted = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (!isnull)
		deleted = datumCopy(deleted, false, -1);
	lock_messages(ids);
	finalize(ids, keep_delivered, isnull ? (Datum) 0 : deleted);
}

/*
 * store_settle: record the outcomes of n finished attempts, in a few
 * batched statements (1.2: each writing the rows of its logged attempts).
 * An item whose row no longer carries its lease (the lease lapsed and
 * another relay claimed it, or it was redriven) changes nothing and logs
 * nothing.
 */
void
store_settle(StoreSchema schema, SettleItem *items, int n, bool keep_delivered)
{
	SettleBatch del;
	SettleBatch up;
	SettleBatch fan;
	bool		log = (schema >= STORE_SCHEMA_1_2);

	batch_init(&del, n);
	batch_init(&up, n);
	batch_init(&fan, n);
	for (int i = 0; i < n; i++)
	{
		SettleItem *it = &items[i];

		if (it->fanout)
		{
			/* fan-out rows exist only under 1.1; a 1.0 schema has none */
			if (schema >= STORE_SCHEMA_1_1)
				batch_add(&fan, it, log);
		}
		else if (it->state == SETTLE_DELIVERED && !keep_delivered)
			batch_add(&del, it, log);
		else
			batch_add(&up, it, log);
	}
	if (del.n > 0)
		settle_delete(&del);
	if (up.n > 0)
		settle_update(schema, &up);
	if (fan.n > 0)
		settle_fanout(&fan, keep_delivered);
}

/*
 * store_release_stale_leases: make every delivery claimed before the
 * server started due now; returns how many.
 */
uint64
store_release_stale_leases(StoreSchema schema)
{
	int			ret;
	bool		isnull;

	if (schema < STORE_SCHEMA_1_1)
	{
		ret = SPI_execute(release_sql, false, 0);
		if (ret != SPI_OK_UPDATE)
			elog(ERROR, "could not release stale leases: %s", SPI_result_code_string(ret));
		return SPI_processed;
	}
	ret = SPI_execute(release_sql_11, false, 0);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not release stale leases: %s", SPI_result_code_string(ret));
	return (uint64) DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
												SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * store_next_due_ms: ms until the next pending delivery or lease comes
 * due, or -1 when nothing is scheduled.
 */
int64
store_next_due_ms(StoreSchema schema)
{
	int			ret;
	bool		isnull;
	Datum		d;
	SPIPlanPtr	plan;

	if (schema >= STORE_SCHEMA_1_1)
		plan = grelout_keep_plan(&next_due_plan_11, next_due_sql_11, 0, NULL, 0);
	else
		plan = grelout_keep_plan(&next_due_plan, next_due_sql, 0, NULL, 0);

	/*
	 * Not read_only: a read-only execution would reuse the snapshot taken
	 * when the cycle began, blind to this cycle's settles and claim, and the
	 * relay would sleep until a stale lease instead of the next retry.
	 */
	ret = SPI_execute_plan(plan, NULL, NULL, false, 1);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "next due query failed: %s", SPI_result_code_string(ret));
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (isnull)
		return -1;
	return Max(DatumGetInt64(d), 0);
}

/*
 * store_purge_delivered: delete up to limit delivered messages (with their
 * fan-out rows) delivered more than window_ms ago; returns how many.
 */
uint64
store_purge_delivered(StoreSchema schema, int64 window_ms, int limit)
{
	Oid			types[2] = {FLOAT8OID, INT4OID};
	Datum		values[2];
	int			ret;
	bool		isnull;

	values[0] = Float8GetDatum((double) window_ms);
	values[1] = Int32GetDatum(limit);
	if (schema < STORE_SCHEMA_1_1)
	{
		grelout_keep_plan(&purge_plan, purge_sql, 2, types, 0);
		ret = SPI_execute_plan(purge_plan, values, NULL, false, 0);
		if (ret != SPI_OK_DELETE)
			elog(ERROR, "retention purge failed: %s", SPI_result_code_string(ret));
		return SPI_processed;
	}
	grelout_keep_plan(&purge_plan_11, purge_sql_11, 2, types, 0);
	ret = SPI_execute_plan(purge_plan_11, values, NULL, false, 0);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "retention purge failed: %s", SPI_result_code_string(ret));
	return (uint64) DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
												SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * store_purge_attempts: delete up to limit rows of grelout.attempts (1.2)
 * of attempts started more than window_ms ago; returns how many.
 */
uint64
store_purge_attempts(int64 window_ms, int limit)
{
	Oid			types[2] = {FLOAT8OID, INT4OID};
	Datum		values[2];
	int			ret;

	values[0] = Float8GetDatum((double) window_ms);
	values[1] = Int32GetDatum(limit);
	grelout_keep_plan(&purge_attempts_plan_12, purge_attempts_sql_12, 2, types, 0);
	ret = SPI_execute_plan(purge_attempts_plan_12, values, NULL, false, 0);
	if (ret != SPI_OK_DELETE)
		elog(ERROR, "attempt log purge failed: %s", SPI_result_code_string(ret));
	return SPI_processed;
}
