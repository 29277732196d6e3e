/*-------------------------------------------------------------------------
 *
 * budget.c
 *	  The claim budget in plain C: which handlers one relay's claim may
 *	  take how many deliveries of (budget.h).
 *
 * Owns the arithmetic, none of the state: the fair share of a relay's
 * slots among its busy handlers, each handler's window of slots earned by
 * answers, the slots beyond concurrency when none is free, the share the
 * claim statement keeps for ordered handlers, and how the limits of the
 * breaker's gate and of the caps combine.  The shared counters those
 * limits come from are health.c's; claim_budget.c brings the two together.
 * Each handler's adaptive limit (limiter.c) bounds its want and its share;
 * and the open files a relay's slots need are counted here too.
 *
 *-------------------------------------------------------------------------
 */
#include "budget.h"

/* min_int: the smaller of two ints. */
static inline int
min_int(int a, int b)
{
	return a < b ? a : b;
}

/* max_int: the larger of two ints. */
static inline int
max_int(int a, int b)
{
	return a > b ? a : b;
}

/*
 * budget_window_floor: the least a handler's window can be
 * (BUDGET_WINDOW_FLOOR_DIV), at least one request.
 */
int
budget_window_floor(int concurrency)
{
	return max_int(1, concurrency / BUDGET_WINDOW_FLOOR_DIV);
}

/* budget_started: a request to the handler started. */
void
budget_started(BudgetHandler *h)
{
	h->in_flight++;
}

/*
 * budget_finished: a request to the handler is over (answered: a status
 * line came back, whatever it said).  It stays busy a moment longer; an
 * answer opens its window by one, up to concurrency, no answer halves it,
 * down to its floor.
 */
void
budget_finished(BudgetHandler *h, bool answered, int concurrency, int64_t now)
{
	int			floor = budget_window_floor(concurrency);
	int			window = max_int(h->window, floor);

	h->in_flight = max_int(h->in_flight - 1, 0);
	h->busy_until = now + BUDGET_BUSY_AFTER_US;
	if (answered)
		h->window = min_int(window + 1, concurrency);
	else
		h->window = max_int(window / 2, floor);
}

/*
 * budget_most_running: the requests a relay may have in flight before it
 * stops claiming.  Per handler (a 1.1 schema), a handler with nothing in
 * flight may get a slot beyond concurrency, up to twice it in all.
 */
int
budget_most_running(int concurrency, bool per_handler)
{
	return per_handler ? 2 * concurrency : concurrency;
}

/*
 * budget_free_slots: how many deliveries the next claim may take with
 * running requests in flight.  With no slot free, per handler, the claim
 * may still start one request for each handler with due work and nothing
 * in flight here (*extra), up to twice concurrency in all: a bad endpoint
 * holding every slot then delays nobody.  Zero or less: no claim.
 */
int
budget_free_slots(int concurrency, int running, bool per_handler, bool *extra)
{
	int			free_slots = concurrency - running;

	*extra = false;
	if (free_slots <= 0 && per_handler && running < 2 * concurrency)
	{
		*extra = true;
		free_slots = 2 * concurrency - running;
	}
	return free_slots;
}

/*
 * budget_ordered_first: of a claim of limit deliveries, what the claim
 * statement takes first while routing has a backlog and a handler is
 * ordered (BUDGET_ORDERED_DIV).
 */
int
budget_ordered_first(int limit)
{
	return max_int(1, limit / BUDGET_ORDERED_DIV);
}

/* budget_reset: forget the last claim's budget of a handler. */
void
budget_reset(BudgetHandler *h)
{
	h->gated = false;
	h->limited = false;
	h->claimed = 0;
}

/*
 * bound: the most a busy handler keeps of the slots beside other busy
 * ones: its window (at least floor), or its adaptive limit when lower.
 */
static int
bound(const BudgetHandler *h, int floor)
{
	int			window = max_int(h->window, floor);

	return h->adaptive > 0 ? min_int(window, h->adaptive) : window;
}

/*
 * share_slots: the fair share of each busy handler (share 0 on entry; the
 * others have -1): the relay's slots divided equally where one handler is
 * busy; where several are, a handler's share is bounded by its window (or
 * its adaptive limit, when lower) and what that leaves goes to the others
 * in equal parts (water filling: a pass fixes every handler whose bound is
 * below the equal share of the slots left, until a pass fixes none and
 * the rest get that share).
 */
static void
share_slots(BudgetHandler **handlers, int n, int concurrency, int busy)
{
	int			floor = budget_window_floor(concurrency);
	int			slots = concurrency;
	int			open = busy;
	bool		fixed = true;

	while (fixed && open > 0)
	{
		int			share = (slots + open - 1) / open;

		fixed = false;
		for (int i = 0; i < n; i++)
		{
			BudgetHandler *h = handlers[i];
			int			window = bound(h, floor);

			if (h->share != 0)
				continue;
			if (busy > 1 && window < share)
			{
				h->share = window;
				slots -= window;
				open--;
				fixed = true;
			}
		}
		if (fixed)
			continue;
		for (int i = 0; i < n; i++)
		{
			if (handlers[i]->share == 0)
				handlers[i]->share = share;
		}
	}
}

