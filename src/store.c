/*-------------------------------------------------------------------------
 *
 * store.c
 *	  The relay's statements on grelout.outbox and grelout.fanout, each
 *	  planned once per relay and kept (the routing of new messages, 1.1,
 *	  is routing.c's): the claim (FOR UPDATE SKIP LOCKED with a lease and a
 *	  fencing token), the batched settle of many outcomes and the finalize
 *	  of fan-out messages, the next due time, the lease recovery at start,
 *	  and the retention purge of delivered messages.
 *
 * The library serves both schemas: store_schema reads the installed
 * version every cycle, and each function takes it, running the 1.0
 * statements (a handler per topic, every delivery inline in its outbox
 * row) on a 1.0 schema and the 1.1 ones (routing; inline deliveries for
 * messages routed to one handler, grelout.fanout rows for several) on 1.1.
 *
 * Every function here runs inside a transaction that the relay opened,
 * with SPI connected and a snapshot pushed.
 *
 * Here too the two helpers every statement grelout runs goes through:
 * grelout_keep_plan, and grelout_pin_search_path, which makes what follows
 * immune to the caller's search_path.
 *
 *-------------------------------------------------------------------------
 */
#include "store.h"

#include "health.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "storage/lmgr.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/fmgrprotos.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

static SPIPlanPtr claim_plan = NULL;
static SPIPlanPtr delete_plan = NULL;
static SPIPlanPtr update_plan = NULL;
static SPIPlanPtr next_due_plan = NULL;
static SPIPlanPtr purge_plan = NULL;

static SPIPlanPtr claim_plan_11 = NULL;
static SPIPlanPtr update_plan_11 = NULL;
static SPIPlanPtr fanout_lock_plan_11 = NULL;
static SPIPlanPtr fanout_update_plan_11 = NULL;
static SPIPlanPtr finalize_plan_11 = NULL;
static SPIPlanPtr next_due_plan_11 = NULL;
static SPIPlanPtr purge_plan_11 = NULL;
static SPIPlanPtr any_ordered_plan_11 = NULL;

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
"  c.previous_secret, c.timeout, o.last_error, NULL::text, false";

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
 * 1.1: the claim, per enabled handler, from its inline deliveries and its
 * fan-out rows through their claim indexes (so it never walks waiting,
 * delayed, finished rows or those of a disabled handler), keeping the
 * oldest $1 of both kinds: neither starves the other.  The candidates, up
 * to 2 * $1 of each kind a handler, are read without locks; then the
 * oldest $1 of them that no other relay holds are locked (FOR UPDATE SKIP
 * LOCKED, which locks a row only as the LIMIT takes it), so a claim locks
 * no row it does not claim however many handlers have work, and a second
 * relay claiming at the same time takes the next candidates.  Candidates
 * are found again by their ctid, a TID scan whatever the statistics said
 * when the (kept, generic) plan was made: their state is tested as "not
 * delivered, not dead" (the same, by the CHECK constraint), which a claim
 * index's predicate cannot be proved from, so that no plan walks a claim
 * index there instead.  A row updated since it was read is followed to its
 * latest version and tested again.  The rest is
 * the 1.0 claim: due, pending or with a lapsed lease, attempts counted
 * here, a lapsed processing claim without attempts left dead-lettered.
 */
#define EXHAUSTED_11(t) \
	"($4 AND " t ".state = 'processing'" \
	" AND " t ".attempts >= coalesce(h.max_attempts, $3))"
#define CLAIM_SET_11(t) \
	"  state = CASE WHEN " EXHAUSTED_11(t) " THEN 'dead' ELSE 'processing' END," \
	"  attempts = " t ".attempts + CASE WHEN " EXHAUSTED_11(t) " THEN 0 ELSE 1 END," \
	"  available_at = CASE WHEN " EXHAUSTED_11(t) " THEN " t ".available_at" \
	"   ELSE now() + $2 * interval '1 millisecond' END," \
	"  dead_at = CASE WHEN " EXHAUSTED_11(t) " THEN now() END," \
	"  last_error = CASE WHEN NOT " EXHAUSTED_11(t) " THEN " t ".last_error" \
	"   ELSE 'attempt ' || " t ".attempts ||" \
	"    ' ended without an outcome (relay stopped or lease expired)' END," \
	"  lease = CASE WHEN " EXHAUSTED_11(t) " THEN NULL ELSE $5 END"

