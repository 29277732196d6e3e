/*-------------------------------------------------------------------------
 *
 * relay.c
 *	  The relay's loop: background workers that claim committed messages and
 *	  POST them to their handlers' URLs, at least once, with retries,
 *	  backoff and dead-lettering.
 *
 * One loop does everything, and never blocks outside its wait:
 *
 *	1. move HTTP requests along (http.c) and collect the finished ones,
 *	   deciding each outcome (outcome.c: delivered, retry later, dead);
 *	2. in one short transaction, settle those outcomes (finalizing fan-out
 *	   messages whose deliveries are all finished), route the messages
 *	   committed since the last cycle to their handlers (1.1), and claim as
 *	   many deliveries as there are free request slots (store.c), building
 *	   each claimed delivery's request (webhook.c); commit;
 *	3. start the claimed requests (only after the claim has committed: no
 *	   transaction is ever open across network I/O);
 *	4. wait on the latch, postmaster death and the HTTP sockets until the
 *	   earliest of libcurl's timers, the next due message and the poll
 *	   interval.
 *
 * A publisher's commit sets our latch through shared memory, so an idle
 * relay claims within milliseconds of a commit.  Signals set the latch too:
 * SIGHUP reloads settings; SIGTERM stops claiming, cancels the statement in
 * progress if any, and lets the requests in flight finish for a short
 * grace period, then hands the unfinished claims back; SIGINT
 * (pg_cancel_backend) cancels at most the statement in progress, never the
 * relay; the ProcSignalBarrier of DROP DATABASE is absorbed by
 * CHECK_FOR_INTERRUPTS at the top of the loop.
 *
 * The relay's transactions pin what its statements rely on (read committed,
 * read-write, bounded lock waits and statement time) whatever the server's
 * defaults, and a failed cycle is retried with a growing pause.  Every timer
 * of the loop runs on the monotonic clock and moves forward on every path,
 * so the loop never spins.  Table statistics are reported after each
 * commit, as worker_spi does, so autovacuum sees the relays' dead tuples.
 *
 * The loop allocates in one memory context, reset at every turn; jobs and
 * queued outcomes, which outlive a turn, have contexts of their own.
 *
 *-------------------------------------------------------------------------
 */
#include "relay.h"

#include <signal.h>
#include <time.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "common/pg_prng.h"
#include "executor/spi.h"
#include "health.h"
#include "http.h"
#include "miscadmin.h"
#include "outcome.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "shmem.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "store.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/fmgrprotos.h"
#include "utils/hsearch.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"
#include "webhook.h"

/* How long in-flight requests may finish after SIGTERM. */
#define SHUTDOWN_GRACE_MS		2000
/* Pause after a failed database cycle, doubling up to the max. */
#define ERROR_BACKOFF_MS		1000
#define ERROR_BACKOFF_MAX_MS	8000
/* Pinned bounds of the relay's statements (see relay_init). */
#define RELAY_LOCK_TIMEOUT		"1s"
#define RELAY_CYCLE_TIMEOUT_MS	30000
/*
 * While routing takes every free slot (a backlog of new messages) and a
 * handler is ordered, the claim still runs this often, first, with a share
 * of the slots (budget_ordered_first): the heads of ordered keys, which
 * routing never claims, are not held back by the backlog.
 */
#define CLAIM_AT_LEAST_MS		100
/* Routing held back by a handler change: try again this soon. */
#define ROUTE_RETRY_MS			100
/*
 * With no slot free, routing ahead (routing new messages to find a handler
 * with nothing in flight behind them) is worth its second write only while
 * the slots are stuck: no request has finished for this long.  While
 * requests keep finishing, each settle routes the next messages in order
 * anyway, and routing ahead would only write twice the deliveries of the
 * handlers holding the slots.
 */
#define STUCK_AFTER_MS			50
/*
 * The next due time is read from the claim indexes at most this often;
 * in between, the relay wakes by this time to read it again.  A busy relay
 * would otherwise read it at every cycle whose claim was not full, and the
 * read walks the index entries of every lease of the last lease_duration.
 */
#define NEXT_DUE_EVERY_MS		50
/* Retention purge: rows a batch, and pause when nothing is left. */
#define PURGE_BATCH				500
#define PURGE_IDLE_MS			10000

/* Everything the loop carries from one turn to the next. */
typedef struct RelayState
{
	int			index;			/* slot */
	HttpEngine *engine;
	WaitEventSet *wes;

	/* claiming */
	bool		claim_wanted;	/* a wake-up came, or the last claim was full */
	MonoTime	next_claim_at;	/* next due message, or the poll */
	MonoTime	claim_overdue_at;	/* run the claim statement by then */
	bool		ahead_useful;	/* the last extra claim took a delivery */
	bool		woken;			/* the latch was set since the last claim */
	MonoTime	next_due_read_at;	/* store_next_due_ms last read then */
	MonoTime	next_due_at;	/* what it said: 0 nothing due, or the time */
	bool		extension_ready;
	bool		extension_reported; /* to the launcher, once */
	bool		looked;			/* a cycle has committed since the start */
	bool		keyed_claimed;	/* the claim took a message with a key */

	/* dead letters of the claim, logged once it commits */
	List	   *claim_dead;

	/* handler health (1.1) */
	bool		health_loaded;	/* stored breaker states loaded */
	List	   *disabled;		/* names disabled by this cycle, to log */
	bool		events_published;	/* route them soon */

	/* retention */
	MonoTime	next_purge_at;

	/* table statistics waiting to be flushed */
	bool		stats_pending;
	MonoTime	stats_flush_at;

	/* trouble and shutdown */
	MonoTime	retry_db_at;
	int			failed_cycles;	/* in a row */
	bool		stopping;
	MonoTime	stop_deadline;
	char		activity[64];
} RelayState;

