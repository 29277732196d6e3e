/*-------------------------------------------------------------------------
 *
 * claim.c
 *	  The claim: the deliveries a relay takes for one cycle, FOR UPDATE
 *	  SKIP LOCKED under a lease with a fencing token, each statement one
 *	  SQL text returning its rows in the columns of claim_columns.h; and
 *	  what the relay reads of the handlers to decide how many each may
 *	  take (their caps, whether one is ordered).
 *
 * The routing of new messages claims too, as it routes them (routing.c);
 * the settle of the claimed deliveries is settle.c's.  Every function here
 * runs inside a transaction that the relay opened, with SPI connected and
 * a snapshot pushed.
 *
 *-------------------------------------------------------------------------
 */
#include "store.h"

#include "catalog/pg_type.h"
#include "utils/fmgrprotos.h"

/*
 * The claim of a 1.0 schema.  Only messages of topics with an enabled
 * handler, due now, pending or with a lapsed lease, oldest first, skipping
 * rows another relay holds.  attempts is counted here.  A lapsed claim
 * ('processing' past its lease) that used up its attempts without an
 * outcome (its relay died) is dead-lettered here instead; a pending
 * message never is: one whose attempts already reached the maximum
 * (dead_letter was off, or max_attempts was lowered) gets one more
 * attempt, and its outcome decides.  The handler's timeout is returned as
 * an interval and converted in C.
 *
 * $1 limit, $2 lease (ms), $3 grelout.max_attempts, $4 dead_letter,
 * $5 the lease's fencing token.
 */
static const char *claim_sql_10 =
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
" FOR UPDATE OF o SKIP LOCKED),"
" u AS ("
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
" RETURNING o.id, o.topic, o.key, o.payload::text AS payload, o.headers,"
"  o.attempts, c.exhausted, c.max_attempts, c.url, c.handler_headers,"
"  c.secret, c.previous_secret, c.timeout, o.last_error,"
"  NULL::text AS handler, false AS fanout)"
" SELECT " CLAIM_COLUMNS " FROM u";

/*
 * The claim of a 1.1 schema, per enabled handler, from its inline
 * deliveries (ki, ci, ui) and its fan-out rows (kf, cf, uf) through their
 * claim indexes (so it never walks waiting, delayed, finished rows or
 * those of a disabled handler), keeping the oldest $1 of both kinds:
 * neither starves the other.
 *
 * h: the enabled handlers that may take deliveries, each with its limit
 * (lim: $7, or its entry in $8/$9, the claim limits of ClaimLimits).
 *
 * ki, kf: the candidates, up to 2 * $1 of each kind a handler, read
 * without locks, with their rank within their handler.  A delivery of an
 * ordered handler with a key is a candidate only if it is the head of its
 * (handler, publisher, key): no delivery of the key published by the same
 * role with a smaller routing number (seq) is unfinished (pending,
 * processing, or dead when the handler blocks on a dead head), and none of
 * them is in flight (processing with a live lease; this matters for a
 * redriven delivery of a 'skip' handler, which becomes the head again).
 * Only when the claim holds the redrive lock ($6, store_claim).  Heads
 * are unique per key and publisher, so a claim never takes two of them.
 * The publisher is the message's published_by, NULL for a message stored
 * under 1.0: NULL is a publisher of its own, compared as
 * coalesce(published_by, 0) (no role has oid 0), which is what
 * IS NOT DISTINCT FROM would say, in a form an index can answer
 * (outbox_publisher_key_idx, 1.2).  A fan-out row's publisher is its
 * message's.  Each test is an index probe (outbox_key_idx or, from 1.2,
 * outbox_publisher_key_idx; fanout_key_idx and the _processing twins,
 * whose rows of other publishers are passed over).
 *
 * ci, cf: the oldest $1 candidates of each kind that no other relay holds,
 * locked (FOR UPDATE SKIP LOCKED, which locks a row only as the LIMIT takes
 * it), so a claim locks no row it does not claim however many handlers
 * have work, and a second relay claiming at the same time takes the next
 * candidates.  Candidates are found again by their ctid, a TID scan
 * whatever the statistics said when the (kept, generic) plan was made:
 * their state is tested as "not delivered, not dead" (the same, by the
 * CHECK constraint), which a claim index's predicate cannot be proved
 * from, so that no plan walks a claim index there instead.  A row updated
 * since it was read is followed to its latest version and tested again.
 *
 * c: of those, at most lim a handler, $1 in all, the best ranked first.
 *
 * ui, uf: the claim itself, as the 1.0 claim makes it: attempts counted
 * here, and a lapsed processing claim without attempts left ("exhausted":
 * $4 AND state = 'processing' AND attempts >= max_attempts, written out in
 * each assignment, as an UPDATE cannot name it once) dead-lettered.
 *
 * $1 limit, $2 lease (ms), $3 grelout.max_attempts, $4 dead_letter, $5 the
 * lease's fencing token, $6 the redrive lock is held, $7 the default
 * limit of a handler, $8 and $9 the handlers with limits of their own.
 */
