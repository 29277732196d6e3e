/*-------------------------------------------------------------------------
 *
 * backlog.c
 *	  The handlers' backlog gauges of grelout.metrics(): how many of each
 *	  handler's deliveries are pending, and when the oldest of them was
 *	  published.  A relay counts them in its cycle's transaction and keeps
 *	  them in the handlers' shared health entries (health.c), where
 *	  grelout.metrics() reads them without scanning a table.
 *
 * Pending means neither delivered nor dead: due now, delayed for a retry
 * or a Retry-After pause, held by a disabled handler or an open breaker,
 * or claimed and in flight (grelout_handler_in_flight of them).  Messages
 * not yet routed to their handlers are not counted: a relay routes them
 * in its next cycle.  The publish time is the one the message id carries
 * (a UUIDv7, ids.c), as for the commit-to-delivery latency histogram.
 *
 * The count walks the claim indexes' entries of every pending delivery
 * (an index-only scan when the visibility map allows), so its cost grows
 * with the backlog.  It is kept bounded: one relay of a database counts at
 * a time (the one that moves the database's backlog_due_at forward,
 * shmem.h), at most once a second, and never more often than every
 * BACKLOG_COST_FACTOR times the last count's duration, so that counting
 * never takes more than a small share of a relay's time; and a count that
 * would take longer than BACKLOG_BUDGET_MS (a backlog of millions) is
 * given up, in a subtransaction of its own, without failing the cycle.
 * It rides on the cycles that run anyway (at grelout.poll_interval at the
 * latest while the relay may claim): the gauges are that fresh.  The
 * counts are published to shared memory once the cycle commits; a
 * rolled-back cycle's are dropped.
 *
 *-------------------------------------------------------------------------
 */
#include "relay.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "latency.h"
#include "miscadmin.h"
#include "postmaster/interrupt.h"
#include "utils/resowner.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

/* The shortest interval between two counts of a database's backlog. */
#define BACKLOG_INTERVAL_MS		1000
/* ... and the interval, in multiples of the last count's duration. */
#define BACKLOG_COST_FACTOR		50
/* The most time one count may take (a larger backlog is not counted). */
#define BACKLOG_BUDGET_MS		2000
/* The longest; a due time further away means the clock stepped back. */
#define BACKLOG_MAX_WAIT_MS		300000

/*
 * Each handler's pending deliveries, inline (route single) and fan-out,
 * and the least of their ids, compared as text in the "C" collation: the
 * order of the UUIDs' bytes, so the oldest UUIDv7 (uuid has no min()).
 * The conditions are those of the claim indexes' predicates
 * (outbox_claim_idx, fanout_claim_idx), whose entries it reads in handler
 * order.  Names resolve under the relay's pinned search_path (relay.c).
 */
static const char *const backlog_sql =
"SELECT b.handler, sum(b.n)::int8,"
"  min(b.oldest COLLATE \"C\")::uuid"
" FROM ("
"  SELECT o.handler, count(*) AS n, min(o.id::text COLLATE \"C\") AS oldest"
"  FROM grelout.outbox o"
"  WHERE o.route = 'single' AND o.state IN ('pending', 'processing')"
"  GROUP BY o.handler"
"  UNION ALL"
"  SELECT f.handler, count(*), min(f.message_id::text COLLATE \"C\")"
"  FROM grelout.fanout f"
"  WHERE f.state IN ('pending', 'processing')"
"  GROUP BY f.handler) b"
" GROUP BY b.handler";

static SPIPlanPtr backlog_plan = NULL;

/* The last count, waiting for its cycle's commit. */
static HealthBacklog *counted = NULL;
static int	ncounted = 0;
static TimestampTz counted_at = 0;
static bool have_count = false;

/*
 * backlog_take_turn: is the database's count due, and did this relay win
 * it?  The winner moves backlog_due_at past the end of its count's
 * budget, so that no other relay counts while it does.  A due time too far
 * ahead (the clock stepped back) is due now.
 */
static bool
backlog_take_turn(TimestampTz now)
{
	pg_atomic_uint64 *due = &MyRelay.db->backlog_due_at;
	uint64		expected = pg_atomic_read_u64(due);

	if ((TimestampTz) expected > now &&
		(TimestampTz) expected - now <= BACKLOG_MAX_WAIT_MS * INT64CONST(1000))
		return false;
	return pg_atomic_compare_exchange_u64(due, &expected,
										  (uint64) (now + (BACKLOG_BUDGET_MS + BACKLOG_INTERVAL_MS) * INT64CONST(1000)));
}

/* backlog_row: one handler's row of backlog_sql. */
static void
backlog_row(HeapTuple tup, TupleDesc desc, HealthBacklog *b)
{
	bool		isnull;
	Datum		d;
	char	   *name = SPI_getvalue(tup, desc, 1);

	strlcpy(b->name, name ? name : "", sizeof(b->name));
	d = SPI_getbinval(tup, desc, 2, &isnull);
	b->pending = isnull ? 0 : DatumGetInt64(d);
	b->oldest_ms = 0;
	d = SPI_getbinval(tup, desc, 3, &isnull);
	if (!isnull)
	{
		int64_t		ms;

		if (latency_uuid7_ms(DatumGetUUIDP(d)->data, &ms))
			b->oldest_ms = ms;
	}
}

