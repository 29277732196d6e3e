/*-------------------------------------------------------------------------
 *
 * test_oauth.c
 *	  Unit tests of src/pure/oauth.c, OAuth2 client credentials: the token
 *	  request's form body and Basic credentials (RFC 6749's examples, and
 *	  base64 checked against OpenSSL's encoder), the token response reader
 *	  (the RFC's examples, responses shaped as Auth0, Okta, Azure AD,
 *	  Google and Salesforce send them, escapes, and every refusal), the
 *	  error response reader, and the refresh rule of the token cache.
 *	  Prints TAP.
 *
 *-------------------------------------------------------------------------
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "oauth.h"
#include "tap.h"

/* S: a string literal as (pointer, length), without its NUL. */
#define S(lit) (lit), (sizeof(lit) - 1)

static OAuthToken token;

/*
 * parse_n: oauth_token_parse over an exact-size copy of body[0..len), so
 * that AddressSanitizer sees a read past it.
 */
static const char *
parse_n(const char *body, size_t len)
{
	char	   *copy = malloc(len ? len : 1);
	const char *error;

	memcpy(copy, body, len);
	error = oauth_token_parse(copy, len, &token);
	free(copy);
	return error;
}

/* parse: parse_n of a C string. */
static const char *
parse(const char *body)
{
	return parse_n(body, strlen(body));
}

/* refused: is body refused with exactly this error, the token left wiped? */
static void
refused(const char *body, const char *error, const char *what)
{
	const char *got = parse(body);
	int			wiped = 1;

	for (size_t i = 0; i < sizeof(token.access_token); i++)
		if (token.access_token[i] != 0)
			wiped = 0;
	is_str(got, error, "%s: refused with \"%s\"", what, error);
	ok(wiped && token.access_token_len == 0 && !token.has_expires_in,
	   "%s: the token buffer is wiped", what);
}

/* accepted: is body taken, with this token and expires_in (-1: none)? */
static void
accepted(const char *body, const char *want, long long expires_ms,
		 const char *what)
{
	const char *got = parse(body);

	ok(got == NULL, "%s: accepted%s%s", what, got ? ", not: " : "", got ? got : "");
	is_str(token.access_token, want, "%s: the token, byte for byte", what);
	is_int(token.access_token_len, strlen(want), "%s: its length", what);
	if (expires_ms < 0)
		ok(!token.has_expires_in, "%s: no expires_in", what);
	else
		ok(token.has_expires_in && token.expires_in_ms == expires_ms,
		   "%s: expires_in is %lld ms", what, expires_ms);
}

/* b64: OpenSSL's base64 of s (an independent encoder). */
static void
b64(const char *s, char *out)
{
	EVP_EncodeBlock((unsigned char *) out, (const unsigned char *) s, (int) strlen(s));
}

/* ---------------------------------------------------------------- request */

/* test_form_encode: RFC 6749 Appendix B, and every byte. */
static void
test_form_encode(void)
{
	char		out[256];
	char		all[256];
	char		big[256 * 3 + 1];
	size_t		n;
	int			good = 1;

	/* Appendix B's example: " %&+£€" */
	n = oauth_form_encode(S(" %&+\xc2\xa3\xe2\x82\xac"), out, sizeof(out));
	is_str(out, "+%25%26%2B%C2%A3%E2%82%AC", "Appendix B's example encodes as the RFC shows");
	is_int(n, strlen("+%25%26%2B%C2%A3%E2%82%AC"), "its length");
	oauth_form_encode(S("AZaz09-._~"), out, sizeof(out));
	is_str(out, "AZaz09-._~", "unreserved bytes stay as they are");
	oauth_form_encode(S("a:b/c?d=e&f#g@h!i*j'k(l)m,n;o$p\"q<r>s\\t^u`v{w}x|y[z]"), out, sizeof(out));
	is_str(out, "a%3Ab%2Fc%3Fd%3De%26f%23g%40h%21i%2Aj%27k%28l%29m%2Cn%3Bo%24p%22q%3Cr%3Es%5Ct%5Eu%60v%7Bw%7Dx%7Cy%5Bz%5D",
		   "every reserved and other ASCII punctuation is %%XX");
	oauth_form_encode(S("a\0b\r\n\x7f\xff"), out, sizeof(out));
	is_str(out, "a%00b%0D%0A%7F%FF", "NUL, controls, DEL and high bytes are %%XX, upper-case hex");

	for (int i = 0; i < 256; i++)
		all[i] = (char) i;
	n = oauth_form_encode(all, 256, big, sizeof(big));
	for (int i = 0, o = 0; i < 256; i++)
	{
		char		c = (char) i;
		char		want[4];

		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
			c == '-' || c == '.' || c == '_' || c == '~')
			want[0] = c, want[1] = 0;
		else if (c == ' ')
			strcpy(want, "+");
		else
			snprintf(want, sizeof(want), "%%%02X", i);
		if (strncmp(big + o, want, strlen(want)) != 0)
			good = 0;
		o += strlen(want);
	}
	ok(good, "each of the 256 bytes encodes as Appendix B says");
	is_int(n, 66 + 1 + 189 * 3, "the 256 bytes take 66 + 1 + 3 x 189 bytes");

	/* snprintf-style: the length always, the text when it fits */
	is_int(oauth_form_encode(S("a b"), NULL, 0), 3, "cap 0: the length, nothing written");
	memset(out, 'x', sizeof(out));
	n = oauth_form_encode(S("a&b"), out, 4);
	is_int(n, 5, "a short buffer: the whole length");
	is_str(out, "a%2", "a short buffer: as much as fits, NUL-terminated");
	is_int(oauth_form_encode(S("a&b"), out, 6), 5, "an exact buffer");
	is_str(out, "a%26b", "an exact buffer holds all of it");
	is_int(oauth_form_encode("", 0, out, sizeof(out)), 0, "the empty string");
	is_str(out, "", "encodes as nothing");
}

