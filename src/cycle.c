/*-------------------------------------------------------------------------
 *
 * cycle.c
 *	  One database cycle of a relay: a short transaction that settles the
 *	  outcomes queued since the last one (jobs.c), writes the handlers'
 *	  health, routes and claims (claim_step.c) and purges, then commits
 *	  (or rolls back and pauses); and when the next cycle is due.
 *
 * The steps of a cycle, in its transaction:
 *
 *	1. read the installed schema (none: DROP EXTENSION, nothing to settle);
 *	2. settle the queued outcomes (finalizing fan-out messages whose
 *	   deliveries are all finished) and, under 1.1, store the breakers'
 *	   transitions, publish their events and those of dead letters, and
 *	   disable the handlers whose breaker stayed open too long;
 *	3. when wanted and a slot is free (budget_free_slots), and once the
 *	   claims left over from before the server started are due again
 *	   (lease recovery, done by the first relay of the database), route
 *	   and claim;
 *	4. one batch of the retention purges, when it is due;
 *	5. under 1.1, count the handlers' backlog for grelout.metrics(), when
 *	   it is due and this relay's turn (backlog.c).
 *
 * The transaction pins what its statements rely on (relay.c pins the
 * session's settings; the cycle arms the statement timer itself) and is
 * cancelled by SIGTERM and pg_cancel_backend() (relay.c's handlers, while
 * relay_in_cycle is set).  A failed cycle is rolled back, its outcomes
 * stay queued, nothing it claimed is started, and the database is left
 * alone for a pause that doubles with each failure in a row.  Table
 * statistics are reported after each commit, as worker_spi does, so that
 * autovacuum sees the relays' dead tuples.
 *
 *-------------------------------------------------------------------------
 */
#include "relay.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

/* Pause after a failed database cycle, doubling up to the max. */
#define ERROR_BACKOFF_MS		1000
#define ERROR_BACKOFF_MAX_MS	8000
/* The statement timeout of a whole cycle (see pin_transactions in relay.c). */
#define RELAY_CYCLE_TIMEOUT_MS	30000
/* Another relay is releasing the old leases: try again this soon. */
#define RECOVERY_WAIT_MS		100
/* Retention purge: rows a batch, and pause when nothing is left. */
#define PURGE_BATCH				500
#define PURGE_IDLE_MS			10000

/* The installed schema, as the last cycle read it. */
StoreSchema relay_schema = STORE_SCHEMA_NONE;

/* What the cycles carry from one to the next. */
static struct
{
	/* when the next cycle is due */
	bool		claim_wanted;	/* a wake-up came, or the last claim was full */
	MonoTime	next_claim_at;	/* next due message, or the poll */
	MonoTime	next_purge_at;	/* the purge's next batch */
	bool		attempts_backlog;	/* the attempt log's last batch was full */
	bool		looked;			/* a cycle has committed since the start */
	bool		room_measured;	/* the last cycle claimed with a slot free */
	bool		short_of_room;	/* and that claim was short of room */
	MonoTime	retry_db_at;	/* after a failed cycle, not before then */
	int			failed_cycles;	/* in a row */

	/* the extension */
	bool		extension_ready;
	bool		extension_reported; /* to the launcher, once */

	/* handler health (1.1) */
	bool		health_loaded;	/* stored breaker states loaded */
	List	   *disabled;		/* names disabled by this cycle, to log */
	bool		events_published;	/* route them soon */

	/* table statistics waiting to be flushed */
	bool		stats_pending;
	MonoTime	stats_flush_at;

	/* the current cycle's time writing the outcomes, routing and claiming */
	int64		settle_us;
	int64		claim_us;
} cycle;

/* True while this relay owns the lease recovery of its database. */
static bool recovering_leases = false;

/* abandon_lease_recovery: let another relay do it if we could not. */
static void
abandon_lease_recovery(int code, Datum arg)
{
	if (recovering_leases)
	{
		pg_atomic_write_u32(&MyRelay.db->leases_recovered, LEASES_TO_RECOVER);
		recovering_leases = false;
	}
}

/*
 * may_claim_after_restart: true once the claims left over from before the
 * server started have been made due again.  The first relay to get here
 * does it, in the caller's transaction; the others wait for it.
 */
