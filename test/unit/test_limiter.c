/*-------------------------------------------------------------------------
 *
 * test_limiter.c
 *	  Unit tests of src/pure/limiter.c, the adaptive limit of a handler's
 *	  requests in flight (issue 32): slow start from LIMITER_START, one
 *	  more a round trip past the threshold, growth only while the limit is
 *	  used, halving on timeouts, 5xx and 429, a cut by the gradient of a
 *	  slow answer (the relay's own delay not counted), one cut a round trip, the ceiling, the baseline's
 *	  periods, the threshold an outage keeps; and two simulated endpoints, a healthy one 100 ms away that
 *	  reaches thousands in flight and one that queues past a knee, where
 *	  the limit settles (between the knee and where its latency reaches
 *	  the tolerated LIMITER_TOLERANCE x + LIMITER_SLACK_US).  Prints TAP.
 *
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include "limiter.h"
#include "tap.h"

#define MS			INT64_C(1000)
#define T0			(INT64_C(1000000) * 1000)

/* answer: a sample started at start, answered status after lat_ms. */
static LimiterSample
answer(int64_t start, int64_t lat_ms, long status, int in_flight)
{
	LimiterSample s;

	memset(&s, 0, sizeof(s));
	s.started = start;
	s.finished = start + lat_ms * MS;
	s.answered = true;
	s.status = status;
	s.in_flight = in_flight;
	return s;
}

/* timeout: a sample started at start that got no answer after lat_ms. */
static LimiterSample
timeout(int64_t start, int64_t lat_ms, int in_flight)
{
	LimiterSample s = answer(start, lat_ms, 0, in_flight);

	s.answered = false;
	return s;
}

/*
 * round_trip: the whole limit sent at *now, all answered status after
 * lat_ms (the handler using all of it: each answer's slot is refilled at
 * once); *now moves to their answer.
 */
static int
round_trip(Limiter *l, int64_t *now, int64_t lat_ms, long status, int ceiling)
{
	int			n = limiter_limit(l);
	LimiterSample s;

	for (int i = 0; i < n; i++)
	{
		s = answer(*now, lat_ms, status, n);
		limiter_sample(l, &s, ceiling);
	}
	*now += lat_ms * MS + MS;
	return limiter_limit(l);
}

/*
 * queueing_latency: an endpoint that answers in base_ms up to knee
 * requests at once, and queues beyond it (latency grows with the load).
 */
static int64_t
queueing_latency(int in_flight, int knee, int64_t base_ms)
{
	if (in_flight <= knee)
		return base_ms;
	return base_ms * in_flight / knee;
}

/* basics: a new limiter, its start, growth and cuts. */
static void
basics(void)
{
	Limiter		l;
	LimiterSample s;
	int64_t		now = T0;

	memset(&l, 0, sizeof(l));
	is_int(limiter_limit(&l), LIMITER_START, "a new limiter starts at LIMITER_START");
	is_int(limiter_baseline(&l), 0, "with no baseline");

	s = answer(now, 100, 204, 10);
	is_int(limiter_judge(&l, &s), LIMITER_GOOD, "a first answer is good");
	is_int(limiter_sample(&l, &s, 1000), 11, "slow start: one more per good answer");
	is_int(limiter_baseline(&l), 100 * MS, "its latency is the baseline");

	s = answer(now, 100, 204, 2);
	is_int(limiter_sample(&l, &s, 1000), 11, "no growth while less than half the limit is used");
	s = answer(now, 100, 404, 6);
	is_int(limiter_sample(&l, &s, 1000), 12, "a 404 is an answer like any other: good");
	s = answer(now, 100, 204, 12);
	is_int(limiter_sample(&l, &s, 12), 12, "never above the ceiling");

	/* failures halve, once a round trip */
	memset(&l, 0, sizeof(l));
	l.limit = 400;
	s = answer(now, 100, 503, 400);
	is_int(limiter_judge(&l, &s), LIMITER_FAILED, "a 503 failed");
	is_int(limiter_sample(&l, &s, 1000), 200, "a 503 halves the limit");
	is_int(l.threshold, 200, "and the threshold is the new limit");
	ok(!l.grown, "nothing grown since");
	s = answer(now + MS, 100, 500, 300);
	is_int(limiter_sample(&l, &s, 1000), 200,
		   "a failure of a request sent before the cut cuts no more");
	s = answer(now + MS, 100, 204, 300);
	is_int(limiter_sample(&l, &s, 1000), 200,
		   "nor does a good answer sent before the cut grow it");
	s = answer(now + 200 * MS, 100, 429, 200);
	is_int(limiter_sample(&l, &s, 1000), 100, "a 429 sent after the cut halves it again");
	s = timeout(now + 400 * MS, 10000, 100);
	is_int(limiter_judge(&l, &s), LIMITER_FAILED, "no answer failed");
	is_int(limiter_sample(&l, &s, 1000), 50, "a timeout halves it");
	s = answer(now + 20000 * MS, 100, 600, 1);
	is_int(limiter_judge(&l, &s), LIMITER_FAILED, "a status of 600 or more failed");

	memset(&l, 0, sizeof(l));
	l.limit = 1;
	s = timeout(now, 10000, 1);
	is_int(limiter_sample(&l, &s, 1000), 1, "never below 1");
	is_int(l.threshold, LIMITER_START, "the threshold at least LIMITER_START");

	/* past the threshold: one more per limit answers */
	memset(&l, 0, sizeof(l));
	l.limit = 20;
	l.threshold = 20;
	for (int i = 0; i < 19; i++)
	{
		s = answer(now, 100, 204, 20);
		limiter_sample(&l, &s, 1000);
	}
	is_int(limiter_limit(&l), 20, "past the threshold, 19 answers of 20 add nothing");
	s = answer(now, 100, 204, 20);
	is_int(limiter_sample(&l, &s, 1000), 21, "the 20th adds one");

	limiter_clamp(&l, 5);
	is_int(limiter_limit(&l), 5, "clamped to a lower ceiling (max_in_flight)");
	limiter_clamp(&l, 0);
	is_int(limiter_limit(&l), 5, "no ceiling: unchanged");
}