/* test_request_body: section 4.4.2, with and without scope and audience. */
static void
test_request_body(void)
{
	char		out[512];
	size_t		n;
	char	   *p;

	n = oauth_token_request_body(NULL, NULL, out, sizeof(out));
	is_str(out, "grant_type=client_credentials", "no scope, no audience: the RFC's body");
	is_int(n, 29, "its length");
	oauth_token_request_body("", "", out, sizeof(out));
	is_str(out, "grant_type=client_credentials", "empty scope and audience are left out");
	oauth_token_request_body("read:users write", NULL, out, sizeof(out));
	is_str(out, "grant_type=client_credentials&scope=read%3Ausers+write",
		   "a scope of two space-separated values");
	oauth_token_request_body(NULL, "https://api.example.com/", out, sizeof(out));
	is_str(out, "grant_type=client_credentials&audience=https%3A%2F%2Fapi.example.com%2F",
		   "an audience (Auth0's)");
	oauth_token_request_body("a b", "x&scope=admin", out, sizeof(out));
	is_str(out, "grant_type=client_credentials&scope=a+b&audience=x%26scope%3Dadmin",
		   "both; an audience cannot add a parameter");

	/* the caller's usual two calls: the length, then the text */
	n = oauth_token_request_body("s", "a", NULL, 0);
	p = malloc(n + 1);
	is_int(oauth_token_request_body("s", "a", p, n + 1), n, "the second call gives the same length");
	is_str(p, "grant_type=client_credentials&scope=s&audience=a", "into a buffer of that length + 1");
	ok(strlen(p) == n, "filled exactly");
	free(p);
	memset(out, 'x', sizeof(out));
	oauth_token_request_body("scope", NULL, out, 12);
	is_str(out, "grant_type=", "a short buffer: cut and terminated");
	ok(out[12] == 'x', "nothing written past the buffer");
}

/* test_basic: section 2.3.1, the RFC's example and encoded credentials. */
static void
test_basic(void)
{
	char		out[512];
	char		want[512];
	size_t		n;

	n = oauth_basic_authorization("s6BhdRkqt3", "7Fjfp0ZBr1KtDRbnfVdmIw", out, sizeof(out));
	is_str(out, "Basic czZCaGRSa3F0Mzo3RmpmcDBaQnIxS3REUmJuZlZkbUl3",
		   "RFC 6749 section 2.3.1's example");
	is_int(n, strlen(out), "its length");

	/* id and secret are each form-encoded before base64 */
	oauth_basic_authorization("my client:1", "p@ss w+rd/=&%\xc3\xa9", out, sizeof(out));
	b64("my+client%3A1:p%40ss+w%2Brd%2F%3D%26%25%C3%A9", want + 6);
	memcpy(want, "Basic ", 6);
	is_str(out, want, "id and secret with reserved bytes: form-encoded, then base64 (OpenSSL's)");

	/* every padding case: 0, 1 and 2 '=' */
	for (int k = 0; k < 3; k++)
	{
		const char *ids[] = {"ab", "abc", "abcd"};	/* ":" + "s": 4, 5, 6 bytes */
		char		plain[16];

		oauth_basic_authorization(ids[k], "s", out, sizeof(out));
		snprintf(plain, sizeof(plain), "%s:s", ids[k]);
		memcpy(want, "Basic ", 6);
		b64(plain, want + 6);
		is_str(out, want, "base64 of %zu bytes agrees with OpenSSL's", strlen(plain));
	}
	oauth_basic_authorization("", "", out, sizeof(out));
	is_str(out, "Basic Og==", "empty id and secret: base64 of \":\"");

	/* long credentials, two calls */
	{
		char		id[300],
					secret[700];
		char	   *p;

		memset(id, 'i', sizeof(id) - 1);
		id[sizeof(id) - 1] = 0;
		memset(secret, '/', sizeof(secret) - 1);
		secret[sizeof(secret) - 1] = 0;
		n = oauth_basic_authorization(id, secret, NULL, 0);
		is_int(n, 6 + 4 * ((299 + 1 + 699 * 3 + 2) / 3), "the length of long credentials");
		p = malloc(n + 1);
		oauth_basic_authorization(id, secret, p, n + 1);
		ok(strlen(p) == n && strncmp(p, "Basic aWlp", 10) == 0, "written whole");
		oauth_wipe(p, n);
		ok(p[0] == 0 && p[n - 1] == 0, "oauth_wipe clears it");
		free(p);
	}
	memset(out, 'x', sizeof(out));
	n = oauth_basic_authorization("s6BhdRkqt3", "7Fjfp0ZBr1KtDRbnfVdmIw", out, 10);
	is_str(out, "Basic czZ", "a short buffer: cut and terminated");
	ok(out[10] == 'x' && n == 50, "nothing past it, the whole length returned");
}