/*
 * Per-key ordering (issue 12, per publisher since issue 29): a delivery t
 * (an outbox or fanout row) of handler h may be claimed only if h is not
 * ordered, t has no key, or t is the head of its (handler, publisher,
 * key): no delivery of the key published by the same role with a smaller
 * routing number is unfinished (pending, processing, or dead when h
 * blocks on a dead head), and none of them is in flight (processing with
 * a live lease; this matters for a redriven delivery of a 'skip' handler,
 * which becomes the head again).  Only when the claim holds the redrive
 * lock ($6, store_claim).  Heads are unique per key and publisher, so a
 * claim never takes two of them.
 *
 * The publisher is the message's published_by, NULL for a message stored
 * under 1.0: NULL is a publisher of its own, compared as
 * coalesce(published_by, 0) (no role has oid 0), which is what
 * IS NOT DISTINCT FROM would say, in a form an index can answer
 * (outbox_publisher_key_idx, 1.2).  A fanout row's publisher is its
 * message's ("pub": an expression of t).  Each test is an index probe
 * (outbox_key_idx or, from 1.2, outbox_publisher_key_idx; fanout_key_idx
 * and the _processing twins, whose rows of other publishers are passed
 * over).
 */
#define PUB_OUTBOX_11(t) "coalesce(" t ".published_by, 0::oid)"
#define PUB_FANOUT_11(t) \
	"(SELECT coalesce(m.published_by, 0::oid) FROM grelout.outbox m" \
	" WHERE m.id = " t ".message_id)"
#define NO_EARLIER_OUTBOX_11(t, pub) \
	" NOT EXISTS (SELECT 1 FROM grelout.outbox e WHERE e.route = 'single'" \
	"  AND e.handler = h.name AND e.key = " t ".key" \
	"  AND coalesce(e.published_by, 0::oid) = " pub \
	"  AND e.state IN ('pending', 'processing', 'dead') AND e.seq < " t ".seq" \
	"  AND (e.state <> 'dead' OR h.on_dead = 'block'))"
#define NO_EARLIER_FANOUT_11(t, pub) \
	" NOT EXISTS (SELECT 1 FROM grelout.fanout e" \
	"  JOIN grelout.outbox em ON em.id = e.message_id" \
	"  WHERE e.handler = h.name AND e.key = " t ".key" \
	"  AND e.state IN ('pending', 'processing', 'dead') AND e.seq < " t ".seq" \
	"  AND (e.state <> 'dead' OR h.on_dead = 'block')" \
	"  AND coalesce(em.published_by, 0::oid) = " pub ")"
#define NONE_IN_FLIGHT_OUTBOX_11(t, pub) \
	" NOT EXISTS (SELECT 1 FROM grelout.outbox e WHERE e.route = 'single'" \
	"  AND e.handler = h.name AND e.key = " t ".key" \
	"  AND coalesce(e.published_by, 0::oid) = " pub \
	"  AND e.state = 'processing' AND e.available_at > now())"
#define NONE_IN_FLIGHT_FANOUT_11(t, pub) \
	" NOT EXISTS (SELECT 1 FROM grelout.fanout e" \
	"  JOIN grelout.outbox em ON em.id = e.message_id" \
	"  WHERE e.handler = h.name AND e.key = " t ".key" \
	"  AND e.state = 'processing' AND e.available_at > now()" \
	"  AND coalesce(em.published_by, 0::oid) = " pub ")"
