/*-------------------------------------------------------------------------
 *
 * claim_budget.c
 *	  The relay's record of each handler it sends to (LocalHandler, 1.1),
 *	  and the claim's budget over them: how many deliveries of each handler
 *	  one cycle's routing and claim may take (ClaimLimits).
 *
 * The arithmetic is budget.c's, in plain C: the fair share of the relay's
 * slots, the windows earned by answers, the default of a handler not seen
 * yet.  This file brings it together with what lives in shared memory
 * (health.c): the breaker's gate and pauses, which give a handler nothing
 * or one probe, and the caps over all relays (max_in_flight and
 * max_per_second), reserved before the claim and given back after it, as
 * far as it did not use them, and at exit.
 *
 *	- Adaptive limit (limiter.c, issue 32): each handler's requests in
 *	  flight here stay within a limit its answers teach, grown while they
 *	  come timely and healthy, cut on timeouts, 5xx, 429 and latency well
 *	  above the endpoint's recent least; between 1 and the relay's bound
 *	  (relay_concurrency) or the handler's max_in_flight.  The sum of the
 *	  relays' limits of a handler is shown in its health entry (metrics).
 *	- Fair share: a handler busy here (requests in flight, or a moment ago)
 *	  gets at most concurrency / (busy handlers) in flight, bounded by its
 *	  window while others are busy too, and a handler not busy beside busy
 *	  ones at most its window; the claim hands out the free slots round
 *	  robin over the handlers with due work.  When no slot is free (extra),
 *	  a handler with nothing in flight here still gets one request, so a
 *	  bad endpoint holding every slot delays nobody (in flight stays at
 *	  most concurrency plus one per such handler, never above twice it).
 *	- Breaker and pause (health_gate): nothing while open or paused, one
 *	  probe when its time has come.
 *	- Caps (health_reserve): max_in_flight over all relays and
 *	  max_per_second, reserved in shared memory before the claim and given
 *	  back after it (claim_budget_close) as far as unused.
 *
 *-------------------------------------------------------------------------
 */
#include "relay.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* LocalHandler by name, for the life of the relay */
static HTAB *handlers = NULL;

/* The handlers with a limit of their own in the current claim, in order */
static List *limited = NIL;

/* A breaker's probe time, a pause's end, a rate's next token; 0: none */
static TimestampTz wake_at = 0;

/*
 * show_limit: count the handler's adaptive limit, as it is now, in its
 * shared entry's sum over the relays (grelout.metrics()).
 */
static void
show_limit(LocalHandler *lh)
{
	int			limit = limiter_limit(&lh->limiter);

	if (lh->entry != NULL && limit != lh->shown_limit)
		health_add_limit(lh->entry, limit - lh->shown_limit);
	lh->shown_limit = limit;
}

/* ceiling: the most a handler's adaptive limit may reach. */
static int
ceiling(const LocalHandler *lh)
{
	if (lh->max_in_flight > 0)
		return Min(lh->max_in_flight, relay_concurrency);
	return relay_concurrency;
}

/*
 * local_handler: the relay's record of a handler, made on first sight with
 * its shared health entry.
 */
LocalHandler *
local_handler(const char *name)
{
	char		key[GRELOUT_HANDLER_NAME_MAX + 1];
	LocalHandler *lh;
	bool		found;

	memset(key, 0, sizeof(key));
	strlcpy(key, name, sizeof(key));
	lh = hash_search(handlers, key, HASH_ENTER, &found);
	if (!found)
	{
		memset((char *) lh + sizeof(lh->name), 0, sizeof(LocalHandler) - sizeof(lh->name));
		lh->entry = health_entry(MyDatabaseId, key, true);
		limiter_clamp(&lh->limiter, relay_concurrency);
		show_limit(lh);
	}
	return lh;
}

/*
 * local_handler_started: count a started request in its handler's in
 * flight, here and over all relays (unless its claim reserved it there
 * already).
 */
void
local_handler_started(WebhookJob *job)
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
 * local_handler_finished: a request is over; not in flight any more.  An
 * answer (a status line, whatever it said) opens its handler's window, no
 * answer halves it; its latency and status teach the handler's adaptive
 * limit (limiter_sample), unless it never left the relay (no OAuth2 token,
 * no time left, libcurl refused it): that says nothing of the endpoint's
 * congestion.
 */
