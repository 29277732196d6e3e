/*-------------------------------------------------------------------------
 *
 * budget.c
 *	  libFuzzer target: the claim budget (src/pure/budget.c) driven by a relay
 *	  simulated from the input: requests start and finish (answered or
 *	  not), time passes, breakers gate handlers, caps lower their limits,
 *	  and claims take what the budget allows.
 *
 * The input is a concurrency byte, then a handler count byte, then one
 * operation per byte pair (the first byte picks the operation and the
 * handler, the second is its argument).
 *
 * Invariants: a handler has a share exactly when it is busy and not
 * gated; a share is between 1 and concurrency, all of it for a lone busy
 * handler; beside other busy handlers a share is never above the
 * handler's window, and the handlers held below their window all get the
 * same share; the shares add up to at most concurrency plus busy - 1
 * (rounding); the shares do not depend on the handlers' order; a want is
 * within the claim's limit and the handler's share less its requests in
 * flight, and with no slot free it is one request for an idle handler
 * only; the lowest limit given holds; a window is never below its floor,
 * and an answer never opens it above concurrency; claims that keep to the
 * budget never put more than budget_most_running requests in flight.
 *
 *-------------------------------------------------------------------------
 */
#include "budget.h"
#include "fuzz.h"

#define MAX_HANDLERS	8

/* The simulated relay. */
typedef struct Sim
{
	int			concurrency;
	int			n;
	int			running;
	int64_t		now;
	BudgetHandler h[MAX_HANDLERS];
	bool		gate[MAX_HANDLERS];	/* gated in the next claim */
	int			cap[MAX_HANDLERS];	/* a cap's limit in the next claim; -1: none */
} Sim;

/* window_eff: a handler's window as the share reads it. */
static int
window_eff(const Sim *s, const BudgetHandler *h)
{
	int			floor = budget_window_floor(s->concurrency);

	return h->window > floor ? h->window : floor;
}

/* check_shares: the invariants of budget_share_out's shares and wants. */
static void
check_shares(const Sim *s, const BudgetClaim *c)
{
	int			busy = 0;
	int			sum = 0;
	int			held = -1;

	for (int i = 0; i < s->n; i++)
	{
		const BudgetHandler *h = &s->h[i];
		bool		is_busy = !h->gated &&
			(h->in_flight > 0 || h->busy_until > c->now);

		CHECK(is_busy == (h->share >= 0));
		CHECK(h->want >= 0 && h->want <= c->limit);
		if (c->extra)
			CHECK(h->want == (h->in_flight == 0 ? 1 : 0));
		if (!is_busy)
			continue;
		busy++;
		sum += h->share;
		CHECK(h->share >= 1 && h->share <= s->concurrency);
		if (!c->extra)
			CHECK(h->want <= (h->share > h->in_flight ? h->share - h->in_flight : 0));
		if (c->busy > 1)
		{
			CHECK(h->share <= window_eff(s, h));
			if (h->share < window_eff(s, h))
			{
				CHECK(held < 0 || held == h->share);
				held = h->share;
			}
		}
	}
	CHECK(busy == c->busy);
	if (busy == 1)
		CHECK(sum == s->concurrency);
	CHECK(sum <= s->concurrency + (busy > 0 ? busy - 1 : 0));
	if (c->extra)
		CHECK(c->default_limit == 1);
	else if (busy > 0)
		CHECK(c->default_limit ==
			  (c->limit < budget_window_floor(s->concurrency) ? c->limit :
			   budget_window_floor(s->concurrency)));
	else
		CHECK(c->default_limit == c->limit);
}

/* check_order: the same claim over the handlers reversed gives the same shares. */
static void
check_order(const Sim *s, const BudgetClaim *c)
{
	BudgetHandler copy[MAX_HANDLERS];
	BudgetHandler *rev[MAX_HANDLERS];
	BudgetClaim c2 = *c;

	for (int i = 0; i < s->n; i++)
	{
		copy[i] = s->h[i];
		rev[s->n - 1 - i] = &copy[i];
	}
	budget_share_out(&c2, rev, s->n);
	CHECK(c2.busy == c->busy && c2.default_limit == c->default_limit);
	for (int i = 0; i < s->n; i++)
		CHECK(copy[i].share == s->h[i].share && copy[i].want == s->h[i].want);
}