#define HEAD_11(t, pub) \
	"(NOT h.ordered OR " t ".key IS NULL OR ($6 AND" \
	NO_EARLIER_OUTBOX_11(t, pub) " AND" \
	NO_EARLIER_FANOUT_11(t, pub) " AND" \
	NONE_IN_FLIGHT_OUTBOX_11(t, pub) " AND" \
	NONE_IN_FLIGHT_FANOUT_11(t, pub) "))"

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
"    AND " HEAD_11("o", PUB_OUTBOX_11("o"))
"   ORDER BY o.available_at, o.id LIMIT least(2 * $1, 2 * h.lim)) y) x),"
" kf AS MATERIALIZED ("
" SELECT x.tid, x.rk FROM h CROSS JOIN LATERAL ("
"  SELECT y.tid, row_number() OVER () AS rk FROM ("
"   SELECT f.ctid AS tid FROM grelout.fanout f"
"   WHERE f.handler = h.name"
"    AND f.state IN ('pending', 'processing') AND f.available_at <= now()"
"    AND " HEAD_11("f", PUB_FANOUT_11("f"))
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
CLAIM_SET_11("o")
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
CLAIM_SET_11("f")
" FROM c JOIN h ON h.name = c.handler JOIN grelout.outbox o ON o.id = c.id"
" WHERE c.fanout AND f.message_id = c.id AND f.handler = c.handler"
"  AND f.message_id = ANY (ARRAY(SELECT id FROM c WHERE fanout))"
" RETURNING f.message_id, o.topic, o.key, o.payload::text, o.headers,"
"  f.attempts, f.state = 'dead', coalesce(h.max_attempts, $3), h.url,"
"  h.headers, h.secret, h.previous_secret, h.timeout, f.last_error,"
"  f.handler, true)"
" SELECT * FROM ui UNION ALL SELECT * FROM uf";

/* 1.1: the inline outcomes, as in 1.0, with the attempt's status and duration. */
static const char *update_sql_11 =
"UPDATE grelout.outbox o SET"
" state = CASE WHEN s.state IN ('release', 'hold') THEN 'pending'"
"  ELSE s.state END,"
" attempts = CASE WHEN s.state IN ('release', 'hold')"
"  THEN greatest(o.attempts - 1, 0) ELSE o.attempts END,"
" available_at = CASE WHEN s.state IN ('pending', 'release', 'hold')"
"  THEN now() + s.delay_ms * interval '1 millisecond' ELSE o.available_at END,"
" last_error = CASE WHEN s.state IN ('delivered', 'release') THEN o.last_error"
"  ELSE s.error END,"
" last_status = CASE WHEN s.state = 'release' THEN o.last_status ELSE s.status END,"
" last_duration_ms = CASE WHEN s.state = 'release' THEN o.last_duration_ms"
"  ELSE s.duration_ms END,"
" delivered_at = CASE WHEN s.state = 'delivered' THEN now() END,"
" dead_at = CASE WHEN s.state = 'dead' THEN now() END,"
" lease = NULL"
" FROM unnest($1::uuid[], $2::int8[], $3::text[], $4::float8[], $5::text[],"
"  $6::int4[], $7::int4[])"
"  AS s(id, lease, state, delay_ms, error, status, duration_ms)"
" WHERE o.id = s.id AND o.lease = s.lease";

/* 1.1: the messages of fan-out rows that changed (see lock_messages). */
static const char *fanout_lock_sql_11 =
"SELECT 1 FROM grelout.outbox o WHERE o.id = ANY ($1::uuid[])"
" ORDER BY o.id FOR UPDATE OF o";

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
"UPDATE grelout.fanout f SET"
" state = CASE WHEN s.state IN ('release', 'hold') THEN 'pending'"
"  ELSE s.state END,"
" attempts = CASE WHEN s.state IN ('release', 'hold')"
"  THEN greatest(f.attempts - 1, 0) ELSE f.attempts END,"
" available_at = CASE WHEN s.state IN ('pending', 'release', 'hold')"
"  THEN now() + s.delay_ms * interval '1 millisecond' ELSE f.available_at END,"
" last_error = CASE WHEN s.state IN ('delivered', 'release') THEN f.last_error"
"  ELSE s.error END,"
" last_status = CASE WHEN s.state = 'release' THEN f.last_status ELSE s.status END,"
" last_duration_ms = CASE WHEN s.state = 'release' THEN f.last_duration_ms"
"  ELSE s.duration_ms END,"
" delivered_at = CASE WHEN s.state = 'delivered' THEN now() END,"
" dead_at = CASE WHEN s.state = 'dead' THEN now() END,"
" lease = NULL"
" FROM s"
" WHERE ($9 OR s.state <> 'delivered')"
"  AND f.message_id = s.id AND f.handler = s.handler AND f.lease = s.lease)"
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
 * grelout_keep_plan: prepare a statement once and keep it for the
 * backend's life (publish.c's and the relay's statements alike), with
 * the given cursor options.  PostgreSQL revalidates a kept plan when the
 * objects it uses change (ALTER EXTENSION UPDATE included).
 */
