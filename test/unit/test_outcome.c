/*-------------------------------------------------------------------------
 *
 * test_outcome.c
 *	  Unit tests of src/pure/outcome.c, the outcome decision of a webhook
 *	  attempt: 2xx delivered; 410 dead at once even with dead_letter off;
 *	  dead after the last attempt only with dead_letter on; 429/503 with
 *	  Retry-After retried after it, capped by retry_max; everything else
 *	  retried with capped exponential backoff and jitter; and what an
 *	  attempt says about its endpoint, for the breaker (outcome_health).
 *	  Prints TAP.
 *
 *-------------------------------------------------------------------------
 */
#include <stdint.h>
#include <string.h>

#include "outcome.h"
#include "tap.h"

/* base: a failed first attempt of ten, default policy, no jitter. */
static OutcomeInput
base(void)
{
	OutcomeInput in;

	memset(&in, 0, sizeof(in));
	in.responded = true;
	in.status = 500;
	in.attempts = 1;
	in.max_attempts = 10;
	in.dead_letter = true;
	in.retry_base_ms = 1000;
	in.retry_max_ms = 300000;
	in.retry_jitter = 0.0;
	in.draw = 0.5;
	return in;
}

/*
 * health_range: does every status from lo to hi (but skip) get want from
 * outcome_health, with Retry-After and without?
 */
static int
health_range(long lo, long hi, long skip, OutcomeHealth want)
{
	for (long s = lo; s <= hi; s++)
		if (s != skip && (outcome_health(true, s, false) != want ||
						  outcome_health(true, s, true) != want))
			return 0;
	return 1;
}

