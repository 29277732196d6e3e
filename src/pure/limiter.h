/*-------------------------------------------------------------------------
 *
 * limiter.h
 *	  The adaptive limit of one handler's requests in flight (issue 32): how
 *	  many requests a relay may have out to a handler, learned from its
 *	  answers like TCP's congestion window.  Plain C, no PostgreSQL header,
 *	  so that test/unit/test_limiter.c and a libFuzzer target
 *	  (fuzz/limiter.c) reach it.
 *
 * The relay keeps one Limiter per handler (claim_budget.c) and gives it
 * each finished request as a LimiterSample; the budget (budget.c) then
 * never lets the handler have more than the limit in flight here.  The
 * rules, additive increase and multiplicative decrease:
 *
 *	- A request sent after the last cut (a sample whose started is not
 *	  before cut_at) counts; one sent before it was sent under the old,
 *	  larger limit and says nothing new: it neither grows nor cuts.
 *	- A good answer (a status below 500 but 429, within LIMITER_TOLERANCE
 *	  times the baseline latency plus LIMITER_SLACK_US, plus the time the
 *	  relay was busy elsewhere while it may have waited: a database cycle
 *	  is not the endpoint's latency) grows the limit while the handler
 *	  uses at least half of it: by one per answer while below the
 *	  threshold (slow start: the limit doubles every round trip), then by
 *	  one per limit answers (one per round trip).
 *	- No answer (a timeout, a failed connection), a 5xx or a 429 halves
 *	  it; a slow answer cuts it by the ratio of the tolerated latency to
 *	  its own, between LIMITER_SLOW_CUT_MAX and LIMITER_SLOW_CUT_MIN (a
 *	  gradient: the further above, the deeper the cut).  The threshold
 *	  becomes the new limit (at least LIMITER_START), so the limit climbs
 *	  back slowly to where the endpoint started to suffer; cuts that
 *	  follow without growth between (an outage) keep it, so the limit
 *	  climbs back quickly to half of where it was before.  Never below 1.
 *	- The baseline is the least latency of the good and slow answers of
 *	  this period and the one before (LIMITER_PERIOD_US each): an endpoint
 *	  that became slower for good is measured anew within two periods.
 *
 * A Limiter all zeros is a new one: its limit LIMITER_START, no threshold
 * yet, no baseline.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_LIMITER_H
#define GRELOUT_LIMITER_H

#include <stdbool.h>
#include <stdint.h>

/* A new handler's limit, TCP's initial window (RFC 6928) */
#define LIMITER_START			10

/*
 * An answer slower than TOLERANCE x baseline + SLACK is slow: the slack
 * keeps a fast endpoint's jitter and short queues (tens of ms, its own or
 * the relay's) from counting as congestion; what the limit guards against
 * is a queue that grows toward the timeout
 */
#define LIMITER_TOLERANCE		2
#define LIMITER_SLACK_US		(100 * 1000)

/* A slow answer keeps between these fractions of the limit */
#define LIMITER_SLOW_CUT_MIN	0.5
#define LIMITER_SLOW_CUT_MAX	0.9

/* The baseline's period: the least latency of this one and the last */
#define LIMITER_PERIOD_US		(INT64_C(30) * 1000 * 1000)

/* What a sample says about the endpoint. */
typedef enum LimiterVerdict
{
	LIMITER_GOOD,				/* answered in time, not 5xx nor 429 */
	LIMITER_SLOW,				/* answered, too slow against the baseline */
	LIMITER_FAILED				/* no answer, a 5xx or a 429 */
} LimiterVerdict;

/* One handler's limit and what it is learned from. */
typedef struct Limiter
{
	int			limit;			/* requests in flight; 0: LIMITER_START */
	int			threshold;		/* slow start below it; 0: none yet */
	int			acked;			/* good answers toward the next +1 */
	bool		grown;			/* grown since the last cut */
	int64_t		cut_at;			/* the last cut (us); 0: none */
	int64_t		least_now;		/* least latency of this period; 0: none */
	int64_t		least_before;	/* of the period before; 0: none */
	int64_t		period_at;		/* this period's start (us) */
} Limiter;

/* One finished request, on the relay's monotonic clock (us). */
typedef struct LimiterSample
{
	int64_t		started;
	int64_t		finished;
	bool		answered;		/* a status line came back */
	long		status;
	int			in_flight;		/* the handler's requests here, this one
								 * included */
	int64_t		unseen;			/* of its latency, how long the answer may
								 * have waited for the relay to look (us) */
} LimiterSample;

extern int	limiter_limit(const Limiter *l);
extern int64_t limiter_baseline(const Limiter *l);
extern LimiterVerdict limiter_judge(const Limiter *l, const LimiterSample *s);
extern int	limiter_sample(Limiter *l, const LimiterSample *s, int ceiling);
extern void limiter_clamp(Limiter *l, int ceiling);

#endif							/* GRELOUT_LIMITER_H */
