/*-------------------------------------------------------------------------
 *
 * test_edge.c
 *	  Unit tests of src/pure/edge.c, the parsers and checks at grelout's network
 *	  edge: header names and values, handler URLs, base64 and webhook
 *	  secrets, HTTP status and header lines, Retry-After, the classification
 *	  of endpoint addresses, CIDRs, and grelout.database lists.  Prints TAP.
 *
 * Also holds the regression cases found by the fuzz targets in fuzz/.
 *
 *-------------------------------------------------------------------------
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "edge.h"
#include "tap.h"

/* S: a string literal as (pointer, length), without its NUL. */
#define S(lit) (lit), (sizeof(lit) - 1)

/* ---------------------------------------------------------------- headers */

/* test_header_names: RFC 9110 tokens of 1 to 256 bytes. */
static void
test_header_names(void)
{
	char		buf[GRELOUT_HEADER_NAME_MAX + 2];
	static const char *const good[] = {
		"X-Trace", "traceparent", "a", "Authorization", "x_1.2",
		"!#$%&'*+-.^_`|~", NULL
	};
	static const char *const bad[] = {
		"X Trace", "X:Y", "X-Trace:", "a/b", "a(b)", "a\"b", "a@b", "a,b",
		"a;b", "a=b", "a{b}", "a[b]", "a\\b", "a?b", "\xc3\xa9t\xc3\xa9",
		"a\tb", "a\rb", "a\nb", "a\x7f", NULL
	};

	for (int i = 0; good[i]; i++)
		ok(edge_header_name_valid(good[i], strlen(good[i])),
		   "header name \"%s\" is valid", good[i]);
	for (int i = 0; bad[i]; i++)
		ok(!edge_header_name_valid(bad[i], strlen(bad[i])),
		   "header name %d of the bad list is refused", i);
	ok(!edge_header_name_valid("", 0), "empty header name is refused");
	ok(!edge_header_name_valid(S("X-A\0B")), "header name with NUL is refused");

	memset(buf, 'h', sizeof(buf));
	ok(edge_header_name_valid(buf, GRELOUT_HEADER_NAME_MAX),
	   "header name of %d bytes is valid", GRELOUT_HEADER_NAME_MAX);
	ok(!edge_header_name_valid(buf, GRELOUT_HEADER_NAME_MAX + 1),
	   "header name of %d bytes is refused", GRELOUT_HEADER_NAME_MAX + 1);
}

/* test_header_values: no CR, LF or NUL, at most 8192 bytes. */
static void
test_header_values(void)
{
	char	   *buf = malloc(GRELOUT_HEADER_VALUE_MAX + 1);

	ok(edge_header_value_valid("", 0), "empty header value is valid");
	ok(edge_header_value_valid(S("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")),
	   "traceparent value is valid");
	ok(edge_header_value_valid(S("a\tb c")), "tab and space are valid in a value");
	ok(edge_header_value_valid(S("caf\xc3\xa9")), "UTF-8 bytes are valid in a value");
	ok(!edge_header_value_valid(S("a\rb")), "CR in a value is refused");
	ok(!edge_header_value_valid(S("a\nb")), "LF in a value is refused");
	ok(!edge_header_value_valid(S("a\r\nX-Injected: 1")), "CRLF injection is refused");
	ok(!edge_header_value_valid(S("a\0b")), "NUL in a value is refused");
	ok(!edge_header_value_valid(S("a\x01""b")), "SOH in a value is refused");
	ok(!edge_header_value_valid(S("a\x0b""b")), "VT in a value is refused");
	ok(!edge_header_value_valid(S("a\x0c""b")), "FF in a value is refused");
	ok(!edge_header_value_valid(S("a\x7f""b")), "DEL in a value is refused");
	ok(!edge_header_value_valid(S("a\xc2\x85""b")), "U+0085 (NEL, C1) in a value is refused");
	ok(edge_header_value_valid(S("a\xc2\xa0""b")), "U+00A0 (not a control) in a value is valid");
	ok(edge_control_free(S("order.created"), false), "a plain topic has no control");
	ok(!edge_control_free(S("a\tb"), false), "HTAB is a control where it is not allowed");
	ok(!edge_control_free(S("a\xc2\x9f"), false), "U+009F is a C1 control");
	ok(edge_control_free(S("a\xc2"), false), "a lone C2 at the end is no control (and is read no further)");
	ok(edge_control_free(S("caf\xc3\xa9"), false), "UTF-8 letters are no controls");
	memset(buf, 'v', GRELOUT_HEADER_VALUE_MAX + 1);
	ok(edge_header_value_valid(buf, GRELOUT_HEADER_VALUE_MAX),
	   "value of %d bytes is valid", GRELOUT_HEADER_VALUE_MAX);
	ok(!edge_header_value_valid(buf, GRELOUT_HEADER_VALUE_MAX + 1),
	   "value of %d bytes is refused", GRELOUT_HEADER_VALUE_MAX + 1);
	free(buf);
}

/* test_header_reserved: the relay's own headers, whatever their case. */
static void
test_header_reserved(void)
{
	static const char *const reserved[] = {
		"content-type", "Content-Type", "CONTENT-LENGTH", "Host", "connection",
		"Transfer-Encoding", "user-agent", "Webhook-Id", "WEBHOOK-TIMESTAMP",
		"webhook-signature", "grelout-topic", "Grelout-Attempt", "GRELOUT-KEY",
		"grelout-anything-at-all", "grelout-", NULL
	};
	static const char *const free_names[] = {
		"x-content-type", "content-typ", "content-types", "webhook-id2",
		"webhook", "grelout", "grelout_topic", "x-grelout-topic", "hosts",
		"authorization", "traceparent", NULL
	};

	for (int i = 0; reserved[i]; i++)
		ok(edge_header_name_reserved(reserved[i], strlen(reserved[i])),
		   "\"%s\" is reserved", reserved[i]);
	for (int i = 0; free_names[i]; i++)
		ok(!edge_header_name_reserved(free_names[i], strlen(free_names[i])),
		   "\"%s\" is not reserved", free_names[i]);
	ok(edge_header_name_reserved("hostname", 4),
	   "only the given length counts (\"host\" of \"hostname\")");
	ok(!edge_header_name_reserved("", 0), "empty name is not reserved");
	ok(edge_header_name_message_reserved(S("Authorization")), "messages may not set Authorization");
	ok(edge_header_name_message_reserved(S("proxy-AUTHORIZATION")), "... nor Proxy-Authorization");
	ok(edge_header_name_message_reserved(S("Cookie")), "... nor Cookie");
	ok(edge_header_name_message_reserved(S("webhook-id")), "... nor any reserved name");
	ok(!edge_header_name_reserved(S("Authorization")), "handlers may set Authorization");
	ok(!edge_header_name_message_reserved(S("Authorizations")), "a longer name is free");
	ok(!edge_header_name_message_reserved(S("X-HTTP-Method-Override")), "X-HTTP-Method-Override is free");

	/* issue 29: the names a message may not set, in 1.2 */
	{
		static const char *const msg_reserved[] = {
			"webhook-anything", "Webhook-Version", "WEBHOOK-", "keep-alive", "Keep-Alive",
			"proxy-connection", "te", "TE", "trailer", "Transfer-Encoding", "upgrade",
			"Expect", "host", "Content-Length", "content-encoding", "CONTENT-ENCODING",
			"connection", "content-type", "user-agent", "grelout-x", "cookie", NULL
		};
		static const char *const msg_free[] = {
			"webhook", "webhooks-id", "x-webhook-id", "tes", "t", "trailers", "upgrade-insecure",
			"expected", "content-language", "content-encodings", "traceparent",
			"x-request-id", "keepalive", NULL
		};

		for (int i = 0; msg_reserved[i]; i++)
			ok(edge_header_name_message_reserved(msg_reserved[i], strlen(msg_reserved[i])),
			   "\"%s\" is reserved in messages", msg_reserved[i]);
		for (int i = 0; msg_free[i]; i++)
			ok(!edge_header_name_message_reserved(msg_free[i], strlen(msg_free[i])),
			   "\"%s\" is free in messages", msg_free[i]);
		ok(!edge_header_name_reserved(S("keep-alive")), "handlers keep their 1.1 rules (keep-alive)");
		ok(!edge_header_name_reserved(S("webhook-version")), "handlers keep their 1.1 rules (webhook-version)");
	}

	/* blank values: libcurl drops them, and a default header with them */
	ok(edge_header_value_blank(S("")), "an empty value is blank");
	ok(edge_header_value_blank(S(" ")), "a space is blank");
	ok(edge_header_value_blank(S(" \t  ")), "spaces and tabs are blank");
	ok(!edge_header_value_blank(S(" x ")), "a value with a character is not");
	ok(!edge_header_value_blank(S("\xC2\xA0")), "a no-break space is a character");
}