/* --------------------------------------------------------------- response */

/* test_real_responses: the RFCs' examples and what providers send. */
static void
test_real_responses(void)
{
	/* RFC 6750 section 4's example */
	accepted("{\n  \"access_token\":\"mF_9.B5f-4.1JqM\",\n  \"token_type\":\"Bearer\",\n"
			 "  \"expires_in\":3600,\n  \"refresh_token\":\"tGzv3JOkF0XG5Qx2TlKWIA\"\n}",
			 "mF_9.B5f-4.1JqM", 3600000, "RFC 6750's example");
	/* RFC 6749 section 4.4.3 and 5.1: token_type "example" */
	refused("{\"access_token\":\"2YotnFZFEjr1zCsicMWpAA\",\"token_type\":\"example\","
			"\"expires_in\":3600,\"example_parameter\":\"example_value\"}",
			"token_type is not Bearer", "RFC 6749 section 4.4.3's example (token_type \"example\")");
	/* Auth0 */
	accepted("{\"access_token\":\"eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJpc3MiOiJodHRwczovL2V4YW1wbGUuYXV0aDAuY29tLyJ9.c2ln\","
			 "\"scope\":\"read:users update:users\",\"expires_in\":86400,\"token_type\":\"Bearer\"}",
			 "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJpc3MiOiJodHRwczovL2V4YW1wbGUuYXV0aDAuY29tLyJ9.c2ln",
			 86400000, "Auth0's shape");
	/* Okta: token_type first */
	accepted("{\"token_type\":\"Bearer\",\"expires_in\":3600,\"access_token\":\"eyJraWQiOiJ.x.y\",\"scope\":\"customScope\"}",
			 "eyJraWQiOiJ.x.y", 3600000, "Okta's shape");
	/* Azure AD v1: numbers as strings */
	accepted("{\"token_type\":\"Bearer\",\"expires_in\":\"3599\",\"ext_expires_in\":\"3599\","
			 "\"expires_on\":\"1569858200\",\"not_before\":\"1569854300\","
			 "\"resource\":\"https://management.core.windows.net/\",\"access_token\":\"eyJ0eXAi.b.c\"}",
			 "eyJ0eXAi.b.c", 3599000, "Azure AD v1's shape (expires_in as a string)");
	/* Azure AD v2 */
	accepted("{\"token_type\":\"Bearer\",\"expires_in\":3599,\"ext_expires_in\":3599,\"access_token\":\"eyJ0eXAi.d.e\"}",
			 "eyJ0eXAi.d.e", 3599000, "Azure AD v2's shape");
	/* Google */
	accepted("{\n  \"access_token\": \"ya29.c.b0Aaekm1K\",\n  \"expires_in\": 3599,\n  \"token_type\": \"Bearer\"\n}\n",
			 "ya29.c.b0Aaekm1K", 3599000, "Google's shape, a final newline");
	/* Salesforce: no expires_in, other members of every kind */
	accepted("{\"access_token\":\"00D5e000000!AQ0AQ.abc\",\"signature\":\"e2a=\",\"scope\":\"api\","
			 "\"instance_url\":\"https:\\/\\/example.my.salesforce.com\",\"id\":\"https:\\/\\/login.salesforce.com\\/id\\/00D\\/005\","
			 "\"token_type\":\"Bearer\",\"issued_at\":\"1700000000000\"}",
			 "00D5e000000!AQ0AQ.abc", -1, "Salesforce's shape (no expires_in)");
	/* lower-case bearer; nested ignored members */
	accepted("{\"access_token\":\"t\",\"token_type\":\"bearer\",\"expires_in\":60,"
			 "\"authorization_details\":[{\"type\":\"a\",\"locations\":[\"https://x\"],\"n\":[1,2.5e3,-0,true,false,null,{}]}],"
			 "\"x\":{\"y\":{\"z\":[[[]]]}}}",
			 "t", 60000, "token_type \"bearer\", nested objects and arrays in ignored members");
	accepted("{\"access_token\":\"t\",\"token_type\":\"BEARER\",\"expires_in\":null}",
			 "t", -1, "token_type \"BEARER\"; expires_in null is no expires_in");
}

