/*-------------------------------------------------------------------------
 *
 * test_budget.c
 *	  Unit tests of src/pure/budget.c, the claim budget: the window of slots a
 *	  handler earns by answers, the fair share of a relay's slots among its
 *	  busy handlers (water filling), what each handler and a handler not
 *	  seen yet may take, the slots beyond concurrency when none is free,
 *	  the claim statement's share for ordered handlers, and how the limits
 *	  of gates and caps combine; the bound of each handler's adaptive limit
 *	  (issue 32) and the open files of a relay's slots.  The cases of the TAP tests 120 (fair
 *	  slots), 126 (slow start) and 131 (ordered backlog) are here as
 *	  arithmetic.  Prints TAP.
 *
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include "budget.h"
#include "tap.h"

#define NOW			INT64_C(1000000000)

/* handler: a handler with in_flight requests and the given window. */
static BudgetHandler
handler(int in_flight, int window)
{
	BudgetHandler h;

	memset(&h, 0, sizeof(h));
	h.in_flight = in_flight;
	h.window = window;
	return h;
}

/* claim: a claim of limit deliveries over concurrency slots, at NOW. */
static BudgetClaim
claim(int concurrency, int limit, bool extra)
{
	BudgetClaim c;

	memset(&c, 0, sizeof(c));
	c.concurrency = concurrency;
	c.limit = limit;
	c.extra = extra;
	c.now = NOW;
	return c;
}

/* share_out: reset the n handlers and share the claim out among them. */
static void
share_out(BudgetClaim *c, BudgetHandler *hs, int n)
{
	BudgetHandler *ptrs[16];

	for (int i = 0; i < n; i++)
	{
		budget_reset(&hs[i]);
		ptrs[i] = &hs[i];
	}
	budget_share_out(c, ptrs, n);
}

/* test_windows: a window opens by answers and halves without them. */
static void
test_windows(void)
{
	BudgetHandler h = handler(1, 0);

	is_int(budget_window_floor(10), 1, "floor: concurrency 10 -> 1");
	is_int(budget_window_floor(5), 1, "floor: at least one request");
	is_int(budget_window_floor(100), 10, "floor: concurrency 100 -> 10");
	is_int(budget_window_floor(25), 2, "floor: concurrency 25 -> 2");

	budget_finished(&h, true, 10, NOW);
	is_int(h.window, 2, "a new handler's first answer: floor + 1");
	is_int(h.in_flight, 0, "not in flight any more");
	is_int(h.busy_until, NOW + 100000, "busy 100 ms after it finished");
	budget_finished(&h, true, 10, NOW);
	is_int(h.in_flight, 0, "in flight never below zero");
	for (int i = 0; i < 20; i++)
		budget_finished(&h, true, 10, NOW);
	is_int(h.window, 10, "answers open the window up to concurrency");
	budget_finished(&h, false, 10, NOW);
	is_int(h.window, 5, "no answer halves it");
	budget_finished(&h, false, 10, NOW);
	is_int(h.window, 2, "and again");
	budget_finished(&h, false, 10, NOW);
	is_int(h.window, 1, "down to the floor");
	budget_finished(&h, false, 10, NOW);
	is_int(h.window, 1, "never below it");

	h = handler(1, 0);
	budget_finished(&h, false, 10, NOW);
	is_int(h.window, 1, "a new handler that never answered: the floor");
	h = handler(1, 40);
	budget_finished(&h, false, 100, NOW);
	is_int(h.window, 20, "concurrency 100: halved from 40 to 20");
	h = handler(1, 12);
	budget_finished(&h, false, 100, NOW);
	is_int(h.window, 10, "concurrency 100: never below its floor of 10");

	h = handler(0, 0);
	budget_started(&h);
	budget_started(&h);
	is_int(h.in_flight, 2, "started requests count in flight");
}

/* test_busy: in flight, or finished less than 100 ms ago. */
static void
test_busy(void)
{
	BudgetHandler hs[3];
	BudgetClaim c = claim(10, 10, false);

	hs[0] = handler(0, 10);
	hs[0].busy_until = NOW + 1;
	hs[1] = handler(0, 10);
	hs[1].busy_until = NOW;
	hs[2] = handler(3, 10);
	share_out(&c, hs, 3);
	is_int(c.busy, 2, "busy: requests in flight, or busy_until still ahead");
	is_int(hs[1].share, -1, "busy_until reached: not busy, no share");
	is_int(hs[0].share, 5, "two busy handlers with open windows: half each");
	is_int(hs[2].share, 5, "the other half");
	is_int(hs[2].want, 2, "its want: its share less its requests in flight");
	is_int(hs[1].want, 10, "a handler not busy beside busy ones: its window");
	is_int(c.default_limit, 1, "a handler not seen yet beside busy ones: the floor");
}

