/*-------------------------------------------------------------------------
 *
 * relay.c
 *	  The relay's life: background workers that claim committed messages
 *	  and POST them to their handlers' URLs, at least once, with retries,
 *	  backoff and dead-lettering.  This file starts a relay (raising its
 *	  open-file limit for grelout.concurrency), handles its signals, runs
 *	  its loop and its waits, and stops it.
 *
 * One loop does everything, and never blocks outside its wait:
 *
 *	1. move HTTP requests along (http.c) and collect the finished ones,
 *	   deciding each outcome (jobs.c);
 *	2. when a cycle is due, one short transaction (cycle.c) settles those
 *	   outcomes, routes the messages committed since the last cycle to their
 *	   handlers and claims as many deliveries as the claim's budget allows
 *	   (claim_step.c, claim_budget.c, budget.c), building each claimed
 *	   delivery's request (webhook.c); commit;
 *	3. start the claimed requests (only after the claim has committed: no
 *	   transaction is ever open across network I/O), and a batch of the
 *	   finished attempts' spans when one is due (spans.c);
 *	4. wait on the latch, postmaster death and the HTTP sockets until the
 *	   earliest of libcurl's timers, the next due message and the poll
 *	   interval.
 *
 * A publisher's commit sets our latch through shared memory, so an idle
 * relay claims within milliseconds of a commit.  Signals set the latch too,
 * so the wait ends at once whatever is in flight: SIGHUP reloads settings;
 * SIGTERM stops claiming, cancels the statement in progress if any, and
 * lets the requests in flight finish for a short grace period, then hands
 * the unfinished claims back; SIGINT (pg_cancel_backend) cancels at most
 * the statement in progress, never the relay; the ProcSignalBarrier of
 * DROP DATABASE is absorbed by CHECK_FOR_INTERRUPTS at the top of the loop.
 *
 * An extra relay of an elastic database (one above grelout.workers) is
 * retired by the launcher when its database has had room to spare for a
 * quiet spell (elastic.h): it claims no more, lets what it has in flight
 * finish, settles it and exits, handing nothing back.  After each claim
 * that could tell, the relay notes whether it was short of room, and its
 * slot says whether it is saturated, for the launcher to add a relay.
 *
 * The relay's session pins what its statements rely on (read committed,
 * read-write, bounded lock waits) whatever the server's defaults.  Every
 * timer of the loop runs on the monotonic clock and moves forward on every
 * path, so the loop never spins.
 *
 * The loop allocates in one memory context (RelayLoopContext), reset at
 * every turn; jobs and queued outcomes, which outlive a turn, have contexts
 * of their own (jobs.c).
 *
 *-------------------------------------------------------------------------
 */
#include "relay.h"

#include <sys/resource.h>
#include <time.h>

#include "elastic.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"

/* How long in-flight requests may finish after SIGTERM. */
#define SHUTDOWN_GRACE_MS		2000
/* Pinned bound of the relay's lock waits (see pin_transactions). */
#define RELAY_LOCK_TIMEOUT		"1s"

/* Who this relay is (relay.h). */
RelayIdentity MyRelay;

/* The loop's memory context, reset at every turn. */
MemoryContext RelayLoopContext = NULL;

/*
 * The relay's bound on requests in flight (relay.h): grelout.concurrency,
 * or fewer when the open-file limit cannot hold that many (fit_open_files).
 */
int			relay_concurrency = 1;

/* True while a database cycle runs: a cancel then cancels its statement. */
volatile sig_atomic_t relay_in_cycle = false;

/* The worker's own state. */
static struct
{
	int			index;			/* slot */
	HttpEngine *engine;
	WaitEventSet *wes;
	bool		stopping;
	MonoTime	stop_deadline;
	bool		retiring;		/* the launcher retires it: claim no more */
	ElasticRelay room;			/* short of room, saturated (elastic.h) */
	MonoTime	woke_at;		/* the loop's wait last ended then */
	int64		busy_us;		/* the last turn, from its wake to its wait */
	uint32		wakes_seen;		/* the slot's wakes when last looked at */
	char		activity[64];	/* what grelout.relays shows */
} life;

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

/*
 * relay_unseen_us: how long an answer collected now may have waited for
 * the relay to look (its last turn away from its sockets, a database
 * cycle and the requests it started, and this turn so far): the limiter
 * does not count that as the endpoint's latency.
 */
int64
relay_unseen_us(void)
{
	return life.busy_us + Max(relay_now() - life.woke_at, 0);
}

/* relay_ms_after: a time ms milliseconds from now. */
MonoTime
relay_ms_after(int64 ms)
{
	return relay_now() + ms * 1000;
}