static bool
may_claim_after_restart(uint64 *released)
{
	uint32		expected = LEASES_TO_RECOVER;

	if (pg_atomic_read_u32(&MyRelay.db->leases_recovered) == LEASES_RECOVERED)
		return true;
	if (!pg_atomic_compare_exchange_u32(&MyRelay.db->leases_recovered,
										&expected, LEASES_RECOVERING))
		return false;
	recovering_leases = true;
	*released = store_release_stale_leases(relay_schema);
	return true;
}

/* lease_recovery_done: after the commit that released the old leases. */
static void
lease_recovery_done(uint64 released)
{
	if (!recovering_leases)
		return;
	pg_atomic_write_u32(&MyRelay.db->leases_recovered, LEASES_RECOVERED);
	recovering_leases = false;
	if (released > 0)
		ereport(LOG,
				(errmsg("grelout relay %d made " UINT64_FORMAT " messages claimed before the server started due again in database \"%s\"",
						MyRelay.relay, released, MyRelay.dbname)));
}

/*
 * cycle_init: at start, before the relay connects: the lease recovery is
 * given up at exit if unfinished; the first cycle looks for the extension
 * and claims.
 */
void
cycle_init(void)
{
	before_shmem_exit(abandon_lease_recovery, 0);
	cycle.extension_ready = true;
	cycle.claim_wanted = true;
}

/*
 * disable_due: disable the handlers whose breaker stayed open for
 * grelout.disable_after; their names are logged once the cycle commits.
 */
static void
disable_due(void)
{
	ListCell   *lc;

	cycle.disabled = NIL;
	foreach(lc, health_disable_due(MyDatabaseId, GetCurrentTimestamp()))
	{
		char	   *name = lfirst(lc);

		if (store_disable_handler(name))
		{
			MemoryContext old = MemoryContextSwitchTo(RelayLoopContext);

			cycle.events_published = true;
			cycle.disabled = lappend(cycle.disabled, pstrdup(name));
			MemoryContextSwitchTo(old);
		}
	}
}

/*
 * health_step: in the cycle's transaction (1.1), load the stored breakers
 * once, store the queued breaker transitions with their events, publish
 * grelout.delivery.dead for the dead outcomes being settled, and disable
 * the handlers whose breaker stayed open for grelout.disable_after.
 */
static void
health_step(void)
{
	if (!cycle.health_loaded)
	{
		store_load_health(MyDatabaseId);
		cycle.health_loaded = true;
	}
	if (jobs_write_health())
		cycle.events_published = true;
	disable_due();
}

/*
 * route_and_claim: when wanted and a slot is free, route and claim (once
 * the lease recovery allows), and schedule the next claim; *keyed when
 * the claim took a message with a key.
 */
static void
route_and_claim(bool claim, uint64 *released, bool *keyed)
{
	ClaimResult r;
	bool		extra;
	int			free_slots;

	/*
	 * No slot free: under 1.1 the claim may still start one request for
	 * each handler with due work and none in flight here, up to twice the
	 * concurrency in all (budget_free_slots).
	 */
	free_slots = budget_free_slots(relay_concurrency, jobs_running(),
								   relay_schema >= STORE_SCHEMA_1_1, &extra);
	if (!claim || free_slots <= 0)
		return;
	if (!may_claim_after_restart(released))
	{
		/* another relay is releasing the old leases: come back soon */
		cycle.claim_wanted = false;
		cycle.next_claim_at = relay_ms_after(RECOVERY_WAIT_MS);
		return;
	}
	claim_step(Min(grelout_batch_size, free_slots), extra, &r);
	/* with no slot free (extra) the claim says nothing of the relay's room */
	cycle.room_measured = !extra && !r.deferred;
	cycle.short_of_room = r.short_of_room;
	cycle.claim_wanted = r.again;
	cycle.next_claim_at = r.next_at;
	if (r.events)
		cycle.events_published = true;
	*keyed = r.keyed;
}

/*
 * purge_step: one batch of each retention purge that is on, when they are
 * due: delivered messages (grelout.keep_delivered an interval), and (1.2)
 * the attempt log's rows (grelout.keep_attempts not 0).  The attempt log's
 * purge wakes no relay (cycle_purge_backlog): it rides on the cycles that
 * run anyway, at the poll interval at the latest, unless its last batch
 * was full.
 */
