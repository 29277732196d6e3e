/*-------------------------------------------------------------------------
 *
 * otlp.c
 *	  The span of a delivery attempt in OTLP/HTTP JSON
 *	  (https://opentelemetry.io/docs/specs/otlp/, the JSON encoding of an
 *	  ExportTraceServiceRequest: trace and span ids as hex strings, times
 *	  and 64-bit integers as decimal strings), with the attributes of the
 *	  OpenTelemetry semantic conventions for an HTTP client and for
 *	  messaging, and grelout's own (grelout.handler, grelout.attempt).
 *
 * What a span may show of a URL is decided here: url.full carries no
 * userinfo ("REDACTED:REDACTED@", as the conventions say) and no query
 * value (every one "REDACTED", since a webhook URL's query often holds its
 * key), and no fragment.  A span never carries a header, a body or a
 * secret of its handler.
 *
 * Nothing here allocates or knows PostgreSQL: the relay's span export
 * (spans.c) encodes with it, and the unit tests reach it alone.  Every
 * writer is bounded by the room it is given and returns the length the
 * whole text needs (as snprintf does), so a caller may ask for the length
 * first, with no room.
 *
 *-------------------------------------------------------------------------
 */
#include "otlp.h"

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* A bounded text being written: what fits is kept, all of it counted. */
typedef struct OtlpOut
{
	char	   *buf;
	size_t		cap;			/* room, the NUL included */
	size_t		len;			/* bytes the whole text needs */
} OtlpOut;

/* out_bytes: append n bytes (those that fit before the NUL's room). */
static void
out_bytes(OtlpOut *o, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
	{
		if (o->len + 1 < o->cap)
			o->buf[o->len] = s[i];
		o->len++;
	}
}

/* out_str: append a NUL-terminated string. */
static void
out_str(OtlpOut *o, const char *s)
{
	out_bytes(o, s, strlen(s));
}

/* out_end: NUL-terminate what was kept; the length the whole needs. */
static size_t
out_end(OtlpOut *o)
{
	if (o->cap > 0)
		o->buf[o->len < o->cap ? o->len : o->cap - 1] = '\0';
	return o->len;
}

/*
 * utf8_length: the length of the well-formed UTF-8 sequence at s (at most
 * n bytes), or 0 when the bytes there are none.
 */
static size_t
utf8_length(const unsigned char *s, size_t n)
{
	size_t		need;

	if (s[0] >= 0xC2 && s[0] <= 0xDF)
		need = 2;
	else if (s[0] >= 0xE0 && s[0] <= 0xEF)
		need = 3;
	else if (s[0] >= 0xF0 && s[0] <= 0xF4)
		need = 4;
	else
		return 0;
	if (need > n)
		return 0;
	for (size_t i = 1; i < need; i++)
		if ((s[i] & 0xC0) != 0x80)
			return 0;
	/* no overlong 3- or 4-byte form, no surrogate, nothing past U+10FFFF */
	if ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0) ||
		(s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90))
		return 0;
	return need;
}

/*
 * out_json_string: s as a JSON string, quotes included: '"', '\\' and
 * control characters escaped, and any byte that is not well-formed UTF-8
 * written as U+FFFD (a database that is not UTF-8 may hold such names).
 */
static void
out_json_string(OtlpOut *o, const char *s)
{
	const unsigned char *p = (const unsigned char *) s;
	size_t		n = strlen(s);
	char		esc[8];

	out_bytes(o, "\"", 1);
	for (size_t i = 0; i < n;)
	{
		if (p[i] == '"' || p[i] == '\\')
		{
			esc[0] = '\\';
			esc[1] = (char) p[i];
			out_bytes(o, esc, 2);
			i++;
		}
		else if (p[i] < 0x20 || p[i] == 0x7F)
		{
			snprintf(esc, sizeof(esc), "\\u%04x", p[i]);
			out_bytes(o, esc, 6);
			i++;
		}
		else if (p[i] < 0x80)
			out_bytes(o, (const char *) p + i++, 1);
		else
		{
			size_t		len = utf8_length(p + i, n - i);

			if (len == 0)
			{
				out_str(o, "\\ufffd");
				i++;
			}
			else
			{
				out_bytes(o, (const char *) p + i, len);
				i += len;
			}
		}
	}
	out_bytes(o, "\"", 1);
}

/* out_u64: a decimal number as a JSON string (OTLP's 64-bit integers). */
static void
out_u64(OtlpOut *o, uint64_t v)
{
	char		num[24];

	snprintf(num, sizeof(num), "\"%llu\"", (unsigned long long) v);
	out_str(o, num);
}

/* out_attr_str: a string attribute, after a comma unless first; none if empty. */
static void
out_attr_str(OtlpOut *o, bool *first, const char *key, const char *value)
{
	if (value == NULL || value[0] == '\0')
		return;
	if (!*first)
		out_bytes(o, ",", 1);
	*first = false;
	out_str(o, "{\"key\":");
	out_json_string(o, key);
	out_str(o, ",\"value\":{\"stringValue\":");
	out_json_string(o, value);
	out_str(o, "}}");
}