/* claim: one claim of up to batch deliveries, as the relay makes it. */
static void
claim(Sim *s, int batch)
{
	BudgetHandler *ptrs[MAX_HANDLERS];
	BudgetClaim c;
	bool		extra;
	int			free_slots = budget_free_slots(s->concurrency, s->running, true, &extra);
	int			left;

	if (extra)
		CHECK(s->running >= s->concurrency && free_slots == 2 * s->concurrency - s->running);
	else
		CHECK(free_slots == s->concurrency - s->running);
	if (free_slots <= 0)
		return;
	c.concurrency = s->concurrency;
	c.limit = batch < free_slots ? batch : free_slots;
	c.extra = extra;
	c.now = s->now;
	c.start_limit = 0;		/* adaptive limits: fuzz/limiter.c */
	for (int i = 0; i < s->n; i++)
	{
		budget_reset(&s->h[i]);
		s->h[i].gated = s->gate[i];
		ptrs[i] = &s->h[i];
	}
	budget_share_out(&c, ptrs, s->n);
	check_shares(s, &c);
	check_order(s, &c);

	/* the gates and the caps lower the limits; the lowest holds */
	for (int i = 0; i < s->n; i++)
	{
		BudgetHandler *h = &s->h[i];
		int			before = h->limited ? h->limit : -1;

		if (s->gate[i])
			budget_limit(h, h->want > 0 ? 1 : 0);
		if (s->cap[i] >= 0)
		{
			int			asked = budget_asked(h);
			int			got = s->cap[i] < asked ? s->cap[i] : asked;

			before = h->limited ? h->limit : -1;
			budget_limit(h, got);
			CHECK(h->limit == (before >= 0 && before < got ? before : got));
		}
		if (budget_needs_limit(h, &c))
			budget_limit(h, h->want);
	}

	/* the claim takes what each handler's limit allows, up to c.limit */
	left = c.limit;
	for (int i = 0; i < s->n && left > 0; i++)
	{
		BudgetHandler *h = &s->h[i];
		int			may = h->limited ? budget_remaining(h) : c.default_limit;
		int			take = may < left ? may : left;

		CHECK(!h->limited || budget_remaining(h) <= h->limit);
		for (int k = 0; k < take; k++)
			budget_started(h);
		h->claimed += take;
		s->running += take;
		left -= take;
		CHECK(!h->limited || budget_remaining(h) >= 0);
	}
	CHECK(s->running <= budget_most_running(s->concurrency, true));
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Sim			s;

	if (size < 2)
		return 0;
	memset(&s, 0, sizeof(s));
	s.concurrency = 1 + data[0] % 200;
	s.n = 1 + data[1] % MAX_HANDLERS;
	s.now = 1000000;
	for (int i = 0; i < MAX_HANDLERS; i++)
		s.cap[i] = -1;
	data += 2;
	size -= 2;
	for (; size >= 2; data += 2, size -= 2)
	{
		int			i = (data[0] >> 4) % s.n;
		int			arg = data[1];
		BudgetHandler *h = &s.h[i];

		switch (data[0] & 0x0f)
		{
			case 0:				/* a request of handler i finishes */
			case 1:
				if (h->in_flight == 0)
					break;
				budget_finished(h, (data[0] & 1) != 0, s.concurrency, s.now);
				s.running--;
				CHECK(h->window >= budget_window_floor(s.concurrency));
				if (data[0] & 1)
					CHECK(h->window <= s.concurrency);
				CHECK(h->in_flight >= 0);
				break;
			case 2:				/* time passes */
				s.now += (int64_t) arg * 1000;
				break;
			case 3:				/* the breaker gates, or stops gating */
				s.gate[i] = (arg & 1) != 0;
				break;
			case 4:				/* a cap, or none */
				s.cap[i] = (arg == 255) ? -1 : arg % 64;
				break;
			case 5:				/* a window as a reload left it */
				h->window = arg;
				break;
			default:			/* a claim of up to arg deliveries */
				claim(&s, 1 + arg);
				break;
		}
		CHECK(s.running >= 0);
	}
	return 0;
}
