/*-------------------------------------------------------------------------
 *
 * budget.h
 *	  The claim budget: how many deliveries of each handler one relay's
 *	  claim may take.  Plain C over plain structs (no PostgreSQL), so that
 *	  the unit tests (test/unit/test_budget.c) and a libFuzzer target
 *	  (fuzz/budget.c) reach it.
 *
 * The relay keeps one BudgetHandler per handler it has seen (in its record
 * of the handler, claim_budget.c) and tells it when a request starts and
 * finishes.  Before each claim it resets the claim's part of every record,
 * marks the handlers whose breaker or pause gates them, and lets
 * budget_share_out give each handler what it may take (want) and any
 * handler it has not seen its default.  The breaker's gate and the caps
 * over all relays live in shared memory (health.c); what they grant is
 * applied here with budget_limit, the lowest limit winning.  Each
 * handler's adaptive limit (limiter.c, issue 32) bounds its requests in
 * flight here whether others are busy or not.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_BUDGET_H
#define GRELOUT_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

/*
 * A handler counts as busy, for the fair share of the slots, while it has
 * requests in flight and this long after its last one finished (a fast
 * endpoint's requests are often all finished when the claim runs).
 */
#define BUDGET_BUSY_AFTER_US		(100 * 1000)

/*
 * While several handlers are busy, a handler's requests in flight are
 * earned by answers (like TCP's slow start): its window opens by one for
 * each request its endpoint answered (any status) and halves, down to
 * concurrency / BUDGET_WINDOW_FLOOR_DIV (at least one), for each request
 * that got no answer (a timeout, a refused or failed connection).  The
 * slots a handler's window leaves of its fair share go to the others.  So
 * an endpoint that hangs holds a tenth of the slots, not its half, while a
 * slow one that answers earns its whole share within a few round trips.
 */
#define BUDGET_WINDOW_FLOOR_DIV		10

/*
 * While routing new messages takes every free slot and a handler is
 * ordered, the claim statement still runs first, now and then, with this
 * share of the slots (limit / BUDGET_ORDERED_DIV, at least one): the heads
 * of ordered keys, which routing never claims, are not held back by a
 * backlog of new messages.
 */
#define BUDGET_ORDERED_DIV			4

/*
 * The open files a relay keeps for its own (its relations, WAL, the
 * postmaster's pipes, libcurl's resolver) beside its connections, which
 * may be twice its requests in flight (budget_most_running), as many
 * again kept open in libcurl's pool for reuse.
 */
#define BUDGET_FILES_RESERVE		256

/* One handler as the budget sees it. */
typedef struct BudgetHandler
{
	/* kept from claim to claim */
	int			in_flight;		/* this relay's requests to it */
	int64_t		busy_until;		/* busy for the fair share until then (us) */
	int			window;			/* requests earned by answers */
	int			adaptive;		/* its adaptive limit (limiter.c); 0: none */

	/* one claim's budget: budget_reset clears these */
	bool		gated;			/* breaker not closed, or paused */
	int			share;			/* fair share of the slots; -1: not busy */
	int			want;			/* what it may take, before gate and caps */
	bool		limited;		/* has a limit of its own in this claim */
	int			limit;			/* that limit */
	int			claimed;		/* deliveries this cycle's statements took */
} BudgetHandler;

/* One claim: what it may fill, and what budget_share_out found. */
typedef struct BudgetClaim
{
	int			concurrency;	/* the relay's request slots */
	int			limit;			/* deliveries this claim may take in all */
	bool		extra;			/* no slot free: one request per idle handler */
	int64_t		now;			/* the monotonic clock (us) */
	int			start_limit;	/* a new handler's adaptive limit; 0: none */
	/* set by budget_share_out */
	int			busy;			/* busy handlers, gated ones not counted */
	int			default_limit;	/* any handler without a limit of its own */
} BudgetClaim;

extern int	budget_window_floor(int concurrency);
extern void budget_started(BudgetHandler *h);
extern void budget_finished(BudgetHandler *h, bool answered, int concurrency,
							int64_t now);

extern int	budget_most_running(int concurrency, bool per_handler);
extern int	budget_free_slots(int concurrency, int running, bool per_handler,
							  bool *extra);
extern int	budget_ordered_first(int limit);

extern void budget_reset(BudgetHandler *h);
extern void budget_share_out(BudgetClaim *c, BudgetHandler **handlers, int n);
extern bool budget_limit(BudgetHandler *h, int limit);
extern int	budget_asked(const BudgetHandler *h);
extern bool budget_needs_limit(const BudgetHandler *h, const BudgetClaim *c);
extern int	budget_remaining(const BudgetHandler *h);
extern int64_t budget_next_token_at(int64_t now, int per_second);
extern int64_t budget_earliest(int64_t wake_at, int64_t candidate);
extern int64_t budget_files_needed(int concurrency);
extern int	budget_concurrency_for_files(int64_t files);

#endif							/* GRELOUT_BUDGET_H */