SPIPlanPtr
grelout_keep_plan(const char *sql, int nargs, Oid *argtypes, int cursor_options)
{
	SPIPlanPtr	plan = SPI_prepare_cursor(sql, nargs, argtypes, cursor_options);

	if (plan == NULL)
		elog(ERROR, "could not prepare grelout statement \"%s\": %s",
			 sql, SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "could not keep grelout statement");
	return plan;
}

/*
 * grelout_pin_search_path: run what follows, until grelout_unpin_search_path
 * with the value returned, under search_path GRELOUT_SEARCH_PATH whatever
 * the session's, as a function's SET search_path clause would
 * (fmgr_security_definer does the same).  Every SQL-callable function of
 * grelout that runs a statement or looks a name up calls it first: a kept
 * plan is analyzed again under the search_path of the moment it runs, so
 * pinning the path only while preparing would not do, and an operator or
 * function planted first on the caller's path would run with the rights
 * grelout raises to.
 *
 * Returns the GUC nest level to pass to grelout_unpin_search_path, or -1
 * when the path is that already (the function's own SET clause, an outer
 * pin, the relay's session) and nothing changed.  After an error nothing
 * needs undoing: the abort of the (sub)transaction restores the path.
 */
int
grelout_pin_search_path(void)
{
	int			nest;

	if (namespace_search_path != NULL &&
		strcmp(namespace_search_path, GRELOUT_SEARCH_PATH) == 0)
		return -1;
	nest = NewGUCNestLevel();
	(void) set_config_option("search_path", GRELOUT_SEARCH_PATH,
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	return nest;
}

/*
 * grelout_unpin_search_path: give back the search_path that
 * grelout_pin_search_path replaced (nest: what it returned).
 */
void
grelout_unpin_search_path(int nest)
{
	if (nest >= 0)
		AtEOXact_GUC(true, nest);
}

/* prepare_once: plan sql the first time, and keep the plan. */
static SPIPlanPtr
prepare_once(SPIPlanPtr *plan, const char *sql, int nargs, Oid *types)
{
	/*
	 * The claim runs on every cycle with a LIMIT that changes each time, so
	 * the plan cache would re-plan it at every call (its custom plans always
	 * look cheaper than a generic plan costed for an unknown LIMIT).  Planned
	 * once instead: the redundant "o.id = ANY (ARRAY( SELECT id FROM c))"
	 * gives the generic plan a primary-key lookup of the claimed rows
	 * whatever row count it assumes for the LIMIT.
	 */
	if (*plan == NULL)
		*plan = grelout_keep_plan(sql, nargs, types,
								  (plan == &claim_plan || plan == &claim_plan_11) ?
								  CURSOR_OPT_GENERIC_PLAN : 0);
	return *plan;
}

/*
 * store_schema: which grelout schema this database has, as the catalog
 * reads now (read every cycle: after ALTER EXTENSION grelout UPDATE
 * commits, the next cycle runs the 1.1 statements).  One index lookup, as
 * get_extension_oid does.
 */
StoreSchema
store_schema(void)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	StoreSchema result = STORE_SCHEMA_NONE;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("grelout"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		result = STORE_SCHEMA_1_1;
		if (!isnull && strcmp(TextDatumGetCString(d), "1.0") == 0)
			result = STORE_SCHEMA_1_0;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return result;
}

/*
 * store_lock_outbox: lock grelout.outbox for the cycle's writes, first of
 * the extension's tables, so that a cycle takes its locks in one order
 * whatever its statements: the outbox, then the handlers and the fan-out
 * rows.  Without it a cycle with nothing to settle read the handlers
 * (plan_claim) before routing locked the outbox, and a concurrent
 * "TRUNCATE grelout.outbox, grelout.handlers" could deadlock with it.
 */
void
store_lock_outbox(void)
{
	LockRelationOid(store_relid("outbox"), RowExclusiveLock);
}

/*
 * store_relid: the OID of relation relname in schema grelout (an error when
 * it is missing: the schema is older than this library expects).
 */
Oid
store_relid(const char *relname)
{
	Oid			nsp = get_namespace_oid("grelout", false);
	Oid			rel = get_relname_relid(relname, nsp);

	if (!OidIsValid(rel))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"grelout.%s\" does not exist", relname),
				 errhint("Update the extension with ALTER EXTENSION grelout UPDATE.")));
	return rel;
}