/* slowness: the latency signal against the baseline, and its periods. */
static void
slowness(void)
{
	Limiter		l;
	LimiterSample s;
	int64_t		now = T0;

	memset(&l, 0, sizeof(l));
	l.limit = 100;
	s = answer(now, 100, 204, 100);
	limiter_sample(&l, &s, 1000);
	s = answer(now, 300, 204, 100);
	is_int(limiter_judge(&l, &s), LIMITER_GOOD,
		   "2 x baseline + the slack is still in time");
	s = answer(now, 390, 204, 100);
	s.unseen = 90 * MS;
	is_int(limiter_judge(&l, &s), LIMITER_GOOD,
		   "390 ms, 90 of which the relay was busy elsewhere: in time");
	s = answer(now, 301, 204, 100);
	is_int(limiter_judge(&l, &s), LIMITER_SLOW, "beyond it, slow");
	is_int(limiter_sample(&l, &s, 1000), 90,
		   "just beyond: cut by LIMITER_SLOW_CUT_MAX");
	s = answer(now + 400 * MS, 2000, 204, 90);
	is_int(limiter_sample(&l, &s, 1000), 45, "ten times slower: cut by half (the least kept)");
	s = answer(now + 400 * MS, 420, 204, 90);
	is_int(limiter_sample(&l, &s, 1000), 45, "sent before the cut: no second cut");
	s = answer(now + 2400 * MS, 600, 204, 45);
	is_int(limiter_sample(&l, &s, 1000), 22, "600 ms against 300 tolerated: half");
	is_int(limiter_baseline(&l), 100 * MS, "slow answers do not raise the baseline");

	/* the endpoint is now 2 s away for good: measured anew within two periods */
	now += 10000 * MS;
	for (int i = 0; i < 40; i++)
	{
		s = answer(now, 2000, 204, 1);
		limiter_sample(&l, &s, 1000);
		now += 2000 * MS;
	}
	is_int(limiter_baseline(&l), 2000 * MS, "after two periods the baseline is the new latency");
	s = answer(now, 2000, 204, 1);
	is_int(limiter_judge(&l, &s), LIMITER_GOOD, "and 2 s answers are good again");
}

/* endpoints: simulated round trips against two endpoints. */
static void
endpoints(void)
{
	Limiter		l;
	int64_t		now = T0;
	int			limit = 0;
	int			most = 0;
	int			least = 1 << 30;
	int			rounds;

	/* healthy, 100 ms away: slow start to thousands within a few seconds */
	memset(&l, 0, sizeof(l));
	for (rounds = 0; rounds < 40 && limit < 5000; rounds++)
		limit = round_trip(&l, &now, 100, 204, 5000);
	is_int(limit, 5000, "a healthy endpoint 100 ms away reaches the ceiling of 5000");
	ok(rounds <= 10, "within 10 round trips (%d)", rounds);

	/* the same endpoint answers 503: the limit falls to 1 and stays low */
	for (int i = 0; i < 15; i++)
		limit = round_trip(&l, &now, 100, 503, 5000);
	is_int(limit, 1, "answering 503 for 15 round trips brings it down to 1");
	is_int(l.threshold, 2500, "the outage's cuts kept the threshold of its first (half of 5000)");
	limit = round_trip(&l, &now, 100, 204, 5000);
	ok(limit == 2, "healthy again: it climbs back (%d)", limit);
	for (rounds = 1; rounds < 40 && limit < 2500; rounds++)
		limit = round_trip(&l, &now, 100, 204, 5000);
	ok(limit >= 2500 && rounds <= 13,
	   "by slow start to half its limit before the outage (%d after %d round trips)", limit, rounds);
	limit = round_trip(&l, &now, 100, 204, 5000);
	ok(limit <= 2502, "then one a round trip (%d)", limit);

	/* queueing past a knee of 200: settles near it, never a timeout */
	memset(&l, 0, sizeof(l));
	now = T0;
	for (int i = 0; i < 300; i++)
	{
		int			n = limiter_limit(&l);
		int64_t		lat = queueing_latency(n, 200, 100);

		for (int j = 0; j < n; j++)
		{
			LimiterSample s = answer(now, lat, 204, n);

			limiter_sample(&l, &s, 5000);
		}
		now += lat * MS + MS;
		if (i >= 100)
		{
			most = limiter_limit(&l) > most ? limiter_limit(&l) : most;
			least = limiter_limit(&l) < least ? limiter_limit(&l) : least;
		}
	}
	ok(most <= 300 * 200 / 100 * 12 / 10 && least >= 200 / 2,
	   "past its knee of 200 the limit settles near it, where its latency reaches 2 x 100 + 100 ms (between %d and %d)",
	   least, most);
}

int
main(void)
{
	basics();
	slowness();
	endpoints();
	return done_testing();
}