static const char *claim_sql_11 =
"WITH h AS MATERIALIZED ("
" SELECT hh.name, hh.url, hh.headers, hh.secret, hh.previous_secret,"
"  hh.timeout, hh.max_attempts, hh.ordered, hh.on_dead,"
"  coalesce(l.lim, $7) AS lim"
" FROM grelout.handlers hh"
"  LEFT JOIN unnest($8::text[], $9::int4[]) AS l(name, lim) ON l.name = hh.name"
" WHERE hh.enabled AND coalesce(l.lim, $7) > 0),"
" ki AS MATERIALIZED ("
" SELECT x.tid, x.rk FROM h CROSS JOIN LATERAL ("
"  SELECT y.tid, row_number() OVER () AS rk FROM ("
"   SELECT o.ctid AS tid FROM grelout.outbox o"
"   WHERE o.handler = h.name AND o.route = 'single'"
"    AND o.state IN ('pending', 'processing') AND o.available_at <= now()"
"    AND (NOT h.ordered OR o.key IS NULL OR ($6"
"     AND NOT EXISTS (SELECT 1 FROM grelout.outbox e WHERE e.route = 'single'"
"      AND e.handler = h.name AND e.key = o.key"
"      AND coalesce(e.published_by, 0::oid) = coalesce(o.published_by, 0::oid)"
"      AND e.state IN ('pending', 'processing', 'dead') AND e.seq < o.seq"
"      AND (e.state <> 'dead' OR h.on_dead = 'block'))"
"     AND NOT EXISTS (SELECT 1 FROM grelout.fanout e"
"      JOIN grelout.outbox em ON em.id = e.message_id"
"      WHERE e.handler = h.name AND e.key = o.key"
"      AND e.state IN ('pending', 'processing', 'dead') AND e.seq < o.seq"
"      AND (e.state <> 'dead' OR h.on_dead = 'block')"
"      AND coalesce(em.published_by, 0::oid) = coalesce(o.published_by, 0::oid))"
"     AND NOT EXISTS (SELECT 1 FROM grelout.outbox e WHERE e.route = 'single'"
"      AND e.handler = h.name AND e.key = o.key"
"      AND coalesce(e.published_by, 0::oid) = coalesce(o.published_by, 0::oid)"
"      AND e.state = 'processing' AND e.available_at > now())"
"     AND NOT EXISTS (SELECT 1 FROM grelout.fanout e"
"      JOIN grelout.outbox em ON em.id = e.message_id"
"      WHERE e.handler = h.name AND e.key = o.key"
"      AND e.state = 'processing' AND e.available_at > now()"
"      AND coalesce(em.published_by, 0::oid) = coalesce(o.published_by, 0::oid))))"
"   ORDER BY o.available_at, o.id LIMIT least(2 * $1, 2 * h.lim)) y) x),"
" kf AS MATERIALIZED ("
" SELECT x.tid, x.rk FROM h CROSS JOIN LATERAL ("
"  SELECT y.tid, row_number() OVER () AS rk FROM ("
"   SELECT f.ctid AS tid FROM grelout.fanout f"
"   WHERE f.handler = h.name"
"    AND f.state IN ('pending', 'processing') AND f.available_at <= now()"
"    AND (NOT h.ordered OR f.key IS NULL OR ($6"
"     AND NOT EXISTS (SELECT 1 FROM grelout.outbox e WHERE e.route = 'single'"
"      AND e.handler = h.name AND e.key = f.key"
"      AND coalesce(e.published_by, 0::oid) = (SELECT coalesce(m.published_by, 0::oid)"
"       FROM grelout.outbox m WHERE m.id = f.message_id)"
"      AND e.state IN ('pending', 'processing', 'dead') AND e.seq < f.seq"
"      AND (e.state <> 'dead' OR h.on_dead = 'block'))"
"     AND NOT EXISTS (SELECT 1 FROM grelout.fanout e"
"      JOIN grelout.outbox em ON em.id = e.message_id"
"      WHERE e.handler = h.name AND e.key = f.key"
"      AND e.state IN ('pending', 'processing', 'dead') AND e.seq < f.seq"
"      AND (e.state <> 'dead' OR h.on_dead = 'block')"
"      AND coalesce(em.published_by, 0::oid) = (SELECT coalesce(m.published_by, 0::oid)"
"       FROM grelout.outbox m WHERE m.id = f.message_id))"
"     AND NOT EXISTS (SELECT 1 FROM grelout.outbox e WHERE e.route = 'single'"
"      AND e.handler = h.name AND e.key = f.key"
"      AND coalesce(e.published_by, 0::oid) = (SELECT coalesce(m.published_by, 0::oid)"
"       FROM grelout.outbox m WHERE m.id = f.message_id)"
"      AND e.state = 'processing' AND e.available_at > now())"
"     AND NOT EXISTS (SELECT 1 FROM grelout.fanout e"
"      JOIN grelout.outbox em ON em.id = e.message_id"
"      WHERE e.handler = h.name AND e.key = f.key"
"      AND e.state = 'processing' AND e.available_at > now()"
"      AND coalesce(em.published_by, 0::oid) = (SELECT coalesce(m.published_by, 0::oid)"
"       FROM grelout.outbox m WHERE m.id = f.message_id))))"
"   ORDER BY f.available_at, f.message_id LIMIT least(2 * $1, 2 * h.lim)) y) x),"
" ci AS MATERIALIZED ("
" SELECT o.id, o.handler, o.available_at, false AS fanout, ki.rk"
" FROM ki JOIN grelout.outbox o ON o.ctid = ki.tid"
" WHERE o.route = 'single'"
"  AND o.state <> 'delivered' AND o.state <> 'dead' AND o.available_at <= now()"
" ORDER BY ki.rk, o.available_at, o.id LIMIT $1"
" FOR UPDATE OF o SKIP LOCKED),"
" cf AS MATERIALIZED ("
" SELECT f.message_id AS id, f.handler, f.available_at, true AS fanout, kf.rk"
" FROM kf JOIN grelout.fanout f ON f.ctid = kf.tid"
" WHERE f.state <> 'delivered' AND f.state <> 'dead' AND f.available_at <= now()"
" ORDER BY kf.rk, f.available_at, f.message_id, f.handler LIMIT $1"
" FOR UPDATE OF f SKIP LOCKED),"
" c AS MATERIALIZED ("
" SELECT u.id, u.handler, u.available_at, u.fanout FROM ("
"  SELECT u.*, row_number() OVER ("
"   PARTITION BY u.handler ORDER BY u.rk, u.available_at, u.id) AS n"
"  FROM (SELECT * FROM ci UNION ALL SELECT * FROM cf) u) u"
"  JOIN h ON h.name = u.handler"
" WHERE u.n <= h.lim"
" ORDER BY u.n, u.available_at, u.id LIMIT $1),"
" ui AS ("
" UPDATE grelout.outbox o SET"
"  state = CASE WHEN ($4 AND o.state = 'processing'"
"    AND o.attempts >= coalesce(h.max_attempts, $3))"
"   THEN 'dead' ELSE 'processing' END,"
"  attempts = o.attempts + CASE WHEN ($4 AND o.state = 'processing'"
"    AND o.attempts >= coalesce(h.max_attempts, $3))"
"   THEN 0 ELSE 1 END,"
"  available_at = CASE WHEN ($4 AND o.state = 'processing'"
"    AND o.attempts >= coalesce(h.max_attempts, $3))"
"   THEN o.available_at ELSE now() + $2 * interval '1 millisecond' END,"
"  dead_at = CASE WHEN ($4 AND o.state = 'processing'"
"    AND o.attempts >= coalesce(h.max_attempts, $3))"
"   THEN now() END,"
"  last_error = CASE WHEN NOT ($4 AND o.state = 'processing'"
"    AND o.attempts >= coalesce(h.max_attempts, $3))"
"   THEN o.last_error"
"   ELSE 'attempt ' || o.attempts ||"
"    ' ended without an outcome (relay stopped or lease expired)' END,"
"  lease = CASE WHEN ($4 AND o.state = 'processing'"
"    AND o.attempts >= coalesce(h.max_attempts, $3))"
"   THEN NULL ELSE $5 END"
" FROM c JOIN h ON h.name = c.handler"
" WHERE NOT c.fanout AND o.id = c.id"
"  AND o.id = ANY (ARRAY(SELECT id FROM c WHERE NOT fanout))"
" RETURNING o.id, o.topic, o.key, o.payload::text AS payload, o.headers,"
"  o.attempts, o.state = 'dead' AS exhausted,"
"  coalesce(h.max_attempts, $3) AS max_attempts, h.url,"
"  h.headers AS handler_headers, h.secret, h.previous_secret, h.timeout,"
"  o.last_error, h.name AS handler, false AS fanout),"
" uf AS ("
" UPDATE grelout.fanout f SET"
"  state = CASE WHEN ($4 AND f.state = 'processing'"
"    AND f.attempts >= coalesce(h.max_attempts, $3))"
"   THEN 'dead' ELSE 'processing' END,"
"  attempts = f.attempts + CASE WHEN ($4 AND f.state = 'processing'"
"    AND f.attempts >= coalesce(h.max_attempts, $3))"
"   THEN 0 ELSE 1 END,"
"  available_at = CASE WHEN ($4 AND f.state = 'processing'"
"    AND f.attempts >= coalesce(h.max_attempts, $3))"
"   THEN f.available_at ELSE now() + $2 * interval '1 millisecond' END,"
"  dead_at = CASE WHEN ($4 AND f.state = 'processing'"
"    AND f.attempts >= coalesce(h.max_attempts, $3))"
"   THEN now() END,"
"  last_error = CASE WHEN NOT ($4 AND f.state = 'processing'"
"    AND f.attempts >= coalesce(h.max_attempts, $3))"
"   THEN f.last_error"
"   ELSE 'attempt ' || f.attempts ||"
"    ' ended without an outcome (relay stopped or lease expired)' END,"
"  lease = CASE WHEN ($4 AND f.state = 'processing'"
"    AND f.attempts >= coalesce(h.max_attempts, $3))"
"   THEN NULL ELSE $5 END"
" FROM c JOIN h ON h.name = c.handler JOIN grelout.outbox o ON o.id = c.id"
" WHERE c.fanout AND f.message_id = c.id AND f.handler = c.handler"
"  AND f.message_id = ANY (ARRAY(SELECT id FROM c WHERE fanout))"
" RETURNING f.message_id AS id, o.topic, o.key, o.payload::text AS payload,"
"  o.headers, f.attempts, f.state = 'dead' AS exhausted,"
"  coalesce(h.max_attempts, $3) AS max_attempts, h.url,"
"  h.headers AS handler_headers, h.secret, h.previous_secret, h.timeout,"
"  f.last_error, f.handler, true AS fanout)"
" SELECT " CLAIM_COLUMNS " FROM ui"
" UNION ALL"
" SELECT " CLAIM_COLUMNS " FROM uf";