/* test_water_filling: a share bounded by the window, the rest to the others. */
static void
test_water_filling(void)
{
	BudgetHandler hs[3];
	BudgetClaim c = claim(10, 10, false);

	hs[0] = handler(1, 1);
	hs[1] = handler(1, 20);
	hs[2] = handler(1, 20);
	share_out(&c, hs, 3);
	is_int(hs[0].share, 1, "windows 1, 20, 20: the first gets its window");
	is_int(hs[1].share, 5, "the others share the 9 left (rounded up)");
	is_int(hs[2].share, 5, "both of them");

	hs[0] = handler(1, 20);
	hs[1] = handler(1, 3);
	hs[2] = handler(1, 2);
	share_out(&c, hs, 3);
	is_int(hs[2].share, 2, "windows 20, 3, 2: the 2 is fixed in the first pass");
	is_int(hs[1].share, 3, "so is the 3 (below 10 / 3 rounded up)");
	is_int(hs[0].share, 5, "the open window gets the 5 left");

	hs[0] = handler(1, 0);
	hs[1] = handler(1, 0);
	hs[2] = handler(1, 0);
	share_out(&c, hs, 3);
	is_int(hs[0].share + hs[1].share + hs[2].share, 3,
		   "three new handlers, all busy: each at its floor");

	hs[0] = handler(2, 1);
	share_out(&c, hs, 1);
	is_int(hs[0].share, 10, "one busy handler gets every slot, whatever its window");
	is_int(hs[0].want, 8, "less its requests in flight");

	c = claim(10, 3, false);
	hs[0] = handler(0, 10);
	hs[0].busy_until = NOW + 50000;
	share_out(&c, hs, 1);
	is_int(hs[0].want, 3, "no more than the claim's limit");
}

/* test_idle: no handler busy. */
static void
test_idle(void)
{
	BudgetHandler hs[2];
	BudgetClaim c = claim(10, 7, false);

	hs[0] = handler(0, 0);
	hs[1] = handler(0, 10);
	share_out(&c, hs, 2);
	is_int(c.busy, 0, "nothing in flight: none busy");
	is_int(hs[0].want, 7, "every handler may take the whole claim");
	is_int(c.default_limit, 7, "so may a handler not seen yet");
	ok(!budget_needs_limit(&hs[0], &c), "which needs no limit of its own");
}

/* test_gated: a gated handler is not counted busy. */
static void
test_gated(void)
{
	BudgetHandler hs[2];
	BudgetHandler *ptrs[2] = {&hs[0], &hs[1]};
	BudgetClaim c = claim(10, 10, false);

	hs[0] = handler(5, 10);
	hs[1] = handler(2, 10);
	budget_reset(&hs[0]);
	budget_reset(&hs[1]);
	hs[0].gated = true;
	budget_share_out(&c, ptrs, 2);
	is_int(c.busy, 1, "a gated handler is not busy");
	is_int(hs[0].share, -1, "it has no share");
	is_int(hs[1].share, 10, "the other takes every slot");
	is_int(hs[1].want, 8, "less its own in flight");
	is_int(hs[0].want, 10, "the gated one wants its window (its gate decides)");
	ok(budget_limit(&hs[0], 1), "the gate's probe: its first limit");
	is_int(budget_asked(&hs[0]), 1, "the caps are asked for the probe only");
	budget_reset(&hs[0]);
	ok(!hs[0].gated && !hs[0].limited, "reset: neither gated nor limited");
}

