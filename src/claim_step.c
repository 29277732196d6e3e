/*-------------------------------------------------------------------------
 *
 * claim_step.c
 *	  One cycle's route and claim, inside its transaction: route the
 *	  messages committed since the last cycle to their handlers and claim
 *	  due deliveries, within the claim's budget (claim_budget.c), queue
 *	  their requests (jobs.c) to start once the claim commits, and tell
 *	  the cycle when to claim again.
 *
 * Two statements take deliveries (store.h): routing (store_route), which
 * claims the deliveries of the messages it routes, as many as fit, so
 * that a delivery is written once; and the claim statement (store_claim),
 * which takes due deliveries, the heads of ordered keys among them, and
 * dead-letters lapsed claims without attempts left.  The claim statement
 * is not run while routing left new messages for want of slots: the
 * slots left are fewer than the next message needs, and the next settle,
 * as requests finish, comes back for it.  But while a handler is ordered
 * it runs first, at least every CLAIM_AT_LEAST_MS, with a share of the
 * slots (budget_ordered_first), and routing takes what is left: so a
 * backlog of new messages does not hold back the heads of ordered keys
 * (which only the claim statement takes), nor due retries.  Without an
 * ordered handler it does not (a claim walks the dead claim-index entries
 * of the deliveries routing claimed, which slows the fan-out drain:
 * bench/README.md), and due retries wait for the backlog of new messages
 * to be routed.  When routing claimed deliveries, the claim statement is
 * left to the next cycle, soon after (CLAIM_DEFER_MS), so that the
 * publisher's requests start without waiting for it.
 *
 *-------------------------------------------------------------------------
 */
#include "relay.h"

#include "common/pg_prng.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/*
 * While routing takes every free slot (a backlog of new messages) and a
 * handler is ordered, the claim statement still runs this often, first.
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
/*
 * When routing claimed deliveries of a publisher's commit, the claim
 * statement (due retries, lapsed leases, the heads of ordered keys, a
 * just-routed one among them) is left to a cycle at most this much later,
 * so that the routed requests start at the commit of a cycle without it:
 * the claim statement costs more than the routing (bench/README.md,
 * "Figures behind the relay's design").  A near endpoint's answer brings
 * that cycle sooner.
 */
#define CLAIM_DEFER_MS			2

/* A lapsed claim the claim dead-lettered, to log once the claim commits. */
typedef struct ClaimDead
{
	char	   *id;
	char	   *topic;
	char	   *handler;
	int			attempts;
	char	   *error;
} ClaimDead;

/* What the statements of one claim step did. */
typedef struct StepTaken
{
	int			claimed;		/* deliveries both statements took */
	bool		ahead;			/* routing ran */
	bool		full;			/* routing routed a whole batch */
	bool		cut;			/* routing left new messages for want of slots */
	bool		blocked;		/* a handler change held routing back */
	bool		deferred;		/* the claim statement was left to the next
								 * cycle (CLAIM_DEFER_MS) */
} StepTaken;

/* What the claim steps carry from one cycle to the next. */
static struct
{
	MonoTime	claim_overdue_at;	/* run the claim statement by then */
	bool		ahead_useful;	/* the last extra claim took a delivery */
	bool		woken;			/* the latch was set since the last claim */
	bool		deferred;		/* the last step left its claim statement to
								 * this one */
	bool		dry;			/* the last claim statement took nothing */
	MonoTime	next_due_read_at;	/* store_next_due_ms last read then */
	MonoTime	next_due_at;	/* what it said: 0 nothing due, or the time */
	List	   *claim_dead;		/* ClaimDead, in the loop's context */
} claim;

/* claim_step_woken: the latch was set (a publisher's commit, say). */
void
claim_step_woken(void)
{
	claim.woken = true;
}

/*
 * claimed_exhausted: a lapsed claim the claim dead-lettered (its last
 * attempt ended without an outcome); no request.  Its WARNING and count
 * wait until the claim commits (claim_step_committed): a claim rolled
 * back dead-lettered nothing.  A fan-out delivery's id goes to
 * *fanout_dead.
 */
static bool
claimed_exhausted(HeapTuple tup, TupleDesc desc, List **fanout_dead)
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
	claim.claim_dead = lappend(claim.claim_dead, cd);
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

/*
 * claim_step_committed: the claim committed: log its dead letters;
 * returns how many, for the relay's counts.
 */
int
claim_step_committed(void)
{
	ListCell   *lc;
	int			n = 0;

	foreach(lc, claim.claim_dead)
	{
		ClaimDead  *cd = lfirst(lc);

		jobs_log_dead(cd->id, cd->topic, cd->handler, cd->attempts,
					  cd->error ? cd->error : "no attempts left");
		n++;
	}
	claim.claim_dead = NIL;
	return n;
}

/* claim_step_failed: the claim rolled back: it dead-lettered nothing. */
void
claim_step_failed(void)
{
	claim.claim_dead = NIL;
}

