/*-------------------------------------------------------------------------
 *
 * store.c
 *	  The relay's statements on grelout.outbox, each planned once per relay
 *	  and kept: the claim (FOR UPDATE SKIP LOCKED with a lease and a fencing
 *	  token), the batched settle of many outcomes in one statement, the
 *	  next due time, and the retention purge of delivered rows.
 *
 * Every function here runs inside a transaction that the relay opened,
 * with SPI connected and a snapshot pushed.
 *
 *-------------------------------------------------------------------------
 */
#include "store.h"

#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

static SPIPlanPtr claim_plan = NULL;
static SPIPlanPtr delete_plan = NULL;
static SPIPlanPtr update_plan = NULL;
static SPIPlanPtr next_due_plan = NULL;
static SPIPlanPtr purge_plan = NULL;

/*
 * The claim.  Only messages of topics with an enabled handler, due now,
 * pending or with a lapsed lease, oldest first, skipping rows another relay
 * holds.  attempts is counted here.  A lapsed claim ('processing' past its
 * lease) that used up its attempts without an outcome (its relay died) is
 * dead-lettered here instead; a pending message never is: one whose
 * attempts already reached the maximum (dead_letter was off, or
 * max_attempts was lowered) gets one more attempt, and its outcome decides.
 * The handler's timeout is returned as an interval and converted in C.
 */
static const char *claim_sql =
"WITH c AS ("
" SELECT o.id,"
"  $4 AND o.state = 'processing' AND o.attempts >= coalesce(h.max_attempts, $3)"
"   AS exhausted,"
"  coalesce(h.max_attempts, $3) AS max_attempts,"
"  h.url, h.headers AS handler_headers, h.secret, h.previous_secret,"
"  h.timeout"
" FROM grelout.outbox o"
"  JOIN grelout.handlers h ON h.topic = o.topic AND h.enabled"
" WHERE o.state IN ('pending', 'processing') AND o.available_at <= now()"
" ORDER BY o.available_at, o.id"
" LIMIT $1"
" FOR UPDATE OF o SKIP LOCKED)"
" UPDATE grelout.outbox o SET"
"  state = CASE WHEN c.exhausted THEN 'dead' ELSE 'processing' END,"
"  attempts = o.attempts + CASE WHEN c.exhausted THEN 0 ELSE 1 END,"
"  available_at = CASE WHEN c.exhausted THEN o.available_at"
"   ELSE now() + $2 * interval '1 millisecond' END,"
"  dead_at = CASE WHEN c.exhausted THEN now() END,"
"  last_error = CASE WHEN NOT c.exhausted THEN o.last_error"
"   ELSE 'attempt ' || o.attempts ||"
"    ' ended without an outcome (relay stopped or lease expired)' END,"
"  lease = CASE WHEN c.exhausted THEN NULL ELSE $5 END"
" FROM c WHERE o.id = c.id AND o.id = ANY (ARRAY(SELECT id FROM c))"
" RETURNING o.id, o.topic, o.key, o.payload::text, o.headers, o.attempts,"
"  c.exhausted, c.max_attempts, c.url, c.handler_headers, c.secret,"
"  c.previous_secret, c.timeout, o.last_error";

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

/* prepare_once: plan sql the first time, and keep the plan. */
static SPIPlanPtr
prepare_once(SPIPlanPtr *plan, const char *sql, int nargs, Oid *types)
{
	if (*plan == NULL)
	{
		/*
		 * The claim runs on every cycle with a LIMIT that changes each time,
		 * so the plan cache would re-plan it at every call (its custom plans
		 * always look cheaper than a generic plan costed for an unknown
		 * LIMIT).  Planned once instead: the redundant "o.id = ANY (ARRAY(
		 * SELECT id FROM c))" gives the generic plan a primary-key lookup of
		 * the claimed rows whatever row count it assumes for the LIMIT.
		 */
		SPIPlanPtr	p = SPI_prepare_cursor(sql, nargs, types,
										   plan == &claim_plan ? CURSOR_OPT_GENERIC_PLAN : 0);

		if (p == NULL)
			elog(ERROR, "could not prepare relay statement: %s",
				 SPI_result_code_string(SPI_result));
		if (SPI_keepplan(p) != 0)
			elog(ERROR, "could not keep relay statement");
		*plan = p;
	}
	return *plan;
}

/*
 * store_extension_ready: is grelout installed in this database, as seen by
 * the current transaction?
 */
bool
store_extension_ready(void)
{
	return OidIsValid(get_extension_oid("grelout", true));
}

/*
 * store_claim: claim up to limit messages.  The rows are in SPI_tuptable
 * (columns as enum CLAIM_*) until SPI_finish.
 */
SPITupleTable *
store_claim(int limit, int lease_ms, int64 lease_token,
			int default_max_attempts, bool dead_letter, uint64 *nrows)
{
	Oid			types[5] = {INT4OID, FLOAT8OID, INT4OID, BOOLOID, INT8OID};
	Datum		values[5];
	int			ret;

	prepare_once(&claim_plan, claim_sql, 5, types);
	values[0] = Int32GetDatum(limit);
	values[1] = Float8GetDatum((double) lease_ms);
	values[2] = Int32GetDatum(default_max_attempts);
	values[3] = BoolGetDatum(dead_letter);
	values[4] = Int64GetDatum(lease_token);
	ret = SPI_execute_plan(claim_plan, values, NULL, false, 0);
	if (ret != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "claim failed: %s", SPI_result_code_string(ret));
	*nrows = SPI_processed;
	return SPI_tuptable;
}

