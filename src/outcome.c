/*-------------------------------------------------------------------------
 *
 * outcome.c
 *	  The outcome decision of a webhook attempt: delivered, retry after a
 *	  delay, or dead.  Pure C (no PostgreSQL calls, no randomness of its
 *	  own: the caller passes the random draw), so the unit tests and a
 *	  libFuzzer target reach every branch.
 *
 *	  - any 2xx: delivered;
 *	  - 410 Gone: dead at once, even with dead_letter off (the receiver
 *		asked us to stop);
 *	  - with dead_letter on, the last attempt: dead;
 *	  - 429 or 503 with Retry-After: retry after it, capped by retry_max;
 *	  - anything else (3xx, other status, transport failure): retry with
 *		capped exponential backoff and jitter.
 *
 *	  And what the attempt says about the endpoint, for its handler's
 *	  breaker (outcome_health): whether it is the endpoint's fault, which
 *	  counts, or something one message provoked, which does not.
 *
 *-------------------------------------------------------------------------
 */
#include "outcome.h"

/*
 * outcome_backoff_ms: min(max, base * 2^(attempts-1)), with the jitter
 * fraction of it scaled by draw (in [0, 1)).  Never negative, never above
 * max (when max >= 0).
 */
int64_t
outcome_backoff_ms(int attempts, int64_t base_ms, int64_t max_ms,
				   double jitter, double draw)
{
	double		delay;

	if (base_ms < 0)
		base_ms = 0;
	if (max_ms < 0)
		max_ms = 0;
	if (!(jitter >= 0.0))		/* also NaN */
		jitter = 0.0;
	if (jitter > 1.0)
		jitter = 1.0;
	if (!(draw >= 0.0))
		draw = 0.0;
	if (draw > 1.0)
		draw = 1.0;

	delay = (double) base_ms;
	/* at most 63 doublings reach any int64 ceiling; a zero base stays 0 */
	for (int i = 1; i < attempts && i < 64 && delay > 0 && delay < (double) max_ms; i++)
		delay *= 2;
	if (delay > (double) max_ms)
		delay = (double) max_ms;
	delay = delay * (1.0 - jitter) + delay * jitter * draw;
	/* compared as doubles, returned exact: (double) INT64_MAX is 2^63 */
	if (delay >= (double) max_ms)
		return max_ms;
	if (delay < 0)
		delay = 0;
	return (int64_t) delay;
}

/* outcome_decide: what to do with the message after this attempt. */
Outcome
outcome_decide(const OutcomeInput *in)
{
	Outcome		out = {OUTCOME_RETRY, 0};

	if (in->responded && in->status >= 200 && in->status < 300)
	{
		out.kind = OUTCOME_DELIVERED;
		return out;
	}
	if (in->responded && in->status == 410)
	{
		out.kind = OUTCOME_DEAD;
		return out;
	}
	if (in->dead_letter && in->attempts >= in->max_attempts)
	{
		out.kind = OUTCOME_DEAD;
		return out;
	}
	if (in->responded && (in->status == 429 || in->status == 503) &&
		in->has_retry_after)
	{
		int64_t		cap = in->retry_max_ms < 0 ? 0 : in->retry_max_ms;
		int64_t		ra = in->retry_after_ms < 0 ? 0 : in->retry_after_ms;

		out.delay_ms = ra < cap ? ra : cap;
		return out;
	}
	out.delay_ms = outcome_backoff_ms(in->attempts, in->retry_base_ms,
									  in->retry_max_ms, in->retry_jitter,
									  in->draw);
	return out;
}

/*
 * outcome_health: what an attempt says about its endpoint (1.2).
 *
 * Counts toward the breaker (OUTCOME_HEALTH_FAILURE) what no message can
 * change: no answer (a transport failure, a timeout), a 5xx (but a 503 with
 * Retry-After), a 429 without Retry-After, a 401, 403, 404, 405 or 407 (the
 * endpoint's address or its credentials, which the handler sets), and a
 * 3xx: redirects are not followed, so a redirect says the handler's URL is
 * wrong, whatever the message.  Any other status a final answer can carry
 * (1xx, 600 and up) is the endpoint misbehaving too.
 *
 * Every other 4xx (400, 409, 410, 411 to 415, 422, ...) is something a
 * message's content, size or headers can provoke: it fails that delivery
 * only (OUTCOME_HEALTH_MESSAGE), so that no publisher can open a shared
 * handler's breaker, or have it disabled, with payloads the endpoint
 * refuses.
 */
OutcomeHealth
outcome_health(bool responded, long status, bool has_retry_after)
{
	if (!responded)
		return OUTCOME_HEALTH_FAILURE;
	if (status >= 200 && status < 300)
		return OUTCOME_HEALTH_SUCCESS;
	if ((status == 429 || status == 503) && has_retry_after)
		return OUTCOME_HEALTH_PAUSE;
	if (status >= 400 && status < 500)
	{
		switch (status)
		{
			case 401:			/* Unauthorized */
			case 403:			/* Forbidden */
			case 404:			/* Not Found */
			case 405:			/* Method Not Allowed */
			case 407:			/* Proxy Authentication Required */
			case 429:			/* Too Many Requests, without Retry-After */
				return OUTCOME_HEALTH_FAILURE;
			default:
				return OUTCOME_HEALTH_MESSAGE;
		}
	}
	return OUTCOME_HEALTH_FAILURE;
}

/*
 * outcome_sanitize: copy at most cap-1 bytes of src[0..len) into dst as
 * printable ASCII (line breaks and tabs become spaces, anything else
 * unprintable '?'), without trailing spaces, NUL-terminated, so that any
 * response body or transport error can go into last_error and the log.
 * Returns the length written.
 */
size_t
outcome_sanitize(const char *src, size_t len, char *dst, size_t cap)
{
	size_t		n;

	if (cap == 0)
		return 0;
	n = len < cap - 1 ? len : cap - 1;
	for (size_t i = 0; i < n; i++)
	{
		unsigned char c = (unsigned char) src[i];

		dst[i] = (c >= 0x20 && c < 0x7F) ? (char) c :
			(c == '\n' || c == '\r' || c == '\t') ? ' ' : '?';
	}
	/* a body's final line break is no part of the message */
	while (n > 0 && dst[n - 1] == ' ')
		n--;
	dst[n] = '\0';
	return n;
}