/* test_expires_in: numbers, numeric strings, and the refusals. */
static void
test_expires_in(void)
{
	static const struct
	{
		const char *value;
		long long	ms;
	}			good[] = {
		{"3600", 3600000}, {"1", 1000}, {"3599.9", 3599900}, {"0.5", 500},
		{"1.0009", 1000}, {"0.001", 1}, {"36e2", 3600000}, {"3.6E+3", 3600000},
		{"360000e-2", 3600000}, {"0.0000001e7", 1000}, {"315360000", 315360000000LL},
		{"\"3600\"", 3600000}, {"\"3599.5\"", 3599500}, {"\"1e3\"", 1000000},
	};
	static const struct
	{
		const char *value;
		const char *error;
	}			bad[] = {
		{"0", "expires_in is not positive"},
		{"0001", "token response is not JSON"},
		{"-0", "expires_in is not positive"},
		{"0.0", "expires_in is not positive"},
		{"-1", "expires_in is not positive"},
		{"-3600", "expires_in is not positive"},
		{"\"-5\"", "expires_in is not positive"},
		{"\"0\"", "expires_in is not positive"},
		{"0.0009", "expires_in is out of range"},
		{"1e-4", "expires_in is out of range"},
		{"315360001", "expires_in is out of range"},
		{"1e300", "expires_in is out of range"},
		{"9223372036854775807", "expires_in is out of range"},
		{"99999999999999999999999999999", "expires_in is out of range"},
		{"1e999999999999999999", "expires_in is out of range"},
		{"\"\"", "expires_in is not a number"},
		{"\" 3600\"", "expires_in is not a number"},
		{"\"3600 \"", "expires_in is not a number"},
		{"\"3600s\"", "expires_in is not a number"},
		{"\"+3600\"", "expires_in is not a number"},
		{"\"0x10\"", "expires_in is not a number"},
		{"\"1,000\"", "expires_in is not a number"},
		{"\"Infinity\"", "expires_in is not a number"},
		{"\"NaN\"", "expires_in is not a number"},
		{"\"01\"", "expires_in is not a number"},
		{"\".5\"", "expires_in is not a number"},
		{"\"1111111111111111111111111111111111111111111111111111111111111111111\"", "expires_in is not a number"},
		{"true", "expires_in is not a number"},
		{"[3600]", "expires_in is not a number"},
		{"{\"s\":3600}", "expires_in is not a number"},
	};
	char		body[256];
	int64_t		ms = -7;

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
	{
		snprintf(body, sizeof(body),
				 "{\"access_token\":\"tok\",\"token_type\":\"Bearer\",\"expires_in\":%s}", good[i].value);
		accepted(body, "tok", good[i].ms, good[i].value);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
	{
		snprintf(body, sizeof(body),
				 "{\"access_token\":\"tok\",\"token_type\":\"Bearer\",\"expires_in\":%s}", bad[i].value);
		refused(body, bad[i].error, bad[i].value);
	}
	/* oauth_number_ms alone */
	ok(oauth_number_ms(S("12.25"), &ms) == NULL && ms == 12250, "oauth_number_ms: 12.25 s is 12250 ms");
	ms = -7;
	ok(oauth_number_ms(S("12 "), &ms) != NULL && ms == -7, "oauth_number_ms: a refusal leaves *ms");
	ok(oauth_number_ms("", 0, &ms) != NULL, "oauth_number_ms: the empty string is no number");
	ok(oauth_number_ms(S("1e"), &ms) != NULL && oauth_number_ms(S("1."), &ms) != NULL &&
	   oauth_number_ms(S("-"), &ms) != NULL && oauth_number_ms(S("1e+"), &ms) != NULL,
	   "oauth_number_ms: cut numbers are refused");
	ok(oauth_number_ms(S("315360000.000"), &ms) == NULL && ms == OAUTH_EXPIRES_MAX_MS,
	   "oauth_number_ms: exactly ten years is taken");
	ok(oauth_number_ms(S("315360000.001"), &ms) != NULL,
	   "oauth_number_ms: a millisecond more is not");
}

/* test_escapes: strings decode byte for byte. */
static void
test_escapes(void)
{
	accepted("{\"access_token\":\"a\\/b\\\\c\\\"d\",\"token_type\":\"Bearer\"}", "a/b\\c\"d", -1,
			 "escaped / \\ and \" in the token");
	accepted("{\"access_token\":\"\\u0041\\u002b\\u002F\\u003D\\u007e\",\"token_type\":\"\\u0042earer\"}",
			 "A+/=~", -1, "\\u escapes, both hex cases, in the token and token_type");
	accepted("{\"\\u0061ccess_token\":\"x\",\"token_type\":\"Bearer\"}", "x", -1,
			 "an escaped member name is the same name");
	accepted("{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"note\":\"caf\xc3\xa9 \\ud83d\\ude00 \xf0\x9f\x98\x80 \\u00e9\\b\\f\\n\\r\\t\"}",
			 "x", -1, "UTF-8 and escapes of every kind in an ignored member");
	refused("{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"\\ud83d\\ude00\":1,\"\xf0\x9f\x98\x80\":2}",
			"token response has a duplicate member",
			"a surrogate pair decodes to the same name as its UTF-8");
	refused("{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"\\u00e9\":1,\"\xc3\xa9\":2}",
			"token response has a duplicate member", "\\u00e9 is the name \xc3\xa9");
	accepted("{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"\\u00e9\":1,\"\xc3\xa8\":2}",
			 "x", -1, "but not \xc3\xa8");
	refused("{\"access_token\":\"caf\\u00e9\",\"token_type\":\"Bearer\"}",
			"access_token has bytes not allowed in a header", "a token with \\u00e9 (decoded to UTF-8)");
	refused("{\"access_token\":\"\\ud83d\\ude00\",\"token_type\":\"Bearer\"}",
			"access_token has bytes not allowed in a header", "a token with a surrogate pair");
	/* malformed escapes and strings */
	refused("{\"access_token\":\"\\ud83d\",\"token_type\":\"Bearer\"}", "token response is not JSON", "a lone high surrogate");
	refused("{\"access_token\":\"\\ud83dx\",\"token_type\":\"Bearer\"}", "token response is not JSON", "a high surrogate and a letter");
	refused("{\"access_token\":\"\\ude00\\ud83d\",\"token_type\":\"Bearer\"}", "token response is not JSON", "a reversed pair");
	refused("{\"access_token\":\"\\ud83d\\u0041\",\"token_type\":\"Bearer\"}", "token response is not JSON", "a high surrogate and \\u0041");
	refused("{\"access_token\":\"\\u12\",\"token_type\":\"Bearer\"}", "token response is not JSON", "a short \\u escape");
	refused("{\"access_token\":\"\\u12g4\",\"token_type\":\"Bearer\"}", "token response is not JSON", "a \\u escape with a non-hex digit");
	refused("{\"access_token\":\"\\x41\",\"token_type\":\"Bearer\"}", "token response is not JSON", "an unknown escape \\x");
	refused("{\"access_token\":\"\\'\",\"token_type\":\"Bearer\"}", "token response is not JSON", "an unknown escape \\'");
	refused("{\"access_token\":\"a\tb\",\"token_type\":\"Bearer\"}", "token response is not JSON", "a raw tab in a string");
	refused("{\"access_token\":\"a\nb\",\"token_type\":\"Bearer\"}", "token response is not JSON", "a raw LF in a string");
	refused("{\"access_token\":\"a\xc3\",\"token_type\":\"Bearer\"}", "token response is not JSON", "cut UTF-8");
	refused("{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"n\":\"\xc0\xaf\"}", "token response is not JSON", "overlong UTF-8");
	refused("{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"n\":\"\xed\xa0\x80\"}", "token response is not JSON", "a surrogate in UTF-8");
	refused("{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"n\":\"\xf4\x90\x80\x80\"}", "token response is not JSON", "UTF-8 past U+10FFFF");
	refused("{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"n\":\"\xff\"}", "token response is not JSON", "a byte that is never UTF-8");
	refused("{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"n\":\"\x80\"}", "token response is not JSON", "a lone continuation byte");
	refused("{\"access_token\":\"x\\", "token response is not JSON", "a backslash at the end");
	refused("{\"access_token\":\"x", "token response is not JSON", "an unclosed string");
}

/* test_token_refusals: what the token must be, and what must be there. */
static void
test_token_refusals(void)
{
	char	   *body;
	char	   *p;
	size_t		n;

	refused("{\"token_type\":\"Bearer\",\"expires_in\":3600}", "no access_token", "no access_token");
	refused("{\"access_token\":null,\"token_type\":\"Bearer\"}", "access_token is not a string", "access_token null");
	refused("{\"access_token\":12345,\"token_type\":\"Bearer\"}", "access_token is not a string", "access_token a number");
	refused("{\"access_token\":[\"x\"],\"token_type\":\"Bearer\"}", "access_token is not a string", "access_token an array");
	refused("{\"access_token\":{\"v\":\"x\"},\"token_type\":\"Bearer\"}", "access_token is not a string", "access_token an object");
	refused("{\"access_token\":\"\",\"token_type\":\"Bearer\"}", "access_token is empty", "an empty access_token");
	refused("{\"access_token\":\"a b\",\"token_type\":\"Bearer\"}", "access_token has bytes not allowed in a header", "a space in the token");
	refused("{\"access_token\":\" ab\",\"token_type\":\"Bearer\"}", "access_token has bytes not allowed in a header", "a leading space");
	refused("{\"access_token\":\"ab\\r\\nX-Evil: 1\",\"token_type\":\"Bearer\"}", "access_token has bytes not allowed in a header", "CR LF (header injection)");
	refused("{\"access_token\":\"ab\\n\",\"token_type\":\"Bearer\"}", "access_token has bytes not allowed in a header", "an LF");
	refused("{\"access_token\":\"ab\\u0000cd\",\"token_type\":\"Bearer\"}", "access_token has bytes not allowed in a header", "a NUL");
	refused("{\"access_token\":\"ab\\tcd\",\"token_type\":\"Bearer\"}", "access_token has bytes not allowed in a header", "a tab");
	refused("{\"access_token\":\"ab\\u001bcd\",\"token_type\":\"Bearer\"}", "access_token has bytes not allowed in a header", "an ESC");
	refused("{\"access_token\":\"ab\\u007fcd\",\"token_type\":\"Bearer\"}", "access_token has bytes not allowed in a header", "a DEL");
	refused("{\"access_token\":\"ab\xc3\xa9\",\"token_type\":\"Bearer\"}", "access_token has bytes not allowed in a header", "raw UTF-8");
	refused("{\"access_token\":\"x\"}", "no token_type", "no token_type");
	refused("{\"access_token\":\"x\",\"token_type\":null}", "token_type is not Bearer", "token_type null");
	refused("{\"access_token\":\"x\",\"token_type\":\"\"}", "token_type is not Bearer", "token_type empty");
	refused("{\"access_token\":\"x\",\"token_type\":\"mac\"}", "token_type is not Bearer", "token_type mac");
	refused("{\"access_token\":\"x\",\"token_type\":\"DPoP\"}", "token_type is not Bearer", "token_type DPoP");
	refused("{\"access_token\":\"x\",\"token_type\":\"Bearer \"}", "token_type is not Bearer", "token_type \"Bearer \"");
	refused("{\"access_token\":\"x\",\"token_type\":\"Bearerx\"}", "token_type is not Bearer", "token_type Bearerx");
	refused("{\"access_token\":\"x\",\"token_type\":\"Bear\"}", "token_type is not Bearer", "token_type Bear");
	refused("{\"access_token\":\"x\",\"token_type\":[\"Bearer\"]}", "token_type is not Bearer", "token_type an array");
	refused("{\"access_token\":\"x\",\"token_type\":\"Bearer Bearer Bearer Bearer Bearer Bearer Bearer Bearer Bearer Bearer Bearer\"}",
			"token_type is not Bearer", "a long token_type");

	/* the bound: 16 kB taken, one byte more refused */
	n = 64 + OAUTH_TOKEN_MAX + 1;
	body = malloc(n);
	p = malloc(OAUTH_TOKEN_MAX + 2);
	memset(p, 'T', OAUTH_TOKEN_MAX);
	p[OAUTH_TOKEN_MAX] = 0;
	snprintf(body, n, "{\"access_token\":\"%s\",\"token_type\":\"Bearer\"}", p);
	accepted(body, p, -1, "a token of OAUTH_TOKEN_MAX bytes");
	p[OAUTH_TOKEN_MAX] = 'T';
	p[OAUTH_TOKEN_MAX + 1] = 0;
	body = realloc(body, n + 1);
	snprintf(body, n + 1, "{\"access_token\":\"%s\",\"token_type\":\"Bearer\"}", p);
	refused(body, "access_token is too long", "a token of OAUTH_TOKEN_MAX + 1 bytes");
	free(body);
	free(p);
}

/* test_json_refusals: not JSON, not an object, duplicates, depth, size. */
static void
test_json_refusals(void)
{
	static const struct
	{
		const char *body;
		const char *error;
		const char *what;
	}			bad[] = {
		{"", "token response is not JSON", "empty"},
		{"   \n", "token response is not JSON", "white space only"},
		{"access_token=x&token_type=bearer", "token response is not JSON", "a form body (old Facebook)"},
		{"<html><body>502 Bad Gateway</body></html>", "token response is not JSON", "an HTML error page"},
		{"[{\"access_token\":\"x\",\"token_type\":\"Bearer\"}]", "token response is not a JSON object", "an array"},
		{"\"x\"", "token response is not a JSON object", "a string"},
		{"null", "token response is not a JSON object", "null"},
		{"42", "token response is not a JSON object", "a number"},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\"}x", "token response is not JSON", "trailing garbage"},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\"}{}", "token response is not JSON", "a second object"},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\"},", "token response is not JSON", "a trailing comma after the object"},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\",}", "token response is not JSON", "a trailing comma in the object"},
		{"{\"access_token\":\"x\",,\"token_type\":\"Bearer\"}", "token response is not JSON", "two commas"},
		{"{\"access_token\":\"x\" \"token_type\":\"Bearer\"}", "token response is not JSON", "no comma"},
		{"{\"access_token\" \"x\",\"token_type\":\"Bearer\"}", "token response is not JSON", "no colon"},
		{"{access_token:\"x\",token_type:\"Bearer\"}", "token response is not JSON", "bare names"},
		{"{'access_token':'x','token_type':'Bearer'}", "token response is not JSON", "single quotes"},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\"", "token response is not JSON", "no closing brace"},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"a\":[1,2}", "token response is not JSON", "a mismatched bracket"},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"a\":[1,]}", "token response is not JSON", "a trailing comma in an array"},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"a\":tru}", "token response is not JSON", "a cut literal"},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"a\":True}", "token response is not JSON", "True"},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"a\":NaN}", "token response is not JSON", "NaN"},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"a\":+1}", "token response is not JSON", "+1"},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"a\":.5}", "token response is not JSON", ".5"},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"a\":1.}", "token response is not JSON", "1."},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"a\":01}", "token response is not JSON", "01"},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"a\":0x1}", "token response is not JSON", "0x1"},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"a\":1e}", "token response is not JSON", "1e"},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"a\":{1:2}}", "token response is not JSON", "a number as a nested name"},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\"} /* c */", "token response is not JSON", "a comment"},
		{"\xef\xbb\xbf{\"access_token\":\"x\",\"token_type\":\"Bearer\"}", "token response is not JSON", "a byte order mark"},
		{"{\"access_token\":\"x\",\"access_token\":\"y\",\"token_type\":\"Bearer\"}", "token response has a duplicate member", "two access_tokens"},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"token_type\":\"Bearer\"}", "token response has a duplicate member", "two token_types"},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"expires_in\":1,\"expires_in\":2}", "token response has a duplicate member", "two expires_ins"},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"scope\":\"a\",\"scope\":\"a\"}", "token response has a duplicate member", "an ignored member twice"},
		{"{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"\":1,\"\":2}", "token response has a duplicate member", "the empty name twice"},
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		refused(bad[i].body, bad[i].error, bad[i].what);
	accepted(" \t\r\n{ \"access_token\" : \"x\" , \"token_type\" : \"Bearer\" } \t\r\n", "x", -1,
			 "white space everywhere JSON allows it");
	accepted("{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"a\":{\"k\":1,\"k\":2}}", "x", -1,
			 "a repeated name inside an ignored member is not looked at");
	{
		static const char nul_name[] = "{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"a\0b\":1}";
		static const char nul_after[] = "{\"access_token\":\"x\",\"token_type\":\"Bearer\"}\0";

		is_str(parse_n(nul_name, sizeof(nul_name) - 1), "token response is not JSON", "a raw NUL in a name");
		is_str(parse_n(nul_after, sizeof(nul_after) - 1), "token response is not JSON",
			   "a NUL after the object is trailing garbage");
	}

	/* nesting: 32 levels (the object's own counted) taken, 33 refused */
	{
		char		body[512];
		int			o;

		/* the member's value alternates objects {"k": ...} and arrays [...] */
		for (int levels = 31; levels <= 32; levels++)
		{
			o = snprintf(body, sizeof(body), "{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"a\":");
			for (int i = 0; i < levels; i++)
				o += sprintf(body + o, "%s", (i % 2) ? "[" : "{\"k\":");
			o += sprintf(body + o, "0");
			for (int i = levels - 1; i >= 0; i--)
				body[o++] = (i % 2) ? ']' : '}';
			body[o++] = '}';
			body[o] = 0;
			if (levels == 31)
				accepted(body, "x", -1, "nested 32 deep with the response's object");
			else
				refused(body, "token response nests too deeply", "nested 33 deep");
		}
		memset(body, '[', 400);
		body[400] = 0;
		refused(body, "token response nests too deeply", "400 ['s");
	}

	/* members: 64 taken, 65 refused; 4 kB of names */
	{
		char		body[16384];
		int			o;

		for (int count = 64; count <= 65; count++)
		{
			o = sprintf(body, "{\"access_token\":\"x\",\"token_type\":\"Bearer\"");
			for (int i = 2; i < count; i++)
				o += sprintf(body + o, ",\"m%d\":%d", i, i);
			body[o++] = '}';
			body[o] = 0;
			if (count == 64)
				accepted(body, "x", -1, "64 members");
			else
				refused(body, "token response has too many members", "65 members");
		}
		o = sprintf(body, "{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"");
		memset(body + o, 'n', OAUTH_MEMBER_NAMES_MAX);
		o += OAUTH_MEMBER_NAMES_MAX;
		o += sprintf(body + o, "\":1}");
		refused(body, "token response has too many members", "a 4 kB member name");
	}

	/* the response's size */
	{
		size_t		n = OAUTH_RESPONSE_MAX + 1;
		char	   *body = malloc(n + 1);
		int			o = sprintf(body, "{\"access_token\":\"x\",\"token_type\":\"Bearer\",\"pad\":\"");

		memset(body + o, 'p', n - o - 2);
		memcpy(body + n - 2, "\"}", 2);
		body[n] = 0;
		refused(body, "token response is too long", "a response of OAUTH_RESPONSE_MAX + 1 bytes");
		body[n - 3] = '"';
		body[n - 2] = '}';
		body[n - 1] = 0;
		accepted(body, "x", -1, "a response of OAUTH_RESPONSE_MAX bytes");
		free(body);
	}
}