/*
 * store_claim: claim up to limit deliveries.  The rows are in SPI_tuptable
 * (columns as enum CLAIM_*) until SPI_finish.  On 1.1
 * the redrive lock is tried first, in shared mode: without it (a redrive
 * in progress) deliveries of ordered handlers with a key wait for a later
 * claim.
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

	if (schema == STORE_SCHEMA_1_1)
	{
		plan = prepare_once(&claim_plan_11, claim_sql_11, 9, types);
		values[6] = Int32GetDatum(lims->default_lim);
		values[7] = lims->names;
		values[8] = lims->lims;
		/* ordered deliveries only while no redrive is changing the heads */
		values[5] = DirectFunctionCall2(pg_try_advisory_xact_lock_shared_int4,
										Int32GetDatum(ROUTING_LOCK_KEY1),
										Int32GetDatum(REDRIVE_LOCK_KEY2));
	}
	else
		plan = prepare_once(&claim_plan, claim_sql, 5, types);
	values[0] = Int32GetDatum(limit);
	values[1] = Float8GetDatum((double) lease_ms);
	values[2] = Int32GetDatum(default_max_attempts);
	values[3] = BoolGetDatum(dead_letter);
	values[4] = Int64GetDatum(lease_token);
	ret = SPI_execute_plan(plan, values, NULL, false, 0);
	if (ret != (schema == STORE_SCHEMA_1_1 ? SPI_OK_SELECT : SPI_OK_UPDATE_RETURNING))
		elog(ERROR, "claim failed: %s", SPI_result_code_string(ret));
	*nrows = SPI_processed;
	return SPI_tuptable;
}

/* store_any_ordered_handler: whether some handler has ordered = true (1.1). */
bool
store_any_ordered_handler(void)
{
	int			ret;

	prepare_once(&any_ordered_plan_11,
				 "SELECT 1 FROM grelout.handlers WHERE ordered LIMIT 1", 0, NULL);
	ret = SPI_execute_plan(any_ordered_plan_11, NULL, NULL, false, 1);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not read the handlers: %s", SPI_result_code_string(ret));
	return SPI_processed > 0;
}

/* store_array: a one-dimensional array of n datums of a type. */
Datum
store_array(Datum *elems, bool *nulls, int n, Oid type)
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

/* The columns of one batch of outcomes, as arrays are built from them. */
typedef struct SettleBatch
{
	int			n;
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
} SettleBatch;

/* batch_init: room for n outcomes. */
static void
batch_init(SettleBatch *b, int n)
{
	b->n = 0;
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
}

/* batch_add: one outcome. */
static void
batch_add(SettleBatch *b, SettleItem *it)
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
}

/* settle_delete: delivered inline rows not kept, fenced by their lease. */
static void
settle_delete(SettleBatch *b)
{
	Oid			types[2] = {UUIDARRAYOID, INT8ARRAYOID};
	Datum		values[2];
	int			ret;

	prepare_once(&delete_plan, delete_sql, 2, types);
	values[0] = store_array(b->ids, NULL, b->n, UUIDOID);
	values[1] = store_array(b->leases, NULL, b->n, INT8OID);
	ret = SPI_execute_plan(delete_plan, values, NULL, false, 0);
	if (ret != SPI_OK_DELETE)
		elog(ERROR, "settle failed: %s", SPI_result_code_string(ret));
}

