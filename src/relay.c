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
#include "grelout.h"

#include <signal.h>
#include <time.h>

#include "access/xact.h"
#include "budget.h"
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

/* A time on the monotonic clock, in microseconds. */
typedef int64 MonoTime;

/*
 * The relay's record of one handler (1.1): its requests in flight here,
 * its shared health entry, and what the current claim may take of it.
 */
typedef struct LocalHandler
{
	char		name[GRELOUT_HANDLER_NAME_MAX + 1];	/* hash key */
	HealthEntry *entry;			/* NULL when the shared table is full */
	BudgetHandler budget;		/* its requests here, window, claim budget */
	int			counted;		/* of its requests, counted in entry->in_flight */
	int			reserved;		/* slots reserved in entry by the claim (caps) */
	int			tokens;			/* of them, max_per_second budget */
	bool		probe;			/* its limit is the breaker's one probe */
} LocalHandler;

/* Everything the loop carries from one turn to the next. */
typedef struct RelayState
{
	int			index;			/* slot */
	int			relay;			/* number within the database */
	char		dbname[NAMEDATALEN];
	GreloutDbEntry *db;			/* the database's shared entry */
	GreloutRelaySlot *slot;
	HttpEngine *engine;
	WaitEventSet *wes;
	MemoryContext loop_cxt;		/* reset at every turn */
	MemoryContext jobs_cxt;
	MemoryContext settle_cxt;

	/* outcomes waiting to be written */
	SettleItem *settles;
	int			nsettles;
	int			settles_cap;
	int			count_delivered;
	int			count_retried;
	int			count_dead;

	/* claiming */
	bool		claim_wanted;	/* a wake-up came, or the last claim was full */
	MonoTime	next_claim_at;	/* next due message, or the poll */
	MonoTime	claim_overdue_at;	/* run the claim statement by then */
	MonoTime	last_finish_at; /* a request last finished then */
	bool		ahead_useful;	/* the last extra claim took a delivery */
	bool		woken;			/* the latch was set since the last claim */
	MonoTime	next_due_read_at;	/* store_next_due_ms last read then */
	MonoTime	next_due_at;	/* what it said: 0 nothing due, or the time */
	bool		extension_ready;
	bool		extension_reported; /* to the launcher, once */
	bool		looked;			/* a cycle has committed since the start */
	StoreSchema schema;			/* read at the start of each cycle */
	WebhookJob *to_start;
	bool		keyed_claimed;	/* to_start has a message with a key */
	dlist_head	in_flight;		/* started, not yet finished */

	/* dead letters of the claim, logged once it commits */
	List	   *claim_dead;
	int			count_claim_dead;

	/* handler health (1.1) */
	HTAB	   *handlers;		/* LocalHandler by name */
	List	   *planned;		/* LocalHandlers listed in this claim */
	TimestampTz health_wake_at; /* a probe or a pause ends then; 0: none */
	bool		health_loaded;	/* stored breaker states loaded */
	List	   *health_writes;	/* HealthWrite, in settle_cxt */
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
						st->relay, released, st->dbname)));
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
 * now_ts: the loop's clock, monotonic: a step of the wall clock neither
 * suspends nor hurries the poll, the retries or the purge.
 */