/* Who this relay is, the loop's context, the schema the last cycle read */
RelayIdentity MyRelay;
MemoryContext RelayLoopContext = NULL;
StoreSchema relay_schema = STORE_SCHEMA_NONE;



/* True while this relay owns the lease recovery of its database. */
static bool recovering_leases = false;
static GreloutDbEntry *recovery_db = NULL;

/* abandon_lease_recovery: let another relay do it if we could not. */
static void
abandon_lease_recovery(int code, Datum arg)
{
	if (recovering_leases)
	{
		pg_atomic_write_u32(&recovery_db->leases_recovered, LEASES_TO_RECOVER);
		recovering_leases = false;
	}
}

/*
 * may_claim_after_restart: true once the claims left over from before the
 * server started have been made due again.  The first relay to get here
 * does it, in the caller's transaction; the others wait for it.
 */
static bool
may_claim_after_restart(StoreSchema schema, uint64 *released)
{
	uint32		expected = LEASES_TO_RECOVER;

	if (pg_atomic_read_u32(&recovery_db->leases_recovered) == LEASES_RECOVERED)
		return true;
	if (!pg_atomic_compare_exchange_u32(&recovery_db->leases_recovered,
										&expected, LEASES_RECOVERING))
		return false;
	recovering_leases = true;
	*released = store_release_stale_leases(schema);
	return true;
}

/* lease_recovery_done: after the commit that released the old leases. */
static void
lease_recovery_done(RelayState *st, uint64 released)
{
	if (!recovering_leases)
		return;
	pg_atomic_write_u32(&recovery_db->leases_recovered, LEASES_RECOVERED);
	recovering_leases = false;
	if (released > 0)
		ereport(LOG,
				(errmsg("grelout relay %d made " UINT64_FORMAT " messages claimed before the server started due again in database \"%s\"",
						MyRelay.relay, released, MyRelay.dbname)));
}

/* True while a database cycle runs: a cancel then cancels its statement. */
static volatile sig_atomic_t in_cycle = false;

/*
 * relay_sigint: pg_cancel_backend(), and the lock and statement timeouts
 * (which signal ourselves).  Inside a database cycle it cancels the
 * statement, like a backend's; outside one there is no statement to
 * cancel, and the relay only wakes.
 */
static void
relay_sigint(SIGNAL_ARGS)
{
	int			save_errno = errno;

	if (in_cycle)
	{
		InterruptPending = true;
		QueryCancelPending = true;
	}
	SetLatch(MyLatch);
	errno = save_errno;
}

/*
 * relay_sigterm: stop.  A statement in progress (waiting for a lock, say)
 * is cancelled, so that the relay honours SIGTERM within its grace period.
 */
static void
relay_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	ShutdownRequestPending = true;
	if (in_cycle)
	{
		InterruptPending = true;
		QueryCancelPending = true;
	}
	SetLatch(MyLatch);
	errno = save_errno;
}

/*
 * relay_now: the loop's clock, monotonic: a step of the wall clock neither
 * suspends nor hurries the poll, the retries or the purge.
 */
MonoTime
relay_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (MonoTime) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* relay_ms_after: a time ms milliseconds from now. */
MonoTime
relay_ms_after(int64 ms)
{
	return relay_now() + ms * 1000;
}

/* ms_until: milliseconds from now until t, at least 0. */
static long
ms_until(MonoTime t)
{
	MonoTime	now = relay_now();

	return (t <= now) ? 0 : (long) ((t - now + 999) / 1000);
}

/* set_activity: what grelout.relays and pg_stat_activity show. */
static void
set_activity(RelayState *st, const char *activity)
{
	if (strcmp(st->activity, activity) == 0)
		return;
	strlcpy(st->activity, activity, sizeof(st->activity));
	grelout_slot_set_activity(MyRelay.slot, activity);
	pgstat_report_activity(STATE_IDLE, activity);
}

/* A lapsed claim the claim dead-lettered, to log once the claim commits. */
typedef struct ClaimDead
{
	char	   *id;
	char	   *topic;
	char	   *handler;
	int			attempts;
	char	   *error;
} ClaimDead;

/*
 * claimed_exhausted: a lapsed claim the claim dead-lettered (its last
 * attempt ended without an outcome); no request.  Its WARNING and count
 * wait until the claim commits (claim_dead_report): a claim rolled back
 * dead-lettered nothing.
 */