/* settle_update: every other inline outcome (1.1: with status, duration). */
static void
settle_update(StoreSchema schema, SettleBatch *b)
{
	Oid			types[7] = {UUIDARRAYOID, INT8ARRAYOID, TEXTARRAYOID,
	FLOAT8ARRAYOID, TEXTARRAYOID, INT4ARRAYOID, INT4ARRAYOID};
	Datum		values[7];
	SPIPlanPtr	plan;
	int			ret;

	if (schema == STORE_SCHEMA_1_1)
		plan = prepare_once(&update_plan_11, update_sql_11, 7, types);
	else
		plan = prepare_once(&update_plan, update_sql, 5, types);
	values[0] = store_array(b->ids, NULL, b->n, UUIDOID);
	values[1] = store_array(b->leases, NULL, b->n, INT8OID);
	values[2] = store_array(b->states, NULL, b->n, TEXTOID);
	values[3] = store_array(b->delays, NULL, b->n, FLOAT8OID);
	values[4] = store_array(b->errors, b->error_nulls, b->n, TEXTOID);
	values[5] = store_array(b->statuses, b->status_nulls, b->n, INT4OID);
	values[6] = store_array(b->durations, b->duration_nulls, b->n, INT4OID);
	ret = SPI_execute_plan(plan, values, NULL, false, 0);
	if (ret != SPI_OK_UPDATE)
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

	prepare_once(&fanout_lock_plan_11, fanout_lock_sql_11, 1, types);
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

	prepare_once(&finalize_plan_11, finalize_sql_11, 3, types);
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
 * delivered ones not kept), lock their messages, then finalize the
 * messages that have no unfinished row left.
 */
static void
settle_fanout(SettleBatch *b, bool keep_delivered)
{
	Oid			types[9] = {UUIDARRAYOID, TEXTARRAYOID, INT8ARRAYOID,
		TEXTARRAYOID, FLOAT8ARRAYOID, TEXTARRAYOID, INT4ARRAYOID, INT4ARRAYOID,
	BOOLOID};
	Datum		ids = store_array(b->ids, NULL, b->n, UUIDOID);
	Datum		values[9];
	Datum		deleted;
	bool		isnull;
	int			ret;

	prepare_once(&fanout_update_plan_11, fanout_update_sql_11, 9, types);
	values[0] = ids;
	values[1] = store_array(b->handlers, NULL, b->n, TEXTOID);
	values[2] = store_array(b->leases, NULL, b->n, INT8OID);
	values[3] = store_array(b->states, NULL, b->n, TEXTOID);
	values[4] = store_array(b->delays, NULL, b->n, FLOAT8OID);
	values[5] = store_array(b->errors, b->error_nulls, b->n, TEXTOID);
	values[6] = store_array(b->statuses, b->status_nulls, b->n, INT4OID);
	values[7] = store_array(b->durations, b->duration_nulls, b->n, INT4OID);
	values[8] = BoolGetDatum(keep_delivered);
	ret = SPI_execute_plan(fanout_update_plan_11, values, NULL, false, 0);
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
 * batched statements.  An item whose row no longer carries its lease (the
 * lease lapsed and another relay claimed it, or it was redriven) changes
 * nothing.
 */
void
store_settle(StoreSchema schema, SettleItem *items, int n, bool keep_delivered)
{
	SettleBatch del;
	SettleBatch up;
	SettleBatch fan;

	batch_init(&del, n);
	batch_init(&up, n);
	batch_init(&fan, n);
	for (int i = 0; i < n; i++)
	{
		SettleItem *it = &items[i];

		if (it->fanout)
		{
			/* fan-out rows exist only under 1.1; a 1.0 schema has none */
			if (schema == STORE_SCHEMA_1_1)
				batch_add(&fan, it);
		}
		else if (it->state == SETTLE_DELIVERED && !keep_delivered)
			batch_add(&del, it);
		else
			batch_add(&up, it);
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

	if (schema != STORE_SCHEMA_1_1)
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

	if (schema == STORE_SCHEMA_1_1)
		plan = prepare_once(&next_due_plan_11, next_due_sql_11, 0, NULL);
	else
		plan = prepare_once(&next_due_plan, next_due_sql, 0, NULL);

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
	if (schema != STORE_SCHEMA_1_1)
	{
		prepare_once(&purge_plan, purge_sql, 2, types);
		ret = SPI_execute_plan(purge_plan, values, NULL, false, 0);
		if (ret != SPI_OK_DELETE)
			elog(ERROR, "retention purge failed: %s", SPI_result_code_string(ret));
		return SPI_processed;
	}
	prepare_once(&purge_plan_11, purge_sql_11, 2, types);
	ret = SPI_execute_plan(purge_plan_11, values, NULL, false, 0);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "retention purge failed: %s", SPI_result_code_string(ret));
	return (uint64) DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
												SPI_tuptable->tupdesc, 1, &isnull));
}

/* store_text_array: a text[] of the C strings of a list. */
Datum
store_text_array(List *strings)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(list_length(strings), 1));
	int			n = 0;
	ListCell   *lc;

	foreach(lc, strings)
		elems[n++] = CStringGetTextDatum((char *) lfirst(lc));
	return store_array(elems, NULL, n, TEXTOID);
}