/* test_fair_slots: test/t/120 as arithmetic (a hanging A, then B). */
static void
test_fair_slots(void)
{
	BudgetHandler hs[2];
	BudgetClaim c;
	bool		extra;
	int			free_slots;

	/* A holds all 10 slots: no slot free, but one for a handler with none */
	free_slots = budget_free_slots(10, 10, true, &extra);
	ok(extra, "120: every slot held: extra slots");
	is_int(free_slots, 10, "up to twice concurrency in all");
	c = claim(10, free_slots, extra);
	hs[0] = handler(10, 10);
	hs[1] = handler(0, 2);
	share_out(&c, hs, 2);
	is_int(hs[0].want, 0, "120: A, holding the slots, gets nothing more");
	is_int(hs[1].want, 1, "120: B, nothing in flight, gets one request");
	is_int(c.default_limit, 1, "120: so does a handler not seen yet");
	ok(budget_needs_limit(&hs[0], &c), "A needs its limit of 0 listed");
	ok(!budget_needs_limit(&hs[1], &c), "B takes the default");

	/* B's request started: B has one in flight too */
	free_slots = budget_free_slots(10, 11, true, &extra);
	is_int(free_slots, 9, "120: 11 in flight: 9 more at most");
	hs[1] = handler(1, 2);
	c = claim(10, free_slots, extra);
	share_out(&c, hs, 2);
	is_int(hs[0].want + hs[1].want, 0, "120: neither A nor B gets another");

	free_slots = budget_free_slots(10, 20, true, &extra);
	ok(free_slots <= 0 && !extra, "120: never above twice concurrency");
	is_int(budget_most_running(10, true), 20, "claims stop at twice concurrency");
	free_slots = budget_free_slots(10, 10, false, &extra);
	ok(free_slots <= 0 && !extra, "1.0 schema: no extra slots");
	is_int(budget_most_running(10, false), 10, "1.0 schema: claims stop at concurrency");
	free_slots = budget_free_slots(10, 4, true, &extra);
	ok(free_slots == 6 && !extra, "slots free: the free ones, no extra");

	/* B done: A alone busy again takes every slot */
	hs[0] = handler(0, 1);
	hs[0].busy_until = NOW + 1;
	hs[1] = handler(0, 2);
	c = claim(10, 10, false);
	share_out(&c, hs, 2);
	is_int(hs[0].want, 10, "120: B done, A (its window at the floor) takes every slot");

	/* A holds 9, one slot free: A and B each may take it */
	hs[0] = handler(9, 10);
	hs[1] = handler(0, 10);
	c = claim(10, 1, false);
	share_out(&c, hs, 2);
	is_int(hs[0].want, 1, "one slot free: A's share (all 10) leaves it one");
	is_int(hs[1].want, 1, "B beside busy A: its window, within the claim");
}

/* test_slow_start: test/t/126 as arithmetic (hanging G beside busy H). */
static void
test_slow_start(void)
{
	BudgetHandler hs[2];
	BudgetClaim c = claim(10, 10, false);

	/* G: timed out (no answer), window at its floor; H answers */
	hs[0] = handler(1, 0);
	budget_finished(&hs[0], false, 10, NOW - 1000);
	budget_started(&hs[0]);
	hs[1] = handler(6, 0);
	for (int i = 0; i < 20; i++)
		budget_finished(&hs[1], true, 10, NOW - 1000);
	hs[1].in_flight = 6;
	share_out(&c, hs, 2);
	is_int(hs[0].share, 1, "126: beside busy H, G's share is its window's floor");
	is_int(hs[0].want, 0, "126: with its one request hanging, G gets no other");
	is_int(hs[1].share, 9, "126: H gets the other 9 slots");
	is_int(hs[1].want, 3, "126: less its 6 in flight");

	hs[0].window = 10;
	share_out(&c, hs, 2);
	is_int(hs[0].share, 5, "126: without the window G's share would be 5");

	/* H done: G alone, window or not, takes every slot */
	hs[0] = handler(1, 1);
	hs[1] = handler(0, 10);
	hs[1].busy_until = NOW;
	share_out(&c, hs, 2);
	is_int(hs[0].share, 10, "126: H done, G alone takes every slot");
	is_int(hs[0].want, 9, "126: 9 more beside its one in flight");
	is_int(hs[1].want, 10, "H idle beside busy G: its window");
}

/* test_ordered_first: test/t/131 (the claim's share beside a routing backlog). */
static void
test_ordered_first(void)
{
	is_int(budget_ordered_first(10), 2, "131: a claim of 10: the claim statement takes 2 first");
	is_int(budget_ordered_first(100), 25, "a claim of 100: 25");
	is_int(budget_ordered_first(3), 1, "a claim of 3: still one");
	is_int(budget_ordered_first(1), 1, "a claim of 1: one");
}