void
local_handler_finished(WebhookJob *job, bool answered, long status)
{
	LocalHandler *lh = job->local;
	LimiterSample s;

	if (lh == NULL)
		return;
	s.started = job->started_us;
	s.finished = relay_now();
	s.answered = answered;
	s.status = status;
	s.in_flight = lh->budget.in_flight;
	s.unseen = relay_unseen_us();
	if (!job->unsent)
		(void) limiter_sample(&lh->limiter, &s, ceiling(lh));
	show_limit(lh);
	budget_finished(&lh->budget, answered, relay_concurrency, s.finished);
	if (job->counted && lh->entry != NULL)
	{
		health_add_in_flight(lh->entry, -1);
		lh->counted = Max(lh->counted - 1, 0);
		job->counted = false;
	}
}

/*
 * release_health: at exit, take this relay's requests and reservations out
 * of its handlers' shared in flight counts, and its adaptive limits out of
 * their sums, and give back a probe it held
 * (a relay terminated mid-probe must not keep its breaker from probing).
 */
static void
release_health(int code, Datum arg)
{
	HASH_SEQ_STATUS seq;
	LocalHandler *lh;

	if (handlers == NULL)
		return;
	hash_seq_init(&seq, handlers);
	while ((lh = hash_seq_search(&seq)) != NULL)
	{
		if (lh->entry == NULL)
			continue;
		health_unreserve(lh->entry, lh->counted + lh->reserved, lh->tokens);
		health_add_limit(lh->entry, -lh->shown_limit);
		lh->counted = lh->reserved = lh->tokens = lh->shown_limit = 0;
		health_release_probe(lh->entry);
	}
}

/*
 * claim_budget_init: the table of handler records, and their release at
 * exit.
 */