/* relay_ms_until: milliseconds from now until t, at least 0. */
long
relay_ms_until(MonoTime t)
{
	MonoTime	now = relay_now();

	return (t <= now) ? 0 : (long) ((t - now + 999) / 1000);
}

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

	if (relay_in_cycle)
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
	if (relay_in_cycle)
	{
		InterruptPending = true;
		QueryCancelPending = true;
	}
	SetLatch(MyLatch);
	errno = save_errno;
}

/* set_activity: what grelout.relays and pg_stat_activity show. */
static void
set_activity(const char *activity)
{
	if (strcmp(life.activity, activity) == 0)
		return;
	strlcpy(life.activity, activity, sizeof(life.activity));
	grelout_slot_set_activity(MyRelay.slot, activity);
	pgstat_report_activity(STATE_IDLE, activity);
}

/* relay_report_idle: show the relay's activity again after a cycle. */
void
relay_report_idle(void)
{
	pgstat_report_activity(STATE_IDLE, life.activity);
}

/*
 * open_files_capped: LOG that the hard open-file limit (files) holds the
 * relay's requests in flight below grelout.concurrency; once a value of
 * the setting.
 */
static void
open_files_capped(int64 files, int64 need)
{
	static int	logged_for = 0;

	if (logged_for == grelout_concurrency)
		return;
	logged_for = grelout_concurrency;
	ereport(LOG,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("grelout relay %d can have at most %d requests in flight, fewer than grelout.concurrency (%d)",
					MyRelay.relay, relay_concurrency, grelout_concurrency),
			 errdetail("Its open-file limit is %lld, capped by the hard limit; grelout.concurrency needs %lld.",
					   (long long) files, (long long) need),
			 errhint("Raise the hard open-file limit of the PostgreSQL service (LimitNOFILE in its systemd unit, ulimit -Hn), or lower grelout.concurrency.")));
}

/*
 * fit_open_files: raise the relay's soft open-file limit to what its
 * requests in flight may need (budget_files_needed), as far as the hard
 * limit allows (never lowering it), and set relay_concurrency: the
 * setting, or what the limit holds when the hard limit caps it.
 */
static void
fit_open_files(void)
{
	int64		need = budget_files_needed(grelout_concurrency);
	struct rlimit rl;
	int64		files;

	relay_concurrency = grelout_concurrency;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
		(int64) rl.rlim_cur >= need)
		return;
	if (rl.rlim_max == RLIM_INFINITY || (int64) rl.rlim_max >= need)
		rl.rlim_cur = (rlim_t) need;
	else
		rl.rlim_cur = rl.rlim_max;
	files = (int64) rl.rlim_cur;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0 && getrlimit(RLIMIT_NOFILE, &rl) == 0)
		files = (int64) rl.rlim_cur;
	ereport(DEBUG1,
			(errmsg("grelout relay %d open-file limit is now %lld",
					MyRelay.relay, (long long) files)));
	if (files >= need)
		return;
	relay_concurrency = Min(grelout_concurrency, budget_concurrency_for_files(files));
	open_files_capped(files, need);
}

/*
 * reload_settings: SIGHUP, and once at start.  The open-file limit is
 * raised for grelout.concurrency (fit_open_files), and the engine's
 * connection pool sized to the most requests the relay may have in flight
 * (per handler, as with a 1.1 schema: the larger bound).
 */
static void
reload_settings(bool initial)
{
	if (!initial)
		ProcessConfigFile(PGC_SIGHUP);
	fit_open_files();
	http_engine_configure(life.engine, grelout_ca_file,
						  grelout_block_private_networks, grelout_allowed_networks,
						  budget_most_running(relay_concurrency, true));
	cycle_want_claim();
}

/* may_claim: not stopping, not paused, and a request slot free. */
static bool
may_claim(void)
{
	/* 1.1: a handler with nothing in flight may get a slot beyond them */
	int			limit = budget_most_running(relay_concurrency,
											relay_schema >= STORE_SCHEMA_1_1);

	return !life.stopping && !life.retiring && grelout_relay_enabled &&
		jobs_running() < limit;
}

/*
 * purge_wanted: should the retention purge make cycles due: is the purge
 * of delivered messages on, or has the attempt log's purge a backlog (see
 * purge_step), and the relay not stopping?
 */
static bool
purge_wanted(void)
{
	return (grelout_keep_mode == GRELOUT_KEEP_WINDOW || cycle_purge_backlog()) &&
		!life.stopping;
}

/*
 * wait_timeout: how long the loop may sleep: until libcurl's next timer,
 * the pending spans' export (spans.c), the next cycle's (cycle_timeout),
 * the shutdown deadline.
 */