/* -------------------------------------------------------------------- URL */

/* url_is: check one URL's verdict. */
static void
url_is(const char *url, size_t len, EdgeUrlError expected, const char *why)
{
	is_int(edge_url_check(url, len), expected, "url: %s", why);
}

/* test_url: http or https, a host, no white space or control character. */
static void
test_url(void)
{
	char	   *buf = malloc(GRELOUT_URL_MAX + 2);

	url_is(S("http://example.com"), EDGE_URL_OK, "plain http");
	url_is(S("https://example.com/path?q=1#frag"), EDGE_URL_OK, "https with path, query, fragment");
	url_is(S("HTTPS://EXAMPLE.COM/"), EDGE_URL_OK, "scheme in upper case");
	url_is(S("http://user:pw@host:8080/x"), EDGE_URL_OK, "userinfo and port");
	url_is(S("http://127.0.0.1:80/"), EDGE_URL_OK, "IPv4 literal");
	url_is(S("http://[::1]:8080/"), EDGE_URL_OK, "IPv6 literal");
	url_is(S("http://[::ffff:127.0.0.1]/"), EDGE_URL_OK, "IPv4-mapped literal");
	url_is(S("http://h?x"), EDGE_URL_OK, "query right after the host");

	url_is(S("file:///etc/passwd"), EDGE_URL_BAD_SCHEME, "file:// refused");
	url_is(S("gopher://127.0.0.1:70/_x"), EDGE_URL_BAD_SCHEME, "gopher:// refused");
	url_is(S("ftp://example.com/"), EDGE_URL_BAD_SCHEME, "ftp:// refused");
	url_is(S("dict://example.com/"), EDGE_URL_BAD_SCHEME, "dict:// refused");
	url_is(S("ldap://example.com/"), EDGE_URL_BAD_SCHEME, "ldap:// refused");
	url_is(S("httpx://example.com/"), EDGE_URL_BAD_SCHEME, "httpx:// refused");
	url_is(S("http:/example.com"), EDGE_URL_BAD_SCHEME, "one slash refused");
	url_is(S("http:example.com"), EDGE_URL_BAD_SCHEME, "no slashes refused");
	url_is(S("//example.com"), EDGE_URL_BAD_SCHEME, "scheme-relative refused");
	url_is(S("example.com"), EDGE_URL_BAD_SCHEME, "no scheme refused");
	url_is(S(""), EDGE_URL_BAD_SCHEME, "empty refused");
	url_is(S("http"), EDGE_URL_BAD_SCHEME, "scheme name only refused");

	url_is(S("http://"), EDGE_URL_NO_HOST, "no host");
	url_is(S("https://"), EDGE_URL_NO_HOST, "https, no host");
	url_is(S("http:///path"), EDGE_URL_NO_HOST, "empty host with path");
	url_is(S("http://:80/"), EDGE_URL_NO_HOST, "port without host");
	url_is(S("http://user@/x"), EDGE_URL_NO_HOST, "userinfo without host");
	url_is(S("http://user@:80/x"), EDGE_URL_NO_HOST, "userinfo and port without host");
	url_is(S("http://?q"), EDGE_URL_NO_HOST, "query without host");
	url_is(S("http://#f"), EDGE_URL_NO_HOST, "fragment without host");
	url_is(S("http://[]/"), EDGE_URL_NO_HOST, "empty IPv6 brackets");
	url_is(S("http://[::1/"), EDGE_URL_NO_HOST, "unclosed IPv6 bracket");

	url_is(S("http://exa mple.com/"), EDGE_URL_BAD_CHAR, "space refused");
	url_is(S(" http://example.com/"), EDGE_URL_BAD_CHAR, "leading space refused");
	url_is(S("http://example.com/\t"), EDGE_URL_BAD_CHAR, "tab refused");
	url_is(S("http://example.com/\r\nHost: x"), EDGE_URL_BAD_CHAR, "CRLF refused");
	url_is(S("http://example.com/\x7f"), EDGE_URL_BAD_CHAR, "DEL refused");
	url_is(S("http://example.com\0.evil/"), EDGE_URL_BAD_CHAR, "NUL refused");

	memcpy(buf, "http://h/", 9);
	memset(buf + 9, 'p', GRELOUT_URL_MAX + 2 - 9);
	url_is(buf, GRELOUT_URL_MAX, EDGE_URL_OK, "URL of exactly the maximum length");
	url_is(buf, GRELOUT_URL_MAX + 1, EDGE_URL_TOO_LONG, "URL one byte too long");
	free(buf);
}

/* ----------------------------------------------------------------- base64 */