static bool
claimed_exhausted(RelayState *st, HeapTuple tup, TupleDesc desc,
				  List **fanout_dead)
{
	bool		isnull;
	ClaimDead  *cd;
	MemoryContext old;

	if (!DatumGetBool(SPI_getbinval(tup, desc, CLAIM_EXHAUSTED, &isnull)))
		return false;
	old = MemoryContextSwitchTo(RelayLoopContext);
	cd = palloc(sizeof(ClaimDead));
	cd->id = SPI_getvalue(tup, desc, CLAIM_ID);
	cd->topic = webhook_text_column(tup, desc, CLAIM_TOPIC);
	cd->handler = webhook_text_column(tup, desc, CLAIM_HANDLER);
	cd->attempts = DatumGetInt32(SPI_getbinval(tup, desc, CLAIM_ATTEMPTS, &isnull));
	cd->error = webhook_text_column(tup, desc, CLAIM_LAST_ERROR);
	st->claim_dead = lappend(st->claim_dead, cd);
	if (DatumGetBool(SPI_getbinval(tup, desc, CLAIM_FANOUT, &isnull)))
	{
		pg_uuid_t  *id = palloc(sizeof(pg_uuid_t));

		memcpy(id, DatumGetUUIDP(SPI_getbinval(tup, desc, CLAIM_ID, &isnull)),
			   sizeof(pg_uuid_t));
		*fanout_dead = lappend(*fanout_dead, id);
	}
	MemoryContextSwitchTo(old);
	return true;
}

/* claim_dead_report: the claim committed: log and count its dead letters. */
static int
claim_dead_report(RelayState *st)
{
	ListCell   *lc;
	int			n = 0;

	foreach(lc, st->claim_dead)
	{
		ClaimDead  *cd = lfirst(lc);

		jobs_log_dead(cd->id, cd->topic, cd->handler, cd->attempts,
				 cd->error ? cd->error : "no attempts left");
		n++;
	}
	st->claim_dead = NIL;
	return n;
}

/*
 * flush_if_ordered: called in the cycle's transaction, after its claim
 * (keyed_claimed: the claim statement took a message with a key; routing
 * never claims a delivery of an ordered handler with a key).
 * The relays commit asynchronously (synchronous_commit = off): a server
 * crash may undo their last commits, whose requests went out.  For an
 * ordered handler that would rewind a key (its delivered head pending
 * again, after the next one was sent; or a routing redone in another
 * order).  So when the cycle claimed a message with a key and some handler
 * is ordered, its commit is flushed before any of its requests starts: a
 * key's next message goes out only once the outcome of the previous one,
 * and its own routing, are durable.  Returns whether to flush.
 */
static bool
flush_if_ordered(RelayState *st)
{
	if (!st->keyed_claimed || relay_schema != STORE_SCHEMA_1_1)
		return false;
	return store_any_ordered_handler();
}

/*
 * route_step: route the messages committed since the last cycle (1.1), as
 * many as the claim may take (limit deliveries), claiming at once their
 * deliveries due to enabled handlers; returns how many it claimed.  *full
 * says a whole batch was routed (more may be new), *cut that new messages
 * were left because their deliveries no longer fit in limit, *blocked that
 * a handler change in progress held routing back (store_route).  Routing no
 * more than can be claimed keeps a delivery at one write, as in 1.0:
 * routed and claimed together, rather than routed now and claimed in a
 * later cycle.
 */
static int
route_step(RelayState *st, int limit, int claim_limit, int64 lease,
		   const ClaimLimits *cl, bool *full, bool *cut, bool *blocked)
{
	uint64		nrows;
	uint64		routed;
	SPITupleTable *tt;

	tt = store_route(relay_schema, limit, claim_limit,
					 Min(grelout_batch_size, grelout_concurrency),
					 grelout_lease_duration, lease, cl, &nrows, &routed, cut,
					 blocked);
	for (uint64 i = 0; i < nrows; i++)
		jobs_queue(tt->vals[i], tt->tupdesc, lease);
	*full = (routed >= (uint64) limit);
	return (int) nrows;
}

/*
 * claim_rows: run the claim statement for up to limit deliveries and queue
 * their requests (a lapsed claim without attempts left is dead-lettered
 * instead, its fan-out message in *fanout_dead); returns how many rows it
 * claimed.  The claim is then not overdue for CLAIM_AT_LEAST_MS.
 */
static uint64
claim_rows(RelayState *st, int limit, int64 lease, const ClaimLimits *cl,
		   List **fanout_dead)
{
	uint64		nrows;
	SPITupleTable *tt;

	tt = store_claim(relay_schema, limit, grelout_lease_duration, lease,
					 grelout_max_attempts, grelout_dead_letter, cl, &nrows);
	st->claim_overdue_at = relay_ms_after(CLAIM_AT_LEAST_MS);
	for (uint64 i = 0; i < nrows; i++)
	{
		bool		isnull;

		if (claimed_exhausted(st, tt->vals[i], tt->tupdesc, fanout_dead))
			continue;
		(void) SPI_getbinval(tt->vals[i], tt->tupdesc, CLAIM_KEY, &isnull);
		if (!isnull)
			st->keyed_claimed = true;
		jobs_queue(tt->vals[i], tt->tupdesc, lease);
	}
	return nrows;
}

/* publish_claim_dead: the events of the deliveries the claim dead-lettered. */
static void
publish_claim_dead(RelayState *st)
{
	ListCell   *lc;

	if (relay_schema != STORE_SCHEMA_1_1)
		return;
	foreach(lc, st->claim_dead)
	{
		ClaimDead  *cd = lfirst(lc);

		if (jobs_publish_dead(cd->id, cd->topic, cd->handler, cd->attempts,
							  cd->error ? cd->error : "no attempts left"))
			st->events_published = true;
	}
}