void
claim_budget_init(void)
{
	HASHCTL		info;

	memset(&info, 0, sizeof(info));
	info.keysize = GRELOUT_HANDLER_NAME_MAX + 1;
	info.entrysize = sizeof(LocalHandler);
	info.hcxt = TopMemoryContext;
	handlers = hash_create("grelout relay handlers", 64, &info,
						   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	before_shmem_exit(release_health, 0);
}

/*
 * limit_handler: limit a handler to lim deliveries in the current claim;
 * a handler's first limit puts it in the claim's list.
 */
static void
limit_handler(LocalHandler *lh, int lim)
{
	if (budget_limit(&lh->budget, lim))
	{
		MemoryContext old = MemoryContextSwitchTo(RelayLoopContext);

		limited = lappend(limited, lh);
		MemoryContextSwitchTo(old);
	}
}

/*
 * claim_budget_left: the limits of the handlers in the claim's list, less
 * what this cycle's statements have claimed of them so far, for the next
 * statement of the cycle (routing and the claim both take deliveries).
 */
void
claim_budget_left(ClaimLimits *cl)
{
	ListCell   *lc;
	int		   *lims;
	int			n = 0;

	if (relay_schema < STORE_SCHEMA_1_1)
		return;
	lims = palloc(sizeof(int) * Max(list_length(limited), 1));
	foreach(lc, limited)
	{
		LocalHandler *lh = lfirst(lc);

		lims[n++] = budget_remaining(&lh->budget);
	}
	cl->lims = store_int_array(lims, n);
}

/*
 * begin_budget: forget the last claim's budget and reservations, and the
 * handlers' caps (apply_caps reads them again); give each its adaptive
 * limit; mark the handlers whose breaker is not closed, or that are
 * paused.  Returns their names.
 */
static List *
begin_budget(TimestampTz now)
{
	HASH_SEQ_STATUS seq;
	LocalHandler *lh;
	List	   *gated;
	ListCell   *lc;

	limited = NIL;
	wake_at = 0;
	hash_seq_init(&seq, handlers);
	while ((lh = hash_seq_search(&seq)) != NULL)
	{
		budget_reset(&lh->budget);
		lh->reserved = lh->tokens = 0;
		lh->probe = false;
		lh->max_in_flight = 0;
		limiter_clamp(&lh->limiter, relay_concurrency);
		show_limit(lh);
		lh->budget.adaptive = limiter_limit(&lh->limiter);
	}
	gated = health_restricted(MyDatabaseId, now);
	foreach(lc, gated)
		local_handler((char *) lfirst(lc))->budget.gated = true;
	return gated;
}

/*
 * share_out: the fair share of the claim among every handler seen so far
 * (budget_share_out), into *bc.
 */
static void
share_out(BudgetClaim *bc)
{
	HASH_SEQ_STATUS seq;
	LocalHandler *lh;
	BudgetHandler **all;
	int			n = 0;

	all = palloc(sizeof(BudgetHandler *) * Max(hash_get_num_entries(handlers), 1));
	hash_seq_init(&seq, handlers);
	while ((lh = hash_seq_search(&seq)) != NULL)
		all[n++] = &lh->budget;
	budget_share_out(bc, all, n);
	pfree(all);
}

/*
 * apply_gates: a gated handler gets what its breaker or pause allows
 * (health_gate): nothing, or one probe when its time has come.
 */
static void
apply_gates(List *gated, TimestampTz now)
{
	ListCell   *lc;

	foreach(lc, gated)
	{
		LocalHandler *lh = local_handler((char *) lfirst(lc));
		TimestampTz wake = 0;
		bool		probe;
		int			got;

		if (lh->entry == NULL)
			continue;
		got = health_gate(lh->entry, lh->budget.want, now, &probe, &wake);
		lh->probe = probe;
		limit_handler(lh, got);
		wake_at = budget_earliest(wake_at, wake);
	}
}

/*
 * apply_caps: reserve what each capped handler asks for within its caps
 * over all relays (health_reserve), and limit it to that; its adaptive
 * limit grows no higher than its max_in_flight.  A handler seen here for
 * the first time has no want yet: it asks for nothing this claim.
 */
static void
apply_caps(TimestampTz now)
{
	ListCell   *lc;

	foreach(lc, store_handler_caps(grelout_max_in_flight))
	{
		HandlerCaps *c = lfirst(lc);
		LocalHandler *lh = local_handler(c->name);
		int			asked;

		lh->max_in_flight = c->max_in_flight;
		limiter_clamp(&lh->limiter, ceiling(lh));
		show_limit(lh);
		if (lh->entry == NULL)
			continue;
		asked = budget_asked(&lh->budget);
		lh->reserved = health_reserve(lh->entry, asked, c->max_in_flight,
									  c->max_per_second, now);
		lh->tokens = (c->max_per_second > 0) ? lh->reserved : 0;
		limit_handler(lh, lh->reserved);
		if (c->max_per_second > 0 && lh->reserved < asked)
			wake_at = budget_earliest(wake_at,
									  budget_next_token_at(now, c->max_per_second));
	}
}

/*
 * claim_budget_make: how many deliveries of each handler the cycle's
 * routing and claim may take, over limit deliveries in all (extra: no slot
 * free), into *cl: the fair share, then the gates, then the caps; the
 * handlers left whose want is not the default get a limit of their own.
 */
void
claim_budget_make(int limit, bool extra, ClaimLimits *cl)
{
	TimestampTz now = GetCurrentTimestamp();
	HASH_SEQ_STATUS seq;
	LocalHandler *lh;
	BudgetClaim bc;
	List	   *gated;
	List	   *names = NIL;
	ListCell   *lc;

	gated = begin_budget(now);
	bc.concurrency = relay_concurrency;
	bc.start_limit = Min(LIMITER_START, relay_concurrency);
	bc.limit = limit;
	bc.extra = extra;
	bc.now = relay_now();
	share_out(&bc);
	apply_gates(gated, now);
	apply_caps(now);

	cl->default_lim = bc.default_limit;
	hash_seq_init(&seq, handlers);
	while ((lh = hash_seq_search(&seq)) != NULL)
	{
		if (budget_needs_limit(&lh->budget, &bc))
			limit_handler(lh, lh->budget.want);
	}
	foreach(lc, limited)
		names = lappend(names, ((LocalHandler *) lfirst(lc))->name);
	cl->names = store_text_array(names);
	claim_budget_left(cl);
}

/*
 * claim_budget_wake_at: when the claim should run again for a gated or
 * rate-limited handler (a probe's time, a pause's end, a rate's next
 * token); 0: none.
 */
TimestampTz
claim_budget_wake_at(void)
{
	return wake_at;
}

/*
 * mark_claimed: the jobs a committed claim took (the list from claimed
 * on) use its reservations: counted in flight by them, and the breaker's
 * probe.
 */
static void
mark_claimed(WebhookJob *claimed)
{
	for (WebhookJob *job = claimed; job; job = job->next)
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

/*
 * claim_budget_close: after the cycle, mark its claimed jobs, then give
 * back what the claim reserved and did not use.  When the cycle failed
 * nothing was claimed (its jobs are dropped): everything goes back.
 */
void
claim_budget_close(WebhookJob *claimed, bool committed)
{
	ListCell   *lc;

	if (committed)
		mark_claimed(claimed);
	foreach(lc, limited)
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
	limited = NIL;
}
