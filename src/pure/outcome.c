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
 *	  counts, or something one message provoked, which does not.  And the
 *	  outcome class of a stored attempt (outcome_class), which is what a
 *	  publisher is shown of it: never an address nor a body.
 *
 *-------------------------------------------------------------------------
 */
#include "outcome.h"

#include <stdio.h>
#include <string.h>

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

/*
 * utf8_sequence: the length of the valid UTF-8 sequence at s (of len
 * bytes): not overlong, no surrogate, at most U+10FFFF.  0 when the bytes
 * there are no such sequence; -1 when they begin one that len cuts.
 */
static int
utf8_sequence(const unsigned char *s, size_t len)
{
	size_t		n;
	unsigned char lo = 0x80,
				hi = 0xBF;

	if (s[0] >= 0xC2 && s[0] <= 0xDF)
		n = 2;
	else if (s[0] >= 0xE0 && s[0] <= 0xEF)
	{
		n = 3;
		if (s[0] == 0xE0)
			lo = 0xA0;			/* overlong */
		else if (s[0] == 0xED)
			hi = 0x9F;			/* surrogates */
	}
	else if (s[0] >= 0xF0 && s[0] <= 0xF4)
	{
		n = 4;
		if (s[0] == 0xF0)
			lo = 0x90;			/* overlong */
		else if (s[0] == 0xF4)
			hi = 0x8F;			/* above U+10FFFF */
	}
	else
		return 0;
	for (size_t i = 1; i < n; i++)
	{
		if (i >= len)
			return -1;
		if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xBF))
			return 0;
	}
	return (int) n;
}

/*
 * outcome_sanitize_text: copy at most cap-1 bytes of src[0..len) into dst
 * as text any database takes, NUL-terminated: printable ASCII, line
 * breaks and tabs as they are, and (utf8: the database's encoding is
 * UTF-8) every valid UTF-8 sequence; every other byte becomes '?'.  A
 * sequence that the end of src or of dst cuts is left out.  For a
 * response body kept in grelout.attempts.  Returns the length written.
 */
size_t
outcome_sanitize_text(const char *src, size_t len, char *dst, size_t cap,
					  bool utf8)
{
	const unsigned char *s = (const unsigned char *) src;
	size_t		i = 0,
				n = 0;

	if (cap == 0)
		return 0;
	while (i < len && n < cap - 1)
	{
		unsigned char c = s[i];
		int			seq = (utf8 && c >= 0x80) ? utf8_sequence(s + i, len - i) : 0;

		if ((c >= 0x20 && c < 0x7F) || c == '\n' || c == '\r' || c == '\t')
		{
			dst[n++] = (char) c;
			i++;
		}
		else if (seq < 0 || (seq > 0 && n + seq > cap - 1))
			break;				/* cut by the end of src or of dst */
		else if (seq > 0)
		{
			memcpy(dst + n, s + i, seq);
			n += seq;
			i += seq;
		}
		else
		{
			dst[n++] = '?';
			i++;
		}
	}
	dst[n] = '\0';
	return n;
}

/* starts_with: does s (of len bytes) begin with the C string p? */
static bool
starts_with(const char *s, size_t len, const char *p)
{
	size_t		plen = strlen(p);

	return len >= plen && memcmp(s, p, plen) == 0;
}

/* contains: does s (of len bytes) hold the C string p? */
static bool
contains(const char *s, size_t len, const char *p)
{
	size_t		plen = strlen(p);

	for (size_t i = 0; plen <= len && i <= len - plen; i++)
		if (memcmp(s + i, p, plen) == 0)
			return true;
	return false;
}

/* put_class: copy the C string c into out (of cap bytes); its length. */
static size_t
put_class(const char *c, char *out, size_t cap)
{
	size_t		n = strlen(c);

	if (cap == 0)
		return 0;
	if (n > cap - 1)
		n = cap - 1;
	memcpy(out, c, n);
	out[n] = '\0';
	return n;
}

/*
 * outcome_class: the class of an attempt's outcome from what is stored of
 * it: its HTTP status when it got one (status > 0), else its last_error
 * as the relay writes it ("HTTP 503: <body>", "could not resolve host:
 * ...", "timed out after ...", ...).  The class is "http NNN" or one of
 * a few words ("timeout", "connection refused", "tls", "dns", ...); it
 * never holds an address, a host name or any byte of a response body, so
 * a publisher may see it.  Writes it NUL-terminated into out (cap bytes,
 * OUTCOME_CLASS_MAX is enough) and returns its length: 0 when there is
 * nothing to say (no status, no error).
 */
size_t
outcome_class(int status, const char *error, size_t len, char *out, size_t cap)
{
	char		buf[OUTCOME_CLASS_MAX];
	static const struct
	{
		const char *prefix;
		const char *cls;
	}			prefixes[] = {
		{"could not resolve host", "dns"},
		{"timed out after", "timeout"},
		{"TLS failure", "tls"},
		{"refused to connect to ", "blocked network"},
		{"protocol not allowed", "protocol not allowed"},
		{"empty reply from server", "empty reply"},
		{"connection broken", "connection broken"},
		{"out of memory in libcurl", "internal error"},
		{"libcurl refused the request", "internal error"},
	};

	if (cap > 0)
		out[0] = '\0';
	/* a 1.0 row, or a row of a failure without a status: the text says */
	if (status <= 0 && error != NULL && starts_with(error, len, "HTTP "))
	{
		int			code = 0;
		size_t		i = 5;

		while (i < len && i < 8 && error[i] >= '0' && error[i] <= '9')
			code = code * 10 + (error[i++] - '0');
		if (i == 8 && (i == len || error[i] == ':' || error[i] == ' '))
			status = code;
	}
	if (status > 0)
	{
		if (status > 999)
			return put_class("http", out, cap);
		snprintf(buf, sizeof(buf), "http %d", status);
		return put_class(buf, out, cap);
	}
	if (error == NULL || len == 0)
		return 0;
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
		if (starts_with(error, len, prefixes[i].prefix))
			return put_class(prefixes[i].cls, out, cap);
	if (starts_with(error, len, "could not connect"))
	{
		if (starts_with(error, len, "could not connect (connection refused)") ||
			contains(error, len, "Connection refused"))
			return put_class("connection refused", out, cap);
		if (starts_with(error, len, "could not connect (timed out)") ||
			contains(error, len, "Connection timed out"))
			return put_class("timeout", out, cap);
		if (starts_with(error, len, "could not connect (unreachable)"))
			return put_class("unreachable", out, cap);
		return put_class("connection failed", out, cap);
	}
	return put_class("transport error", out, cap);
}