/*
 * health_step: in the cycle's transaction (1.1), load the stored breakers
 * once, store the queued breaker transitions with their events, publish
 * grelout.delivery.dead for the dead outcomes being settled, and disable
 * the handlers whose breaker stayed open for grelout.disable_after.
 */
static void
health_step(RelayState *st)
{
	ListCell   *lc;

	if (!st->health_loaded)
	{
		store_load_health(MyDatabaseId);
		st->health_loaded = true;
	}
	if (jobs_write_health())
		st->events_published = true;
	st->disabled = NIL;
	foreach(lc, health_disable_due(MyDatabaseId, GetCurrentTimestamp()))
	{
		char	   *name = lfirst(lc);

		if (store_disable_handler(name))
		{
			MemoryContext old = MemoryContextSwitchTo(RelayLoopContext);

			st->events_published = true;
			st->disabled = lappend(st->disabled, pstrdup(name));
			MemoryContextSwitchTo(old);
		}
	}
}

/*
 * route_ahead: with no slot free, whether to route a batch of new messages
 * ahead of the claim: while the slots are stuck (no request has finished
 * for STUCK_AFTER_MS: an endpoint that hangs may hold them all, and a
 * handler with nothing in flight may have messages behind its backlog),
 * after a wake-up (a publisher's commit: its messages may be such work), or
 * while routing ahead goes on finding work for such handlers.
 */
static bool
route_ahead(RelayState *st)
{
	return st->woken || st->ahead_useful ||
		relay_now() - jobs_last_finish() >= STUCK_AFTER_MS * INT64CONST(1000);
}

/*
 * next_due: when the next delivery or lease comes due (0: nothing is
 * scheduled), on the monotonic clock.  Read from the store at most every
 * NEXT_DUE_EVERY_MS; in between, the time read last or, when that is
 * later, the time to read it again, so that a due time this relay cannot
 * know of (another relay's retry, a delayed message routed here) is seen
 * at most that late.  The retries this cycle settles are its own to know.
 */
static MonoTime
next_due(RelayState *st)
{
	MonoTime	now = relay_now();
	MonoTime	due;

	if (st->next_due_read_at == 0 ||
		now - st->next_due_read_at >= NEXT_DUE_EVERY_MS * INT64CONST(1000) ||
		(st->next_due_at > 0 && st->next_due_at <= now))
	{
		int64		ms = store_next_due_ms(relay_schema);

		st->next_due_read_at = now;
		st->next_due_at = (ms >= 0) ? now + ms * 1000 : 0;
		return st->next_due_at;
	}
	due = st->next_due_read_at + NEXT_DUE_EVERY_MS * INT64CONST(1000);
	if (st->next_due_at > 0 && st->next_due_at < due)
		due = st->next_due_at;
	return jobs_earliest_retry(now, due);
}

/*
 * claim_step: route new messages, claim up to limit deliveries and build
 * their requests, to be started once the claim commits; then schedule the
 * next claim.  When routing left new messages for want of slots, the
 * claim is not run: the slots left are fewer than the next message needs,
 * and the next settle, as requests finish, comes back for it.  But while
 * a handler is ordered, at least every CLAIM_AT_LEAST_MS the claim runs
 * first, with a quarter of the slots (at least one), and routing takes
 * what is left: so a backlog of new messages does not hold back the heads
 * of ordered keys (which only the claim takes), nor due retries.  Without
 * an ordered handler it does not (a claim walks the dead claim-index
 * entries of the deliveries routing claimed: running it every 100 ms cost
 * the fan-out drain a tenth of its rate), and due retries wait for the
 * backlog of new messages to be routed.
 */