static void
purge_step(void)
{
	uint64		n = 0;
	uint64		na = 0;

	if (relay_now() < cycle.next_purge_at)
		return;
	if (grelout_keep_mode == GRELOUT_KEEP_WINDOW)
		n = store_purge_delivered(relay_schema, grelout_keep_window_ms, PURGE_BATCH);
	if (grelout_keep_attempts > 0 && relay_schema >= STORE_SCHEMA_1_2)
		na = store_purge_attempts((int64) grelout_keep_attempts * 1000, PURGE_BATCH);
	cycle.attempts_backlog = (na >= PURGE_BATCH);
	cycle.next_purge_at = (n >= PURGE_BATCH || na >= PURGE_BATCH) ? 0 :
		relay_ms_after(PURGE_IDLE_MS);
}

/*
 * cycle_purge_backlog: did the attempt log's purge leave rows to delete
 * (its last batch was full)?  Only then does that purge make a cycle due.
 */
bool
cycle_purge_backlog(void)
{
	return cycle.attempts_backlog;
}

/*
 * cycle_steps: the work of one database cycle, inside its transaction,
 * timing the settle and the claim for grelout.metrics().  Returns whether
 * the extension is installed.
 */
static bool
cycle_steps(bool claim, uint64 *released, bool *keyed)
{
	MonoTime	t;

	relay_schema = store_schema();
	if (relay_schema == STORE_SCHEMA_NONE)
	{
		/* DROP EXTENSION: what was in flight has no row to settle */
		jobs_forget_settles();
		return false;
	}
	store_lock_outbox();
	t = relay_now();
	jobs_write_settles();
	cycle.settle_us = relay_now() - t;
	if (relay_schema >= STORE_SCHEMA_1_1)
		health_step();
	t = relay_now();
	route_and_claim(claim, released, keyed);
	cycle.claim_us = relay_now() - t;
	purge_step();
	if (relay_schema >= STORE_SCHEMA_1_1)
		backlog_count();
	return true;
}

/*
 * must_flush_commit: whether the cycle's commit must reach the disk before
 * its requests start.  The relays commit asynchronously
 * (synchronous_commit = off): a server crash may undo their last commits,
 * whose requests went out.  For an ordered handler that would rewind a key
 * (its delivered head pending again, after the next one was sent; or a
 * routing redone in another order).  So when the cycle's claim statement
 * took a message with a key (keyed; routing never claims a delivery of an
 * ordered handler with a key) and some handler is ordered, its commit is
 * flushed: a key's next message goes out only once the outcome of the
 * previous one, and its own routing, are durable.  Called in the cycle's
 * transaction.
 */
static bool
must_flush_commit(bool keyed)
{
	if (!keyed || relay_schema < STORE_SCHEMA_1_1)
		return false;
	return store_any_ordered_handler();
}

/*
 * leave_without_extension: with grelout.database = '*', a database without
 * the extension is not served: say so to the launcher and exit (it starts
 * the relays again when CREATE EXTENSION grelout commits there).
 */
static void
leave_without_extension(void)
{
	grelout_slot_extension(MyRelay.slot, false);
	ereport(cycle.extension_reported ? LOG : DEBUG1,
			(errmsg("grelout relay %d leaves database \"%s\", which has no grelout extension",
					MyRelay.relay, MyRelay.dbname)));
	proc_exit(0);
}

/*
 * note_extension: log when the extension appears or goes; while it is
 * missing, claim and purge only at the poll interval (or, serving every
 * database with the extension, leave).
 */
static void
note_extension(bool ready)
{
	if (!ready && grelout_database_all())
		leave_without_extension();
	if (ready && !cycle.extension_reported)
	{
		grelout_slot_extension(MyRelay.slot, true);
		cycle.extension_reported = true;
	}
	if (ready != cycle.extension_ready)
	{
		ereport(LOG,
				(errmsg(ready ? "grelout relay %d found the grelout extension in database \"%s\", delivering" :
						"grelout relay %d is waiting for CREATE EXTENSION grelout in database \"%s\"",
						MyRelay.relay, MyRelay.dbname)));
		cycle.extension_ready = ready;
	}
	if (!ready)
	{
		cycle.claim_wanted = false;
		cycle.next_claim_at = relay_ms_after(grelout_poll_interval);
		cycle.next_purge_at = relay_ms_after(grelout_poll_interval);
	}
}