static long
wait_timeout(void)
{
	long		timeout = grelout_poll_interval;
	long		t;

	t = http_engine_timeout(life.engine);
	if (t >= 0)
		timeout = Min(timeout, t);
	timeout = spans_timeout(timeout);
	timeout = cycle_timeout(timeout, may_claim(), purge_wanted());
	if (life.stopping)
		timeout = Min(timeout, relay_ms_until(life.stop_deadline));
	return Max(timeout, 0);
}

/*
 * handle_signals: absorb interrupts (a ProcSignalBarrier among them),
 * reload on SIGHUP, begin stopping on SIGTERM, flush statistics a deferred
 * flush left pending.
 */
static void
handle_signals(void)
{
	/* a cancel outside a cycle has no statement to cancel */
	QueryCancelPending = false;
	CHECK_FOR_INTERRUPTS();
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		reload_settings(false);
	}
	if (ShutdownRequestPending && !life.stopping)
	{
		life.stopping = true;
		life.stop_deadline = relay_ms_after(SHUTDOWN_GRACE_MS);
		set_activity("stopping");
	}
	cycle_flush_stats();
}

/*
 * stop_if_done: once stopping and every request has finished or the grace
 * period is over, settle what finished, hand back the claims still in
 * flight, and exit.  The final settle is one cycle, bounded by the pinned
 * lock and statement timeouts (and cancelled by another SIGTERM).
 */
static void
stop_if_done(void)
{
	int			unfinished;
	int			outcomes;
	bool		settled = true;

	if (!life.stopping ||
		(jobs_running() > 0 && relay_now() < life.stop_deadline))
		return;
	jobs_collect();
	unfinished = jobs_release_unfinished();
	outcomes = jobs_settles_queued() - unfinished;
	if (jobs_settles_queued() > 0)
		settled = cycle_run(false);
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
	spans_stop();
	proc_exit(1);
}

/*
 * note_room: after a cycle, whether its claim was short of room (a claim
 * that says nothing of it changes nothing); while the relay claims
 * nothing (paused, stopping, retiring) it is not saturated.  The slot is
 * told only when the saturated state changes.
 */
static void
note_room(void)
{
	bool		measured;
	bool		short_of_room = cycle_short_of_room(&measured);

	if (life.stopping || life.retiring || !grelout_relay_enabled)
	{
		measured = true;
		short_of_room = false;
	}
	if (measured && elastic_relay_note(&life.room, short_of_room, elastic_now()))
		grelout_slot_saturated(MyRelay.slot, life.room.saturated);
}

/*
 * retire_if_asked: the launcher retires this extra relay (elastic.h): claim
 * no more; once nothing is in flight and every outcome is settled, exit.
 * A stop (SIGTERM) meanwhile takes over: stop_if_done.
 */
static void
retire_if_asked(void)
{
	if (life.stopping)
		return;
	if (!life.retiring && grelout_slot_retiring(MyRelay.slot))
	{
		life.retiring = true;
		set_activity("retiring");
		note_room();
	}
	if (!life.retiring || jobs_running() > 0 || jobs_settles_queued() > 0)
		return;
	/* the spans of its last attempts go too (an export ends within 5 s) */
	if (!spans_drained())
		return;
	ereport(LOG,
			(errmsg("grelout relay %d retires from database \"%s\"",
					MyRelay.relay, MyRelay.dbname),
			 errdetail("The launcher retired it, an extra relay above grelout.workers; it finished and settled its requests, and hands nothing back.")));
	spans_stop();
	proc_exit(0);
}

/* show_activity: what the relay is doing, when not stopping. */
static void
show_activity(void)
{
	if (!life.stopping && !life.retiring)
	{
		if (!grelout_relay_enabled)
		{
			set_activity("paused (grelout.relay is off)");
			note_room();
		}
		else if (!cycle_extension_ready())
			set_activity("waiting for CREATE EXTENSION grelout");
		else if (jobs_running() > 0)
			set_activity("delivering");
		else
			set_activity("idle");
	}
	grelout_slot_count(MyRelay.slot, 0, 0, 0, jobs_running());
}

/*
 * wait_for_work: sleep until a wake-up, a socket, or the next timer.  A
 * signal or a ProcSignalBarrier sets the latch, so the wait ends at once
 * and the next turn handles it (handle_signals).
 */
static void
wait_for_work(void)
{
	WaitEvent	events[3];
	int			nevents;

	nevents = WaitEventSetWait(life.wes, wait_timeout(),
							   events, lengthof(events), PG_WAIT_EXTENSION);
	for (int i = 0; i < nevents; i++)
	{
		if (events[i].events & WL_LATCH_SET)
		{
			uint32		wakes;

			ResetLatch(MyLatch);

			/*
			 * A claim only for a commit's wake-up (grelout_wake_relays): a
			 * latch set by anything else, such as the SIGALRM that a timer
			 * the relay no longer needs still sends, is no work.
			 */
			wakes = pg_atomic_read_u32(&MyRelay.slot->wakes);
			if (wakes != life.wakes_seen)
			{
				life.wakes_seen = wakes;
				cycle_wake();
			}
		}
	}
}