/*
 * publish_claim_dead: the events of the deliveries the claim
 * dead-lettered (1.1); returns whether it published one.
 */
static bool
publish_claim_dead(void)
{
	ListCell   *lc;
	bool		published = false;

	if (relay_schema < STORE_SCHEMA_1_1)
		return false;
	foreach(lc, claim.claim_dead)
	{
		ClaimDead  *cd = lfirst(lc);

		if (jobs_publish_dead(cd->id, cd->topic, cd->handler, cd->attempts,
							  cd->error ? cd->error : "no attempts left"))
			published = true;
	}
	return published;
}

/*
 * route_step: route the messages committed since the last cycle (1.1), as
 * many as the claim may take (limit deliveries), claiming at once their
 * deliveries due to enabled handlers, up to claim_limit; adds to
 * t->claimed.  t->full says a whole batch was routed (more may be new),
 * t->cut that new messages were left because their deliveries no longer
 * fit in limit, t->blocked that a handler change in progress held routing
 * back (store_route).  Routing no more than can be claimed keeps a
 * delivery at one write, as in 1.0: routed and claimed together, rather
 * than routed now and claimed in a later cycle.
 */
static void
route_step(int limit, int claim_limit, int64 lease, const ClaimLimits *cl,
		   StepTaken *t)
{
	uint64		nrows;
	uint64		routed;
	SPITupleTable *tt;

	tt = store_route(relay_schema, limit, claim_limit,
					 Min(grelout_batch_size, relay_concurrency),
					 grelout_lease_duration, lease, cl, &nrows, &routed,
					 &t->cut, &t->blocked);
	for (uint64 i = 0; i < nrows; i++)
		jobs_queue(tt->vals[i], tt->tupdesc, lease);
	t->full = (routed >= (uint64) limit);
	t->claimed += (int) nrows;
}

/*
 * claim_rows: run the claim statement for up to limit deliveries and queue
 * their requests (a lapsed claim without attempts left is dead-lettered
 * instead, its fan-out message in *fanout_dead); *keyed when it took a
 * message with a key.  Returns how many rows it claimed.  The claim
 * statement is then not overdue for CLAIM_AT_LEAST_MS.  After a claim that
 * took nothing, the next one runs only if a due delivery exists
 * (store_claim_may_find): the cycles of a trickle (a settle, the next due
 * time's) mostly find nothing, and the probe costs a fraction of the
 * claim statement.
 */