static void
claim_step(RelayState *st, int limit, bool extra)
{
	int64		lease;
	uint64		nrows = 0;
	int			claimed = 0;
	bool		ahead;
	bool		routed_full;
	bool		routed_cut;
	bool		route_blocked;
	List	   *fanout_dead = NIL;
	ClaimLimits cl;

	if (!pg_strong_random(&lease, sizeof(lease)))
		lease = (int64) pg_prng_uint64(&pg_global_prng_state);
	if (relay_schema == STORE_SCHEMA_1_1)
		claim_budget_make(limit, extra, &cl);
	else
	{
		cl.default_lim = limit;
		cl.names = store_text_array(NIL);
		cl.lims = store_int_array(NULL, 0);
	}
	if (relay_now() >= st->claim_overdue_at && relay_schema == STORE_SCHEMA_1_1 &&
		store_any_ordered_handler())
		nrows = claim_rows(st, budget_ordered_first(limit), lease, &cl,
						   &fanout_dead);
	claimed = (int) nrows;

	/*
	 * With no slot free (extra), routing claims nothing and routes a whole
	 * batch ahead, when that may find a handler with nothing in flight
	 * (route_ahead); the claim then takes one delivery of each handler with
	 * none in flight.
	 */
	ahead = !extra || route_ahead(st);
	st->woken = false;
	routed_full = routed_cut = route_blocked = false;
	if (ahead)
	{
		claim_budget_left(&cl);
		claimed += route_step(st, extra ? grelout_batch_size : limit,
							  extra ? 0 : limit - claimed, lease, &cl,
							  &routed_full, &routed_cut, &route_blocked);
	}
	if (claimed < limit && !routed_cut && nrows == 0)
	{
		claim_budget_left(&cl);
		claimed += (int) claim_rows(st, limit - claimed, lease, &cl, &fanout_dead);
	}
	if (extra)
		st->ahead_useful = (claimed > 0);
	publish_claim_dead(st);
	/* a fan-out delivery dead-lettered here may have been its message's last */
	if (fanout_dead != NIL)
		store_finalize_fanout(fanout_dead, grelout_keep_mode != GRELOUT_KEEP_OFF);

	/*
	 * A full batch (routed or claimed) means more may be new or due;
	 * otherwise sleep until the next due delivery (or lease), or the poll
	 * interval.  Routing cut for want of slots waits for requests to
	 * finish: their settle's cycle claims again.
	 */
	st->claim_wanted = !routed_cut && (routed_full || claimed >= limit);
	st->next_claim_at = relay_ms_after(grelout_poll_interval);
	if (!st->claim_wanted && !routed_cut)
	{
		MonoTime	due = next_due(st);

		if (due > 0)
			st->next_claim_at = Min(st->next_claim_at, due);
	}
	/* the slots may get stuck: then come back to route ahead */
	if (extra && !ahead)
		st->next_claim_at = Min(st->next_claim_at,
								jobs_last_finish() + STUCK_AFTER_MS * INT64CONST(1000));
	/* new messages wait for a handler change to commit: come back soon */
	if (route_blocked)
		st->next_claim_at = Min(st->next_claim_at, relay_ms_after(ROUTE_RETRY_MS));
	/* a breaker's probe time, a pause's end, a rate's next token */
	if (claim_budget_wake_at() > 0)
	{
		long		ms = (long) Max((claim_budget_wake_at() - GetCurrentTimestamp() + 999) / 1000, 0);

		st->next_claim_at = Min(st->next_claim_at, relay_ms_after(ms));
	}
}

/* purge_step: one batch of the retention purge, when it is due. */
static void
purge_step(RelayState *st)
{
	uint64		n;

	if (grelout_keep_mode != GRELOUT_KEEP_WINDOW || relay_now() < st->next_purge_at)
		return;
	n = store_purge_delivered(relay_schema, grelout_keep_window_ms, PURGE_BATCH);
	st->next_purge_at = (n >= PURGE_BATCH) ? 0 : relay_ms_after(PURGE_IDLE_MS);
}

/*
 * cycle_steps: the work of one database cycle, inside its transaction.
 * Returns whether the extension is installed.
 */
static bool
cycle_steps(RelayState *st, bool claim, uint64 *released)
{
	int			free_slots;
	bool		extra;

	relay_schema = store_schema();
	if (relay_schema == STORE_SCHEMA_NONE)
	{
		/* DROP EXTENSION: what was in flight has no row to settle */
		jobs_forget_settles();
		return false;
	}
	store_lock_outbox();
	jobs_write_settles();
	if (relay_schema == STORE_SCHEMA_1_1)
		health_step(st);

	/*
	 * No slot free: under 1.1 the claim may still start one request for
	 * each handler with due work and none in flight here, up to twice the
	 * concurrency in all (budget_free_slots).
	 */
	free_slots = budget_free_slots(grelout_concurrency,
								   jobs_running(),
								   relay_schema == STORE_SCHEMA_1_1, &extra);
	if (claim && free_slots > 0)
	{
		if (may_claim_after_restart(relay_schema, released))
			claim_step(st, Min(grelout_batch_size, free_slots), extra);
		else
		{
			/* another relay is releasing the old leases: come back soon */
			st->claim_wanted = false;
			st->next_claim_at = relay_ms_after(100);
		}
	}
	purge_step(st);
	return true;
}

/*
 * leave_without_extension: with grelout.database = '*', a database without
 * the extension is not served: say so to the launcher and exit (it starts
 * the relays again when CREATE EXTENSION grelout commits there).
 */
