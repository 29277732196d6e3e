/*-------------------------------------------------------------------------
 *
 * test_otlp.c
 *	  Unit tests of src/pure/otlp.c: url.full with userinfo and query values
 *	  redacted, server.address and server.port of a URL, error.type of a
 *	  failed attempt, one span's OTLP JSON (ids, times as strings, the
 *	  attributes, the ERROR status, escaping and bad UTF-8), the request
 *	  around a batch, and the bounded writers' lengths.  Prints TAP.
 *
 *-------------------------------------------------------------------------
 */
#include <curl/curl.h>
#include <string.h>

#include "otlp.h"
#include "tap.h"

/* url_full: otlp_url_full of a C string into out. */
static const char *
url_full(const char *url, char *out, size_t cap)
{
	otlp_url_full(url, strlen(url), out, cap);
	return out;
}

/* has: does text contain part? */
static int
has(const char *text, const char *part)
{
	return strstr(text, part) != NULL;
}

/* test_urls: url.full and server.address, server.port. */
static void
test_urls(void)
{
	char		out[OTLP_URL_MAX];
	char		host[OTLP_HOST_MAX];
	int			port = 0;

	is_str(url_full("http://127.0.0.1:8080/orders", out, sizeof(out)),
		   "http://127.0.0.1:8080/orders", "a plain URL is kept");
	is_str(url_full("https://alice:s3cret@hooks.example.com/in", out, sizeof(out)),
		   "https://REDACTED:REDACTED@hooks.example.com/in", "userinfo is redacted");
	is_str(url_full("https://tok@hooks.example.com/", out, sizeof(out)),
		   "https://REDACTED:REDACTED@hooks.example.com/", "a user alone is redacted too");
	is_str(url_full("http://h/p?key=abc&mode=x&flag#frag", out, sizeof(out)),
		   "http://h/p?key=REDACTED&mode=REDACTED&flag", "query values redacted, fragment dropped");
	is_str(url_full("http://h/p?a=b=c&&d=", out, sizeof(out)),
		   "http://h/p?a=REDACTED&&d=REDACTED", "odd queries keep no value");
	is_str(url_full("http://u:p@h?x=1", out, sizeof(out)),
		   "http://REDACTED:REDACTED@h?x=REDACTED", "no path");
	is_str(url_full("ftp://u:p@h/", out, sizeof(out)), "", "not http: nothing");
	is_int((long long) otlp_url_full("http://u:p@h/", 13, NULL, 0),
		   (long long) strlen("http://REDACTED:REDACTED@h/"), "the length without room");
	url_full("http://u:p@hooks.example.com/", out, 12);
	is_str(out, "http://REDA", "cut to the room, NUL-terminated");

	ok(otlp_server("https://u:p@hooks.example.com/in", 32, host, sizeof(host), &port) &&
	   strcmp(host, "hooks.example.com") == 0 && port == 443, "https host, default port");
	ok(otlp_server("http://127.0.0.1:8080/x", 23, host, sizeof(host), &port) &&
	   strcmp(host, "127.0.0.1") == 0 && port == 8080, "host and port");
	ok(otlp_server("http://[::1]:9/x", 16, host, sizeof(host), &port) &&
	   strcmp(host, "::1") == 0 && port == 9, "IPv6 literal without brackets");
	ok(otlp_server("http://h?q", 10, host, sizeof(host), &port) &&
	   strcmp(host, "h") == 0 && port == 80, "http default port, query at once");
	ok(!otlp_server("http://h:99999/", 15, host, sizeof(host), &port), "port out of range");
	ok(!otlp_server("http://h:8a/", 12, host, sizeof(host), &port), "port not a number");
	ok(!otlp_server("http:///x", 9, host, sizeof(host), &port), "no host");
	ok(!otlp_server("mailto:x", 8, host, sizeof(host), &port), "not http");
	ok(otlp_server("http://abcdef/", 14, host, 4, &port) && strcmp(host, "abc") == 0,
	   "host cut to its room");
}

/* test_error_types: error.type for answers and transport failures. */
static void
test_error_types(void)
{
	char		t[OTLP_ERROR_TYPE_MAX];

	otlp_error_type(true, 503, CURLE_OK, false, t);
	is_str(t, "503", "an answer: its status");
	otlp_error_type(false, 0, CURLE_OPERATION_TIMEDOUT, false, t);
	is_str(t, "timeout", "timeout");
	otlp_error_type(false, 0, CURLE_COULDNT_CONNECT, false, t);
	is_str(t, "connection_refused", "connection refused");
	otlp_error_type(false, 0, CURLE_COULDNT_CONNECT, true, t);
	is_str(t, "refused", "refused by the address policy");
	otlp_error_type(false, 0, CURLE_COULDNT_RESOLVE_HOST, false, t);
	is_str(t, "name_resolution", "name resolution");
	otlp_error_type(false, 0, CURLE_PEER_FAILED_VERIFICATION, false, t);
	is_str(t, "tls", "TLS");
	otlp_error_type(false, 0, CURLE_RECV_ERROR, false, t);
	is_str(t, "transport", "anything else");
}