/* Whether some handler is ordered (1.1). */
static const char *any_ordered_sql =
"SELECT 1 FROM grelout.handlers WHERE ordered LIMIT 1";

/*
 * The enabled handlers with caps (1.1): their max_in_flight, or the
 * default $1 when it is not 0, and their max_per_second (0: none).
 */
static const char *handler_caps_sql =
"SELECT name, coalesce(max_in_flight, $1), coalesce(max_per_second, 0)"
" FROM grelout.handlers"
" WHERE enabled AND (max_in_flight IS NOT NULL"
"  OR max_per_second IS NOT NULL OR $1 > 0)";

/*
 * Whether the claim statement of a 1.1 schema could take anything now
 * (1.1): some enabled handler has an inline delivery or a fan-out row
 * pending or processing and due, the claim's candidates before its limits
 * and head tests, through the same claim indexes.  A few index probes
 * where the claim statement, whose start alone prepares its many parts,
 * costs several times more (store_claim_may_find).
 */
static const char *any_due_sql =
"SELECT 1 FROM grelout.handlers h"
" WHERE h.enabled AND ("
"  EXISTS (SELECT 1 FROM grelout.outbox o"
"   WHERE o.handler = h.name AND o.route = 'single'"
"    AND o.state IN ('pending', 'processing') AND o.available_at <= now())"
"  OR EXISTS (SELECT 1 FROM grelout.fanout f"
"   WHERE f.handler = h.name"
"    AND f.state IN ('pending', 'processing') AND f.available_at <= now()))"
" LIMIT 1";