static void
leave_without_extension(RelayState *st)
{
	grelout_slot_extension(MyRelay.slot, false);
	ereport(st->extension_reported ? LOG : DEBUG1,
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
note_extension(RelayState *st, bool ready)
{
	if (!ready && grelout_database_all())
		leave_without_extension(st);
	if (ready && !st->extension_reported)
	{
		grelout_slot_extension(MyRelay.slot, true);
		st->extension_reported = true;
	}
	if (ready != st->extension_ready)
	{
		ereport(LOG,
				(errmsg(ready ? "grelout relay %d found the grelout extension in database \"%s\", delivering" :
						"grelout relay %d is waiting for CREATE EXTENSION grelout in database \"%s\"",
						MyRelay.relay, MyRelay.dbname)));
		st->extension_ready = ready;
	}
	if (!ready)
	{
		st->claim_wanted = false;
		st->next_claim_at = relay_ms_after(grelout_poll_interval);
		st->next_purge_at = relay_ms_after(grelout_poll_interval);
	}
}

/*
 * report_stats: flush this process's table statistics, as worker_spi does
 * after each commit, so that autovacuum sees the relays' dead tuples.
 * pgstat_report_stat(false) may defer a flush (another backend holds the
 * lock, or the last flush was too recent); it says how long to wait, and
 * the loop comes back then (wait_timeout).
 */
static void
report_stats(RelayState *st)
{
	long		wait_ms = pgstat_report_stat(false);

	st->stats_pending = (wait_ms > 0);
	if (st->stats_pending)
		st->stats_flush_at = relay_ms_after(wait_ms);
}

/*
 * health_committed: the cycle's health changes are written: log the
 * handlers it disabled, and route the events it published soon.
 */
static void
health_committed(RelayState *st)
{
	ListCell   *lc;

	foreach(lc, st->disabled)
		ereport(WARNING,
				(errmsg("grelout handler \"%s\" disabled: its breaker stayed open for %d s",
						(char *) lfirst(lc), grelout_disable_after),
				 errhint("Fix the endpoint, then set enabled = true in grelout.handlers: its next delivery is a probe.")));
	st->disabled = NIL;
	if (st->events_published)
		st->claim_wanted = true;
	st->events_published = false;
}

/*
 * cycle_committed: the outcomes are written; count them and forget them.
 */
static void
cycle_committed(RelayState *st, bool ready, uint64 released)
{
	int			claim_dead;

	st->failed_cycles = 0;
	st->looked = true;
	lease_recovery_done(st, released);
	note_extension(st, ready);
	claim_dead = claim_dead_report(st);
	health_committed(st);
	jobs_settles_committed(claim_dead);
	report_stats(st);
}

/* foreach_disabled_undo: the disables of a failed cycle are tried again. */
static void
foreach_disabled_undo(RelayState *st)
{
	ListCell   *lc;

	foreach(lc, st->disabled)
		health_disable_undo(MyDatabaseId, (char *) lfirst(lc));
	st->disabled = NIL;
	st->events_published = false;
}

/*
 * cycle_failed: the cycle's transaction is rolled back; the outcomes stay
 * queued, nothing claimed is started or dead-lettered, and the database
 * is left alone for a while, longer after each failure in a row.  Every
 * timer moves past the pause, so the loop sleeps through it.
 */
static void
cycle_failed(RelayState *st)
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
	pgstat_report_activity(STATE_IDLE, st->activity);
	abandon_lease_recovery(0, 0);
	jobs_drop_unstarted();
	st->claim_dead = NIL;
	foreach_disabled_undo(st);
	/* the settle counts stay with their queued outcomes */

	for (int i = 0; i < st->failed_cycles && pause < ERROR_BACKOFF_MAX_MS; i++)
		pause *= 2;
	pause = Min(pause, ERROR_BACKOFF_MAX_MS);
	st->failed_cycles++;
	st->retry_db_at = relay_ms_after(pause);
	st->next_claim_at = Max(st->next_claim_at, st->retry_db_at);
	st->next_purge_at = Max(st->next_purge_at, st->retry_db_at);
	report_stats(st);
}

/*
 * db_cycle: one transaction that settles the queued outcomes and, when
 * wanted, claims up to the free request slots.  On error the transaction
 * is rolled back, the outcomes stay queued and nothing claimed is started.
 * Returns whether it committed.
 */
static bool
db_cycle(RelayState *st, bool claim)
{
	uint64		released = 0;
	volatile bool committed = false;

	PG_TRY();
	{
		bool		ready;
		bool		flush;

		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		in_cycle = true;
		/* a cancel that came before the cycle is not for its statements */
		QueryCancelPending = false;
		enable_timeout_after(STATEMENT_TIMEOUT, RELAY_CYCLE_TIMEOUT_MS);
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		pgstat_report_activity(STATE_RUNNING, "grelout: settling and claiming");

		st->keyed_claimed = false;
		ready = cycle_steps(st, claim, &released);
		flush = ready && flush_if_ordered(st);
		st->keyed_claimed = false;

		SPI_finish();
		PopActiveSnapshot();
		CommitTransactionCommand();
		if (flush)
			XLogFlush(XactLastCommitEnd);
		disable_timeout(STATEMENT_TIMEOUT, false);
		in_cycle = false;
		QueryCancelPending = false;
		MemoryContextSwitchTo(RelayLoopContext);
		pgstat_report_activity(STATE_IDLE, st->activity);
		cycle_committed(st, ready, released);
		committed = true;
	}
	PG_CATCH();
	{
		disable_timeout(STATEMENT_TIMEOUT, false);
		in_cycle = false;
		QueryCancelPending = false;
		cycle_failed(st);
	}
	PG_END_TRY();
	return committed;
}

/* reload_settings: SIGHUP, and once at start. */
static void
reload_settings(RelayState *st, bool initial)
{
	if (!initial)
		ProcessConfigFile(PGC_SIGHUP);
	http_engine_configure(st->engine, grelout_ca_file,
						  grelout_block_private_networks, grelout_allowed_networks);
	st->claim_wanted = true;
}

/* may_claim: not stopping, not paused, and a request slot free. */
static bool
may_claim(RelayState *st)
{
	/* 1.1: a handler with nothing in flight may get a slot beyond them */
	int			limit = budget_most_running(grelout_concurrency,
											relay_schema == STORE_SCHEMA_1_1);

	return !st->stopping && grelout_relay_enabled &&
		jobs_running() < limit;
}

/* purge_wanted: is the retention purge on, and the relay not stopping? */
static bool
purge_wanted(RelayState *st)
{
	return grelout_keep_mode == GRELOUT_KEEP_WINDOW && !st->stopping;
}

/* db_due: does this turn need a database cycle? */
static bool
db_due(RelayState *st)
{
	MonoTime	now = relay_now();

	if (now < st->retry_db_at)
		return false;
	/* the first cycle runs even while paused: it looks for the extension */
	return !st->looked || jobs_settles_queued() > 0 ||
		(may_claim(st) && (st->claim_wanted || now >= st->next_claim_at)) ||
		(purge_wanted(st) && now >= st->next_purge_at);
}

/*
 * wait_timeout: how long the loop may sleep: until libcurl's next timer,
 * the next claim or purge, the stats flush, the shutdown deadline; none of
 * the database's timers before its next retry.
 */
static long
wait_timeout(RelayState *st)
{
	long		timeout = grelout_poll_interval;
	long		db_retry = ms_until(st->retry_db_at);
	long		t;

	t = http_engine_timeout(st->engine);
	if (t >= 0)
		timeout = Min(timeout, t);
	if (jobs_settles_queued() > 0)
		timeout = Min(timeout, db_retry);
	if (may_claim(st))
	{
		if (st->claim_wanted)
			timeout = Min(timeout, db_retry);
		else
			timeout = Min(timeout, Max(ms_until(st->next_claim_at), db_retry));
	}
	if (purge_wanted(st))
		timeout = Min(timeout, Max(ms_until(st->next_purge_at), db_retry));
	if (st->stats_pending)
		timeout = Min(timeout, ms_until(st->stats_flush_at));
	if (st->stopping)
		timeout = Min(timeout, ms_until(st->stop_deadline));
	return Max(timeout, 0);
}

/*
 * handle_signals: reload on SIGHUP, begin stopping on SIGTERM, flush
 * statistics a deferred flush left pending.
 */
static void
handle_signals(RelayState *st)
{
	/* a cancel outside a cycle has no statement to cancel */
	QueryCancelPending = false;
	CHECK_FOR_INTERRUPTS();
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		reload_settings(st, false);
	}
	if (ShutdownRequestPending && !st->stopping)
	{
		st->stopping = true;
		st->stop_deadline = relay_ms_after(SHUTDOWN_GRACE_MS);
		set_activity(st, "stopping");
	}
	if (st->stats_pending && relay_now() >= st->stats_flush_at)
		report_stats(st);
}