/* build_array: a one-dimensional array of n datums of a type. */
static Datum
build_array(Datum *elems, bool *nulls, int n, Oid type)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			dims[1] = {n};
	int			lbs[1] = {1};

	get_typlenbyvalalign(type, &typlen, &typbyval, &typalign);
	return PointerGetDatum(construct_md_array(elems, nulls, 1, dims, lbs, type,
											  typlen, typbyval, typalign));
}

/*
 * store_settle: record the outcomes of n finished attempts, in at most two
 * statements.  An item whose row no longer carries its lease (the lease
 * lapsed and another relay claimed it, or it was redriven) changes nothing.
 */
void
store_settle(SettleItem *items, int n, bool keep_delivered)
{
	Datum	   *del_ids = palloc(sizeof(Datum) * n);
	Datum	   *del_leases = palloc(sizeof(Datum) * n);
	Datum	   *up_ids = palloc(sizeof(Datum) * n);
	Datum	   *up_leases = palloc(sizeof(Datum) * n);
	Datum	   *up_states = palloc(sizeof(Datum) * n);
	Datum	   *up_delays = palloc(sizeof(Datum) * n);
	Datum	   *up_errors = palloc(sizeof(Datum) * n);
	bool	   *up_error_nulls = palloc(sizeof(bool) * n);
	int			ndel = 0;
	int			nup = 0;
	int			ret;

	for (int i = 0; i < n; i++)
	{
		SettleItem *it = &items[i];

		if (it->state == SETTLE_DELIVERED && !keep_delivered)
		{
			del_ids[ndel] = UUIDPGetDatum(&it->id);
			del_leases[ndel] = Int64GetDatum(it->lease);
			ndel++;
			continue;
		}
		up_ids[nup] = UUIDPGetDatum(&it->id);
		up_leases[nup] = Int64GetDatum(it->lease);
		up_states[nup] = CStringGetTextDatum(it->state == SETTLE_DELIVERED ? "delivered" :
											 it->state == SETTLE_RETRY ? "pending" :
											 it->state == SETTLE_RELEASE ? "release" : "dead");
		up_delays[nup] = Float8GetDatum((double) it->delay_ms);
		up_error_nulls[nup] = (it->error == NULL);
		up_errors[nup] = it->error ? CStringGetTextDatum(it->error) : (Datum) 0;
		nup++;
	}

	if (ndel > 0)
	{
		Oid			types[2] = {UUIDARRAYOID, INT8ARRAYOID};
		Datum		values[2];

		prepare_once(&delete_plan, delete_sql, 2, types);
		values[0] = build_array(del_ids, NULL, ndel, UUIDOID);
		values[1] = build_array(del_leases, NULL, ndel, INT8OID);
		ret = SPI_execute_plan(delete_plan, values, NULL, false, 0);
		if (ret != SPI_OK_DELETE)
			elog(ERROR, "settle failed: %s", SPI_result_code_string(ret));
	}
	if (nup > 0)
	{
		Oid			types[5] = {UUIDARRAYOID, INT8ARRAYOID, TEXTARRAYOID,
		FLOAT8ARRAYOID, TEXTARRAYOID};
		Datum		values[5];

		prepare_once(&update_plan, update_sql, 5, types);
		values[0] = build_array(up_ids, NULL, nup, UUIDOID);
		values[1] = build_array(up_leases, NULL, nup, INT8OID);
		values[2] = build_array(up_states, NULL, nup, TEXTOID);
		values[3] = build_array(up_delays, NULL, nup, FLOAT8OID);
		values[4] = build_array(up_errors, up_error_nulls, nup, TEXTOID);
		ret = SPI_execute_plan(update_plan, values, NULL, false, 0);
		if (ret != SPI_OK_UPDATE)
			elog(ERROR, "settle failed: %s", SPI_result_code_string(ret));
	}
}

/*
 * store_release_stale_leases: make every message claimed before the
 * server started due now; returns how many.
 */
uint64
store_release_stale_leases(void)
{
	int			ret = SPI_execute(release_sql, false, 0);

	if (ret != SPI_OK_UPDATE)
		elog(ERROR, "could not release stale leases: %s", SPI_result_code_string(ret));
	return SPI_processed;
}

/*
 * store_next_due_ms: ms until the next pending message or lease comes due,
 * or -1 when nothing is scheduled.
 */
int64
store_next_due_ms(void)
{
	int			ret;
	bool		isnull;
	Datum		d;

	prepare_once(&next_due_plan, next_due_sql, 0, NULL);

	/*
	 * Not read_only: a read-only execution would reuse the snapshot taken
	 * when the cycle began, blind to this cycle's settles and claim, and the
	 * relay would sleep until a stale lease instead of the next retry.
	 */
	ret = SPI_execute_plan(next_due_plan, NULL, NULL, false, 1);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "next due query failed: %s", SPI_result_code_string(ret));
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (isnull)
		return -1;
	return Max(DatumGetInt64(d), 0);
}

/*
 * store_purge_delivered: delete up to limit delivered rows delivered more
 * than window_ms ago; returns how many.
 */
uint64
store_purge_delivered(int64 window_ms, int limit)
{
	Oid			types[2] = {FLOAT8OID, INT4OID};
	Datum		values[2];
	int			ret;

	prepare_once(&purge_plan, purge_sql, 2, types);
	values[0] = Float8GetDatum((double) window_ms);
	values[1] = Int32GetDatum(limit);
	ret = SPI_execute_plan(purge_plan, values, NULL, false, 0);
	if (ret != SPI_OK_DELETE)
		elog(ERROR, "retention purge failed: %s", SPI_result_code_string(ret));
	return SPI_processed;
}