static SPIPlanPtr claim_plan_10 = NULL;
static SPIPlanPtr claim_plan_11 = NULL;
static SPIPlanPtr any_ordered_plan = NULL;
static SPIPlanPtr any_due_plan = NULL;
static SPIPlanPtr handler_caps_plan = NULL;

/*
 * store_claim: claim up to limit deliveries.  The rows are in SPI_tuptable
 * (columns as enum CLAIM_*) until SPI_finish.  On 1.1 the redrive lock is
 * tried first, in shared mode: without it (a redrive in progress)
 * deliveries of ordered handlers with a key wait for a later claim.
 *
 * The claim runs on every cycle with a LIMIT that changes each time, so the
 * plan cache would re-plan it at every call (its custom plans always look
 * cheaper than a generic plan costed for an unknown LIMIT).  It is planned
 * once, generic, instead: the redundant "o.id = ANY (ARRAY(SELECT id FROM
 * c))" gives the generic plan a primary-key lookup of the claimed rows
 * whatever row count it assumes for the LIMIT.
 */
SPITupleTable *
store_claim(StoreSchema schema, int limit, int lease_ms, int64 lease_token,
			int default_max_attempts, bool dead_letter, const ClaimLimits *lims,
			uint64 *nrows)
{
	Oid			types[9] = {INT4OID, FLOAT8OID, INT4OID, BOOLOID, INT8OID, BOOLOID,
	INT4OID, TEXTARRAYOID, INT4ARRAYOID};
	Datum		values[9];
	SPIPlanPtr	plan;
	int			ret;

	if (schema >= STORE_SCHEMA_1_1)
	{
		plan = grelout_keep_plan(&claim_plan_11, claim_sql_11, 9, types,
								 CURSOR_OPT_GENERIC_PLAN);
		values[6] = Int32GetDatum(lims->default_lim);
		values[7] = lims->names;
		values[8] = lims->lims;
		/* ordered deliveries only while no redrive is changing the heads */
		values[5] = DirectFunctionCall2(pg_try_advisory_xact_lock_shared_int4,
										Int32GetDatum(ROUTING_LOCK_KEY1),
										Int32GetDatum(REDRIVE_LOCK_KEY2));
	}
	else
		plan = grelout_keep_plan(&claim_plan_10, claim_sql_10, 5, types,
								 CURSOR_OPT_GENERIC_PLAN);
	values[0] = Int32GetDatum(limit);
	values[1] = Float8GetDatum((double) lease_ms);
	values[2] = Int32GetDatum(default_max_attempts);
	values[3] = BoolGetDatum(dead_letter);
	values[4] = Int64GetDatum(lease_token);
	ret = SPI_execute_plan(plan, values, NULL, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "claim failed: %s", SPI_result_code_string(ret));
	*nrows = SPI_processed;
	return SPI_tuptable;
}

