/*-------------------------------------------------------------------------
 *
 * outcome.c
 *	  libFuzzer target: outcome_decide(), the decision taken on whatever an
 *	  endpoint answers (status, Retry-After) under any policy settings,
 *	  outcome_health(), what that answer tells the breaker, and
 *	  outcome_sanitize(), which copies a response body into last_error,
 *	  and outcome_sanitize_text(), which keeps one for grelout.attempts.
 *
 * Invariants: 2xx is delivered and 410 dead whatever the policy; a retry's
 * delay is never negative nor above retry_max (nor above the Retry-After
 * delay when one applies); nothing is dead before its last attempt with
 * dead_letter on, or ever with it off but for 410; only a 4xx other than
 * 401, 403, 404, 405, 407 and 429 escapes the breaker, and only a 2xx is
 * its success; a sanitized copy is printable ASCII, NUL-terminated, within
 * its buffer; a body kept as text is valid (UTF-8 or ASCII) and stable; the outcome class of any stored text is "http NNN" or one of
 * a few fixed words.
 *
 * fuzz/run links this target with the pure files (src/pure/outcome.c among
 * them), as it does every target.
 *
 *-------------------------------------------------------------------------
 */
#include "outcome.h"
#include "fuzz.h"

/* take: the next n bytes of the input as an unsigned number. */
static uint64_t
take(const uint8_t **data, size_t *size, size_t n)
{
	uint64_t	v = 0;

	for (size_t i = 0; i < n && *size > 0; i++)
	{
		v = (v << 8) | **data;
		(*data)++;
		(*size)--;
	}
	return v;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *body = data;
	size_t		body_len = size;
	OutcomeInput in;
	Outcome		o;
	OutcomeHealth h;
	char		buf[64];
	size_t		n;

	memset(&in, 0, sizeof(in));
	in.responded = take(&data, &size, 1) & 1;
	in.status = (long) (int16_t) take(&data, &size, 2);
	in.has_retry_after = take(&data, &size, 1) & 1;
	in.retry_after_ms = (int64_t) take(&data, &size, 8);
	in.attempts = (int) (int32_t) take(&data, &size, 4);
	in.max_attempts = (int) (int32_t) take(&data, &size, 4);
	in.dead_letter = take(&data, &size, 1) & 1;
	in.retry_base_ms = (int64_t) (take(&data, &size, 4) & 0x7fffffff);
	in.retry_max_ms = (int64_t) (take(&data, &size, 4) & 0x7fffffff);
	in.retry_jitter = (double) take(&data, &size, 2) / 65535.0;
	in.draw = (double) take(&data, &size, 2) / 65536.0;

	o = outcome_decide(&in);
	if (in.responded && in.status >= 200 && in.status < 300)
		CHECK(o.kind == OUTCOME_DELIVERED);
	else if (in.responded && in.status == 410)
		CHECK(o.kind == OUTCOME_DEAD);
	else
	{
		CHECK(o.kind != OUTCOME_DELIVERED);
		if (o.kind == OUTCOME_DEAD)
			CHECK(in.dead_letter && in.attempts >= in.max_attempts);
		else
		{
			CHECK(!(in.dead_letter && in.attempts >= in.max_attempts));
			CHECK(o.delay_ms >= 0);
			CHECK(o.delay_ms <= in.retry_max_ms);
			if (in.responded && in.has_retry_after &&
				(in.status == 429 || in.status == 503) && in.retry_after_ms >= 0)
				CHECK(o.delay_ms <= in.retry_after_ms);
		}
	}

	/* the breaker's input: only a 2xx succeeds, only 429/503 pause */
	h = outcome_health(in.responded, in.status, in.has_retry_after);
	if (!in.responded)
		CHECK(h == OUTCOME_HEALTH_FAILURE);
	else if (in.status >= 200 && in.status < 300)
		CHECK(h == OUTCOME_HEALTH_SUCCESS);
	else if (h == OUTCOME_HEALTH_PAUSE)
		CHECK(in.has_retry_after && (in.status == 429 || in.status == 503));
	else if (h == OUTCOME_HEALTH_MESSAGE)
		CHECK(in.status >= 400 && in.status < 500 && in.status != 401 &&
			  in.status != 403 && in.status != 404 && in.status != 405 &&
			  in.status != 407 && in.status != 429);
	else
		CHECK(h == OUTCOME_HEALTH_FAILURE &&
			  !(in.status >= 200 && in.status < 300));

	n = outcome_sanitize((const char *) body, body_len, buf, sizeof(buf));
	CHECK(n < sizeof(buf));
	CHECK(buf[n] == '\0');
	for (size_t i = 0; i < n; i++)
		CHECK(buf[i] >= 0x20 && buf[i] < 0x7f);
	CHECK(n == 0 || buf[n - 1] != ' ');

	/*
	 * a body kept for grelout.attempts: within its buffer, NUL-terminated,
	 * no control but tab and line breaks, ASCII outside UTF-8, and text
	 * that a second pass keeps as it is (so every sequence in it is valid
	 * UTF-8: an invalid byte would become '?')
	 */
	for (int utf8 = 0; utf8 <= 1; utf8++)
	{
		char		again[sizeof(buf)];

		n = outcome_sanitize_text((const char *) body, body_len, buf, sizeof(buf), utf8);
		CHECK(n < sizeof(buf));
		CHECK(buf[n] == '\0');
		for (size_t i = 0; i < n; i++)
		{
			unsigned char c = (unsigned char) buf[i];

			CHECK(c >= 0x20 || c == '\t' || c == '\n' || c == '\r');
			CHECK(c != 0x7f);
			CHECK(utf8 || c < 0x80);
		}
		CHECK(outcome_sanitize_text(buf, n, again, sizeof(again), utf8) == n);
		CHECK(memcmp(buf, again, n) == 0);
	}

	/*
	 * the class of the same bytes as a stored last_error: "http NNN" or
	 * one of the fixed words, never a byte of the text beyond its status
	 */
	{
		static const char *const words[] = {
			"dns", "timeout", "tls", "blocked network", "protocol not allowed",
			"empty reply", "connection broken", "internal error",
			"connection refused", "unreachable", "connection failed",
			"transport error", "http", NULL
		};
		char		cls[OUTCOME_CLASS_MAX];
		size_t		cn = outcome_class((int) (in.status % 2000) - 500,
									   (const char *) body, body_len, cls, sizeof(cls));
		bool		known = false;

		CHECK(cn == strlen(cls));
		CHECK((cn == 0) == (in.status % 2000 <= 500 && body_len == 0));
		if (cn > 5 && memcmp(cls, "http ", 5) == 0)
		{
			known = cn <= 8;
			for (size_t i = 5; i < cn; i++)
				known = known && cls[i] >= '0' && cls[i] <= '9';
		}
		for (int i = 0; words[i] && !known; i++)
			known = strcmp(cls, words[i]) == 0;
		CHECK(cn == 0 || known);
	}
	return 0;
}