static uint64
claim_rows(int limit, int64 lease, const ClaimLimits *cl, List **fanout_dead,
		   bool *keyed)
{
	uint64		nrows;
	SPITupleTable *tt;

	claim.claim_overdue_at = relay_ms_after(CLAIM_AT_LEAST_MS);
	if (claim.dry && !store_claim_may_find(relay_schema))
		return 0;
	tt = store_claim(relay_schema, limit, grelout_lease_duration, lease,
					 grelout_max_attempts, grelout_dead_letter, cl, &nrows);
	claim.dry = (nrows == 0);
	for (uint64 i = 0; i < nrows; i++)
	{
		bool		isnull;

		if (claimed_exhausted(tt->vals[i], tt->tupdesc, fanout_dead))
			continue;
		(void) SPI_getbinval(tt->vals[i], tt->tupdesc, CLAIM_KEY, &isnull);
		if (!isnull)
			*keyed = true;
		jobs_queue(tt->vals[i], tt->tupdesc, lease);
	}
	return nrows;
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
route_ahead(void)
{
	return claim.woken || claim.ahead_useful ||
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
next_due(void)
{
	MonoTime	now = relay_now();
	MonoTime	due;

	if (claim.next_due_read_at == 0 ||
		now - claim.next_due_read_at >= NEXT_DUE_EVERY_MS * INT64CONST(1000) ||
		(claim.next_due_at > 0 && claim.next_due_at <= now))
	{
		int64		ms = store_next_due_ms(relay_schema);

		claim.next_due_read_at = now;
		claim.next_due_at = (ms >= 0) ? now + ms * 1000 : 0;
		return claim.next_due_at;
	}
	due = claim.next_due_read_at + NEXT_DUE_EVERY_MS * INT64CONST(1000);
	if (claim.next_due_at > 0 && claim.next_due_at < due)
		due = claim.next_due_at;
	return jobs_earliest_retry(now, due);
}

/*
 * claim_limits: what the claim may take of each handler: its budget under
 * 1.1; under 1.0, limit deliveries of any.
 */
static void
claim_limits(int limit, bool extra, ClaimLimits *cl)
{
	if (relay_schema >= STORE_SCHEMA_1_1)
		claim_budget_make(limit, extra, cl);
	else
	{
		cl->default_lim = limit;
		cl->names = store_text_array(NIL);
		cl->lims = store_int_array(NULL, 0);
	}
}

/*
 * defer_claim: whether to leave the claim statement to the next cycle:
 * routing claimed deliveries (new messages: their requests are the ones a
 * publisher waits for) and the last step did not defer it already, so
 * that under a stream of commits it still runs every other cycle at least.
 */
static bool
defer_claim(const StepTaken *t)
{
	return t->ahead && t->claimed > 0 && !claim.deferred;
}

/*
 * take: run the step's statements for up to limit deliveries (extra: no
 * slot free): the claim statement first when it is overdue and a handler
 * is ordered, then routing, then the claim statement for the slots left
 * unless routing was cut or the claim statement ran already.  With no
 * slot free, routing claims nothing and routes a whole batch ahead, when
 * that may find a handler with nothing in flight (route_ahead); the claim
 * statement then takes one delivery of each handler with none in flight.
 */
static void
take(int limit, bool extra, int64 lease, StepTaken *t, ClaimResult *r)
{
	ClaimLimits cl;
	List	   *fanout_dead = NIL;
	uint64		first = 0;

	claim_limits(limit, extra, &cl);
	if (relay_now() >= claim.claim_overdue_at &&
		relay_schema >= STORE_SCHEMA_1_1 && store_any_ordered_handler())
		first = claim_rows(budget_ordered_first(limit), lease, &cl,
						   &fanout_dead, &r->keyed);
	t->claimed = (int) first;

	t->ahead = !extra || route_ahead();
	claim.woken = false;
	if (t->ahead)
	{
		claim_budget_left(&cl);
		route_step(extra ? grelout_batch_size : limit,
				   extra ? 0 : limit - t->claimed, lease, &cl, t);
	}
	if (t->claimed < limit && !t->cut && first == 0)
	{
		if (defer_claim(t))
			t->deferred = true;
		else
		{
			claim_budget_left(&cl);
			t->claimed += (int) claim_rows(limit - t->claimed, lease, &cl,
										   &fanout_dead, &r->keyed);
		}
	}
	claim.deferred = t->deferred;
	if (extra)
		claim.ahead_useful = (t->claimed > 0);
	r->events = publish_claim_dead();
	/* a fan-out delivery dead-lettered here may have been its message's last */
	if (fanout_dead != NIL)
		store_finalize_fanout(fanout_dead, grelout_keep_mode != GRELOUT_KEEP_OFF);
}

/*
 * schedule: when to claim again.  A full batch (routed or claimed) means
 * more may be new or due: at once.  Otherwise by the next due delivery
 * (or lease), or the poll interval.  Routing cut for want of slots waits
 * for requests to finish: their settle's cycle claims again.
 */
static void
schedule(int limit, bool extra, const StepTaken *t, ClaimResult *r)
{
	TimestampTz wake_at = claim_budget_wake_at();

	r->again = !t->cut && (t->full || t->claimed >= limit);
	r->next_at = relay_ms_after(grelout_poll_interval);
	if (t->deferred)
	{
		/*
		 * The claim statement left to the next cycle runs soon; that
		 * cycle reads the next due time (not this one: the publisher's
		 * requests wait for this cycle's commit).
		 */
		r->next_at = relay_ms_after(CLAIM_DEFER_MS);
	}
	else if (!r->again && !t->cut)
	{
		MonoTime	due = next_due();

		if (due > 0)
			r->next_at = Min(r->next_at, due);
	}
	/* the slots may get stuck: then come back to route ahead */
	if (extra && !t->ahead)
		r->next_at = Min(r->next_at,
						 jobs_last_finish() + STUCK_AFTER_MS * INT64CONST(1000));
	/* new messages wait for a handler change to commit: come back soon */
	if (t->blocked)
		r->next_at = Min(r->next_at, relay_ms_after(ROUTE_RETRY_MS));
	/* a breaker's probe time, a pause's end, a rate's next token */
	if (wake_at > 0)
	{
		long		ms = (long) Max((wake_at - GetCurrentTimestamp() + 999) / 1000, 0);

		r->next_at = Min(r->next_at, relay_ms_after(ms));
	}
}

/*
 * claim_step: route new messages, claim up to limit deliveries (extra: no
 * slot free) and build their requests, to be started once the claim
 * commits; *r says when to claim again and whether the claim took a
 * message with a key or published events.
 */
void
claim_step(int limit, bool extra, ClaimResult *r)
{
	StepTaken	t;
	int64		lease;

	memset(&t, 0, sizeof(t));
	memset(r, 0, sizeof(*r));
	if (!pg_strong_random(&lease, sizeof(lease)))
		lease = (int64) pg_prng_uint64(&pg_global_prng_state);
	take(limit, extra, lease, &t, r);
	/*
	 * Short of room: the relay took all it had room for, routed a whole
	 * batch (more may be new: an ordered handler's backlog claims a key at
	 * a time, so routing is where it shows), or routing left new messages
	 * for want of room.
	 */
	r->short_of_room = t.cut || t.full || t.claimed >= limit;
	r->deferred = t.deferred;
	/* after the claim, with a newer snapshot: never older than its rows */
	handler_auth_refresh();
	schedule(limit, extra, &t, r);
}