/*
 * fair_want: what the fair share lets a handler take in this claim.  A
 * busy handler its share less what it has in flight; beside busy ones, a
 * handler not busy its window; with none busy, the whole claim.
 */
static int
fair_want(const BudgetClaim *c, const BudgetHandler *h)
{
	if (h->share >= 0)
		return min_int(c->limit, max_int(h->share - h->in_flight, 0));
	if (c->busy > 0)
		return min_int(c->limit, max_int(h->window,
										 budget_window_floor(c->concurrency)));
	return c->limit;
}

/*
 * want: what a handler may take in this claim, before its gate and caps:
 * its fair want, and no more than its adaptive limit leaves over what it
 * has in flight.  With no slot free, one request if it has nothing in
 * flight, else none.
 */
static int
want(const BudgetClaim *c, const BudgetHandler *h)
{
	int			n;

	if (c->extra)
		return (h->in_flight > 0) ? 0 : 1;
	n = fair_want(c, h);
	if (h->adaptive > 0)
		n = min_int(n, max_int(h->adaptive - h->in_flight, 0));
	return n;
}

/*
 * budget_share_out: the fair share of the claim among the n handlers
 * (reset, their gates marked): counts the busy ones (requests in flight or
 * busy_until not past; a gated handler takes a probe at most and is not
 * counted, so the others share the slots its requests leave free), gives
 * each its share and want, and sets the default limit of the handlers
 * the relay has not seen: what a new one beside the busy ones gets, no
 * more than a new handler's adaptive limit (start_limit).
 */
void
budget_share_out(BudgetClaim *c, BudgetHandler **handlers, int n)
{
	c->busy = 0;
	for (int i = 0; i < n; i++)
	{
		BudgetHandler *h = handlers[i];

		h->share = -1;
		if (!h->gated && (h->in_flight > 0 || h->busy_until > c->now))
		{
			h->share = 0;
			c->busy++;
		}
	}
	share_slots(handlers, n, c->concurrency, c->busy);
	for (int i = 0; i < n; i++)
		handlers[i]->want = want(c, handlers[i]);
	if (c->extra)
		c->default_limit = 1;
	else if (c->busy > 0)
		c->default_limit = min_int(c->limit, budget_window_floor(c->concurrency));
	else
		c->default_limit = c->limit;
	if (!c->extra && c->start_limit > 0)
		c->default_limit = min_int(c->default_limit, c->start_limit);
}

/*
 * budget_limit: limit the handler to limit deliveries in this claim (the
 * breaker's gate, the caps): the lowest limit it is given holds.  Returns
 * true when this is its first limit of the claim.
 */
bool
budget_limit(BudgetHandler *h, int limit)
{
	if (!h->limited)
	{
		h->limited = true;
		h->limit = limit;
		return true;
	}
	h->limit = min_int(h->limit, limit);
	return false;
}

/* budget_asked: what to ask the caps for: its limit so far, or its want. */
int
budget_asked(const BudgetHandler *h)
{
	return h->limited ? h->limit : h->want;
}

/*
 * budget_needs_limit: once the gates and caps are applied, does a handler
 * without a limit want something other than the default?
 */
bool
budget_needs_limit(const BudgetHandler *h, const BudgetClaim *c)
{
	return !h->limited && h->want != c->default_limit;
}

/*
 * budget_remaining: a limited handler's limit less what this cycle's
 * statements have claimed of it so far (routing and the claim both take
 * deliveries), for the next statement of the cycle.
 */
int
budget_remaining(const BudgetHandler *h)
{
	return max_int(h->limit - h->claimed, 0);
}

/*
 * budget_next_token_at: with a rate of per_second requests a second
 * exhausted at now (us), when the next request's token comes, a
 * millisecond late rather than early.
 */
int64_t
budget_next_token_at(int64_t now, int per_second)
{
	return now + 1000000 / per_second + 1000;
}

/*
 * budget_earliest: the earlier of two wake-up times where 0 means none.
 */
int64_t
budget_earliest(int64_t wake_at, int64_t candidate)
{
	if (candidate > 0 && (wake_at == 0 || candidate < wake_at))
		return candidate;
	return wake_at;
}

/*
 * budget_files_needed: the open files a relay of concurrency slots may
 * use: two per request it may have in flight (budget_most_running: its
 * connection, and one kept open in libcurl's pool), and its own
 * (BUDGET_FILES_RESERVE).
 */
int64_t
budget_files_needed(int concurrency)
{
	return 2 * (int64_t) budget_most_running(concurrency, true) +
		BUDGET_FILES_RESERVE;
}

/*
 * budget_concurrency_for_files: the most slots a relay with an open-file
 * limit of files can use (the inverse of budget_files_needed), at least 1.
 */
int
budget_concurrency_for_files(int64_t files)
{
	int64_t		n = (files - BUDGET_FILES_RESERVE) / 4;

	if (n < 1)
		return 1;
	return n > INT32_MAX ? INT32_MAX : (int) n;
}