/* ------------------------------------------------------------------ error */

/* test_error_response: section 5.2's codes; never free text. */
static void
test_error_response(void)
{
	static const char *const codes[] = {
		"invalid_request", "invalid_client", "invalid_grant", "unauthorized_client",
		"unsupported_grant_type", "invalid_scope", NULL
	};
	char		code[OAUTH_ERROR_CODE_SIZE];
	char		body[512];
	char		long_code[OAUTH_ERROR_CODE_MAX + 2];

	for (int i = 0; codes[i]; i++)
	{
		snprintf(body, sizeof(body), "{\"error\":\"%s\",\"error_description\":\"Client authentication failed.\"}", codes[i]);
		ok(oauth_error_parse(body, strlen(body), code) && strcmp(code, codes[i]) == 0,
		   "the error code %s", codes[i]);
	}
	ok(oauth_error_parse(S("{\"error\":\"invalid_request\"}"), code) && strcmp(code, "invalid_request") == 0,
	   "RFC 6749 section 5.2's example");
	ok(oauth_error_parse(S("{\"error_description\":\"AADSTS7000215: Invalid client secret provided.\",\"error\":\"invalid_client\","
						   "\"error_codes\":[7000215],\"timestamp\":\"2024-01-01 00:00:00Z\",\"trace_id\":\"a\",\"correlation_id\":\"b\"}"),
						 code) && strcmp(code, "invalid_client") == 0,
	   "Azure AD's shape, error after its description");
	ok(oauth_error_parse(S("{\"error\":\"access_denied\",\"error_uri\":\"https://x/y\"}"), code) &&
	   strcmp(code, "access_denied") == 0, "a code that is not section 5.2's but a short token");
	ok(oauth_error_parse(S("{\"error\":\"server.error-1\"}"), code) && strcmp(code, "server.error-1") == 0,
	   "a token with . and -");
	ok(!oauth_error_parse(S("{\"error\":\"Invalid client secret for client s6BhdRkqt3\"}"), code) && code[0] == 0,
	   "free text is not given back");
	ok(!oauth_error_parse(S("{\"error\":\"bad\\r\\nX: y\"}"), code) && code[0] == 0, "CR LF is not given back");
	ok(!oauth_error_parse(S("{\"error\":\"\"}"), code), "an empty code");
	ok(!oauth_error_parse(S("{\"error\":42}"), code), "a number");
	ok(!oauth_error_parse(S("{\"error\":null}"), code), "null");
	ok(!oauth_error_parse(S("{\"error_description\":\"x\"}"), code), "no error member");
	ok(!oauth_error_parse(S("{\"error\":\"a\",\"error\":\"b\"}"), code) && code[0] == 0, "two error members");
	ok(!oauth_error_parse(S("{\"error\":\"invalid_client\"} trailing"), code), "trailing garbage");
	ok(!oauth_error_parse(S("invalid_client"), code), "not JSON");
	ok(!oauth_error_parse(S("[\"invalid_client\"]"), code), "not an object");
	ok(!oauth_error_parse(S("{\"error\":\"caf\\u00e9\"}"), code), "non-ASCII");
	memset(long_code, 'e', sizeof(long_code) - 1);
	long_code[OAUTH_ERROR_CODE_MAX] = 0;
	snprintf(body, sizeof(body), "{\"error\":\"%s\"}", long_code);
	ok(oauth_error_parse(body, strlen(body), code) && strlen(code) == OAUTH_ERROR_CODE_MAX,
	   "a code of %d bytes", OAUTH_ERROR_CODE_MAX);
	long_code[OAUTH_ERROR_CODE_MAX] = 'e';
	long_code[OAUTH_ERROR_CODE_MAX + 1] = 0;
	snprintf(body, sizeof(body), "{\"error\":\"%s\"}", long_code);
	ok(!oauth_error_parse(body, strlen(body), code) && code[0] == 0, "a code of %d bytes is not given back",
	   OAUTH_ERROR_CODE_MAX + 1);
	ok(!oauth_error_parse(S("{\"access_token\":\"x\",\"token_type\":\"Bearer\"}"), code),
	   "a token response is no error response");
}