/*
 * stop_if_done: once stopping and every request has finished or the grace
 * period is over, settle what finished, hand back the claims still in
 * flight, and exit.  The final settle is one cycle, bounded by the pinned
 * lock and statement timeouts (and cancelled by another SIGTERM).
 */
static void
stop_if_done(RelayState *st)
{
	int			unfinished;
	int			outcomes;
	bool		settled = true;

	if (!st->stopping ||
		(jobs_running() > 0 && relay_now() < st->stop_deadline))
		return;
	jobs_collect();
	unfinished = jobs_release_unfinished();
	outcomes = jobs_settles_queued() - unfinished;
	if (jobs_settles_queued() > 0)
		settled = db_cycle(st, false);
	if (settled)
		ereport(LOG,
				(errmsg("grelout relay %d stopping with %d requests unfinished",
						MyRelay.relay, unfinished),
				 unfinished > 0 ?
				 errdetail("Their messages were handed back with their attempt and are sent again at once.") : 0));
	else
		ereport(LOG,
				(errmsg("grelout relay %d stopping with %d requests unfinished",
						MyRelay.relay, unfinished),
				 errdetail("The last %d outcomes and hand-backs could not be written; their messages are sent again once their lease expires.",
						   outcomes + unfinished)));
	proc_exit(1);
}

/* show_activity: what the relay is doing, when not stopping. */
static void
show_activity(RelayState *st)
{
	if (!st->stopping)
	{
		if (!grelout_relay_enabled)
			set_activity(st, "paused (grelout.relay is off)");
		else if (!st->extension_ready)
			set_activity(st, "waiting for CREATE EXTENSION grelout");
		else if (jobs_running() > 0)
			set_activity(st, "delivering");
		else
			set_activity(st, "idle");
	}
	grelout_slot_count(MyRelay.slot, 0, 0, 0, jobs_running());
}

/* wait_for_work: sleep until a wake-up, a socket, or the next timer. */
static void
wait_for_work(RelayState *st)
{
	WaitEvent	events[3];
	int			nevents;

	nevents = WaitEventSetWait(st->wes, wait_timeout(st),
							   events, lengthof(events), PG_WAIT_EXTENSION);
	for (int i = 0; i < nevents; i++)
	{
		if (events[i].events & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			st->claim_wanted = true;
			st->woken = true;
		}
	}
}

/*
 * pin_session: the settings the relay's statements rely on, whatever the
 * server's configuration says.
 */
