/*-------------------------------------------------------------------------
 *
 * retry_after.c
 *	  libFuzzer target: edge_retry_after(), the Retry-After parser that
 *	  reads what any endpoint sends back.
 *
 * Invariants: never reads past the value; an accepted value gives a delay
 * that is never negative and stays within what its form allows; a
 * delay-seconds value is digits only; an IMF-fixdate is 29 bytes ending in
 * GMT and its delay is exactly the date minus now, as timegm() computes it.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <time.h>

#include "edge.h"
#include "fuzz.h"

/* trimmed: the value without surrounding spaces and tabs. */
static void
trimmed(const char *v, size_t len, size_t *start, size_t *end)
{
	size_t		s = 0,
				e = len;

	while (s < e && (v[s] == ' ' || v[s] == '\t'))
		s++;
	while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
		e--;
	*start = s;
	*end = e;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* now: a few realistic clocks, one of them taken from the input */
	time_t		nows[3] = {0, 1700000000, 0};
	char	   *v;

	if (size >= 4)
	{
		uint32_t	n;

		memcpy(&n, data, 4);
		nows[2] = (time_t) n;
	}
	v = dup_exact(data, size);
	for (int k = 0; k < 3; k++)
	{
		int64_t		delay = -12345;
		size_t		s,
					e;

		if (!edge_retry_after(v, size, nows[k], &delay))
		{
			CHECK(delay == -12345);		/* untouched on failure */
			continue;
		}
		CHECK(delay >= 0);
		trimmed(v, size, &s, &e);
		CHECK(e > s);
		if (v[s] >= '0' && v[s] <= '9')
		{
			for (size_t i = s; i < e; i++)
				CHECK(v[i] >= '0' && v[i] <= '9');
			CHECK(delay % 1000 == 0);
			CHECK(delay <= INT64_C(10000000000000) * 1000);
		}
		else
		{
			struct tm	tm;
			char		date[30];
			time_t		t;

			CHECK(e - s == 29);
			CHECK(memcmp(v + e - 3, "GMT", 3) == 0);
			CHECK(delay % 1000 == 0);
			/* the same date through the C library */
			memcpy(date, v + s, 29);
			date[29] = '\0';
			memset(&tm, 0, sizeof(tm));
			if (strptime(date, "%a, %d %b %Y %H:%M:%S GMT", &tm) != NULL &&
				tm.tm_sec < 60)
			{
				t = timegm(&tm);
				CHECK(delay == (t > nows[k] ? ((int64_t) t - nows[k]) * 1000 : 0));
			}
		}
	}
	free(v);
	return 0;
}