/* test_spans: one span's JSON and a request around it. */
static void
test_spans(void)
{
	OtlpSpan	s;
	char		out[4096];
	char		small[16];
	size_t		n;
	size_t		head;
	const char *head_want = "{\"traceId\":\"4bf92f3577b34da6a3ce929d0e0e4736\",\"spanId\":\"deadbeef01234567\","
		"\"parentSpanId\":\"00f067aa0ba902b7\",\"name\":\"POST\",\"kind\":3,"
		"\"startTimeUnixNano\":\"1700000000000000000\",\"endTimeUnixNano\":\"1700000000123456789\","
		"\"attributes\":[";

	memset(&s, 0, sizeof(s));
	s.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
	s.span_id = "deadbeef01234567";
	s.parent_span_id = "00f067aa0ba902b7";
	s.start_ns = UINT64_C(1700000000000000000);
	s.end_ns = UINT64_C(1700000000123456789);
	s.url_full = "http://h:8/x";
	s.server_address = "h";
	s.server_port = 8;
	s.message_id = "0190a4b2-0000-7000-8000-000000000001";
	s.topic = "orders";
	s.handler = "billing";
	s.attempt = 2;
	s.status_code = 200;

	n = otlp_span_json(&s, out, sizeof(out));
	is_int((long long) n, (long long) strlen(out), "the length returned is the text's");
	ok(strncmp(out, head_want, strlen(head_want)) == 0,
	   "ids, name, kind and times as strings");
	ok(has(out, "{\"key\":\"http.request.method\",\"value\":{\"stringValue\":\"POST\"}}"), "http.request.method");
	ok(has(out, "{\"key\":\"http.response.status_code\",\"value\":{\"intValue\":\"200\"}}"), "http.response.status_code");
	ok(has(out, "{\"key\":\"server.address\",\"value\":{\"stringValue\":\"h\"}}"), "server.address");
	ok(has(out, "{\"key\":\"server.port\",\"value\":{\"intValue\":\"8\"}}"), "server.port");
	ok(has(out, "{\"key\":\"url.full\",\"value\":{\"stringValue\":\"http://h:8/x\"}}"), "url.full");
	ok(has(out, "{\"key\":\"messaging.message.id\",\"value\":{\"stringValue\":\"0190a4b2-0000-7000-8000-000000000001\"}}"),
	   "messaging.message.id");
	ok(has(out, "{\"key\":\"messaging.destination.name\",\"value\":{\"stringValue\":\"orders\"}}"),
	   "messaging.destination.name");
	ok(has(out, "{\"key\":\"grelout.handler\",\"value\":{\"stringValue\":\"billing\"}}"), "grelout.handler");
	ok(has(out, "{\"key\":\"grelout.attempt\",\"value\":{\"intValue\":\"2\"}}"), "grelout.attempt");
	ok(!has(out, "\"status\"") && !has(out, "error.type"), "no error status on success");
	is_int(out[n - 1], '}', "one object");

	small[0] = 'x';
	is_int((long long) otlp_span_json(&s, small, sizeof(small)), (long long) n,
		   "the whole length with less room");
	is_int((long long) strlen(small), (long long) sizeof(small) - 1, "cut and NUL-terminated");

	s.parent_span_id = "";
	s.status_code = 0;
	s.error_type = "timeout";
	s.topic = "a\"b\\c\nd\xff\xc3\xa9";
	s.handler = NULL;
	s.end_ns = 1;
	otlp_span_json(&s, out, sizeof(out));
	ok(!has(out, "parentSpanId"), "a root span has no parentSpanId");
	ok(!has(out, "http.response.status_code"), "no status code without an answer");
	ok(has(out, "\"status\":{\"code\":2,\"message\":\"timeout\"}"), "ERROR status with error.type");
	ok(has(out, "{\"key\":\"error.type\",\"value\":{\"stringValue\":\"timeout\"}}"), "error.type");
	ok(has(out, "\"stringValue\":\"a\\\"b\\\\c\\u000ad\\ufffd\xc3\xa9\""),
	   "escapes, bad UTF-8 replaced, good UTF-8 kept");
	ok(!has(out, "grelout.handler"), "no handler, no grelout.handler");
	ok(has(out, "\"endTimeUnixNano\":\"1700000000000000000\""), "an end before the start is the start");

	head = otlp_request_head("1.2.0", out, sizeof(out));
	is_str(out, "{\"resourceSpans\":[{\"resource\":{\"attributes\":["
		   "{\"key\":\"service.name\",\"value\":{\"stringValue\":\"grelout\"}}]},"
		   "\"scopeSpans\":[{\"scope\":{\"name\":\"grelout\",\"version\":\"1.2.0\"},\"spans\":[",
		   "the request's head");
	is_int((long long) head, (long long) strlen(out), "its length");
	is_str(otlp_request_tail(), "]}]}]}", "its tail closes it");
}

int
main(void)
{
	test_urls();
	test_error_types();
	test_spans();
	return done_testing();
}
