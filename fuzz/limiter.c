/*-------------------------------------------------------------------------
 *
 * limiter.c
 *	  libFuzzer target: a handler's adaptive limit (src/pure/limiter.c) fed
 *	  samples made from the input: requests started at any time (before
 *	  the last cut or after it), answered with any status or not, with any
 *	  latency and any number in flight, and ceilings that come and go.
 *
 * The input is a ceiling byte pair, then one sample per five bytes: a
 * start offset and a latency (two bytes each, scaled to milliseconds and
 * seconds), and a byte for the status, answered or not, whether the
 * handler uses its limit and whether the relay was busy elsewhere.
 *
 * Invariants: the limit is always between 1 and the ceiling; a sample
 * grows it by one at most, and only when good; a cut keeps at least half
 * of it (rounded down, at least 1) and at most LIMITER_SLOW_CUT_MAX of it;
 * a sample of a request sent before the last cut changes nothing but by
 * the ceiling; the threshold is never below LIMITER_START once set; the
 * baseline is never above the least latency of this period.
 *
 *-------------------------------------------------------------------------
 */
#include "fuzz.h"
#include "limiter.h"

static const long statuses[] = {200, 204, 301, 400, 404, 410, 429, 500, 502, 503, 600, 100};

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Limiter		l;
	int64_t		now = INT64_C(1000000000);
	int			ceiling;

	if (size < 2)
		return 0;
	memset(&l, 0, sizeof(l));
	ceiling = 1 + ((data[0] << 8 | data[1]) % 10000);
	limiter_clamp(&l, ceiling);
	for (size_t i = 2; i + 5 <= size; i += 5)
	{
		const uint8_t *p = data + i;
		LimiterSample s;
		int			before;
		int64_t		cut_before = l.cut_at;
		LimiterVerdict v;
		int			after;

		if (p[4] == 0xff)
		{
			/* a new ceiling (max_in_flight changed) */
			ceiling = 1 + ((p[0] << 8 | p[1]) % 10000);
			limiter_clamp(&l, ceiling);
			CHECK(limiter_limit(&l) >= 1 && limiter_limit(&l) <= ceiling);
			continue;
		}
		before = limiter_limit(&l);
		now += (int64_t) (p[0] << 8 | p[1]) * 1000;
		s.started = now - (int64_t) (p[2] << 8 | p[3]) * 1000 * 1000 / 64;
		s.finished = now;
		s.answered = (p[4] & 0x80) == 0;
		s.status = statuses[(p[4] & 0x0f) % (sizeof(statuses) / sizeof(statuses[0]))];
		s.in_flight = (p[4] & 0x40) ? before : before / 4;
		s.unseen = (p[4] & 0x20) ? (int64_t) p[3] * 1000 : 0;
		v = limiter_judge(&l, &s);
		after = limiter_sample(&l, &s, ceiling);

		CHECK(after >= 1 && after <= ceiling);
		CHECK(after == limiter_limit(&l));
		if (s.started < cut_before)
			CHECK(after == before);
		else if (v == LIMITER_GOOD)
			CHECK(after == before || after == before + 1);
		else
		{
			int			least = before / 2 > 0 ? before / 2 : 1;

			CHECK(after >= least || after == ceiling);
			CHECK(after <= (int) (before * LIMITER_SLOW_CUT_MAX) || after == 1);
			CHECK(l.threshold >= LIMITER_START);
			CHECK(l.cut_at == now);
		}
		if (l.least_now > 0 && s.answered && v != LIMITER_FAILED)
			CHECK(limiter_baseline(&l) <= l.least_now);
	}
	return 0;
}
