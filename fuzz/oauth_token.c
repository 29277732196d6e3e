/*-------------------------------------------------------------------------
 *
 * oauth_token.c
 *	  libFuzzer target: oauth_token_parse() and oauth_error_parse(), the
 *	  readers of what an OAuth2 token endpoint answers, and the form
 *	  encoding of the token request.
 *
 * Invariants: never reads past the response; an accepted token is 1 to
 * OAUTH_TOKEN_MAX visible ASCII bytes, NUL-terminated, and (when the
 * response has no backslash, so no escape) found as is in the response;
 * an accepted expires_in is 1 ms to OAUTH_EXPIRES_MAX_MS and its refresh
 * time falls after half the token's life and by its end; a refusal is one
 * of the fixed error strings and leaves the token wiped; the same input
 * gives the same answer twice; an error code given back is 1 to
 * OAUTH_ERROR_CODE_MAX bytes of [A-Za-z0-9_.-]; the form encoding of the
 * input is as long as announced, uses only unreserved bytes, "+" and %XX,
 * and decodes back to the input.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <stdbool.h>

#include "fuzz.h"
#include "oauth.h"

/* Every error oauth_token_parse may give. */
static const char *const errors[] = {
	"token response is too long", "token response is not JSON",
	"token response is not a JSON object", "token response nests too deeply",
	"token response has too many members", "token response has a duplicate member",
	"no access_token", "access_token is not a string", "access_token is empty",
	"access_token is too long", "access_token has bytes not allowed in a header",
	"no token_type", "token_type is not Bearer", "expires_in is not a number",
	"expires_in is not positive", "expires_in is out of range", NULL
};

static OAuthToken token,
			again;

/* known_error: is e one of the fixed error strings? */
static bool
known_error(const char *e)
{
	for (int i = 0; errors[i]; i++)
		if (strcmp(e, errors[i]) == 0)
			return true;
	return false;
}

/* all_zero: is every byte of p[0..n) zero? */
static bool
all_zero(const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i] != 0)
			return false;
	return true;
}

/* hexval: a hex digit's value, or -1. */
static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* check_form: the form encoding of the input, and its decoding back. */
static void
check_form(const uint8_t *data, size_t size)
{
	size_t		n = oauth_form_encode((const char *) data, size, NULL, 0);
	char	   *enc = malloc(n + 1);
	size_t		o = 0;

	CHECK(n >= size && n <= 3 * size);
	CHECK(oauth_form_encode((const char *) data, size, enc, n + 1) == n);
	CHECK(enc[n] == '\0' && strlen(enc) == n);
	for (size_t i = 0; i < n; i++)
	{
		char		c = enc[i];
		int			want;

		if (c == '%')
		{
			CHECK(i + 2 < n);
			CHECK(hexval(enc[i + 1]) >= 0 && hexval(enc[i + 2]) >= 0);
			want = hexval(enc[i + 1]) * 16 + hexval(enc[i + 2]);
			i += 2;
		}
		else if (c == '+')
			want = ' ';
		else
		{
			CHECK((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
				  (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~');
			want = c;
		}
		CHECK(o < size && data[o] == (uint8_t) want);
		o++;
	}
	CHECK(o == size);
	free(enc);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *body = dup_exact(data, size);
	const char *e = oauth_token_parse(body, size, &token);
	const char *e2 = oauth_token_parse(body, size, &again);
	char		code[OAUTH_ERROR_CODE_SIZE];

	CHECK((e == NULL) == (e2 == NULL));
	if (e != NULL)
	{
		CHECK(strcmp(e, e2) == 0);
		CHECK(known_error(e));
		CHECK(all_zero(&token, sizeof(token)));
	}
	else
	{
		size_t		len = token.access_token_len;

		CHECK(len >= 1 && len <= OAUTH_TOKEN_MAX);
		CHECK(token.access_token[len] == '\0' && strlen(token.access_token) == len);
		for (size_t i = 0; i < len; i++)
			CHECK(token.access_token[i] >= 0x21 && token.access_token[i] <= 0x7E);
		CHECK(again.access_token_len == len &&
			  memcmp(again.access_token, token.access_token, len) == 0);
		CHECK(again.has_expires_in == token.has_expires_in &&
			  again.expires_in_ms == token.expires_in_ms);
		if (memchr(body, '\\', size) == NULL)
			CHECK(memmem(body, size, token.access_token, len) != NULL);
		if (token.has_expires_in)
		{
			int64_t		life = token.expires_in_ms;
			int64_t		at = oauth_refresh_at(1000, true, life);

			CHECK(life >= 1 && life <= OAUTH_EXPIRES_MAX_MS);
			CHECK(at <= 1000 + life && at >= 1000 + life - life / 2);
		}
		else
			CHECK(token.expires_in_ms == 0);
	}

	memset(code, 'x', sizeof(code));
	if (oauth_error_parse(body, size, code))
	{
		size_t		n = strlen(code);

		CHECK(n >= 1 && n <= OAUTH_ERROR_CODE_MAX);
		for (size_t i = 0; i < n; i++)
			CHECK((code[i] >= 'A' && code[i] <= 'Z') || (code[i] >= 'a' && code[i] <= 'z') ||
				  (code[i] >= '0' && code[i] <= '9') || code[i] == '_' ||
				  code[i] == '.' || code[i] == '-');
	}
	else
		CHECK(all_zero(code, sizeof(code)));

	check_form(data, size);
	free(body);
	return 0;
}