/*
 * backlog_rows: run backlog_sql and keep its rows (in RelayLoopContext) as
 * the count waiting for the commit.
 */
static void
backlog_rows(void)
{
	int			ret;
	int			n;
	HealthBacklog *rows;

	grelout_keep_plan(&backlog_plan, backlog_sql, 0, NULL, 0);
	ret = SPI_execute_plan(backlog_plan, NULL, NULL, true, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "backlog count failed: %s", SPI_result_code_string(ret));
	n = (int) SPI_processed;
	rows = MemoryContextAlloc(RelayLoopContext, sizeof(HealthBacklog) * Max(n, 1));
	for (int i = 0; i < n; i++)
		backlog_row(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, &rows[i]);
	counted = rows;
	ncounted = n;
}

/*
 * backlog_query: backlog_rows in a subtransaction, under a time budget of
 * its own (BACKLOG_BUDGET_MS, and no later than the cycle's own statement
 * timeout, which is armed again after it): a count that runs out of time
 * is rolled back alone, logged, and the cycle goes on.  Any other error
 * (a cancel, a stop) is the cycle's.  Returns whether the count finished.
 */
static bool
backlog_query(void)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	bool		cycle_timer = get_timeout_active(STATEMENT_TIMEOUT);
	TimestampTz cycle_end = cycle_timer ? get_timeout_finish_time(STATEMENT_TIMEOUT) : 0;
	int64		budget_ms = BACKLOG_BUDGET_MS;
	bool		done = true;
	bool		own_budget = true;	/* the timer is the count's, not the cycle's */
	TimestampTz deadline;

	if (cycle_timer && (cycle_end - GetCurrentTimestamp()) / 1000 <= budget_ms)
	{
		budget_ms = (cycle_end - GetCurrentTimestamp()) / 1000;
		own_budget = false;
	}
	if (budget_ms <= 0)
		return false;
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), budget_ms);

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcontext);
	enable_timeout_after(STATEMENT_TIMEOUT, (int) budget_ms);
	PG_TRY();
	{
		backlog_rows();
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		bool		timed_out;
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;

		/*
		 * The count's own timer ran out: a cancel once its deadline passed,
		 * with no stop asked for.  (The timeout's indicator cannot tell:
		 * ProcessInterrupts clears it as it raises the cancel.)  A cancel
		 * before it, a stop, or the cycle's own timeout is the cycle's.
		 */
		timed_out = own_budget && edata->sqlerrcode == ERRCODE_QUERY_CANCELED &&
			!ShutdownRequestPending && GetCurrentTimestamp() >= deadline;
		if (!timed_out)
			ReThrowError(edata);
		ereport(LOG,
				(errmsg("grelout relay %d gave up counting the backlog of database \"%s\" after %d ms",
						MyRelay.relay, MyRelay.dbname, (int) budget_ms),
				 errdetail("The backlog gauges of grelout.metrics() keep their last count; the relay counts again in %d s.",
						   BACKLOG_MAX_WAIT_MS / 1000)));
		FreeErrorData(edata);
		counted = NULL;
		ncounted = 0;
		done = false;
	}
	PG_END_TRY();
	if (cycle_timer)
		enable_timeout_at(STATEMENT_TIMEOUT, cycle_end);
	else
		disable_timeout(STATEMENT_TIMEOUT, false);
	return done;
}

/*
 * backlog_count: in the cycle's transaction (1.1 and later), count the
 * handlers' backlog when it is due and this relay's turn; the count waits
 * for backlog_committed.  The next count is due no sooner than
 * BACKLOG_COST_FACTOR times this one's duration, or BACKLOG_MAX_WAIT_MS
 * after one that ran out of time.
 */
void
backlog_count(void)
{
	TimestampTz start = GetCurrentTimestamp();
	TimestampTz end;
	int64		next_ms;

	have_count = false;
	if (!backlog_take_turn(start))
		return;
	have_count = backlog_query();
	counted_at = start;

	end = GetCurrentTimestamp();
	next_ms = Max(BACKLOG_INTERVAL_MS,
				  BACKLOG_COST_FACTOR * (end - start) / 1000);
	if (!have_count)
		next_ms = BACKLOG_MAX_WAIT_MS;
	next_ms = Min(next_ms, BACKLOG_MAX_WAIT_MS);
	pg_atomic_write_u64(&MyRelay.db->backlog_due_at,
						(uint64) (end + next_ms * INT64CONST(1000)));
}

/*
 * backlog_committed: the cycle that counted committed: its count goes to
 * the handlers' shared entries.
 */
void
backlog_committed(void)
{
	if (have_count)
		health_set_backlog(MyDatabaseId, counted, ncounted, counted_at);
	backlog_forget();
}

/* backlog_forget: the cycle rolled back: its count is dropped. */
void
backlog_forget(void)
{
	have_count = false;
	counted = NULL;
	ncounted = 0;
}
