/*-------------------------------------------------------------------------
 *
 * otlp.c
 *	  libFuzzer target: otlp_url_full(), otlp_server() and otlp_span_json(),
 *	  what a relay's attempt span shows of a handler's URL, topic and
 *	  handler name.
 *
 * Invariants: each writer returns the length of its whole text, writes
 * that text when given room for it and a NUL-terminated prefix of it when
 * given less; url.full of an http(s) URL keeps the scheme, shows an '@'
 * in its authority only as "REDACTED:REDACTED@", a query value only as
 * "REDACTED", and no fragment; otlp_server's host fits its room and its
 * port is at most 65535; a span's JSON holds no control character and no
 * byte of a malformed UTF-8 sequence, and ends its object.
 *
 *-------------------------------------------------------------------------
 */
#include <strings.h>

#include "fuzz.h"
#include "otlp.h"

/* check_prefix: a cut write gives a NUL-terminated prefix of full. */
static void
check_prefix(const char *full, size_t n, const char *cut, size_t cap)
{
	size_t		kept = cap == 0 ? 0 : (n < cap ? n : cap - 1);

	CHECK(strlen(cut) == kept);
	CHECK(memcmp(cut, full, kept) == 0);
}

/* check_url_full: the invariants of url.full for url. */
static void
check_url_full(const char *url)
{
	size_t		len = strlen(url);
	size_t		n = otlp_url_full(url, len, NULL, 0);
	char	   *out = malloc(n + 1);
	char		cut[24];
	size_t		start = 0;

	CHECK(otlp_url_full(url, len, out, n + 1) == n);
	CHECK(strlen(out) == n);
	CHECK(otlp_url_full(url, len, cut, sizeof(cut)) == n);
	check_prefix(out, n, cut, sizeof(cut));

	if (len >= 7 && strncasecmp(url, "http://", 7) == 0)
		start = 7;
	else if (len >= 8 && strncasecmp(url, "https://", 8) == 0)
		start = 8;
	if (start == 0)
		CHECK(n == 0);
	else
	{
		size_t		end = start;
		const char *q;

		CHECK(memcmp(out, url, start) == 0);
		CHECK(strchr(out, '#') == NULL);
		while (end < n && out[end] != '/' && out[end] != '?')
		{
			if (out[end] == '@')
				CHECK(end - start == 17 &&
					  memcmp(out + start, "REDACTED:REDACTED@", 18) == 0);
			end++;
		}
		/* every '=' of the query is followed by REDACTED, then & or the end */
		q = strchr(out + end, '?');
		for (const char *p = q ? strchr(q, '=') : NULL; p; p = strchr(p + 1, '='))
		{
			CHECK(strncmp(p + 1, "REDACTED", 8) == 0);
			CHECK(p[9] == '\0' || p[9] == '&');
		}
	}
	free(out);
}

/* utf8_ok: is s well-formed UTF-8 with no control character? */
static int
utf8_ok(const unsigned char *s)
{
	while (*s)
	{
		int			need = 0;

		if (*s < 0x20 || *s == 0x7F)
			return 0;
		if (*s < 0x80)
		{
			s++;
			continue;
		}
		if (*s >= 0xC2 && *s <= 0xDF)
			need = 1;
		else if (*s >= 0xE0 && *s <= 0xEF)
			need = 2;
		else if (*s >= 0xF0 && *s <= 0xF4)
			need = 3;
		else
			return 0;
		if ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0) ||
			(s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90))
			return 0;
		for (int i = 1; i <= need; i++)
			if ((s[i] & 0xC0) != 0x80)
				return 0;
		s += need + 1;
	}
	return 1;
}

/* check_span: the invariants of a span whose names are text. */
static void
check_span(const char *text, const char *url)
{
	OtlpSpan	s;
	char		host[OTLP_HOST_MAX];
	char		cut[40];
	int			port = -1;
	size_t		n;
	char	   *out;

	memset(&s, 0, sizeof(s));
	s.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
	s.span_id = "00f067aa0ba902b7";
	s.topic = text;
	s.handler = text;
	s.error_type = text;
	s.url_full = url;
	if (otlp_server(url, strlen(url), host, sizeof(host), &port))
	{
		CHECK(strlen(host) < sizeof(host) && host[0] != '\0');
		CHECK(port >= 0 && port <= 65535);
		s.server_address = host;
		s.server_port = port;
	}
	n = otlp_span_json(&s, NULL, 0);
	out = malloc(n + 1);
	CHECK(otlp_span_json(&s, out, n + 1) == n);
	CHECK(strlen(out) == n && n > 0 && out[n - 1] == '}');
	CHECK(utf8_ok((const unsigned char *) out));
	CHECK(otlp_span_json(&s, cut, sizeof(cut)) == n);
	check_prefix(out, n, cut, sizeof(cut));
	free(out);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *text = dup_cstring(data, size);

	check_url_full(text);
	check_span(text, text);
	free(text);
	return 0;
}