/* store_int_array: an int4[] of n values. */
Datum
store_int_array(int *values, int n)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		elems[i] = Int32GetDatum(values[i]);
	return store_array(elems, NULL, n, INT4OID);
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
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {INT4OID};
	Datum		values[1];
	List	   *caps = NIL;
	int			ret;

	if (plan == NULL)
		plan = grelout_keep_plan(
								 "SELECT name, coalesce(max_in_flight, $1), coalesce(max_per_second, 0)"
								 " FROM grelout.handlers"
								 " WHERE enabled AND (max_in_flight IS NOT NULL"
								 "  OR max_per_second IS NOT NULL OR $1 > 0)",
								 1, types, 0);
	values[0] = Int32GetDatum(default_max_in_flight);
	ret = SPI_execute_plan(plan, values, NULL, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not read the handlers' caps: %s", SPI_result_code_string(ret));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		HandlerCaps *c = palloc(sizeof(HandlerCaps));
		bool		isnull;

		c->name = SPI_getvalue(tup, desc, 1);
		c->max_in_flight = DatumGetInt32(SPI_getbinval(tup, desc, 2, &isnull));
		c->max_per_second = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
		caps = lappend(caps, c);
	}
	return caps;
}

/* timestamp_value: a stored time, 0 for NULL. */
static TimestampTz
timestamp_value(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return isnull ? 0 : DatumGetTimestampTz(d);
}

/*
 * store_load_health: load the stored breaker states of the database's
 * handlers into shared memory (those this server has no entry for yet).
 */
void
store_load_health(Oid dboid)
{
	int			ret;

	ret = SPI_execute("SELECT t.handler, t.breaker, t.consecutive_failures,"
					  " t.opened_at, t.probe_at, t.cooldown_ms, t.version,"
					  " t.last_success_at, t.last_failure_at, t.last_error"
					  " FROM grelout.handler_health t", false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not read grelout.handler_health: %s",
			 SPI_result_code_string(ret));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		HealthWrite w;
		char	   *name = SPI_getvalue(tup, desc, 1);
		char	   *breaker = SPI_getvalue(tup, desc, 2);
		char	   *error = SPI_getvalue(tup, desc, 10);
		bool		isnull;

		memset(&w, 0, sizeof(w));
		strlcpy(w.name, name, sizeof(w.name));
		w.breaker = strcmp(breaker, "open") == 0 ? BREAKER_OPEN :
			strcmp(breaker, "half-open") == 0 ? BREAKER_HALF_OPEN : BREAKER_CLOSED;
		w.consecutive_failures = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
		w.opened_at = timestamp_value(tup, desc, 4);
		w.probe_at = timestamp_value(tup, desc, 5);
		w.cooldown_ms = DatumGetInt64(SPI_getbinval(tup, desc, 6, &isnull));
		w.version = (uint64) DatumGetInt64(SPI_getbinval(tup, desc, 7, &isnull));
		w.last_success_at = timestamp_value(tup, desc, 8);
		w.last_failure_at = timestamp_value(tup, desc, 9);
		if (error)
			strlcpy(w.last_error, error, sizeof(w.last_error));
		health_load(dboid, &w);
	}
}

/*
 * store_disable_handler: disable a handler whose breaker stayed open (its
 * trigger publishes grelout.handler.disabled with reason "breaker");
 * returns whether it was enabled.
 */
bool
store_disable_handler(const char *name)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	volatile int ret = 0;

	if (plan == NULL)
		plan = grelout_keep_plan("UPDATE grelout.handlers SET enabled = false"
								 " WHERE name = $1 AND enabled", 1, types, 0);
	values[0] = CStringGetTextDatum(name);
	grelout_auto_disabling = true;
	PG_TRY();
	{
		ret = SPI_execute_plan(plan, values, NULL, false, 0);
	}
	PG_FINALLY();
	{
		grelout_auto_disabling = false;
	}
	PG_END_TRY();
	if (ret != SPI_OK_UPDATE)
		elog(ERROR, "could not disable handler \"%s\": %s", name,
			 SPI_result_code_string(ret));
	return SPI_processed > 0;
}