/*
 * report_stats: flush this process's table statistics, as worker_spi does
 * after each commit, so that autovacuum sees the relays' dead tuples.
 * pgstat_report_stat(false) may defer a flush (another backend holds the
 * lock, or the last flush was too recent); it says how long to wait, and
 * the loop comes back then (cycle_timeout, cycle_flush_stats).
 */
static void
report_stats(void)
{
	long		wait_ms = pgstat_report_stat(false);

	cycle.stats_pending = (wait_ms > 0);
	if (cycle.stats_pending)
		cycle.stats_flush_at = relay_ms_after(wait_ms);
}

/*
 * health_committed: the cycle's health changes are written: log the
 * handlers it disabled, and route the events it published soon.
 */
static void
health_committed(void)
{
	ListCell   *lc;

	foreach(lc, cycle.disabled)
		ereport(WARNING,
				(errmsg("grelout handler \"%s\" disabled: its breaker stayed open for %d s",
						(char *) lfirst(lc), grelout_disable_after),
				 errhint("Fix the endpoint, then set enabled = true in grelout.handlers: its next delivery is a probe.")));
	cycle.disabled = NIL;
	if (cycle.events_published)
		cycle.claim_wanted = true;
	cycle.events_published = false;
}

/*
 * cycle_committed: the outcomes are written; count them and forget them.
 */
static void
cycle_committed(bool ready, uint64 released)
{
	int			claim_dead;

	cycle.failed_cycles = 0;
	cycle.looked = true;
	lease_recovery_done(released);
	note_extension(ready);
	claim_dead = claim_step_committed();
	health_committed();
	backlog_committed();
	jobs_settles_committed(claim_dead);
	report_stats();
}

/* undo_disables: the disables of a failed cycle are tried again. */
static void
undo_disables(void)
{
	ListCell   *lc;

	foreach(lc, cycle.disabled)
		health_disable_undo(MyDatabaseId, (char *) lfirst(lc));
	cycle.disabled = NIL;
	cycle.events_published = false;
}

/*
 * cycle_failed: the cycle's transaction is rolled back; the outcomes stay
 * queued, nothing claimed is started or dead-lettered, and the database
 * is left alone for a while, longer after each failure in a row.  Every
 * timer moves past the pause, so the loop sleeps through it.
 */
static void
cycle_failed(void)
{
	int64		pause = ERROR_BACKOFF_MS;
	ErrorData  *edata;

	MemoryContextSwitchTo(RelayLoopContext);
	edata = CopyErrorData();

	/*
	 * A statement our own SIGTERM cancelled is the stop, not an error: the
	 * stop is logged when the relay exits.
	 */
	if (!(ShutdownRequestPending && edata->sqlerrcode == ERRCODE_QUERY_CANCELED))
		EmitErrorReport();
	FreeErrorData(edata);
	FlushErrorState();
	AbortCurrentTransaction();
	MemoryContextSwitchTo(RelayLoopContext);
	relay_report_idle();
	abandon_lease_recovery(0, 0);
	jobs_drop_unstarted();
	claim_step_failed();
	undo_disables();
	backlog_forget();
	/* the settle counts stay with their queued outcomes */

	for (int i = 0; i < cycle.failed_cycles && pause < ERROR_BACKOFF_MAX_MS; i++)
		pause *= 2;
	pause = Min(pause, ERROR_BACKOFF_MAX_MS);
	cycle.failed_cycles++;
	cycle.retry_db_at = relay_ms_after(pause);
	cycle.next_claim_at = Max(cycle.next_claim_at, cycle.retry_db_at);
	cycle.next_purge_at = Max(cycle.next_purge_at, cycle.retry_db_at);
	report_stats();
}

/*
 * end_statements: the cycle's statements are over (committed or not): no
 * statement timer, no cancel pending for them.
 */
static void
end_statements(void)
{
	disable_timeout(STATEMENT_TIMEOUT, false);
	relay_in_cycle = false;
	QueryCancelPending = false;
}