int
main(void)
{
	OutcomeInput in;
	Outcome		o;
	char		buf[16];

	for (long s = 200; s < 300; s += 99)
	{
		in = base();
		in.status = s;
		in.attempts = 10;
		o = outcome_decide(&in);
		is_int(o.kind, OUTCOME_DELIVERED, "status %ld is delivered, even on the last attempt", s);
	}

	in = base();
	in.status = 410;
	in.dead_letter = false;
	is_int(outcome_decide(&in).kind, OUTCOME_DEAD, "410 is dead at once with dead_letter off");

	in = base();
	in.status = 302;
	o = outcome_decide(&in);
	is_int(o.kind, OUTCOME_RETRY, "a redirect is retried");
	is_int(o.delay_ms, 1000, "first retry after retry_base");

	in = base();
	in.responded = false;
	in.status = 0;
	in.attempts = 3;
	o = outcome_decide(&in);
	is_int(o.kind, OUTCOME_RETRY, "a transport failure is retried");
	is_int(o.delay_ms, 4000, "third attempt: base * 4");

	in = base();
	in.attempts = 10;
	is_int(outcome_decide(&in).kind, OUTCOME_DEAD, "last attempt with dead_letter on: dead");
	in.dead_letter = false;
	is_int(outcome_decide(&in).kind, OUTCOME_RETRY, "last attempt with dead_letter off: retried");
	in.attempts = 1000000;
	o = outcome_decide(&in);
	is_int(o.delay_ms, 300000, "a huge attempt count is capped by retry_max");

	in = base();
	in.status = 429;
	in.has_retry_after = true;
	in.retry_after_ms = 7000;
	o = outcome_decide(&in);
	is_int(o.kind, OUTCOME_RETRY, "429 with Retry-After is retried");
	is_int(o.delay_ms, 7000, "after the Retry-After delay");
	in.status = 503;
	in.retry_after_ms = INT64_C(1) << 50;
	is_int(outcome_decide(&in).delay_ms, 300000, "503 Retry-After capped by retry_max");
	in.status = 500;
	is_int(outcome_decide(&in).delay_ms, 1000, "Retry-After on a 500 is ignored");
	in.status = 429;
	in.attempts = 10;
	is_int(outcome_decide(&in).kind, OUTCOME_DEAD, "429 on the last attempt is dead");
	in.status = 429;
	in.attempts = 1;
	in.responded = false;
	is_int(outcome_decide(&in).delay_ms, 1000, "no response: Retry-After is not used");

	is_int(outcome_backoff_ms(1, 1000, 300000, 1.0, 0.0), 0, "full jitter, draw 0: no wait");
	is_int(outcome_backoff_ms(2, 1000, 300000, 1.0, 0.5), 1000, "full jitter, draw 0.5: half");
	is_int(outcome_backoff_ms(2, 1000, 300000, 0.5, 0.0), 1000, "half jitter, draw 0: half");
	is_int(outcome_backoff_ms(20, 1000, 300000, 0.0, 0.9), 300000, "capped by max");
	is_int(outcome_backoff_ms(0, 1000, 300000, 0.0, 0.0), 1000, "attempt 0 counts as the first");
	is_int(outcome_backoff_ms(3, 1000, 300000, -1.0, 2.0), 4000, "bad jitter and draw are clamped");
	/* found by fuzz/outcome.c: a zero base doubled up to 2^31 times */
	is_int(outcome_backoff_ms(2147483647, 0, 2147483647, 0.0, 0.0), 0,
		   "a zero base with a huge attempt count returns at once");
	is_int(outcome_backoff_ms(2147483647, 1, INT64_MAX, 0.0, 0.0), INT64_MAX,
		   "a huge attempt count with an unbounded max stops at the max");
	{
		int			in_range = 1;

		for (int a = 1; a < 40; a++)
		{
			int64_t		d = outcome_backoff_ms(a, 1000, 300000, 1.0, 0.999);

			in_range = in_range && d >= 0 && d <= 300000;
		}
		ok(in_range, "backoff stays within [0, retry_max] for attempts 1 to 39");
	}

	/* outcome_health: what counts toward the breaker (1.2) */
	is_int(outcome_health(false, 0, false), OUTCOME_HEALTH_FAILURE,
		   "no answer (transport failure, timeout) counts");
	is_int(outcome_health(false, 400, false), OUTCOME_HEALTH_FAILURE,
		   "no answer counts whatever status field is left over");
	ok(health_range(200, 299, -1, OUTCOME_HEALTH_SUCCESS), "every 2xx is a success");
	ok(health_range(500, 599, 503, OUTCOME_HEALTH_FAILURE),
	   "every 5xx counts, with or without Retry-After (but 503 with it)");
	is_int(outcome_health(true, 503, false), OUTCOME_HEALTH_FAILURE, "503 without Retry-After counts");
	is_int(outcome_health(true, 503, true), OUTCOME_HEALTH_PAUSE, "503 with Retry-After pauses");
	is_int(outcome_health(true, 429, false), OUTCOME_HEALTH_FAILURE, "429 without Retry-After counts");
	is_int(outcome_health(true, 429, true), OUTCOME_HEALTH_PAUSE, "429 with Retry-After pauses");
	{
		static const long endpoint[] = {401, 403, 404, 405, 407};
		static const long message[] = {400, 402, 406, 408, 409, 410, 411, 412, 413,
		414, 415, 416, 417, 418, 421, 422, 423, 424, 425, 426, 428, 431, 451, 499};

		for (size_t i = 0; i < sizeof(endpoint) / sizeof(endpoint[0]); i++)
			is_int(outcome_health(true, endpoint[i], false), OUTCOME_HEALTH_FAILURE,
				   "%ld (the endpoint or its credentials) counts", endpoint[i]);
		for (size_t i = 0; i < sizeof(message) / sizeof(message[0]); i++)
		{
			is_int(outcome_health(true, message[i], false), OUTCOME_HEALTH_MESSAGE,
				   "%ld (a message can cause it) fails its delivery only", message[i]);
			is_int(outcome_health(true, message[i], true), OUTCOME_HEALTH_MESSAGE,
				   "%ld with Retry-After fails its delivery only", message[i]);
		}
	}
	ok(health_range(300, 399, -1, OUTCOME_HEALTH_FAILURE),
	   "every 3xx counts: redirects are not followed, the handler's URL is wrong");
	is_int(outcome_health(true, 100, false), OUTCOME_HEALTH_FAILURE, "a final 1xx counts");
	is_int(outcome_health(true, 600, false), OUTCOME_HEALTH_FAILURE, "a status of 600 counts");
	/* the delivery's own fate is outcome_decide's, as for any failure */
	in = base();
	in.status = 400;
	in.attempts = 10;
	is_int(outcome_decide(&in).kind, OUTCOME_DEAD, "400 on the last attempt is dead");
	in.attempts = 1;
	is_int(outcome_decide(&in).kind, OUTCOME_RETRY, "400 before the last attempt is retried");

	is_int((long long) outcome_sanitize("ok\r\n", 4, buf, sizeof(buf)), 2, "sanitize drops the final line break");
	is_str(buf, "ok", "sanitize keeps the text");
	outcome_sanitize("a\x01\tb\xff", 5, buf, sizeof(buf));
	is_str(buf, "a? b?", "sanitize replaces controls and non-ASCII");
	outcome_sanitize("0123456789abcdefXYZ", 19, buf, sizeof(buf));
	is_str(buf, "0123456789abcde", "sanitize cuts at the buffer");

	/* issue 33: a response body for grelout.attempts */
	{
		char		t[16];

		is_int((long long) outcome_sanitize_text("a\r\nb\tc\n", 7, t, sizeof(t), true), 7,
			   "sanitize_text keeps line breaks and tabs");
		is_str(t, "a\r\nb\tc\n", "sanitize_text keeps the text as it is");
		outcome_sanitize_text("x\x01\x7f\0y", 5, t, sizeof(t), true);
		is_str(t, "x???y", "sanitize_text replaces controls, DEL and NUL");
		outcome_sanitize_text("caf\xc3\xa9 \xe2\x82\xac", 9, t, sizeof(t), true);
		is_str(t, "caf\xc3\xa9 \xe2\x82\xac", "sanitize_text keeps valid UTF-8");
		outcome_sanitize_text("caf\xc3\xa9", 5, t, sizeof(t), false);
		is_str(t, "caf??", "sanitize_text outside UTF-8 keeps ASCII only");
		outcome_sanitize_text("a\xff\xc0\xaf\xed\xa0\x80" "b", 8, t, sizeof(t), true);
		is_str(t, "a??????b", "sanitize_text replaces invalid, overlong and surrogate bytes");
		outcome_sanitize_text("\xf4\x90\x80\x80", 4, t, sizeof(t), true);
		is_str(t, "????", "sanitize_text refuses code points above U+10FFFF");
		outcome_sanitize_text("ab\xe2\x82", 4, t, sizeof(t), true);
		is_str(t, "ab", "sanitize_text leaves out a sequence the body's end cuts");
		outcome_sanitize_text("0123456789abcd\xc3\xa9", 16, t, sizeof(t), true);
		is_str(t, "0123456789abcd", "sanitize_text leaves out a sequence the buffer cuts");
		is_int((long long) outcome_sanitize_text("abc", 3, t, 1, true), 0,
			   "sanitize_text into one byte writes nothing");
		is_str(t, "", "and terminates it");
	}

	/* issue 29: the outcome class a publisher sees, from what is stored */
	{
		static const struct
		{
			int			status;
			const char *error;
			const char *cls;
		}			cases[] = {
			{503, "HTTP 503: token=sk_live_abc echoed back", "http 503"},
			{404, NULL, "http 404"},
			{302, "HTTP 302 (redirects are not followed): see https://10.0.0.1/", "http 302"},
			{0, "HTTP 500: boom", "http 500"},	/* a 1.0 row: no last_status */
			{0, "HTTP 500", "http 500"},
			{0, "HTTP 5000: odd", "transport error"},
			{0, "HTTP 50", "transport error"},
			{0, "could not resolve host: Could not resolve host: secret-host.internal", "dns"},
			{0, "timed out after 1000 ms: Operation timed out after 1000 milliseconds with 0 bytes received", "timeout"},
			{0, "could not connect (connection refused): Failed to connect to 10.1.2.3 port 9 after 0 ms: Couldn't connect to server", "connection refused"},
			{0, "could not connect: Failed to connect to 127.0.0.1 port 9: Connection refused", "connection refused"},
			{0, "could not connect (timed out): Failed to connect to h port 1", "timeout"},
			{0, "could not connect (unreachable): Failed to connect to h port 1", "unreachable"},
			{0, "could not connect: Failed to connect to h port 1 after 0 ms: Couldn't connect to server", "connection failed"},
			{0, "TLS failure: SSL certificate problem: self-signed certificate", "tls"},
			{0, "refused to connect to private address 10.0.0.5 (grelout.block_private_networks is on)", "blocked network"},
			{0, "protocol not allowed: Protocol \"ftp\" not supported", "protocol not allowed"},
			{0, "empty reply from server: Empty reply from server", "empty reply"},
			{0, "connection broken: Recv failure: Connection reset by peer", "connection broken"},
			{0, "out of memory in libcurl", "internal error"},
			{0, "Some other libcurl text about host.example", "transport error"},
		};

		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		{
			char		out[OUTCOME_CLASS_MAX];
			size_t		n = outcome_class(cases[i].status, cases[i].error,
										  cases[i].error ? strlen(cases[i].error) : 0,
										  out, sizeof(out));

			ok(n == strlen(out) && strcmp(out, cases[i].cls) == 0,
			   "class of (%d, %s) is \"%s\" (got \"%s\")", cases[i].status,
			   cases[i].error ? cases[i].error : "NULL", cases[i].cls, out);
		}
		{
			char		out[OUTCOME_CLASS_MAX] = "x";

			ok(outcome_class(0, NULL, 0, out, sizeof(out)) == 0 && out[0] == '\0',
			   "no status and no error: no class");
			ok(outcome_class(0, "", 0, out, sizeof(out)) == 0, "an empty error: no class");
			ok(outcome_class(0, "HTTP 503: x", 5, out, sizeof(out)) > 0 &&
			   strcmp(out, "transport error") == 0, "only the given length is read");
			ok(outcome_class(503, NULL, 0, out, 4) == 3 && strcmp(out, "htt") == 0,
			   "a short buffer gets a cut, terminated class");
		}
	}

	return done_testing();
}