/*
 * pin_statements: how the relay's statements are committed, planned and
 * resolved, whatever the server's configuration says.
 */
static void
pin_statements(void)
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
	 * 1e10: that cost would make every cycle JIT-compile its statements, at
	 * a cost far above the cycle's own work (bench/README.md).  No relay
	 * statement gains from JIT.
	 */
	SetConfigOption("jit", "off", PGC_SUSET, PGC_S_OVERRIDE);

	/*
	 * Every statement the relay runs, its own and those of the triggers its
	 * writes fire, resolves names under grelout's path, whatever ALTER ROLE
	 * or ALTER DATABASE ... SET search_path says: an override, which no SET
	 * (a function's SET clause included) can change in this session.
	 */
	SetConfigOption("search_path", GRELOUT_SEARCH_PATH, PGC_SUSET, PGC_S_OVERRIDE);
}

/*
 * pin_transactions: the isolation, access and time bounds the relay's
 * transactions are written for, whatever the server's configuration says.
 */
static void
pin_transactions(void)
{
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
	 * background worker does not run: cycle_run arms the same timer itself
	 * for the whole cycle (cycle.c).
	 */
	SetConfigOption("lock_timeout", RELAY_LOCK_TIMEOUT, PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("idle_in_transaction_session_timeout", "0",
					PGC_SUSET, PGC_S_OVERRIDE);
}

/*
 * pin_session: the settings the relay's statements rely on, and the name
 * the relay goes by.
 */
static void
pin_session(void)
{
	pin_statements();
	pin_transactions();
	SetConfigOption("application_name", "grelout relay", PGC_SUSET, PGC_S_OVERRIDE);
	pgstat_report_appname("grelout relay");
}

/*
 * relay_assignment: the database and number the launcher gave this relay's
 * slot; false when the relay is to leave before it connects (the launcher
 * stopped wanting it, or a command wants its database free).
 */
static bool
relay_assignment(void)
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
	return !stop && !grelout_aside_pending(slot->dboid);
}

/* start_http: libcurl, the relay's HTTP engine and its jobs. */
static void
start_http(void)
{
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		ereport(FATAL,
				(errcode(ERRCODE_SYSTEM_ERROR),
				 errmsg("could not initialize libcurl")));
	life.engine = http_engine_create();
	if (life.engine == NULL)
		ereport(FATAL,
				(errcode(ERRCODE_SYSTEM_ERROR),
				 errmsg("could not create the HTTP engine: %m")));
	jobs_init(life.engine);
	spans_init(life.engine);
}

/*
 * relay_init: signals, slot, connection, session settings, libcurl and the
 * wait set.
 */
static void
relay_init(void)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, relay_sigterm);
	pqsignal(SIGINT, relay_sigint);
	BackgroundWorkerUnblockSignals();

	MyRelay.slot = grelout_slot_attach(life.index);
	if (!relay_assignment())
		proc_exit(0);
	cycle_init();
	claim_budget_init();
	BackgroundWorkerInitializeConnectionByOid(MyRelay.slot->dboid,
											  MyRelay.slot->roleoid, 0);
	pin_session();
	start_http();

	RelayLoopContext = AllocSetContextCreate(TopMemoryContext, "grelout relay loop",
											 ALLOCSET_DEFAULT_SIZES);
	life.wes = grelout_create_wait_event_set(3);
	AddWaitEventToSet(life.wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(life.wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	AddWaitEventToSet(life.wes, WL_SOCKET_READABLE, http_engine_fd(life.engine),
					  NULL, NULL);

	reload_settings(true);
	set_activity("idle");
	/* the first cycle claims anyway: wakes from before it are answered */
	life.wakes_seen = pg_atomic_read_u32(&MyRelay.slot->wakes);
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
	life.index = DatumGetInt32(arg);
	relay_concurrency = grelout_concurrency;
	relay_init();
	life.woke_at = relay_now();

	for (;;)
	{
		MemoryContextSwitchTo(RelayLoopContext);
		MemoryContextReset(RelayLoopContext);

		handle_signals();
		jobs_collect();
		if (cycle_due(may_claim(), purge_wanted()))
		{
			(void) cycle_run(may_claim());
			jobs_start_claimed();
			note_room();
		}
		spans_flush();
		stop_if_done();
		retire_if_asked();
		show_activity();
		life.busy_us = relay_now() - life.woke_at;
		wait_for_work();
		life.woke_at = relay_now();
	}
}