static void
pin_session(void)
{
	/*
	 * The relay's own commits need not wait for the WAL flush: a lost claim
	 * or settle only means a redelivery, which at-least-once allows.  The
	 * publishers' commits stay as durable as they configure them.
	 */
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);

	/*
	 * Every relay statement has an index made for it, and the claim's plan
	 * is kept (store.c): planned while the outbox looked empty (just
	 * truncated or vacuumed), it would otherwise be a sequential scan and a
	 * sort that stays in use, growing with the table, until the next ANALYZE.
	 */
	SetConfigOption("enable_seqscan", "off", PGC_SUSET, PGC_S_OVERRIDE);

	/*
	 * The 1.1 statements read grelout.handlers (a few rows, no index on
	 * "enabled") with a sequential scan, which enable_seqscan = off costs at
	 * 1e10: that cost would make every cycle JIT-compile its statements
	 * (hundreds of milliseconds).  No relay statement gains from JIT.
	 */
	SetConfigOption("jit", "off", PGC_SUSET, PGC_S_OVERRIDE);

	/*
	 * Every statement the relay runs, its own and those of the triggers its
	 * writes fire, resolves names under grelout's path, whatever ALTER ROLE
	 * or ALTER DATABASE ... SET search_path says: an override, which no SET
	 * (a function's SET clause included) can change in this session.
	 */
	SetConfigOption("search_path", GRELOUT_SEARCH_PATH, PGC_SUSET, PGC_S_OVERRIDE);

	/*
	 * The claim and settles are written for read committed (SKIP LOCKED,
	 * fenced updates): under repeatable read a concurrent update fails a
	 * whole cycle; a read-only default fails every cycle.
	 */
	SetConfigOption("default_transaction_isolation", "read committed",
					PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_read_only", "off",
					PGC_SUSET, PGC_S_OVERRIDE);

	/*
	 * A cycle never waits long: while it waits, no HTTP request is driven.
	 * A lock held by another session (a LOCK TABLE, a long ALTER) fails the
	 * cycle after lock_timeout, and the cycle is retried with a pause.
	 * statement_timeout is armed only by the backend's query loop, which a
	 * background worker does not run: db_cycle arms the same timer itself
	 * for the whole cycle (RELAY_CYCLE_TIMEOUT_MS).
	 */
	SetConfigOption("lock_timeout", RELAY_LOCK_TIMEOUT, PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("idle_in_transaction_session_timeout", "0",
					PGC_SUSET, PGC_S_OVERRIDE);

	SetConfigOption("application_name", "grelout relay", PGC_SUSET, PGC_S_OVERRIDE);
	pgstat_report_appname("grelout relay");
}

/*
 * relay_assignment: the database and number the launcher gave this relay's
 * slot; false when the relay is to leave before it connects (the launcher
 * stopped wanting it, or a command wants its database free).
 */
static bool
relay_assignment(RelayState *st)
{
	GreloutRelaySlot *slot = MyRelay.slot;
	bool		stop;

	SpinLockAcquire(&slot->mutex);
	MyRelay.relay = slot->relay;
	MyRelay.db = &grelout_shared->dbs[slot->db_entry];
	stop = slot->stop_requested;
	SpinLockRelease(&slot->mutex);
	SpinLockAcquire(&grelout_shared->mutex);
	strlcpy(MyRelay.dbname, MyRelay.db->name, sizeof(MyRelay.dbname));
	SpinLockRelease(&grelout_shared->mutex);
	recovery_db = MyRelay.db;
	return !stop && !grelout_aside_pending(slot->dboid);
}

/*
 * relay_init: signals, slot, connection, session settings, libcurl and the
 * wait set.
 */
static void
relay_init(RelayState *st)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, relay_sigterm);
	pqsignal(SIGINT, relay_sigint);
	BackgroundWorkerUnblockSignals();

	MyRelay.slot = grelout_slot_attach(st->index);
	if (!relay_assignment(st))
		proc_exit(0);
	before_shmem_exit(abandon_lease_recovery, 0);
	claim_budget_init();
	BackgroundWorkerInitializeConnectionByOid(MyRelay.slot->dboid, MyRelay.slot->roleoid, 0);
	pin_session();

	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		ereport(FATAL,
				(errcode(ERRCODE_SYSTEM_ERROR),
				 errmsg("could not initialize libcurl")));
	st->engine = http_engine_create();
	if (st->engine == NULL)
		ereport(FATAL,
				(errcode(ERRCODE_SYSTEM_ERROR),
				 errmsg("could not create the HTTP engine: %m")));

	RelayLoopContext = AllocSetContextCreate(TopMemoryContext, "grelout relay loop",
										 ALLOCSET_DEFAULT_SIZES);
	jobs_init(st->engine);
	st->wes = grelout_create_wait_event_set(3);
	AddWaitEventToSet(st->wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(st->wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	AddWaitEventToSet(st->wes, WL_SOCKET_READABLE, http_engine_fd(st->engine),
					  NULL, NULL);

	st->extension_ready = true;
	st->claim_wanted = true;
	reload_settings(st, true);
	set_activity(st, "idle");
	ereport(LOG,
			(errmsg("grelout relay %d started in database \"%s\"",
					MyRelay.relay, MyRelay.dbname)));
}

/*
 * grelout_relay_main: entry point of a relay worker; never returns.
 */
void
grelout_relay_main(Datum arg)
{
	RelayState	st;

	memset(&st, 0, sizeof(st));
	st.index = DatumGetInt32(arg);
	relay_init(&st);

	for (;;)
	{
		MemoryContextSwitchTo(RelayLoopContext);
		MemoryContextReset(RelayLoopContext);

		handle_signals(&st);
		jobs_collect();
		if (db_due(&st))
		{
			bool		committed = db_cycle(&st, may_claim(&st));

			claim_budget_close(jobs_unstarted(), committed);
			jobs_start_claimed();
		}
		stop_if_done(&st);
		show_activity(&st);
		wait_for_work(&st);
	}
}