/* out_attr_int: an integer attribute, after a comma unless first. */
static void
out_attr_int(OtlpOut *o, bool *first, const char *key, long long value)
{
	char		num[24];

	if (!*first)
		out_bytes(o, ",", 1);
	*first = false;
	out_str(o, "{\"key\":");
	out_json_string(o, key);
	snprintf(num, sizeof(num), "\"%lld\"", value);
	out_str(o, ",\"value\":{\"intValue\":");
	out_str(o, num);
	out_str(o, "}}");
}

/* out_attributes: the span's attributes array. */
static void
out_attributes(OtlpOut *o, const OtlpSpan *s)
{
	bool		first = true;

	out_str(o, ",\"attributes\":[");
	out_attr_str(o, &first, "http.request.method", "POST");
	if (s->status_code > 0)
		out_attr_int(o, &first, "http.response.status_code", s->status_code);
	out_attr_str(o, &first, "server.address", s->server_address);
	if (s->server_port > 0)
		out_attr_int(o, &first, "server.port", s->server_port);
	out_attr_str(o, &first, "url.full", s->url_full);
	out_attr_str(o, &first, "messaging.system", "grelout");
	out_attr_str(o, &first, "messaging.operation.type", "send");
	out_attr_str(o, &first, "messaging.message.id", s->message_id);
	out_attr_str(o, &first, "messaging.destination.name", s->topic);
	out_attr_str(o, &first, "grelout.handler", s->handler);
	out_attr_int(o, &first, "grelout.attempt", s->attempt);
	out_attr_str(o, &first, "error.type", s->error_type);
	out_str(o, "]");
}

/*
 * otlp_span_json: one span of an OTLP JSON spans array: name "POST" (the
 * HTTP client convention's method name), kind CLIENT (3), its ids and
 * times, its attributes, and on failure the status ERROR (2) with
 * error.type as its message.  Writes at most cap bytes, the NUL included;
 * returns the length of the whole text.
 */
size_t
otlp_span_json(const OtlpSpan *s, char *out, size_t cap)
{
	OtlpOut		o = {out, cap, 0};
	bool		failed = s->error_type != NULL && s->error_type[0] != '\0';

	out_str(&o, "{\"traceId\":");
	out_json_string(&o, s->trace_id);
	out_str(&o, ",\"spanId\":");
	out_json_string(&o, s->span_id);
	if (s->parent_span_id != NULL && s->parent_span_id[0] != '\0')
	{
		out_str(&o, ",\"parentSpanId\":");
		out_json_string(&o, s->parent_span_id);
	}
	out_str(&o, ",\"name\":\"POST\",\"kind\":3,\"startTimeUnixNano\":");
	out_u64(&o, s->start_ns);
	out_str(&o, ",\"endTimeUnixNano\":");
	out_u64(&o, s->end_ns < s->start_ns ? s->start_ns : s->end_ns);
	out_attributes(&o, s);
	if (failed)
	{
		out_str(&o, ",\"status\":{\"code\":2,\"message\":");
		out_json_string(&o, s->error_type);
		out_str(&o, "}");
	}
	out_str(&o, "}");
	return out_end(&o);
}

/*
 * otlp_request_head: the start of an ExportTraceServiceRequest, up to its
 * spans array: one resource (service.name "grelout"), one scope ("grelout",
 * of this version).  The spans follow, separated by commas, then
 * otlp_request_tail.  Bounded as otlp_span_json.
 */
size_t
otlp_request_head(const char *version, char *out, size_t cap)
{
	OtlpOut		o = {out, cap, 0};

	out_str(&o, "{\"resourceSpans\":[{\"resource\":{\"attributes\":["
			"{\"key\":\"service.name\",\"value\":{\"stringValue\":\"grelout\"}}]},"
			"\"scopeSpans\":[{\"scope\":{\"name\":\"grelout\",\"version\":");
	out_json_string(&o, version);
	out_str(&o, "},\"spans\":[");
	return out_end(&o);
}

/* otlp_request_tail: what closes otlp_request_head's text. */
const char *
otlp_request_tail(void)
{
	return "]}]}]}";
}

/* scheme_length: 7 for http://, 8 for https:// (any case), else 0. */
static size_t
scheme_length(const char *url, size_t len)
{
	if (len >= 7 && strncasecmp(url, "http://", 7) == 0)
		return 7;
	if (len >= 8 && strncasecmp(url, "https://", 8) == 0)
		return 8;
	return 0;
}

/* authority_end: where the authority that starts at start ends. */
static size_t
authority_end(const char *url, size_t len, size_t start)
{
	size_t		end = start;

	while (end < len && url[end] != '/' && url[end] != '?' && url[end] != '#')
		end++;
	return end;
}