/* test_limits: gates and caps, the lowest limit wins. */
static void
test_limits(void)
{
	BudgetHandler h = handler(0, 0);

	budget_reset(&h);
	h.want = 6;
	is_int(budget_asked(&h), 6, "no limit yet: the caps are asked for its want");
	ok(budget_limit(&h, 4), "the first limit of the claim");
	is_int(budget_asked(&h), 4, "then for that limit");
	ok(!budget_limit(&h, 5), "a second limit");
	is_int(h.limit, 4, "a higher limit does not raise it");
	budget_limit(&h, 2);
	is_int(h.limit, 2, "a lower one holds");
	h.claimed = 1;
	is_int(budget_remaining(&h), 1, "remaining: its limit less what was claimed");
	h.claimed = 3;
	is_int(budget_remaining(&h), 0, "never below zero");
	budget_reset(&h);
	is_int(h.claimed, 0, "reset: nothing claimed");

	is_int(budget_next_token_at(NOW, 4), NOW + 251000,
		   "4 a second: the next token 250 ms later, plus 1 ms");
	is_int(budget_next_token_at(NOW, 1), NOW + 1001000, "1 a second: 1 s later");
	is_int(budget_earliest(0, 5), 5, "earliest: nothing yet, the candidate");
	is_int(budget_earliest(3, 5), 3, "the earlier stays");
	is_int(budget_earliest(7, 5), 5, "an earlier candidate wins");
	is_int(budget_earliest(7, 0), 7, "no candidate (0) changes nothing");
}

/*
 * test_adaptive: a handler's adaptive limit (limiter.c) bounds its want
 * alone and beside others, its share leaves the rest to the others, a new
 * handler gets at most start_limit; and the open files of the slots.
 */
static void
test_adaptive(void)
{
	BudgetHandler hs[2];
	BudgetClaim c;

	/* one busy handler: its share is every slot, its limit bounds it */
	hs[0] = handler(30, 0);
	hs[0].adaptive = 40;
	c = claim(2000, 100, false);
	share_out(&c, hs, 1);
	is_int(hs[0].share, 2000, "alone: the share is every slot");
	is_int(hs[0].want, 10, "but its adaptive limit of 40 leaves 10 over its 30 in flight");
	hs[0].adaptive = 20;
	share_out(&c, hs, 1);
	is_int(hs[0].want, 0, "a limit below what is in flight (cut): nothing more");
	hs[0].adaptive = 0;
	share_out(&c, hs, 1);
	is_int(hs[0].want, 100, "no adaptive limit (0): the whole claim");

	/* not busy, none busy: the limit, not the whole claim */
	hs[0] = handler(0, 0);
	hs[0].busy_until = NOW - 1;
	hs[0].adaptive = 10;
	share_out(&c, hs, 1);
	is_int(hs[0].want, 10, "idle: up to its limit");

	/* two busy: the limit below the equal share leaves the rest to the other */
	hs[0] = handler(5, 0);
	hs[0].adaptive = 5;
	hs[1] = handler(500, 3000);
	hs[1].adaptive = 4000;
	c = claim(2000, 100, false);
	share_out(&c, hs, 2);
	is_int(c.busy, 2, "both busy");
	is_int(hs[0].share, 5, "the one with a limit of 5 keeps 5 of its 1000");
	is_int(hs[1].share, 1995, "the other gets the rest");
	is_int(hs[0].want, 0, "5 in flight of 5: nothing more");

	/* a new handler gets at most start_limit, busy ones or not */
	hs[0] = handler(0, 0);
	hs[0].busy_until = NOW - 1;
	c = claim(2000, 100, false);
	c.start_limit = 10;
	share_out(&c, hs, 1);
	is_int(c.default_limit, 10, "none busy: a new handler's default is start_limit");
	c = claim(2000, 100, true);
	c.start_limit = 10;
	share_out(&c, hs, 1);
	is_int(c.default_limit, 1, "no slot free: one, as before");

	/* the open files of the slots, and the slots the files hold */
	is_int(budget_files_needed(2000), 4 * 2000 + BUDGET_FILES_RESERVE,
		   "2000 slots need four files each and the reserve");
	is_int(budget_concurrency_for_files(budget_files_needed(2000)), 2000,
		   "and that many files hold 2000 slots");
	is_int(budget_concurrency_for_files(20000), (20000 - BUDGET_FILES_RESERVE) / 4,
		   "a hard limit of 20000 holds 4936");
	is_int(budget_concurrency_for_files(100), 1, "at least one slot");
}

int
main(void)
{
	test_windows();
	test_busy();
	test_water_filling();
	test_idle();
	test_gated();
	test_fair_slots();
	test_slow_start();
	test_ordered_first();
	test_limits();
	test_adaptive();
	return done_testing();
}