/*
 * cycle_run: one transaction that settles the queued outcomes and, when
 * claim is set, claims up to the free request slots.  On error the
 * transaction is rolled back, the outcomes stay queued and nothing claimed
 * is started.  Either way the claim's budget is closed: its unused
 * reservations given back.  Returns whether it committed.
 */
bool
cycle_run(bool claim)
{
	uint64		released = 0;
	volatile bool committed = false;
	MonoTime	started = relay_now();

	cycle.settle_us = cycle.claim_us = 0;
	cycle.room_measured = false;
	PG_TRY();
	{
		bool		ready;
		bool		keyed = false;
		bool		flush;

		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		relay_in_cycle = true;
		/* a cancel that came before the cycle is not for its statements */
		QueryCancelPending = false;
		enable_timeout_after(STATEMENT_TIMEOUT, RELAY_CYCLE_TIMEOUT_MS);
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		pgstat_report_activity(STATE_RUNNING, "grelout: settling and claiming");

		ready = cycle_steps(claim, &released, &keyed);
		flush = ready && must_flush_commit(keyed);

		SPI_finish();
		PopActiveSnapshot();
		CommitTransactionCommand();
		if (flush)
			XLogFlush(XactLastCommitEnd);
		end_statements();
		MemoryContextSwitchTo(RelayLoopContext);
		relay_report_idle();
		cycle_committed(ready, released);
		committed = true;
	}
	PG_CATCH();
	{
		end_statements();
		cycle.room_measured = false;
		cycle_failed();
	}
	PG_END_TRY();
	grelout_slot_cycle(MyRelay.slot, committed, relay_now() - started,
					   cycle.settle_us, cycle.claim_us);
	claim_budget_close(jobs_unstarted(), committed);
	return committed;
}

/* cycle_want_claim: claim in the next turn (a reload, a start). */
void
cycle_want_claim(void)
{
	cycle.claim_wanted = true;
}

/* cycle_wake: the latch was set: claim in the next turn. */
void
cycle_wake(void)
{
	cycle.claim_wanted = true;
	claim_step_woken();
}

/* cycle_extension_ready: did the last cycle find the extension? */
bool
cycle_extension_ready(void)
{
	return cycle.extension_ready;
}

/*
 * cycle_short_of_room: was the last cycle's claim short of room (it took
 * as many deliveries as it had slots for, or left new messages behind)?
 * *measured is false when that cycle did not claim with a slot free, or
 * rolled back: it says nothing then.
 */
bool
cycle_short_of_room(bool *measured)
{
	*measured = cycle.room_measured;
	return cycle.short_of_room;
}

/*
 * cycle_due: does this turn need a database cycle?  may_claim: the relay
 * may claim now (relay.c); purge: the retention purge is on.
 */
bool
cycle_due(bool may_claim, bool purge)
{
	MonoTime	now = relay_now();

	if (now < cycle.retry_db_at)
		return false;
	/* the first cycle runs even while paused: it looks for the extension */
	return !cycle.looked || jobs_settles_queued() > 0 ||
		(may_claim && (cycle.claim_wanted || now >= cycle.next_claim_at)) ||
		(purge && now >= cycle.next_purge_at);
}

/*
 * cycle_timeout: timeout, or less: how long the loop may sleep before a
 * cycle is due (a claim, the purge, queued outcomes) or the statistics
 * are flushed; none of the database's timers before its next retry.
 */
long
cycle_timeout(long timeout, bool may_claim, bool purge)
{
	long		db_retry = relay_ms_until(cycle.retry_db_at);

	if (jobs_settles_queued() > 0)
		timeout = Min(timeout, db_retry);
	if (may_claim)
	{
		if (cycle.claim_wanted)
			timeout = Min(timeout, db_retry);
		else
			timeout = Min(timeout, Max(relay_ms_until(cycle.next_claim_at), db_retry));
	}
	if (purge)
		timeout = Min(timeout, Max(relay_ms_until(cycle.next_purge_at), db_retry));
	if (cycle.stats_pending)
		timeout = Min(timeout, relay_ms_until(cycle.stats_flush_at));
	return timeout;
}

/* cycle_flush_stats: flush statistics a deferred flush left pending. */
void
cycle_flush_stats(void)
{
	if (cycle.stats_pending && relay_now() >= cycle.stats_flush_at)
		report_stats();
}