/* host_start: where the host starts, after any userinfo, in [start, end). */
static size_t
host_start(const char *url, size_t start, size_t end)
{
	size_t		host = start;

	for (size_t i = start; i < end; i++)
		if (url[i] == '@')
			host = i + 1;
	return host;
}

/*
 * otlp_url_full: url.full of an attempt to url: scheme, host, port and
 * path as they are; any userinfo as "REDACTED:REDACTED@"; every query
 * parameter's value "REDACTED" (a parameter without '=' is kept: it has
 * no value); no fragment.  Not an http or https URL: "" (the attribute is
 * left out).  Bounded as otlp_span_json.
 */
size_t
otlp_url_full(const char *url, size_t len, char *out, size_t cap)
{
	OtlpOut		o = {out, cap, 0};
	size_t		start = scheme_length(url, len);
	size_t		end;
	size_t		host;
	size_t		i;

	if (start == 0)
		return out_end(&o);
	out_bytes(&o, url, start);
	end = authority_end(url, len, start);
	host = host_start(url, start, end);
	if (host > start)
		out_str(&o, "REDACTED:REDACTED@");
	out_bytes(&o, url + host, end - host);

	i = end;
	while (i < len && url[i] != '?' && url[i] != '#')
		i++;
	out_bytes(&o, url + end, i - end);
	if (i < len && url[i] == '?')
	{
		out_bytes(&o, "?", 1);
		i++;
		while (i < len && url[i] != '#')
		{
			size_t		p = i;

			while (p < len && url[p] != '&' && url[p] != '#' && url[p] != '=')
				p++;
			out_bytes(&o, url + i, p - i);
			if (p < len && url[p] == '=')
			{
				out_str(&o, "=REDACTED");
				while (p < len && url[p] != '&' && url[p] != '#')
					p++;
			}
			if (p < len && url[p] == '&')
			{
				out_bytes(&o, "&", 1);
				p++;
			}
			i = p;
		}
	}
	return out_end(&o);
}

/*
 * otlp_server: server.address and server.port of an http or https URL:
 * its host (an IPv6 literal without its brackets), cut to hostcap - 1
 * bytes, and its port, or the scheme's (80, 443).  False when url is no
 * such URL, or its port is no number up to 65535.
 */
bool
otlp_server(const char *url, size_t len, char *host, size_t hostcap, int *port)
{
	size_t		start = scheme_length(url, len);
	size_t		end;
	size_t		h;
	size_t		hend;
	size_t		n;

	if (start == 0 || hostcap == 0)
		return false;
	end = authority_end(url, len, start);
	h = host_start(url, start, end);
	if (h < end && url[h] == '[')
	{
		h++;
		hend = h;
		while (hend < end && url[hend] != ']')
			hend++;
		if (hend >= end)
			return false;
		n = hend - h;
		hend++;
	}
	else
	{
		hend = h;
		while (hend < end && url[hend] != ':')
			hend++;
		n = hend - h;
	}
	if (n == 0)
		return false;
	*port = (start == 8) ? 443 : 80;
	if (hend < end)
	{
		long		p = 0;

		if (url[hend] != ':' || hend + 1 == end)
			return false;
		for (size_t i = hend + 1; i < end; i++)
		{
			if (url[i] < '0' || url[i] > '9' || (p = p * 10 + (url[i] - '0')) > 65535)
				return false;
		}
		*port = (int) p;
	}
	if (n > hostcap - 1)
		n = hostcap - 1;
	memcpy(host, url + h, n);
	host[n] = '\0';
	return true;
}

/*
 * otlp_error_type: into out (OTLP_ERROR_TYPE_MAX bytes), error.type of a
 * failed attempt (the conventions: the status code of an answer, else a
 * low-cardinality name of what failed): the answer's status ("503"), or
 * "refused" (grelout's address policy), "timeout", "name_resolution",
 * "connection_refused", "tls", or "transport" for any other failure to
 * get an answer.
 */
void
otlp_error_type(bool responded, long status, int curl_result, bool refused,
				char *out)
{
	const char *name;

	if (responded)
	{
		snprintf(out, OTLP_ERROR_TYPE_MAX, "%ld", status);
		return;
	}
	if (refused)
		name = "refused";
	else
	{
		switch (curl_result)
		{
			case CURLE_OPERATION_TIMEDOUT:
				name = "timeout";
				break;
			case CURLE_COULDNT_RESOLVE_HOST:
				name = "name_resolution";
				break;
			case CURLE_COULDNT_CONNECT:
				name = "connection_refused";
				break;
			case CURLE_SSL_CONNECT_ERROR:
			case CURLE_PEER_FAILED_VERIFICATION:
			case CURLE_SSL_CERTPROBLEM:
			case CURLE_SSL_CIPHER:
			case CURLE_SSL_CACERT_BADFILE:
				name = "tls";
				break;
			default:
				name = "transport";
				break;
		}
	}
	snprintf(out, OTLP_ERROR_TYPE_MAX, "%s", name);
}