static MonoTime
now_ts(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (MonoTime) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ms_after: a time ms milliseconds from now. */
static MonoTime
ms_after(int64 ms)
{
	return now_ts() + ms * 1000;
}

/* ms_until: milliseconds from now until t, at least 0. */
static long
ms_until(MonoTime t)
{
	MonoTime	now = now_ts();

	return (t <= now) ? 0 : (long) ((t - now + 999) / 1000);
}

/* set_activity: what grelout.relays and pg_stat_activity show. */
static void
set_activity(RelayState *st, const char *activity)
{
	if (strcmp(st->activity, activity) == 0)
		return;
	strlcpy(st->activity, activity, sizeof(st->activity));
	grelout_slot_set_activity(st->slot, activity);
	pgstat_report_activity(STATE_IDLE, activity);
}

static bool responded(const HttpRequest *r);

/*
 * add_settle: queue the outcome of a job's attempt for the next database
 * cycle, with the attempt's HTTP status and duration.
 */
static void
add_settle(RelayState *st, const WebhookJob *job, SettleState state,
		   int64 delay_ms, const char *error)
{
	MemoryContext old = MemoryContextSwitchTo(st->settle_cxt);
	SettleItem *it;

	if (st->nsettles >= st->settles_cap)
	{
		st->settles_cap = Max(64, st->settles_cap * 2);
		st->settles = st->settles ?
			repalloc(st->settles, sizeof(SettleItem) * st->settles_cap) :
			palloc(sizeof(SettleItem) * st->settles_cap);
	}
	it = &st->settles[st->nsettles++];
	memcpy(&it->id, &job->id, sizeof(pg_uuid_t));
	it->lease = job->lease;
	it->state = state;
	it->delay_ms = delay_ms;
	it->error = error ? pstrdup(error) : NULL;
	it->fanout = job->fanout;
	it->handler = job->handler ? pstrdup(job->handler) : NULL;
	it->status = responded(&job->req) ? (int) job->req.status : 0;
	it->topic = (state == SETTLE_DEAD && job->topic) ? pstrdup(job->topic) : NULL;
	it->attempts = job->attempts;
	it->duration_ms = -1;
	if (job->started_us > 0)
		it->duration_ms = (int) Min((now_ts() - job->started_us) / 1000, PG_INT32_MAX);
	MemoryContextSwitchTo(old);

	if (state == SETTLE_DELIVERED)
		st->count_delivered++;
	else if (state == SETTLE_RETRY)
		st->count_retried++;
	else if (state == SETTLE_DEAD)
		st->count_dead++;
}

/*
 * forget_settles: empty the queue, with the error strings it holds
 * (keeping the array but not the strings leaked one string per failed
 * attempt).
 */
static void
forget_settles(RelayState *st)
{
	st->nsettles = 0;
	st->count_delivered = st->count_retried = st->count_dead = 0;
	MemoryContextReset(st->settle_cxt);
	st->settles = NULL;
	st->settles_cap = 0;
	st->health_writes = NIL;
}

/*
 * named_handler: the handler's name when the log should give it: under 1.1,
 * when it is not the topic (as 1.0 named every handler by its topic).
 */
static const char *
named_handler(const char *handler, const char *topic)
{
	return (handler && strcmp(handler, topic) != 0) ? handler : NULL;
}

/* log_dead: the WARNING of a dead-lettered delivery. */
static void
log_dead(const char *id, const char *topic, const char *handler, int attempt,
		 const char *error)
{
	if (named_handler(handler, topic))
		ereport(WARNING,
				(errmsg("grelout message %s of topic \"%s\" for handler \"%s\" is dead after attempt %d",
						id, topic, handler, attempt),
				 errdetail("%s", error),
				 errhint("Fix the endpoint, then call outbox_redrive().")));
	else
		ereport(WARNING,
				(errmsg("grelout message %s of topic \"%s\" is dead after attempt %d",
						id, topic, attempt),
				 errdetail("%s", error),
				 errhint("Fix the endpoint, then call outbox_redrive().")));
}

/* responded: did a status line arrive (a cut body still counts)? */
static bool
responded(const HttpRequest *r)
{
	return (r->result == CURLE_OK ||
			(r->result == CURLE_WRITE_ERROR && r->body_cut)) &&
		r->status >= 100;
}

/* describe_failure: last_error of a failed attempt, printable ASCII. */
static void
describe_failure(const HttpRequest *r, char *errbuf, size_t len)
{
	if (responded(r))
	{
		char		body[201];

		outcome_sanitize(r->body_start, r->body_start_len, body, sizeof(body));
		snprintf(errbuf, len, "HTTP %ld%s%s%s", r->status,
				 (r->status >= 300 && r->status < 400) ? " (redirects are not followed)" : "",
				 body[0] ? ": " : "", body);
	}
	else
	{
		char		raw[GRELOUT_LAST_ERROR_MAX];

		http_request_describe_error(r, raw, sizeof(raw));
		outcome_sanitize(raw, strlen(raw), errbuf, len);
	}
}

/* decide: the outcome of a finished request under the current settings. */
static Outcome
decide(const WebhookJob *job)
{
	const HttpRequest *r = &job->req;
	OutcomeInput in;

	memset(&in, 0, sizeof(in));
	in.responded = responded(r);
	in.status = r->status;
	in.has_retry_after = r->has_retry_after;
	in.retry_after_ms = r->retry_after_ms;
	in.attempts = job->attempts;
	in.max_attempts = job->max_attempts;
	in.dead_letter = grelout_dead_letter;
	in.retry_base_ms = grelout_retry_base;
	in.retry_max_ms = grelout_retry_max;
	in.retry_jitter = grelout_retry_jitter;
	in.draw = pg_prng_double(&pg_global_prng_state);
	return outcome_decide(&in);
}

/* static state for the exit callback (one relay a process) */
static RelayState *exiting_relay = NULL;

/*
 * local_handler: the relay's record of a handler, made on first sight with
 * its shared health entry.
 */
static LocalHandler *
local_handler(RelayState *st, const char *name)
{
	char		key[GRELOUT_HANDLER_NAME_MAX + 1];
	LocalHandler *lh;
	bool		found;

	memset(key, 0, sizeof(key));
	strlcpy(key, name, sizeof(key));
	lh = hash_search(st->handlers, key, HASH_ENTER, &found);
	if (!found)
	{
		memset((char *) lh + sizeof(lh->name), 0, sizeof(LocalHandler) - sizeof(lh->name));
		lh->entry = health_entry(MyDatabaseId, key, true);
	}
	return lh;
}

/*
 * job_started: count a started request in its handler's in flight, here
 * and over all relays (unless its claim reserved it there already).
 */
static void
job_started(WebhookJob *job)
{
	LocalHandler *lh = job->local;

	if (lh == NULL)
		return;
	budget_started(&lh->budget);
	if (lh->entry != NULL)
	{
		if (!job->counted)
			health_add_in_flight(lh->entry, 1);
		job->counted = true;
		lh->counted++;
	}
}

/*
 * job_finished: a request is over; not in flight any more.  An answer
 * opens its handler's window, no answer halves it.
 */
static void
job_finished(WebhookJob *job)
{
	LocalHandler *lh = job->local;

	if (lh == NULL)
		return;
	budget_finished(&lh->budget, responded(&job->req), grelout_concurrency,
					now_ts());
	if (job->counted && lh->entry != NULL)
	{
		health_add_in_flight(lh->entry, -1);
		lh->counted = Max(lh->counted - 1, 0);
		job->counted = false;
	}
}

/*
 * queue_health_write: a breaker transition to store, with its event, in
 * the next cycle (kept, like the outcomes, until a cycle commits it).
 */
static void
queue_health_write(RelayState *st, const HealthWrite *w)
{
	MemoryContext old = MemoryContextSwitchTo(st->settle_cxt);
	HealthWrite *copy = palloc(sizeof(HealthWrite));

	memcpy(copy, w, sizeof(HealthWrite));
	st->health_writes = lappend(st->health_writes, copy);
	MemoryContextSwitchTo(old);
}

/*
 * judge_health: what the finished request tells its handler's breaker
 * (1.1).  Only what outcome_health calls the endpoint's fault counts
 * (1.2): a 4xx that a message can provoke fails that delivery alone, and
 * is never held.  Logs the breaker's opening (WARNING) and closing (LOG),
 * queues the transitions to store; returns whether the delivery is to be
 * held: handed back with its attempt, because the breaker, not the
 * message, failed it (a failed probe, or a request in flight when it
 * opened).
 */
static bool
judge_health(RelayState *st, WebhookJob *job, const char *error)
{
	const HttpRequest *r = &job->req;
	LocalHandler *lh = job->local;
	HealthOutcome kind;
	HealthTransition t;
	HealthWrite w;
	bool		hold;
	int64		pause_ms = 0;

	if (lh == NULL || lh->entry == NULL || st->schema != STORE_SCHEMA_1_1)
		return false;
	switch (outcome_health(responded(r), r->status, r->has_retry_after))
	{
		case OUTCOME_HEALTH_SUCCESS:
			kind = HEALTH_SUCCESS;
			break;
		case OUTCOME_HEALTH_PAUSE:
			kind = HEALTH_NEUTRAL;
			pause_ms = Min(Max(r->retry_after_ms, 0), (int64) grelout_retry_max);
			break;
		case OUTCOME_HEALTH_MESSAGE:
			kind = HEALTH_MESSAGE;
			break;
		case OUTCOME_HEALTH_FAILURE:
		default:
			kind = HEALTH_FAILURE;
			break;
	}
	t = health_outcome(lh->entry, kind, job->probe, pause_ms, error,
					   GetCurrentTimestamp(), &hold, &w);
	if (t == HEALTH_OPENED)
		ereport(WARNING,
				(errmsg("grelout handler \"%s\" breaker opened after %d consecutive failures",
						job->handler, w.consecutive_failures),
				 errdetail("%s", error ? error : ""),
				 errhint("Nothing is sent to it for %.1f s, then one probe; its messages wait without using attempts.",
						 w.cooldown_ms / 1000.0)));
	else if (t == HEALTH_CLOSED)
		ereport(LOG,
				(errmsg("grelout handler \"%s\" breaker closed", job->handler)));
	if (t != HEALTH_NONE)
		queue_health_write(st, &w);
	return hold;
}

/*
 * finish_job: turn a finished request into an outcome, tell its handler's
 * health, log retries and dead letters, and queue the settle.
 */
static void
finish_job(RelayState *st, WebhookJob *job)
{
	Outcome		o = decide(job);
	char		errbuf[GRELOUT_LAST_ERROR_MAX];
	bool		hold;

	job_finished(job);
	if (o.kind == OUTCOME_DELIVERED)
	{
		(void) judge_health(st, job, NULL);
		add_settle(st, job, SETTLE_DELIVERED, 0, NULL);
		webhook_free(job);
		return;
	}

	describe_failure(&job->req, errbuf, sizeof(errbuf));
	grelout_slot_error(st->slot, errbuf);
	hold = judge_health(st, job, errbuf);

	/*
	 * Never a 410 (the receiver's word about the message: dead, breaker or
	 * not) nor any 4xx a message can cause: those are not the breaker's.
	 */
	if (hold)
	{
		ereport(DEBUG1,
				(errmsg("grelout message %s for handler \"%s\" is held by the handler's open breaker",
						job->id_str, job->handler),
				 errdetail("%s", errbuf)));
		add_settle(st, job, SETTLE_HOLD, 0, errbuf);
		webhook_free(job);
		return;
	}
	if (o.kind == OUTCOME_DEAD)
	{
		log_dead(job->id_str, job->topic, job->handler, job->attempts, errbuf);
		add_settle(st, job, SETTLE_DEAD, 0, errbuf);
		webhook_free(job);
		return;
	}
	if (named_handler(job->handler, job->topic))
		ereport(WARNING,
				(errmsg("grelout message %s of topic \"%s\" for handler \"%s\" failed on attempt %d, retrying in %.1f s",
						job->id_str, job->topic, job->handler, job->attempts,
						o.delay_ms / 1000.0),
				 errdetail("%s", errbuf)));
	else
		ereport(WARNING,
				(errmsg("grelout message %s of topic \"%s\" failed on attempt %d, retrying in %.1f s",
						job->id_str, job->topic, job->attempts, o.delay_ms / 1000.0),
				 errdetail("%s", errbuf)));
	add_settle(st, job, SETTLE_RETRY, o.delay_ms, errbuf);
	webhook_free(job);
}

/* drop_unstarted: forget jobs whose claim did not commit. */
static void
drop_unstarted(RelayState *st)
{
	while (st->to_start)
	{
		WebhookJob *job = st->to_start;

		st->to_start = job->next;
		webhook_free(job);
	}
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
	old = MemoryContextSwitchTo(st->loop_cxt);
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
static void
claim_dead_report(RelayState *st)
{
	ListCell   *lc;

	foreach(lc, st->claim_dead)
	{
		ClaimDead  *cd = lfirst(lc);

		log_dead(cd->id, cd->topic, cd->handler, cd->attempts,
				 cd->error ? cd->error : "no attempts left");
		st->count_dead++;
	}
	st->claim_dead = NIL;
}

/* queue_job: build a claimed row's request, to start once the claim commits. */
static void
queue_job(RelayState *st, HeapTuple tup, TupleDesc desc, int64 lease)
{
	WebhookJob *job = webhook_build(st->jobs_cxt, tup, desc, lease);

	if (job->handler != NULL && st->schema == STORE_SCHEMA_1_1)
	{
		job->local = local_handler(st, job->handler);
		job->local->budget.claimed++;
	}
	job->next = st->to_start;
	st->to_start = job;
}

/*
 * list_handler: limit a handler to lim deliveries in the current claim.
 */
static void
list_handler(RelayState *st, LocalHandler *lh, int lim)
{
	if (budget_limit(&lh->budget, lim))
	{
		MemoryContext old = MemoryContextSwitchTo(st->loop_cxt);

		st->planned = lappend(st->planned, lh);
		MemoryContextSwitchTo(old);
	}
}

/*
 * plan_remaining: the limits of the handlers listed in the claim plan, less
 * what this cycle's statements have claimed of them so far, for the next
 * statement of the cycle (routing and the claim both take deliveries).
 */
static void
plan_remaining(RelayState *st, ClaimLimits *cl)
{
	ListCell   *lc;
	int		   *lims;
	int			n = 0;

	if (st->schema != STORE_SCHEMA_1_1)
		return;
	lims = palloc(sizeof(int) * Max(list_length(st->planned), 1));
	foreach(lc, st->planned)
	{
		LocalHandler *lh = lfirst(lc);

		lims[n++] = budget_remaining(&lh->budget);
	}
	cl->lims = store_int_array(lims, n);
}

/*
 * plan_claim: how many deliveries of each handler the cycle's routing and
 * claim may take (1.1), into *cl.
 *
 *	- Fair share: a handler busy here (requests in flight, or a moment ago)
 *	  gets at most concurrency / (busy handlers) in flight, bounded by its
 *	  window while others are busy too (share_slots), and a handler not
 *	  busy beside busy ones at most its window; the claim hands out the
 *	  free slots round robin over the handlers with due work.  When
 *	  no slot is free (extra), a handler with nothing in flight here still
 *	  gets one request, so a bad endpoint holding every slot delays nobody
 *	  (in flight stays at most concurrency plus one per such handler,
 *	  never above twice it).
 *	- Breaker and pause (health_gate): nothing while open or paused, one
 *	  probe when its time has come.
 *	- Caps (health_reserve): max_in_flight over all relays and
 *	  max_per_second, reserved in shared memory before the claim and given
 *	  back after it (plan_finish) as far as unused.
 */
static void
plan_claim(RelayState *st, int limit, bool extra, ClaimLimits *cl)
{
	TimestampTz now = GetCurrentTimestamp();
	HASH_SEQ_STATUS seq;
	LocalHandler *lh;
	BudgetHandler **all;
	BudgetClaim bc;
	int			n = 0;
	List	   *names = NIL;
	List	   *caps;
	List	   *gated;
	ListCell   *lc;

	st->planned = NIL;
	st->health_wake_at = 0;

	hash_seq_init(&seq, st->handlers);
	while ((lh = hash_seq_search(&seq)) != NULL)
	{
		budget_reset(&lh->budget);
		lh->reserved = lh->tokens = 0;
		lh->probe = false;
	}
	gated = health_restricted(MyDatabaseId, now);
	foreach(lc, gated)
		local_handler(st, (char *) lfirst(lc))->budget.gated = true;

	/* the fair share of the busy handlers, and what each of them wants */
	all = palloc(sizeof(BudgetHandler *) * Max(hash_get_num_entries(st->handlers), 1));
	hash_seq_init(&seq, st->handlers);
	while ((lh = hash_seq_search(&seq)) != NULL)
		all[n++] = &lh->budget;
	bc.concurrency = grelout_concurrency;
	bc.limit = limit;
	bc.extra = extra;
	bc.now = now_ts();
	budget_share_out(&bc, all, n);

	/* breakers not closed, and pauses */
	foreach(lc, gated)
	{
		TimestampTz wake = 0;
		bool		probe;
		int			got;

		lh = local_handler(st, (char *) lfirst(lc));
		if (lh->entry == NULL)
			continue;
		got = health_gate(lh->entry, lh->budget.want, now, &probe, &wake);
		lh->probe = probe;
		list_handler(st, lh, got);
		st->health_wake_at = budget_earliest(st->health_wake_at, wake);
	}

	/* caps over all relays */
	caps = store_handler_caps(grelout_max_in_flight);
	foreach(lc, caps)
	{
		HandlerCaps *c = lfirst(lc);
		int			want;

		lh = local_handler(st, c->name);
		if (lh->entry == NULL)
			continue;
		want = budget_asked(&lh->budget);
		lh->reserved = health_reserve(lh->entry, want, c->max_in_flight,
									  c->max_per_second, now);
		lh->tokens = (c->max_per_second > 0) ? lh->reserved : 0;
		list_handler(st, lh, lh->reserved);
		if (c->max_per_second > 0 && lh->reserved < want)
			st->health_wake_at =
				budget_earliest(st->health_wake_at,
								budget_next_token_at(now, c->max_per_second));
	}

	/*
	 * The fair share of the others; a handler this relay has not seen yet
	 * gets what a new one beside the busy ones gets.
	 */
	cl->default_lim = bc.default_limit;
	hash_seq_init(&seq, st->handlers);
	while ((lh = hash_seq_search(&seq)) != NULL)
	{
		if (budget_needs_limit(&lh->budget, &bc))
			list_handler(st, lh, lh->budget.want);
	}

	foreach(lc, st->planned)
		names = lappend(names, ((LocalHandler *) lfirst(lc))->name);
	cl->names = store_text_array(names);
	plan_remaining(st, cl);
}

/*
 * plan_finish: after the cycle, give back what the claim reserved and did
 * not use, and mark the claimed jobs: counted in flight by their
 * reservation, the breaker's probe.  When the cycle failed nothing was
 * claimed (its jobs are dropped): everything goes back.
 */
static void
plan_finish(RelayState *st, bool committed)
{
	ListCell   *lc;

	if (committed)
	{
		for (WebhookJob *job = st->to_start; job; job = job->next)
		{
			LocalHandler *lh = job->local;

			if (lh == NULL || !lh->budget.limited)
				continue;
			if (lh->reserved > 0)
			{
				lh->reserved--;
				if (lh->tokens > 0)
					lh->tokens--;
				job->counted = true;
			}
			if (lh->probe)
			{
				job->probe = true;
				lh->probe = false;
			}
		}
	}
	foreach(lc, st->planned)
	{
		LocalHandler *lh = lfirst(lc);

		if (lh->entry == NULL)
			continue;
		if (lh->reserved > 0)
			health_unreserve(lh->entry, lh->reserved, lh->tokens);
		if (lh->probe)
			health_release_probe(lh->entry);
		lh->reserved = lh->tokens = 0;
		lh->probe = false;
		lh->budget.limited = false;
	}
	st->planned = NIL;
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
	if (!st->keyed_claimed || st->schema != STORE_SCHEMA_1_1)
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

	tt = store_route(st->schema, limit, claim_limit,
					 Min(grelout_batch_size, grelout_concurrency),
					 grelout_lease_duration, lease, cl, &nrows, &routed, cut,
					 blocked);
	for (uint64 i = 0; i < nrows; i++)
		queue_job(st, tt->vals[i], tt->tupdesc, lease);
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

	tt = store_claim(st->schema, limit, grelout_lease_duration, lease,
					 grelout_max_attempts, grelout_dead_letter, cl, &nrows);
	st->claim_overdue_at = ms_after(CLAIM_AT_LEAST_MS);
	for (uint64 i = 0; i < nrows; i++)
	{
		bool		isnull;

		if (claimed_exhausted(st, tt->vals[i], tt->tupdesc, fanout_dead))
			continue;
		(void) SPI_getbinval(tt->vals[i], tt->tupdesc, CLAIM_KEY, &isnull);
		if (!isnull)
			st->keyed_claimed = true;
		queue_job(st, tt->vals[i], tt->tupdesc, lease);
	}
	return nrows;
}

/*
 * dead_event: publish grelout.delivery.dead about a delivery that went dead
 * (none about an event's own delivery).
 */
static void
dead_event(RelayState *st, const char *id, const char *topic,
		   const char *handler, int attempts, const char *error)
{
	StringInfoData extra;

	if (topic == NULL || handler == NULL || strncmp(topic, "grelout.", 8) == 0)
		return;
	initStringInfo(&extra);
	appendStringInfoString(&extra, "\"message_id\": ");
	escape_json(&extra, id);
	appendStringInfoString(&extra, ", \"topic\": ");
	escape_json(&extra, topic);
	appendStringInfoString(&extra, ", \"error\": ");
	escape_json(&extra, error ? error : "");
	appendStringInfo(&extra, ", \"attempts\": %d", attempts);
	if (health_publish_event("grelout.delivery.dead", handler,
							 health_event_json(handler, extra.data)))
		st->events_published = true;
}

/* publish_claim_dead: the events of the deliveries the claim dead-lettered. */
static void
publish_claim_dead(RelayState *st)
{
	ListCell   *lc;

	if (st->schema != STORE_SCHEMA_1_1)
		return;
	foreach(lc, st->claim_dead)
	{
		ClaimDead  *cd = lfirst(lc);

		dead_event(st, cd->id, cd->topic, cd->handler, cd->attempts,
				   cd->error ? cd->error : "no attempts left");
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
	foreach(lc, st->health_writes)
	{
		HealthWrite *w = lfirst(lc);

		health_store(w);
		if (w->event != NULL)
		{
			StringInfoData extra;

			initStringInfo(&extra);
			if (w->breaker == BREAKER_OPEN)
			{
				appendStringInfo(&extra, "\"consecutive_failures\": %d, \"error\": ",
								 w->consecutive_failures);
				escape_json(&extra, w->last_error);
				appendStringInfoString(&extra, ", \"probe_at\": ");
				escape_json(&extra, timestamptz_to_str(w->probe_at));
			}
			else
			{
				appendStringInfoString(&extra, "\"opened_at\": ");
				if (w->opened_at)
					escape_json(&extra, timestamptz_to_str(w->opened_at));
				else
					appendStringInfoString(&extra, "null");
			}
			if (health_publish_event(w->event, w->name,
									 health_event_json(w->name, extra.data)))
				st->events_published = true;
		}
	}
	for (int i = 0; i < st->nsettles; i++)
	{
		SettleItem *it = &st->settles[i];
		char	   *id;

		if (it->state != SETTLE_DEAD)
			continue;
		id = DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(&it->id)));
		dead_event(st, id, it->topic, it->handler, it->attempts, it->error);
	}
	st->disabled = NIL;
	foreach(lc, health_disable_due(MyDatabaseId, GetCurrentTimestamp()))
	{
		char	   *name = lfirst(lc);

		if (store_disable_handler(name))
		{
			MemoryContext old = MemoryContextSwitchTo(st->loop_cxt);

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
		now_ts() - st->last_finish_at >= STUCK_AFTER_MS * INT64CONST(1000);
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
	MonoTime	now = now_ts();
	MonoTime	due;

	if (st->next_due_read_at == 0 ||
		now - st->next_due_read_at >= NEXT_DUE_EVERY_MS * INT64CONST(1000) ||
		(st->next_due_at > 0 && st->next_due_at <= now))
	{
		int64		ms = store_next_due_ms(st->schema);

		st->next_due_read_at = now;
		st->next_due_at = (ms >= 0) ? now + ms * 1000 : 0;
		return st->next_due_at;
	}
	due = st->next_due_read_at + NEXT_DUE_EVERY_MS * INT64CONST(1000);
	if (st->next_due_at > 0 && st->next_due_at < due)
		due = st->next_due_at;
	for (int i = 0; i < st->nsettles; i++)
	{
		const SettleItem *it = &st->settles[i];

		if (it->state == SETTLE_RETRY && now + it->delay_ms * 1000 < due)
			due = now + it->delay_ms * 1000;
	}
	return due;
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
	if (st->schema == STORE_SCHEMA_1_1)
		plan_claim(st, limit, extra, &cl);
	else
	{
		cl.default_lim = limit;
		cl.names = store_text_array(NIL);
		cl.lims = store_int_array(NULL, 0);
	}
	if (now_ts() >= st->claim_overdue_at && st->schema == STORE_SCHEMA_1_1 &&
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
		plan_remaining(st, &cl);
		claimed += route_step(st, extra ? grelout_batch_size : limit,
							  extra ? 0 : limit - claimed, lease, &cl,
							  &routed_full, &routed_cut, &route_blocked);
	}
	if (claimed < limit && !routed_cut && nrows == 0)
	{
		plan_remaining(st, &cl);
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
	st->next_claim_at = ms_after(grelout_poll_interval);
	if (!st->claim_wanted && !routed_cut)
	{
		MonoTime	due = next_due(st);

		if (due > 0)
			st->next_claim_at = Min(st->next_claim_at, due);
	}
	/* the slots may get stuck: then come back to route ahead */
	if (extra && !ahead)
		st->next_claim_at = Min(st->next_claim_at,
								st->last_finish_at + STUCK_AFTER_MS * INT64CONST(1000));
	/* new messages wait for a handler change to commit: come back soon */
	if (route_blocked)
		st->next_claim_at = Min(st->next_claim_at, ms_after(ROUTE_RETRY_MS));
	/* a breaker's probe time, a pause's end, a rate's next token */
	if (st->health_wake_at > 0)
	{
		long		ms = (long) Max((st->health_wake_at - GetCurrentTimestamp() + 999) / 1000, 0);

		st->next_claim_at = Min(st->next_claim_at, ms_after(ms));
	}
}

/* purge_step: one batch of the retention purge, when it is due. */
static void
purge_step(RelayState *st)
{
	uint64		n;

	if (grelout_keep_mode != GRELOUT_KEEP_WINDOW || now_ts() < st->next_purge_at)
		return;
	n = store_purge_delivered(st->schema, grelout_keep_window_ms, PURGE_BATCH);
	st->next_purge_at = (n >= PURGE_BATCH) ? 0 : ms_after(PURGE_IDLE_MS);
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

	st->schema = store_schema();
	if (st->schema == STORE_SCHEMA_NONE)
	{
		/* DROP EXTENSION: what was in flight has no row to settle */
		forget_settles(st);
		return false;
	}
	store_lock_outbox();
	if (st->nsettles > 0)
		store_settle(st->schema, st->settles, st->nsettles,
					 grelout_keep_mode != GRELOUT_KEEP_OFF);
	if (st->schema == STORE_SCHEMA_1_1)
		health_step(st);

	/*
	 * No slot free: under 1.1 the claim may still start one request for
	 * each handler with due work and none in flight here, up to twice the
	 * concurrency in all (budget_free_slots).
	 */
	free_slots = budget_free_slots(grelout_concurrency,
								   http_engine_running(st->engine),
								   st->schema == STORE_SCHEMA_1_1, &extra);
	if (claim && free_slots > 0)
	{
		if (may_claim_after_restart(st->schema, released))
			claim_step(st, Min(grelout_batch_size, free_slots), extra);
		else
		{
			/* another relay is releasing the old leases: come back soon */
			st->claim_wanted = false;
			st->next_claim_at = ms_after(100);
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
	grelout_slot_extension(st->slot, false);
	ereport(st->extension_reported ? LOG : DEBUG1,
			(errmsg("grelout relay %d leaves database \"%s\", which has no grelout extension",
					st->relay, st->dbname)));
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
		grelout_slot_extension(st->slot, true);
		st->extension_reported = true;
	}
	if (ready != st->extension_ready)
	{
		ereport(LOG,
				(errmsg(ready ? "grelout relay %d found the grelout extension in database \"%s\", delivering" :
						"grelout relay %d is waiting for CREATE EXTENSION grelout in database \"%s\"",
						st->relay, st->dbname)));
		st->extension_ready = ready;
	}
	if (!ready)
	{
		st->claim_wanted = false;
		st->next_claim_at = ms_after(grelout_poll_interval);
		st->next_purge_at = ms_after(grelout_poll_interval);
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
		st->stats_flush_at = ms_after(wait_ms);
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
	st->failed_cycles = 0;
	st->looked = true;
	lease_recovery_done(st, released);
	note_extension(st, ready);
	claim_dead_report(st);
	health_committed(st);
	grelout_slot_count(st->slot, st->count_delivered, st->count_retried,
					   st->count_dead, http_engine_running(st->engine));
	forget_settles(st);
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

	MemoryContextSwitchTo(st->loop_cxt);
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
	MemoryContextSwitchTo(st->loop_cxt);
	pgstat_report_activity(STATE_IDLE, st->activity);
	abandon_lease_recovery(0, 0);
	drop_unstarted(st);
	st->claim_dead = NIL;
	foreach_disabled_undo(st);
	/* the settle counts stay with their queued outcomes */

	for (int i = 0; i < st->failed_cycles && pause < ERROR_BACKOFF_MAX_MS; i++)
		pause *= 2;
	pause = Min(pause, ERROR_BACKOFF_MAX_MS);
	st->failed_cycles++;
	st->retry_db_at = ms_after(pause);
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
		MemoryContextSwitchTo(st->loop_cxt);
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

/* start_claimed: send the requests whose claim has committed. */
static void
start_claimed(RelayState *st)
{
	while (st->to_start)
	{
		WebhookJob *job = st->to_start;

		st->to_start = job->next;
		job->started_us = now_ts();
		job_started(job);
		if (!http_engine_start(st->engine, &job->req))
		{
			job->req.result = CURLE_FAILED_INIT;
			finish_job(st, job);
		}
		else
			dlist_push_tail(&st->in_flight, &job->in_flight);
	}
}

/* collect_finished: decide the outcome of every finished request. */
static void
collect_finished(RelayState *st)
{
	HttpRequest *req;

	http_engine_perform(st->engine);
	while ((req = http_engine_next_done(st->engine)) != NULL)
	{
		WebhookJob *job = (WebhookJob *) req;

		dlist_delete(&job->in_flight);
		finish_job(st, job);
		st->last_finish_at = now_ts();
	}
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
											st->schema == STORE_SCHEMA_1_1);

	return !st->stopping && grelout_relay_enabled &&
		http_engine_running(st->engine) < limit;
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
	MonoTime	now = now_ts();

	if (now < st->retry_db_at)
		return false;
	/* the first cycle runs even while paused: it looks for the extension */
	return !st->looked || st->nsettles > 0 ||
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
	if (st->nsettles > 0)
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
		st->stop_deadline = ms_after(SHUTDOWN_GRACE_MS);
		set_activity(st, "stopping");
	}
	if (st->stats_pending && now_ts() >= st->stats_flush_at)
		report_stats(st);
}

/*
 * release_unfinished: queue the claims whose requests are still in flight
 * as released: pending again, due now, their attempt given back (the
 * endpoint may or may not have received them; they are sent again).
 */
static int
release_unfinished(RelayState *st)
{
	dlist_iter	iter;
	int			n = 0;

	dlist_foreach(iter, &st->in_flight)
	{
		WebhookJob *job = dlist_container(WebhookJob, in_flight, iter.cur);

		add_settle(st, job, SETTLE_RELEASE, 0, NULL);
		n++;
	}
	return n;
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
		(http_engine_running(st->engine) > 0 && now_ts() < st->stop_deadline))
		return;
	collect_finished(st);
	unfinished = release_unfinished(st);
	outcomes = st->nsettles - unfinished;
	if (st->nsettles > 0)
		settled = db_cycle(st, false);
	if (settled)
		ereport(LOG,
				(errmsg("grelout relay %d stopping with %d requests unfinished",
						st->relay, unfinished),
				 unfinished > 0 ?
				 errdetail("Their messages were handed back with their attempt and are sent again at once.") : 0));
	else
		ereport(LOG,
				(errmsg("grelout relay %d stopping with %d requests unfinished",
						st->relay, unfinished),
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
		else if (http_engine_running(st->engine) > 0)
			set_activity(st, "delivering");
		else
			set_activity(st, "idle");
	}
	grelout_slot_count(st->slot, 0, 0, 0, http_engine_running(st->engine));
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
	GreloutRelaySlot *slot = st->slot;
	bool		stop;

	SpinLockAcquire(&slot->mutex);
	st->relay = slot->relay;
	st->db = &grelout_shared->dbs[slot->db_entry];
	stop = slot->stop_requested;
	SpinLockRelease(&slot->mutex);
	SpinLockAcquire(&grelout_shared->mutex);
	strlcpy(st->dbname, st->db->name, sizeof(st->dbname));
	SpinLockRelease(&grelout_shared->mutex);
	recovery_db = st->db;
	return !stop && !grelout_aside_pending(slot->dboid);
}

/*
 * release_health: at exit, take this relay's requests and reservations out
 * of its handlers' shared in flight counts, and give back a probe it held
 * (a relay terminated mid-probe must not keep its breaker from probing).
 */
static void
release_health(int code, Datum arg)
{
	HASH_SEQ_STATUS seq;
	LocalHandler *lh;

	if (exiting_relay == NULL || exiting_relay->handlers == NULL)
		return;
	hash_seq_init(&seq, exiting_relay->handlers);
	while ((lh = hash_seq_search(&seq)) != NULL)
	{
		if (lh->entry == NULL)
			continue;
		health_unreserve(lh->entry, lh->counted + lh->reserved, lh->tokens);
		lh->counted = lh->reserved = lh->tokens = 0;
		health_release_probe(lh->entry);
	}
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

	st->slot = grelout_slot_attach(st->index);
	if (!relay_assignment(st))
		proc_exit(0);
	before_shmem_exit(abandon_lease_recovery, 0);
	{
		HASHCTL		info;

		memset(&info, 0, sizeof(info));
		info.keysize = GRELOUT_HANDLER_NAME_MAX + 1;
		info.entrysize = sizeof(LocalHandler);
		info.hcxt = TopMemoryContext;
		st->handlers = hash_create("grelout relay handlers", 64, &info,
								   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
		exiting_relay = st;
		before_shmem_exit(release_health, 0);
	}
	BackgroundWorkerInitializeConnectionByOid(st->slot->dboid, st->slot->roleoid, 0);
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

	st->loop_cxt = AllocSetContextCreate(TopMemoryContext, "grelout relay loop",
										 ALLOCSET_DEFAULT_SIZES);
	st->jobs_cxt = AllocSetContextCreate(TopMemoryContext, "grelout jobs",
										 ALLOCSET_DEFAULT_SIZES);
	st->settle_cxt = AllocSetContextCreate(TopMemoryContext, "grelout settles",
										   ALLOCSET_DEFAULT_SIZES);
	dlist_init(&st->in_flight);
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
					st->relay, st->dbname)));
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
		MemoryContextSwitchTo(st.loop_cxt);
		MemoryContextReset(st.loop_cxt);

		handle_signals(&st);
		collect_finished(&st);
		if (db_due(&st))
		{
			bool		committed = db_cycle(&st, may_claim(&st));

			plan_finish(&st, committed);
			start_claimed(&st);
		}
		stop_if_done(&st);
		show_activity(&st);
		wait_for_work(&st);
	}
}
