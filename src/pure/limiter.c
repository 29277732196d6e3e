/*-------------------------------------------------------------------------
 *
 * limiter.c
 *	  The adaptive limit of a handler's requests in flight, in plain C
 *	  (limiter.h has the rules): grown by timely answers, cut by failures
 *	  and by latency well above the endpoint's recent least.
 *
 * Owns the arithmetic of one Limiter, none of the relay's state: the
 * relay (claim_budget.c) feeds it samples and hands its limit to the
 * budget (budget.c).
 *
 *-------------------------------------------------------------------------
 */
#include "limiter.h"

/* limiter_limit: the handler's limit now (LIMITER_START for a new one). */
int
limiter_limit(const Limiter *l)
{
	return l->limit > 0 ? l->limit : LIMITER_START;
}

/*
 * limiter_baseline: the least latency (us) of the answers of this period
 * and the last one; 0 while none is known.
 */
int64_t
limiter_baseline(const Limiter *l)
{
	if (l->least_now > 0 && l->least_before > 0)
		return l->least_now < l->least_before ? l->least_now : l->least_before;
	return l->least_now > 0 ? l->least_now : l->least_before;
}

/* latency: a sample's latency (us), at least 1. */
static int64_t
latency(const LimiterSample *s)
{
	int64_t		us = s->finished - s->started;

	return us > 0 ? us : 1;
}

/*
 * tolerated: the most latency (us) a good answer may take, unseen of it
 * the relay's own delay.
 */
static int64_t
tolerated(int64_t baseline, int64_t unseen)
{
	return LIMITER_TOLERANCE * baseline + LIMITER_SLACK_US +
		(unseen > 0 ? unseen : 0);
}

/*
 * limiter_judge: what a sample says about the endpoint: no answer, a 5xx
 * (a status of 600 or above too) or a 429 failed; an answer slower than
 * the tolerated latency is slow; any other answer, whatever its status, is
 * good (a 4xx is the message's business, not congestion).
 */
LimiterVerdict
limiter_judge(const Limiter *l, const LimiterSample *s)
{
	int64_t		baseline = limiter_baseline(l);

	if (!s->answered || s->status >= 500 || s->status == 429)
		return LIMITER_FAILED;
	if (baseline > 0 && latency(s) > tolerated(baseline, s->unseen))
		return LIMITER_SLOW;
	return LIMITER_GOOD;
}

/*
 * note_latency: an answer's latency in the baseline: a new period starts
 * every LIMITER_PERIOD_US, the last one's least kept beside it.
 */
static void
note_latency(Limiter *l, int64_t us, int64_t now)
{
	if (l->period_at == 0 || now < l->period_at)
		l->period_at = now;
	else if (now - l->period_at >= LIMITER_PERIOD_US)
	{
		l->least_before = l->least_now;
		l->least_now = 0;
		l->period_at = now;
	}
	if (l->least_now == 0 || us < l->least_now)
		l->least_now = us;
}

/*
 * grow: a good answer while the handler used at least half its limit: one
 * more below the threshold, else one more per limit answers.
 */
static int
grow(Limiter *l, int limit, int in_flight)
{
	if (2 * (int64_t) in_flight < limit)
		return limit;
	if (l->threshold == 0 || limit < l->threshold)
	{
		l->grown = true;
		return limit + 1;
	}
	if (++l->acked >= limit)
	{
		l->acked = 0;
		l->grown = true;
		return limit + 1;
	}
	return limit;
}

/*
 * cut: a failure halves the limit, a slow answer keeps the fraction the
 * tolerated latency is of its own (LIMITER_SLOW_CUT_MIN to _MAX); at least
 * one.  The first cut after growth sets the threshold to the new limit (at
 * least LIMITER_START); the cuts that follow it without growth between
 * (an outage) keep that threshold, so that the limit climbs back quickly
 * to half of where it was once the endpoint answers again.
 */
static int
cut(Limiter *l, int limit, LimiterVerdict v, const LimiterSample *s)
{
	double		keep = LIMITER_SLOW_CUT_MIN;
	int			next;

	if (v == LIMITER_SLOW)
	{
		keep = (double) tolerated(limiter_baseline(l), s->unseen) /
			(double) latency(s);
		if (keep > LIMITER_SLOW_CUT_MAX)
			keep = LIMITER_SLOW_CUT_MAX;
		if (keep < LIMITER_SLOW_CUT_MIN)
			keep = LIMITER_SLOW_CUT_MIN;
	}
	next = (int) (limit * keep);
	if (next < 1)
		next = 1;
	if (l->grown || l->threshold == 0)
		l->threshold = next > LIMITER_START ? next : LIMITER_START;
	l->grown = false;
	l->acked = 0;
	l->cut_at = s->finished;
	return next;
}

/*
 * limiter_sample: learn from a finished request; the limit stays between
 * 1 and ceiling (the relay's bound, the handler's max_in_flight).
 * Returns the new limit.
 */
int
limiter_sample(Limiter *l, const LimiterSample *s, int ceiling)
{
	LimiterVerdict v = limiter_judge(l, s);
	int			limit = limiter_limit(l);
	bool		fresh = (s->started >= l->cut_at);

	if (v != LIMITER_FAILED)
		note_latency(l, latency(s), s->finished);
	if (fresh && v == LIMITER_GOOD)
		limit = grow(l, limit, s->in_flight);
	else if (fresh)
		limit = cut(l, limit, v, s);
	l->limit = limit;
	limiter_clamp(l, ceiling);
	return l->limit;
}

/* limiter_clamp: keep the limit between 1 and ceiling (none when <= 0). */
void
limiter_clamp(Limiter *l, int ceiling)
{
	int			limit = limiter_limit(l);

	if (ceiling > 0 && limit > ceiling)
		limit = ceiling;
	l->limit = limit > 1 ? limit : 1;
}