/* ------------------------------------------------------------------ cache */

/* test_refresh: when a cached token is replaced. */
static void
test_refresh(void)
{
	const int64_t t0 = 1000000;

	is_int(oauth_refresh_at(t0, true, 3600000), t0 + 3540000, "an hour's token: after 59 minutes (a minute early)");
	is_int(oauth_refresh_at(t0, true, 86400000), t0 + 86340000, "a day's token: a minute early");
	is_int(oauth_refresh_at(t0, true, 600000), t0 + 540000, "10 minutes: a minute early (a tenth)");
	is_int(oauth_refresh_at(t0, true, 300000), t0 + 270000, "5 minutes: 30 s early (a tenth)");
	is_int(oauth_refresh_at(t0, true, 10000), t0 + 9000, "10 s: 1 s early");
	is_int(oauth_refresh_at(t0, true, 1000), t0 + 900, "1 s: 100 ms early");
	is_int(oauth_refresh_at(t0, true, 1), t0 + 1, "1 ms: at its end");
	is_int(oauth_refresh_at(t0, false, 0), t0 + OAUTH_DEFAULT_LIFETIME_MS, "no expires_in: after 5 minutes");
	is_int(OAUTH_DEFAULT_LIFETIME_MS, 300000, "the default life is 5 minutes");
	is_int(oauth_refresh_at(t0, true, 0), t0, "a zero life: at once");
	is_int(oauth_refresh_at(t0, true, -5), t0, "a negative life: at once");
	is_int(oauth_refresh_at(INT64_MAX - 10, true, 3600000), INT64_MAX, "saturates instead of overflowing");
	is_int(oauth_refresh_at(t0, true, INT64_MAX), t0 + OAUTH_EXPIRES_MAX_MS - 60000, "a life past the bound is the bound");
	{
		int			good = 1;

		for (int64_t life = 1; life < 10000000; life = life * 3 + 1)
		{
			int64_t		at = oauth_refresh_at(0, true, life);

			if (at > life || at < life - life / 2 || life - at > 60000 || life - at > life / 10)
				good = 0;
		}
		ok(good, "for lives of 1 ms to hours: before expiry, after half of it, at most min(60 s, 10%%) early");
	}
}

int
main(void)
{
	test_form_encode();
	test_request_body();
	test_basic();
	test_real_responses();
	test_expires_in();
	test_escapes();
	test_token_refusals();
	test_json_refusals();
	test_error_response();
	test_refresh();
	return done_testing();
}