/*
 * store_claim_may_find: whether the claim statement could take a delivery
 * now (any_due_sql); always true under 1.0, whose claim is one plain
 * statement.  False means a claim would take nothing.
 */
bool
store_claim_may_find(StoreSchema schema)
{
	int			ret;

	if (schema < STORE_SCHEMA_1_1)
		return true;
	grelout_keep_plan(&any_due_plan, any_due_sql, 0, NULL, 0);
	/* not read_only: this cycle's own settles and routing are to be seen */
	ret = SPI_execute_plan(any_due_plan, NULL, NULL, false, 1);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not look for due deliveries: %s",
			 SPI_result_code_string(ret));
	return SPI_processed > 0;
}

/* store_any_ordered_handler: whether some handler has ordered = true (1.1). */
bool
store_any_ordered_handler(void)
{
	int			ret;

	grelout_keep_plan(&any_ordered_plan, any_ordered_sql, 0, NULL, 0);
	ret = SPI_execute_plan(any_ordered_plan, NULL, NULL, false, 1);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not read the handlers: %s", SPI_result_code_string(ret));
	return SPI_processed > 0;
}

/*
 * store_handler_caps: the enabled handlers with a max_in_flight (their own,
 * or default_max_in_flight when it is not 0) or a max_per_second, as a
 * list of HandlerCaps (1.1).  No handler has caps in the usual case, and
 * the statement then reads a few handler rows.
 */
List *
store_handler_caps(int default_max_in_flight)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1];
	List	   *caps = NIL;
	int			ret;

	grelout_keep_plan(&handler_caps_plan, handler_caps_sql, 1, types, 0);
	values[0] = Int32GetDatum(default_max_in_flight);
	ret = SPI_execute_plan(handler_caps_plan, values, NULL, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not read the handlers' caps: %s", SPI_result_code_string(ret));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		HandlerCaps *c = palloc(sizeof(HandlerCaps));
		bool		isnull;

		c->name = grelout_text_column(tup, desc, 1);
		c->max_in_flight = DatumGetInt32(SPI_getbinval(tup, desc, 2, &isnull));
		c->max_per_second = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
		caps = lappend(caps, c);
	}
	return caps;
}