/* test_base64_vectors: RFC 4648 section 10. */
static void
test_base64_vectors(void)
{
	static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
	static const char *const coded[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
	static const char *const unpadded[] = {"", "Zg", "Zm8", "Zm9v", "Zm9vYg", "Zm9vYmE", "Zm9vYmFy"};

	for (int i = 0; i < 7; i++)
	{
		char		enc[16];
		unsigned char dec[16];
		long		n;
		size_t		elen = edge_base64_encode((const unsigned char *) plain[i],
											  strlen(plain[i]), enc);

		is_str(enc, coded[i], "base64 of \"%s\"", plain[i]);
		is_int((long long) elen, (long long) strlen(coded[i]), "encoded length of \"%s\"", plain[i]);
		n = edge_base64_decode(coded[i], strlen(coded[i]), dec, sizeof(dec));
		ok(n == (long) strlen(plain[i]) && memcmp(dec, plain[i], n) == 0,
		   "decode \"%s\"", coded[i]);
		n = edge_base64_decode(unpadded[i], strlen(unpadded[i]), dec, sizeof(dec));
		ok(n == (long) strlen(plain[i]) && memcmp(dec, plain[i], n) == 0,
		   "decode unpadded \"%s\"", unpadded[i]);
	}
	{
		unsigned char all[256];
		unsigned char back[256];
		char		enc[400];
		size_t		elen;
		long		n;

		for (int i = 0; i < 256; i++)
			all[i] = (unsigned char) i;
		elen = edge_base64_encode(all, 256, enc);
		is_int((long long) elen, 344, "base64 of 256 bytes is 344 characters");
		ok(strspn(enc, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") == elen,
		   "encoding uses the standard alphabet only");
		n = edge_base64_decode(enc, elen, back, sizeof(back));
		ok(n == 256 && memcmp(all, back, 256) == 0, "every byte value round-trips");
	}
}

/* test_base64_round_trips: every length from 0 to 200, pseudo-random data. */
static void
test_base64_round_trips(void)
{
	uint32_t	seed = 12345;
	int			bad = 0;

	for (size_t len = 0; len <= 200; len++)
	{
		unsigned char src[200];
		unsigned char back[200];
		char		enc[300];
		size_t		elen;
		long		n;

		for (size_t i = 0; i < len; i++)
		{
			seed = seed * 1103515245 + 12345;
			src[i] = (unsigned char) (seed >> 16);
		}
		elen = edge_base64_encode(src, len, enc);
		if (elen != 4 * ((len + 2) / 3) || enc[elen] != '\0')
			bad++;
		n = edge_base64_decode(enc, elen, back, sizeof(back));
		if (n != (long) len || memcmp(src, back, len) != 0)
			bad++;
		/* exactly len bytes of room is enough, one less is not */
		if (edge_base64_decode(enc, elen, back, len) != (long) len)
			bad++;
		if (len > 0 && edge_base64_decode(enc, elen, back, len - 1) != -1)
			bad++;
	}
	is_int(bad, 0, "base64 round trips of 0..200 bytes, with exact output room");
}

/* test_base64_bad: malformed input is refused, never half-decoded. */
static void
test_base64_bad(void)
{
	static const char *const bad[] = {
		"Z", "Zg=", "Zg===", "Zm9vY", "Zh==", "Zm9=", "Zm9v!", "Zm 9v",
		"=Zm9", "Zg==Zg==", "Zm9v====", "Zm9-", "Zm9_", "Zm9v\n", "====", "=", NULL
	};
	unsigned char dec[64];

	for (int i = 0; bad[i]; i++)
		is_int(edge_base64_decode(bad[i], strlen(bad[i]), dec, sizeof(dec)), -1,
			   "bad base64 #%d is refused", i);
	is_int(edge_base64_decode(S("Zm9\0v"), dec, sizeof(dec)), -1, "NUL inside base64 is refused");
	is_int(edge_base64_decode(S("Zm9vYmFy"), dec, 5), -1, "output larger than the room is refused");
	is_int(edge_base64_decode(S("Zm9vYmFy"), dec, 6), 6, "output exactly the room is accepted");
}

/* ---------------------------------------------------------------- secrets */

/* make_secret: "whsec_" + base64 of n bytes (value i*7+1). */
static size_t
make_secret(size_t n, char *out)
{
	unsigned char raw[200];

	for (size_t i = 0; i < n; i++)
		raw[i] = (unsigned char) (i * 7 + 1);
	memcpy(out, "whsec_", 6);
	return 6 + edge_base64_encode(raw, n, out + 6);
}

/* test_secrets: whsec_ + base64 of 24 to 64 bytes. */
static void
test_secrets(void)
{
	unsigned char key[GRELOUT_SECRET_MAX_BYTES];
	size_t		keylen = 0;
	char		secret[400];
	size_t		len;
	char		enc[100];

	is_int(edge_secret_decode(S("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), key, &keylen),
		   EDGE_SECRET_OK, "the specification's example secret decodes");
	is_int((long long) keylen, 24, "... to 24 bytes");
	edge_base64_encode(key, keylen, enc);
	is_str(enc, "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "... that encode back to its base64 part");

	for (size_t n = 20; n <= 70; n++)
	{
		EdgeSecretError expected = (n >= 24 && n <= 64) ? EDGE_SECRET_OK : EDGE_SECRET_BAD_LENGTH;
		EdgeSecretError got;
		int			right;

		len = make_secret(n, secret);
		keylen = 0;
		memset(key, 0, sizeof(key));
		got = edge_secret_decode(secret, len, key, &keylen);
		right = (got == expected);
		if (got == EDGE_SECRET_OK)
		{
			right = right && keylen == n;
			for (size_t i = 0; i < n && right; i++)
				right = key[i] == (unsigned char) (i * 7 + 1);
		}
		ok(right, "secret of %zu bytes: %s", n,
		   expected == EDGE_SECRET_OK ? "accepted, key decoded" : "refused for its length");
	}

	is_int(edge_secret_decode(S("whsec_"), key, &keylen), EDGE_SECRET_BAD_LENGTH,
		   "empty secret after the prefix is refused");
	len = make_secret(200, secret);
	is_int(edge_secret_decode(secret, len, key, &keylen), EDGE_SECRET_BAD_LENGTH,
		   "secret of 200 bytes is refused for its length");
	{
		char	   *huge = malloc(6 + 8000 + 1);

		memcpy(huge, "whsec_", 6);
		memset(huge + 6, 'A', 8000);
		ok(edge_secret_decode(huge, 6 + 8000, key, &keylen) != EDGE_SECRET_OK,
		   "secret of 6000 bytes is refused");
		free(huge);
	}

	is_int(edge_secret_decode(S("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), key, &keylen),
		   EDGE_SECRET_NO_PREFIX, "secret without whsec_ is refused");
	is_int(edge_secret_decode(S("WHSEC_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), key, &keylen),
		   EDGE_SECRET_NO_PREFIX, "prefix in upper case is refused");
	is_int(edge_secret_decode(S("whsec"), key, &keylen), EDGE_SECRET_NO_PREFIX,
		   "\"whsec\" alone is refused");
	is_int(edge_secret_decode(S(""), key, &keylen), EDGE_SECRET_NO_PREFIX,
		   "empty secret is refused");
	is_int(edge_secret_decode(S("whsec-MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), key, &keylen),
		   EDGE_SECRET_NO_PREFIX, "whsec- (dash) is refused");
	is_int(edge_secret_decode(S("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLa!w"), key, &keylen),
		   EDGE_SECRET_BAD_BASE64, "bad base64 character is refused");
	is_int(edge_secret_decode(S("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2La-aSw"), key, &keylen),
		   EDGE_SECRET_BAD_BASE64, "base64url character is refused");
	is_int(edge_secret_decode(S("whsec_ MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), key, &keylen),
		   EDGE_SECRET_BAD_BASE64, "space after the prefix is refused");
	is_int(edge_secret_decode(S("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS"), key, &keylen),
		   EDGE_SECRET_BAD_BASE64, "truncated base64 is refused");
	is_int(edge_secret_decode(S("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n"), key, &keylen),
		   EDGE_SECRET_BAD_BASE64, "trailing newline is refused");
}

/* ------------------------------------------------------- response parsing */

/* status_is: a status line that parses to code. */
static void
status_is(const char *line, int code)
{
	int			status = -1;
	bool		r = edge_status_line(line, strlen(line), &status);

	ok(r && status == code, "status line \"%.*s\" gives %d", (int) strcspn(line, "\r\n"), line, code);
}

/* status_bad: a line that is not a status line. */
static void
status_bad(const char *line, size_t len, const char *why)
{
	int			status = -1;

	ok(!edge_status_line(line, len, &status) && status == -1,
	   "not a status line: %s", why);
}

/* test_status_line: "HTTP/x[.y] NNN ...". */
static void
test_status_line(void)
{
	status_is("HTTP/1.1 200 OK\r\n", 200);
	status_is("HTTP/1.1 204 No Content\r\n", 204);
	status_is("HTTP/1.0 503 Service Unavailable\r\n", 503);
	status_is("HTTP/2 404\r\n", 404);
	status_is("HTTP/2 429 \r\n", 429);
	status_is("HTTP/1.1 100 Continue\r\n", 100);
	status_is("HTTP/1.1 302 Found\n", 302);
	status_is("HTTP/1.1 410", 410);
	status_is("HTTP/1.1 599 Whatever", 599);

	status_bad(S("HTTP/1.1 099 Low\r\n"), "code below 100");
	status_bad(S("HTTP/1.1 000\r\n"), "code 000");
	status_bad(S("HTTP/1.1 20 OK\r\n"), "two-digit code");
	status_bad(S("HTTP/1.1 2000 OK\r\n"), "four-digit code");
	status_bad(S("HTTP/1.1 2x0 OK\r\n"), "letter in the code");
	status_bad(S("HTTP/1.1 -20 OK\r\n"), "sign in the code");
	status_bad(S("HTTP/1.1  200 OK\r\n"), "two spaces before the code");
	status_bad(S("HTTP/1.1\r\n"), "no code");
	status_bad(S("HTTP/1.1 "), "nothing after the space");
	status_bad(S("HTTP/1.1 20"), "truncated code");
	status_bad(S("HTTP/"), "prefix only");
	status_bad(S("HTTP"), "short prefix");
	status_bad(S(""), "empty line");
	status_bad(S("http/1.1 200 OK\r\n"), "lower-case protocol");
	status_bad(S("FTP/1.1 200 OK\r\n"), "other protocol");
	status_bad(S("Retry-After: 5\r\n"), "a header line");
	status_bad(S("X-HTTP/1.1 200 OK\r\n"), "protocol not at the start");
	status_bad("HTTP/1.1 200 OK", 11, "length cut inside the code");
}

/* header_is: line has header name with this value. */
static void
header_is(const char *line, const char *name, const char *value)
{
	const char *v = NULL;
	size_t		vlen = 999;
	bool		r = edge_header_line(line, strlen(line), name, &v, &vlen);

	ok(r && vlen == strlen(value) && memcmp(v, value, vlen) == 0 &&
	   v >= line && v + vlen <= line + strlen(line),
	   "header line \"%.*s\" gives %s = \"%s\"", (int) strcspn(line, "\r\n"), line, name, value);
}

/* test_header_line: "Name: value" matched case-insensitively. */
static void
test_header_line(void)
{
	const char *v;
	size_t		vlen;

	header_is("Retry-After: 120\r\n", "retry-after", "120");
	header_is("retry-after:120", "retry-after", "120");
	header_is("RETRY-AFTER: \t 5 \t\r\n", "retry-after", "5");
	header_is("Retry-After: Sun, 06 Nov 1994 08:49:37 GMT\r\n", "retry-after",
			  "Sun, 06 Nov 1994 08:49:37 GMT");
	header_is("Retry-After:\r\n", "retry-after", "");
	header_is("Retry-After:    \r\n", "retry-after", "");
	header_is("Location: http://x/y\r\n", "location", "http://x/y");

	ok(!edge_header_line(S("Retry-After : 5\r\n"), "retry-after", &v, &vlen),
	   "space before the colon does not match");
	ok(!edge_header_line(S("Retry-After-X: 5\r\n"), "retry-after", &v, &vlen),
	   "longer name does not match");
	ok(!edge_header_line(S("X-Retry-After: 5\r\n"), "retry-after", &v, &vlen),
	   "name with a prefix does not match");
	ok(!edge_header_line(S("Retry-After"), "retry-after", &v, &vlen),
	   "name without colon does not match");
	ok(!edge_header_line(S("Retry"), "retry-after", &v, &vlen),
	   "truncated name does not match");
	ok(!edge_header_line(S(""), "retry-after", &v, &vlen), "empty line does not match");
	ok(!edge_header_line(S("HTTP/1.1 200 OK\r\n"), "retry-after", &v, &vlen),
	   "status line does not match");
	ok(!edge_header_line("Retry-After: 5", 11, "retry-after", &v, &vlen),
	   "line cut before its colon does not match");
}

/* retry_is: value parses to delay ms at the given now. */
static void
retry_is(const char *value, time_t now, int64_t expected)
{
	int64_t		delay = -1;
	bool		r = edge_retry_after(value, strlen(value), now, &delay);

	ok(r && delay == expected, "Retry-After \"%s\" is %lld ms", value, (long long) expected);
	if (!r || delay != expected)
		printf("#   parsed: %d, delay %lld\n", r, (long long) delay);
}

/* retry_bad: value is refused. */
static void
retry_bad(const char *value, size_t len, const char *why)
{
	int64_t		delay = -1;

	ok(!edge_retry_after(value, len, 784111777, &delay) && delay == -1,
	   "Retry-After refused: %s", why);
}

/* imf: an IMF-fixdate of t, made with the C library, for cross-checks. */
static void
imf(time_t t, char *buf, size_t len)
{
	struct tm	tm;

	gmtime_r(&t, &tm);
	strftime(buf, len, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

/* test_retry_after: delay-seconds or IMF-fixdate. */
static void
test_retry_after(void)
{
	/* Sun, 06 Nov 1994 08:49:37 GMT is 784111777 */
	const time_t t0 = 784111777;
	char		buf[64];
	int			bad = 0;
	int64_t		delay;

	retry_is("120", 0, 120000);
	retry_is("0", 0, 0);
	retry_is("  7 ", 0, 7000);
	retry_is("\t3\t", 0, 3000);
	retry_is("0005", 0, 5000);
	retry_is("86400", t0, 86400000);
	ok(edge_retry_after(S("99999999999999999999999999"), 0, &delay) && delay > 0 &&
	   delay >= INT64_C(1000000000000) * 1000,
	   "a huge delay-seconds saturates and stays positive");

	retry_is("Sun, 06 Nov 1994 08:49:37 GMT", t0 - 60, 60000);
	retry_is("Sun, 06 Nov 1994 08:49:37 GMT", t0, 0);
	retry_is("Sun, 06 Nov 1994 08:49:37 GMT", t0 + 3600, 0);
	retry_is("Sun, 06 Nov 1994 08:49:37 GMT", 1700000000, 0);
	retry_is("  Sun, 06 Nov 1994 08:49:37 GMT  ", t0 - 1, 1000);
	retry_is("Thu, 01 Jan 1970 00:00:00 GMT", 0, 0);
	retry_is("Thu, 01 Jan 1970 00:00:10 GMT", 0, 10000);

	/* cross-check the calendar against the C library over many dates */
	for (int64_t t = 0; t < INT64_C(4102444800); t += 86400 * 37 + 3671)
	{
		imf((time_t) t, buf, sizeof(buf));
		if (!edge_retry_after(buf, strlen(buf), (time_t) (t - 5), &delay) || delay != 5000)
		{
			if (bad++ < 3)
				printf("# calendar mismatch for %s\n", buf);
		}
	}
	is_int(bad, 0, "IMF-fixdates from 1970 to 2100 agree with gmtime()");
	imf((time_t) 951782400, buf, sizeof(buf));	/* 29 Feb 2000 */
	retry_is(buf, 951782400 - 2, 2000);
	imf((time_t) 4107542399, buf, sizeof(buf));	/* 2100, not a leap year */
	retry_is(buf, 4107542399 - 1, 1000);

	retry_bad(S(""), "empty");
	retry_bad(S("   "), "only spaces");
	retry_bad(S("-1"), "negative");
	retry_bad(S("+5"), "explicit sign");
	retry_bad(S("1.5"), "fraction");
	retry_bad(S("5s"), "unit suffix");
	retry_bad(S("5 6"), "two numbers");
	retry_bad(S("0x10"), "hexadecimal");
	retry_bad(S("abc"), "word");
	retry_bad(S("5\0"), "NUL after the number");
	retry_bad(S("Sun, 06 Nov 1994 08:49:37 UTC"), "UTC instead of GMT");
	retry_bad(S("Sun, 06 Nov 1994 08:49:37"), "no zone");
	retry_bad(S("Sun, 06 Nov 1994 08:49:37 GMT x"), "trailing text");
	retry_bad(S("Sun, 06 Xyz 1994 08:49:37 GMT"), "unknown month");
	retry_bad(S("Sun, 06 nov 1994 08:49:37 GMT"), "month in lower case");
	retry_bad(S("Sun, 00 Nov 1994 08:49:37 GMT"), "day 0");
	retry_bad(S("Sun, 32 Nov 1994 08:49:37 GMT"), "day 32");
	retry_bad(S("Sun, 06 Nov 1994 24:49:37 GMT"), "hour 24");
	retry_bad(S("Sun, 06 Nov 1994 08:60:37 GMT"), "minute 60");
	retry_bad(S("Sun, 06 Nov 1994 08:49:61 GMT"), "second 61");
	retry_bad(S("Sun, 6 Nov 1994 08:49:37 GMT "), "one-digit day");
	retry_bad(S("Sun, 06 Nov 94 08:49:37 GMT"), "two-digit year");
	retry_bad(S("Sun, 06 Nov 1994 08-49-37 GMT"), "bad time separators");
	retry_bad(S("Sun; 06 Nov 1994 08:49:37 GMT"), "no comma");
	retry_bad(S("Sun, 0a Nov 1994 08:49:37 GMT"), "letter in the day");
	retry_bad(S("Sun, 06 Nov 19 4 08:49:37 GMT"), "space in the year");
	retry_bad(S("Sun, 06 Nov 1994 08:49:37 GM\0"), "NUL in the zone");
}

/* ------------------------------------------------------------- addresses */

/* sa_of: text address into a sockaddr_storage. */
static const struct sockaddr *
sa_of(const char *text, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (strchr(text, ':'))
	{
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *) ss;

		s6->sin6_family = AF_INET6;
		if (inet_pton(AF_INET6, text, &s6->sin6_addr) != 1)
			abort();
	}
	else
	{
		struct sockaddr_in *s4 = (struct sockaddr_in *) ss;

		s4->sin_family = AF_INET;
		if (inet_pton(AF_INET, text, &s4->sin_addr) != 1)
			abort();
	}
	return (const struct sockaddr *) ss;
}

/* class_is: the class of an address. */
static void
class_is(const char *text, EdgeAddrClass expected)
{
	struct sockaddr_storage ss;
	EdgeAddrClass got = edge_addr_class(sa_of(text, &ss));

	ok(got == expected, "%s is %s", text, edge_addr_class_name(expected));
	if (got != expected)
		printf("#   got %s\n", edge_addr_class_name(got));
}

/* test_addr_class: where an endpoint's address points. */
static void
test_addr_class(void)
{
	struct sockaddr_storage ss;

	class_is("127.0.0.1", EDGE_ADDR_LOOPBACK);
	class_is("127.255.255.254", EDGE_ADDR_LOOPBACK);
	class_is("10.0.0.1", EDGE_ADDR_PRIVATE);
	class_is("10.255.255.255", EDGE_ADDR_PRIVATE);
	class_is("172.16.0.1", EDGE_ADDR_PRIVATE);
	class_is("172.31.255.255", EDGE_ADDR_PRIVATE);
	class_is("172.15.255.255", EDGE_ADDR_PUBLIC);
	class_is("172.32.0.1", EDGE_ADDR_PUBLIC);
	class_is("192.168.1.1", EDGE_ADDR_PRIVATE);
	class_is("192.169.0.1", EDGE_ADDR_PUBLIC);
	class_is("100.64.0.1", EDGE_ADDR_PRIVATE);
	class_is("100.127.255.255", EDGE_ADDR_PRIVATE);
	class_is("100.63.255.255", EDGE_ADDR_PUBLIC);
	class_is("100.128.0.1", EDGE_ADDR_PUBLIC);
	class_is("169.254.169.254", EDGE_ADDR_LINK_LOCAL);
	class_is("169.254.0.1", EDGE_ADDR_LINK_LOCAL);
	class_is("169.253.0.1", EDGE_ADDR_PUBLIC);
	class_is("224.0.0.1", EDGE_ADDR_MULTICAST);
	class_is("239.255.255.250", EDGE_ADDR_MULTICAST);
	class_is("0.0.0.0", EDGE_ADDR_UNSPECIFIED);
	class_is("0.1.2.3", EDGE_ADDR_UNSPECIFIED);
	class_is("255.255.255.255", EDGE_ADDR_RESERVED);
	class_is("240.0.0.1", EDGE_ADDR_RESERVED);
	class_is("8.8.8.8", EDGE_ADDR_PUBLIC);
	class_is("1.1.1.1", EDGE_ADDR_PUBLIC);
	class_is("11.0.0.1", EDGE_ADDR_PUBLIC);
	class_is("126.255.255.255", EDGE_ADDR_PUBLIC);
	class_is("128.0.0.1", EDGE_ADDR_PUBLIC);
	class_is("223.255.255.255", EDGE_ADDR_PUBLIC);

	class_is("::1", EDGE_ADDR_LOOPBACK);
	class_is("::", EDGE_ADDR_UNSPECIFIED);
	class_is("fc00::1", EDGE_ADDR_PRIVATE);
	class_is("fd12:3456:789a::1", EDGE_ADDR_PRIVATE);
	class_is("fe80::1", EDGE_ADDR_LINK_LOCAL);
	class_is("febf:ffff::1", EDGE_ADDR_LINK_LOCAL);
	class_is("ff02::1", EDGE_ADDR_MULTICAST);
	class_is("ff05::1:3", EDGE_ADDR_MULTICAST);
	class_is("::ffff:127.0.0.1", EDGE_ADDR_LOOPBACK);
	class_is("::ffff:10.0.0.1", EDGE_ADDR_PRIVATE);
	class_is("::ffff:169.254.169.254", EDGE_ADDR_LINK_LOCAL);
	class_is("::ffff:0.0.0.0", EDGE_ADDR_UNSPECIFIED);
	class_is("::ffff:8.8.8.8", EDGE_ADDR_PUBLIC);
	class_is("::127.0.0.1", EDGE_ADDR_RESERVED);
	class_is("64:ff9b::7f00:1", EDGE_ADDR_LOOPBACK);
	class_is("64:ff9b::a00:1", EDGE_ADDR_PRIVATE);
	class_is("2002:7f00:1::", EDGE_ADDR_LOOPBACK);
	class_is("2002:c0a8:101::1", EDGE_ADDR_PRIVATE);
	class_is("2001:4860:4860::8888", EDGE_ADDR_PUBLIC);
	class_is("2606:4700:4700::1111", EDGE_ADDR_PUBLIC);
	class_is("::2", EDGE_ADDR_RESERVED);
	class_is("fb00::1", EDGE_ADDR_RESERVED);

	/*
	 * issue 29: the IANA special-purpose registries.  IPv4 first: shared
	 * address space, IETF protocol assignments (anycast included),
	 * documentation, benchmarking, the deprecated 6to4 relay anycast,
	 * reserved and broadcast; then their neighbours, which are public.
	 */
	class_is("100.64.0.0", EDGE_ADDR_PRIVATE);
	class_is("192.0.0.1", EDGE_ADDR_RESERVED);
	class_is("192.0.0.9", EDGE_ADDR_RESERVED);
	class_is("192.0.0.170", EDGE_ADDR_RESERVED);
	class_is("192.0.0.255", EDGE_ADDR_RESERVED);
	class_is("192.0.1.1", EDGE_ADDR_PUBLIC);
	class_is("192.0.2.1", EDGE_ADDR_RESERVED);
	class_is("192.0.3.1", EDGE_ADDR_PUBLIC);
	class_is("192.88.99.1", EDGE_ADDR_RESERVED);
	class_is("192.88.98.1", EDGE_ADDR_PUBLIC);
	class_is("198.18.0.1", EDGE_ADDR_RESERVED);
	class_is("198.19.255.255", EDGE_ADDR_RESERVED);
	class_is("198.17.255.255", EDGE_ADDR_PUBLIC);
	class_is("198.20.0.1", EDGE_ADDR_PUBLIC);
	class_is("198.51.100.7", EDGE_ADDR_RESERVED);
	class_is("203.0.113.7", EDGE_ADDR_RESERVED);
	class_is("203.0.114.7", EDGE_ADDR_PUBLIC);
	class_is("192.31.196.1", EDGE_ADDR_PUBLIC);	/* AS112: globally reachable */
	class_is("192.175.48.1", EDGE_ADDR_PUBLIC);

	/* IPv6: NAT64 local use, IETF protocol assignments, documentation */
	class_is("64:ff9b:1::1", EDGE_ADDR_PRIVATE);
	class_is("64:ff9b:1:ffff::8.8.8.8", EDGE_ADDR_PRIVATE);
	class_is("64:ff9b:2::1", EDGE_ADDR_RESERVED);
	class_is("64:ff9b::8.8.8.8", EDGE_ADDR_PUBLIC);
	class_is("64:ff9b::100.64.0.1", EDGE_ADDR_PRIVATE);
	class_is("64:ff9b::192.0.2.1", EDGE_ADDR_RESERVED);
	class_is("2001::1", EDGE_ADDR_RESERVED);	/* Teredo */
	class_is("2001:0:4136:e378:8000:63bf:3fff:fdd2", EDGE_ADDR_RESERVED);
	class_is("2001:1::1", EDGE_ADDR_RESERVED);	/* PCP anycast: the nearest server */
	class_is("2001:2::1", EDGE_ADDR_RESERVED);
	class_is("2001:3::1", EDGE_ADDR_RESERVED);
	class_is("2001:1ff::1", EDGE_ADDR_RESERVED);
	class_is("2001:200::1", EDGE_ADDR_PUBLIC);
	class_is("2001:db8::1", EDGE_ADDR_RESERVED);
	class_is("2001:db9::1", EDGE_ADDR_PUBLIC);
	class_is("3fff::1", EDGE_ADDR_RESERVED);
	class_is("3fff:fff::1", EDGE_ADDR_RESERVED);
	class_is("3fff:1000::1", EDGE_ADDR_PUBLIC);
	class_is("2620:4f:8000::1", EDGE_ADDR_PUBLIC);	/* AS112: globally reachable */
	class_is("100::1", EDGE_ADDR_RESERVED);	/* discard-only */
	class_is("100:0:0:1::1", EDGE_ADDR_RESERVED);
	class_is("5f00::1", EDGE_ADDR_RESERVED);	/* SRv6 SIDs */
	class_is("fec0::1", EDGE_ADDR_PRIVATE);
	class_is("4000::1", EDGE_ADDR_RESERVED);
	class_is("1fff:ffff::1", EDGE_ADDR_RESERVED);
	class_is("::8.8.8.8", EDGE_ADDR_RESERVED);	/* IPv4-compatible, deprecated */
	class_is("2002:808:808::1", EDGE_ADDR_PUBLIC);
	class_is("2002:c000:201::1", EDGE_ADDR_RESERVED);
	class_is("2002:6440:1::1", EDGE_ADDR_PRIVATE);
	class_is("::ffff:192.0.2.1", EDGE_ADDR_RESERVED);
	class_is("::ffff:100.64.1.1", EDGE_ADDR_PRIVATE);

	memset(&ss, 0, sizeof(ss));
	ss.ss_family = AF_UNIX;
	ok(edge_addr_class((struct sockaddr *) &ss) != EDGE_ADDR_PUBLIC,
	   "an address of another family is never public");

	is_str(edge_addr_class_name(EDGE_ADDR_LOOPBACK), "loopback", "class name loopback");
	is_str(edge_addr_class_name(EDGE_ADDR_PRIVATE), "private", "class name private");
	is_str(edge_addr_class_name(EDGE_ADDR_LINK_LOCAL), "link-local", "class name link-local");
	is_str(edge_addr_class_name(EDGE_ADDR_MULTICAST), "multicast", "class name multicast");
	is_str(edge_addr_class_name(EDGE_ADDR_UNSPECIFIED), "unspecified", "class name unspecified");
	is_str(edge_addr_class_name(EDGE_ADDR_PUBLIC), "public", "class name public");
}

/* ------------------------------------------------------------------ CIDRs */

/* contains: does the CIDR text contain the address text? */
static int
contains(const char *cidr_text, const char *addr)
{
	EdgeCidr	cidr;
	struct sockaddr_storage ss;

	if (!edge_cidr_parse(cidr_text, strlen(cidr_text), &cidr))
	{
		printf("# CIDR %s did not parse\n", cidr_text);
		return -1;
	}
	return edge_cidr_contains(&cidr, sa_of(addr, &ss)) ? 1 : 0;
}

/* test_cidr: parse, contains, lists. */
static void
test_cidr(void)
{
	EdgeCidr	c;
	EdgeCidr	list[4];
	const char *bad = NULL;
	size_t		badlen = 0;
	static const char *const refused[] = {
		"10.0.0.0/33", "::/129", "10.0.0.0/", "/8", "10.0.0/8", "10.0.0.0/8x",
		"10.0.0.0/-1", "10.0.0.0/0008", "10.0.0.0/+8", "", "abc", "10.0.0.0//8",
		"10.0.0.256/8", "1.2.3.4.5", "::1::2", "10.0.0.0/ 8", " 10.0.0.0/8",
		"0123456789012345678901234567890123456789012345678901234567890123456789", NULL
	};

	ok(edge_cidr_parse(S("10.0.0.0/8"), &c) && c.family == AF_INET && c.prefix == 8 &&
	   c.addr[0] == 10, "10.0.0.0/8 parses");
	ok(edge_cidr_parse(S("127.0.0.1"), &c) && c.family == AF_INET && c.prefix == 32,
	   "a bare IPv4 address is a /32");
	ok(edge_cidr_parse(S("::1"), &c) && c.family == AF_INET6 && c.prefix == 128 &&
	   c.addr[15] == 1, "a bare IPv6 address is a /128");
	ok(edge_cidr_parse(S("fc00::/7"), &c) && c.family == AF_INET6 && c.prefix == 7,
	   "fc00::/7 parses");
	ok(edge_cidr_parse(S("0.0.0.0/0"), &c) && c.prefix == 0, "0.0.0.0/0 parses");
	ok(edge_cidr_parse(S("::/0"), &c) && c.prefix == 0, "::/0 parses");
	ok(edge_cidr_parse("10.0.0.0/8,junk", 10, &c) && c.prefix == 8,
	   "only the given length is read");
	for (int i = 0; refused[i]; i++)
		ok(!edge_cidr_parse(refused[i], strlen(refused[i]), &c),
		   "CIDR \"%.20s\" is refused", refused[i]);
	ok(!edge_cidr_parse(S("127.0.0.1\0/8"), &c), "NUL inside a CIDR is refused");

	is_int(contains("10.0.0.0/8", "10.255.1.2"), 1, "10/8 contains 10.255.1.2");
	is_int(contains("10.0.0.0/8", "11.0.0.1"), 0, "10/8 does not contain 11.0.0.1");
	is_int(contains("192.168.1.0/24", "192.168.1.77"), 1, "/24 contains its host");
	is_int(contains("192.168.1.0/24", "192.168.2.1"), 0, "/24 does not contain the next net");
	is_int(contains("172.16.0.0/12", "172.31.0.1"), 1, "/12 contains 172.31.0.1");
	is_int(contains("172.16.0.0/12", "172.32.0.1"), 0, "/12 does not contain 172.32.0.1");
	is_int(contains("10.0.0.0/31", "10.0.0.1"), 1, "/31 contains its second address");
	is_int(contains("10.0.0.0/31", "10.0.0.2"), 0, "/31 does not contain the third");
	is_int(contains("127.0.0.1", "127.0.0.1"), 1, "/32 contains itself");
	is_int(contains("127.0.0.1", "127.0.0.2"), 0, "/32 contains nothing else");
	is_int(contains("0.0.0.0/0", "203.0.113.9"), 1, "/0 contains any IPv4 address");
	is_int(contains("0.0.0.0/0", "2001:db8::1"), 0, "IPv4 /0 does not contain IPv6");
	is_int(contains("127.0.0.0/8", "::ffff:127.0.0.1"), 1, "IPv4-mapped address matches an IPv4 CIDR");
	is_int(contains("10.0.0.0/8", "::ffff:11.0.0.1"), 0, "mapped address outside the CIDR");
	is_int(contains("127.0.0.0/8", "::1"), 0, "::1 is not in 127.0.0.0/8");
	is_int(contains("fc00::/7", "fd00::1"), 1, "fc00::/7 contains fd00::1");
	is_int(contains("fc00::/7", "fe00::1"), 0, "fc00::/7 does not contain fe00::1");
	is_int(contains("::1", "::1"), 1, "::1/128 contains ::1");
	is_int(contains("::1", "::2"), 0, "::1/128 does not contain ::2");
	is_int(contains("::/0", "10.0.0.1"), 0, "an IPv6 CIDR does not contain an IPv4 sockaddr");
	is_int(contains("2001:db8::/32", "2001:db8:ffff::1"), 1, "/32 IPv6 contains its host");
	is_int(contains("2001:db8::/33", "2001:db8:8000::1"), 0, "/33 IPv6 checks the 33rd bit");

	is_int(edge_cidr_list_parse("127.0.0.0/8, ::1/128\t10.0.0.0/8", list, 4, &bad, &badlen), 3,
		   "a list of three, with comma, space and tab");
	ok(list[0].family == AF_INET && list[1].family == AF_INET6 && list[2].prefix == 8,
	   "... stored in order");
	is_int(edge_cidr_list_parse("", list, 4, &bad, &badlen), 0, "empty list");
	is_int(edge_cidr_list_parse(" , ,\t, ", list, 4, &bad, &badlen), 0, "separators only");
	bad = NULL;
	is_int(edge_cidr_list_parse("127.0.0.0/8,bogus, 10.0.0.0/8", list, 4, &bad, &badlen), -1,
		   "a bad entry fails the list");
	ok(bad != NULL && badlen == 5 && memcmp(bad, "bogus", 5) == 0, "... naming the bad entry");
	bad = NULL;
	is_int(edge_cidr_list_parse("1.0.0.0/8 2.0.0.0/8 3.0.0.0/8 4.0.0.0/8 5.0.0.0/8",
								list, 4, &bad, &badlen), -1,
		   "more entries than room fails the list");
	ok(bad != NULL && badlen == 9 && memcmp(bad, "5.0.0.0/8", 9) == 0,
	   "... naming the entry that did not fit");
}

/* ---------------------------------------------------------------- intervals */

/* test_intervals: the one conversion, exact where extract(epoch) is, and checked. */
static void
test_intervals(void)
{
	const int64_t day = INT64_C(86400000000);
	int64_t		t = 42;

	ok(edge_interval_usecs(0, 0, 1500000, &t) && t == 1500000, "1.5 s");
	ok(edge_interval_usecs(0, 2, 5, &t) && t == 2 * day + 5, "days count 24 hours");
	ok(edge_interval_usecs(1, 0, 0, &t) && t == 30 * day, "a month alone is 30 days");
	ok(edge_interval_usecs(12, 0, 0, &t) && t == INT64_C(31557600000000),
	   "a year is 365.25 days, as extract(epoch) counts it");
	ok(edge_interval_usecs(-12, 360, 1000000, &t) &&
	   t == -INT64_C(31557600000000) + 360 * day + 1000000,
	   "'-1 year 360 days 1 second' is negative");
	ok(edge_interval_usecs(-80000, -2400000, 0, &t) && t < 0,
	   "'-80000 months -2400000 days' is negative");
	ok(edge_interval_usecs(-80000, 2400000, 0, &t) && t < 0,
	   "'-80000 months 2400000 days' is negative");
	t = 42;
	ok(!edge_interval_usecs(12000000, 0, 0, &t) && t == 42,
	   "1,000,000 years overflows and leaves the result alone");
	ok(!edge_interval_usecs(INT32_MAX, INT32_MAX, INT64_MAX, &t), "the largest interval overflows");
	ok(!edge_interval_usecs(INT32_MIN, INT32_MIN, INT64_MIN, &t), "the smallest interval overflows");
	ok(!edge_interval_usecs(0, 0, INT64_MAX, &t) || t == INT64_MAX, "no parts but time: exact");
	ok(!edge_interval_usecs(7115004, 0, 0, &t), "593,000 years of months overflows");
}

/* mask_is: edge_url_mask(url) gives want. */
static void
mask_is(const char *url, const char *want)
{
	size_t		len = strlen(url);
	char	   *out = malloc(EDGE_URL_MASK_SIZE(len));
	size_t		n = edge_url_mask(url, len, out);

	ok(n == strlen(want) && memcmp(out, want, n) == 0, "mask %s -> %s", url, want);
	free(out);
}

static void
test_url_mask(void)
{
	mask_is("https://alice:S3cr3t@host/in?token=abc", "https://***@host/in?token=***");
	mask_is("http://host:8080/p/a/t/h", "http://host:8080/p/a/t/h");
	mask_is("HTTP://u@h", "HTTP://***@h");
	mask_is("http://a@b@host/x", "http://***@host/x");
	mask_is("http://@host/", "http://***@host/");
	mask_is("http://host/?a=1&b=2;c=3", "http://host/?a=***&b=***;c=***");
	mask_is("http://host/?secret&x=", "http://host/?***&x=");
	mask_is("http://host/?a=b=c", "http://host/?a=***");
	mask_is("http://host/?&&a=1", "http://host/?&&a=***");
	mask_is("http://host/p#frag", "http://host/p#***");
	mask_is("http://host/p?k=v#f?x=1", "http://host/p?k=***#***");
	mask_is("http://host/p#", "http://host/p#");
	mask_is("http://host/path@not-userinfo", "http://host/path@not-userinfo");
	mask_is("http://h?q=1@x", "http://h?q=***");
	mask_is("ftp://user:pw@host/", "***");
	mask_is("", "***");
	mask_is("http://", "http://");
}

/* -------------------------------------------------------- databases */

/* list_is: the names edge_database_list finds, joined by '|', or "*". */
static void
list_is(const char *text, const char *expected)
{
	EdgeSpan	names[4];
	const char *error = "unset";
	char		buf[512] = "";
	int			n = edge_database_list(text, names, 4, &error);

	if (n == 0)
		strcpy(buf, "*");
	for (int i = 0; i < n && i < 4; i++)
	{
		if (i > 0)
			strcat(buf, "|");
		strncat(buf, names[i].start, names[i].len);
	}
	if (n < 0)
		snprintf(buf, sizeof(buf), "error: %s", error);
	is_str(buf, expected, "grelout.database '%s'", text);
}

/* test_database_list: grelout.database as a name, a list or "*". */
static void
test_database_list(void)
{
	char		many[EDGE_DATABASES_MAX * 2 + 2];
	char		long_name[70];
	const char *error = NULL;

	list_is("app", "app");
	list_is("  app  ", "app");
	list_is("*", "*");
	list_is(" * ", "*");
	list_is("app, shop ,billing", "app|shop|billing");
	list_is("My Db,x", "My Db|x");
	list_is("", "error: it names no database");
	list_is(" \t ", "error: it names no database");
	list_is("app,,shop", "error: a name in the list is empty");
	list_is("app,", "error: a name in the list is empty");
	list_is(",app", "error: a name in the list is empty");
	list_is("app,*", "error: * must stand alone");
	list_is("**", "**");
	memset(long_name, 'a', 63);
	long_name[63] = '\0';
	is_int(edge_database_list(long_name, NULL, 0, &error), 1, "a name of 63 bytes");
	strcat(long_name, "a");
	is_int(edge_database_list(long_name, NULL, 0, &error), -1, "a name of 64 bytes is too long");
	many[0] = '\0';
	for (int i = 0; i < EDGE_DATABASES_MAX; i++)
	{
		if (i > 0)
			strcat(many, ",");
		strcat(many, "d");
	}
	is_int(edge_database_list(many, NULL, 0, &error), EDGE_DATABASES_MAX,
		   "%d names fit (and are counted without room to store them)", EDGE_DATABASES_MAX);
	strcat(many, ",d");
	is_int(edge_database_list(many, NULL, 0, &error), -1, "one more is too many");
	is_str(error, "it lists too many databases", "and says so");
}

int
main(void)
{
	test_header_names();
	test_header_values();
	test_header_reserved();
	test_url();
	test_url_mask();
	test_base64_vectors();
	test_base64_round_trips();
	test_base64_bad();
	test_secrets();
	test_status_line();
	test_header_line();
	test_retry_after();
	test_addr_class();
	test_cidr();
	test_intervals();
	test_database_list();
	return done_testing();
}
