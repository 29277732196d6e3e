/*-------------------------------------------------------------------------
 *
 * oauth.c
 *	  OAuth2 client credentials (RFC 6749 section 4.4) at grelout's edge:
 *	  what a handler's token request carries, what its token endpoint
 *	  answers, and how long a token is kept.
 *
 * The request: the form body "grant_type=client_credentials" with "scope"
 * and "audience" when the handler has them, and the client's credentials as
 * an "Authorization: Basic" value (section 2.3.1: the client id and secret
 * each form-encoded, joined by ":", base64).  Form encoding (Appendix B)
 * keeps ALPHA, DIGIT, "-", ".", "_" and "~", writes a space as "+" (as the
 * appendix's own example does, and HTML forms) and every other byte as
 * %XX with upper-case hex digits.  Those functions write into the caller's
 * buffer, snprintf-style, so that the relay can build them in its own
 * memory context: nothing here allocates.
 *
 * The responses: a small, strict JSON reader (RFC 8259: UTF-8 checked,
 * every escape including \u and its surrogate pairs decoded byte-exact, no
 * trailing bytes, no duplicate member names, nesting bounded) reads the
 * response's object; a token response (section 5.1) gives its access_token
 * (refused unless it is a non-empty header-safe string of at most
 * OAUTH_TOKEN_MAX bytes), its token_type (Bearer only) and its expires_in
 * (a positive number of seconds, also taken as a numeric string, as some
 * servers send it); an error response (section 5.2) gives its error code
 * when the code is a short token.  Errors are fixed strings: they never
 * hold the token or a byte of the response, which may be secret.
 *
 * The cache rule: oauth_refresh_at says when a token fetched at a given
 * moment must be replaced.
 *
 * Everything here works on (pointer, length) input that may hold any bytes,
 * never reads past the length, and uses the C library only, so that unit
 * tests and the fuzz target link this file alone.
 *
 *-------------------------------------------------------------------------
 */
#include "oauth.h"

#include <string.h>

/* The error strings, one each. */
#define E_TOO_LONG		"token response is too long"
#define E_NOT_JSON		"token response is not JSON"
#define E_NOT_OBJECT	"token response is not a JSON object"
#define E_TOO_DEEP		"token response nests too deeply"
#define E_TOO_MANY		"token response has too many members"
#define E_DUPLICATE		"token response has a duplicate member"
#define E_NO_TOKEN		"no access_token"
#define E_TOKEN_TYPE	"access_token is not a string"
#define E_TOKEN_EMPTY	"access_token is empty"
#define E_TOKEN_LONG	"access_token is too long"
#define E_TOKEN_BYTES	"access_token has bytes not allowed in a header"
#define E_NO_TYPE		"no token_type"
#define E_NOT_BEARER	"token_type is not Bearer"
#define E_EXP_NAN		"expires_in is not a number"
#define E_EXP_SIGN		"expires_in is not positive"
#define E_EXP_RANGE		"expires_in is out of range"

/*
 * oauth_wipe: clear a secret (a token, an Authorization value), with a
 * memset the compiler may not drop as a dead store.
 */
void
oauth_wipe(void *p, size_t n)
{
	static void *(*const volatile memset_v) (void *, int, size_t) = memset;

	if (p != NULL && n > 0)
		memset_v(p, 0, n);
}

/* ---------------------------------------------------------------------
 * The token request
 * ---------------------------------------------------------------------
 */

/* Where encoded bytes go: a sink into a buffer, or base64 on its way to one. */
typedef void (*EmitFn) (void *ctx, unsigned char c);

/*
 * A caller's buffer written snprintf-style: n counts every byte emitted,
 * those past cap - 1 are dropped; sink_end writes the NUL.
 */
typedef struct Sink
{
	char	   *out;
	size_t		cap;
	size_t		n;
} Sink;

/* sink_emit: one byte into the buffer when it fits (with its NUL). */
static void
sink_emit(void *ctx, unsigned char c)
{
	Sink	   *s = ctx;

	if (s->n + 1 < s->cap)
		s->out[s->n] = (char) c;
	s->n++;
}

/* sink_str: a C string's bytes into the buffer. */
static void
sink_str(Sink *s, const char *str)
{
	for (; *str; str++)
		sink_emit(s, (unsigned char) *str);
}

/* sink_end: terminate what was written (cut when short); the full length. */
static size_t
sink_end(Sink *s)
{
	if (s->cap > 0)
		s->out[s->n < s->cap ? s->n : s->cap - 1] = '\0';
	return s->n;
}

/* form_unreserved: a byte Appendix B leaves as it is. */
static inline bool
form_unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		(c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
}

/* form_encode_to: the form encoding of s[0..len) into emit. */
static void
form_encode_to(const char *s, size_t len, EmitFn emit, void *ctx)
{
	static const char hex[] = "0123456789ABCDEF";

	for (size_t i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (form_unreserved(c))
			emit(ctx, c);
		else if (c == ' ')
			emit(ctx, '+');
		else
		{
			emit(ctx, '%');
			emit(ctx, (unsigned char) hex[c >> 4]);
			emit(ctx, (unsigned char) hex[c & 15]);
		}
	}
}

/*
 * oauth_form_encode: s[0..len) form-encoded (RFC 6749 Appendix B) into out,
 * cap bytes, snprintf-style: returns the encoded length (without the NUL);
 * the whole result and its NUL are written only when cap is greater than
 * it, else as much as fits and a NUL.  out may be NULL when cap is 0.
 */
size_t
oauth_form_encode(const char *s, size_t len, char *out, size_t cap)
{
	Sink		sink = {out, cap, 0};

	form_encode_to(s, len, sink_emit, &sink);
	return sink_end(&sink);
}

/*
 * oauth_token_request_body: the client credentials token request's body
 * (section 4.4.2), "grant_type=client_credentials" then "&scope=..." and
 * "&audience=..." for those of scope and audience that are neither NULL
 * nor empty, into out as oauth_form_encode writes (call once with cap 0
 * for the length).  Content-Type: application/x-www-form-urlencoded.
 */
size_t
oauth_token_request_body(const char *scope, const char *audience,
						 char *out, size_t cap)
{
	Sink		sink = {out, cap, 0};

	sink_str(&sink, "grant_type=client_credentials");
	if (scope != NULL && scope[0] != '\0')
	{
		sink_str(&sink, "&scope=");
		form_encode_to(scope, strlen(scope), sink_emit, &sink);
	}
	if (audience != NULL && audience[0] != '\0')
	{
		sink_str(&sink, "&audience=");
		form_encode_to(audience, strlen(audience), sink_emit, &sink);
	}
	return sink_end(&sink);
}

/* Base64 on its way to a sink: up to two bytes wait for their group. */
typedef struct Base64Sink
{
	Sink	   *sink;
	unsigned char group[3];
	int			n;
} Base64Sink;

static const char b64_alphabet[] =
"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* b64_group: the four characters of the waiting group, padded with '='. */
static void
b64_group(Base64Sink *b)
{
	unsigned char *g = b->group;
	uint32_t	v;

	if (b->n == 0)
		return;
	if (b->n < 3)
		memset(g + b->n, 0, 3 - b->n);
	v = ((uint32_t) g[0] << 16) | ((uint32_t) g[1] << 8) | g[2];
	sink_emit(b->sink, (unsigned char) b64_alphabet[(v >> 18) & 63]);
	sink_emit(b->sink, (unsigned char) b64_alphabet[(v >> 12) & 63]);
	sink_emit(b->sink, b->n > 1 ? (unsigned char) b64_alphabet[(v >> 6) & 63] : '=');
	sink_emit(b->sink, b->n > 2 ? (unsigned char) b64_alphabet[v & 63] : '=');
	b->n = 0;
	v = 0;
	oauth_wipe(g, 3);
}

/* b64_emit: one byte into the waiting group, written out when full. */
static void
b64_emit(void *ctx, unsigned char c)
{
	Base64Sink *b = ctx;

	b->group[b->n++] = c;
	if (b->n == 3)
		b64_group(b);
}

/*
 * oauth_basic_authorization: the Authorization value of the client's
 * credentials (section 2.3.1), "Basic " and the base64 of the form-encoded
 * client id, ":" and the form-encoded client secret, into out as
 * oauth_form_encode writes.  The value holds the secret: the caller wipes
 * it (oauth_wipe) before freeing it.
 */
size_t
oauth_basic_authorization(const char *client_id, const char *client_secret,
						  char *out, size_t cap)
{
	Sink		sink = {out, cap, 0};
	Base64Sink	b64 = {&sink, {0, 0, 0}, 0};

	sink_str(&sink, "Basic ");
	form_encode_to(client_id, strlen(client_id), b64_emit, &b64);
	b64_emit(&b64, ':');
	form_encode_to(client_secret, strlen(client_secret), b64_emit, &b64);
	b64_group(&b64);
	return sink_end(&sink);
}

/* ---------------------------------------------------------------------
 * The JSON reader
 * ---------------------------------------------------------------------
 */

/* Where a reading is: the next byte, the end, the first error. */
typedef struct JsonReader
{
	const char *p;
	const char *end;
	const char *error;
} JsonReader;

/* What a member's value turned out to be. */
typedef enum ValueKind
{
	VALUE_ABSENT = 0,			/* no such member */
	VALUE_STRING,
	VALUE_NUMBER,
	VALUE_NULL,
	VALUE_OTHER					/* true, false, an object or an array */
} ValueKind;

/*
 * A member's value: its kind; a string's decoded length (its bytes went to
 * the caller's buffer as far as they fit); a number's bytes in the input.
 */
typedef struct JsonValue
{
	ValueKind	kind;
	size_t		len;
	const char *number;
} JsonValue;

/* fail: note the reading's first error; false, for the caller to return. */
static bool
fail(JsonReader *r, const char *error)
{
	if (r->error == NULL)
		r->error = error;
	return false;
}

/* skip_ws: past JSON's white space (space, tab, LF, CR). */
static void
skip_ws(JsonReader *r)
{
	while (r->p < r->end &&
		   (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
		r->p++;
}

/* put: one decoded byte at dst[*n] when it fits in cap; *n counts them all. */
static inline void
put(char *dst, size_t cap, size_t *n, unsigned char c)
{
	if (*n < cap)
		dst[*n] = (char) c;
	(*n)++;
}

/* put_utf8: a code point (not a surrogate, at most U+10FFFF) as UTF-8. */
static void
put_utf8(char *dst, size_t cap, size_t *n, uint32_t cp)
{
	if (cp < 0x80)
		put(dst, cap, n, (unsigned char) cp);
	else if (cp < 0x800)
	{
		put(dst, cap, n, (unsigned char) (0xC0 | (cp >> 6)));
		put(dst, cap, n, (unsigned char) (0x80 | (cp & 0x3F)));
	}
	else if (cp < 0x10000)
	{
		put(dst, cap, n, (unsigned char) (0xE0 | (cp >> 12)));
		put(dst, cap, n, (unsigned char) (0x80 | ((cp >> 6) & 0x3F)));
		put(dst, cap, n, (unsigned char) (0x80 | (cp & 0x3F)));
	}
	else
	{
		put(dst, cap, n, (unsigned char) (0xF0 | (cp >> 18)));
		put(dst, cap, n, (unsigned char) (0x80 | ((cp >> 12) & 0x3F)));
		put(dst, cap, n, (unsigned char) (0x80 | ((cp >> 6) & 0x3F)));
		put(dst, cap, n, (unsigned char) (0x80 | (cp & 0x3F)));
	}
}

/*
 * utf8_length: the length of the well-formed UTF-8 sequence at p (a byte of
 * 0x80 or more; Unicode's table 3-7: no overlong forms, no surrogates,
 * nothing past U+10FFFF), or 0 when it is not one.
 */
static int
utf8_length(const unsigned char *p, const unsigned char *end)
{
	unsigned char c = p[0];
	unsigned char lo = 0x80,
				hi = 0xBF;
	int			len;

	if (c >= 0xC2 && c <= 0xDF)
		len = 2;
	else if (c >= 0xE0 && c <= 0xEF)
	{
		len = 3;
		if (c == 0xE0)
			lo = 0xA0;
		else if (c == 0xED)
			hi = 0x9F;
	}
	else if (c >= 0xF0 && c <= 0xF4)
	{
		len = 4;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F;
	}
	else
		return 0;
	if (end - p < len)
		return 0;
	if (p[1] < lo || p[1] > hi)
		return 0;
	for (int i = 2; i < len; i++)
		if (p[i] < 0x80 || p[i] > 0xBF)
			return 0;
	return len;
}

/* read_hex4: the four hex digits of a \u escape at r->p, as a number. */
static bool
read_hex4(JsonReader *r, uint32_t *v)
{
	*v = 0;
	if (r->end - r->p < 4)
		return fail(r, E_NOT_JSON);
	for (int i = 0; i < 4; i++)
	{
		char		c = *r->p++;
		uint32_t	d;

		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return fail(r, E_NOT_JSON);
		*v = (*v << 4) | d;
	}
	return true;
}

/*
 * read_unicode_escape: the code point of a \u escape whose "\u" was read,
 * with a high surrogate's following "\uDC00".."\uDFFF" escape: a pair is
 * one code point; a lone or reversed surrogate is refused (it has no UTF-8).
 */
static bool
read_unicode_escape(JsonReader *r, uint32_t *cp)
{
	uint32_t	low;

	if (!read_hex4(r, cp))
		return false;
	if (*cp >= 0xDC00 && *cp <= 0xDFFF)
		return fail(r, E_NOT_JSON);
	if (*cp < 0xD800 || *cp > 0xDBFF)
		return true;
	if (r->end - r->p < 2 || r->p[0] != '\\' || r->p[1] != 'u')
		return fail(r, E_NOT_JSON);
	r->p += 2;
	if (!read_hex4(r, &low))
		return false;
	if (low < 0xDC00 || low > 0xDFFF)
		return fail(r, E_NOT_JSON);
	*cp = 0x10000 + ((*cp - 0xD800) << 10) + (low - 0xDC00);
	return true;
}

/*
 * read_string: the string at r->p (its opening quote), decoded into dst as
 * far as cap allows (dst may be NULL when cap is 0); *len is its whole
 * decoded length.
 */
static bool
read_string(JsonReader *r, char *dst, size_t cap, size_t *len)
{
	size_t		n = 0;

	r->p++;						/* the quote */
	for (;;)
	{
		unsigned char c;

		if (r->p >= r->end)
			return fail(r, E_NOT_JSON);
		c = (unsigned char) *r->p;
		if (c == '"')
		{
			r->p++;
			*len = n;
			return true;
		}
		if (c < 0x20)
			return fail(r, E_NOT_JSON);
		if (c == '\\')
		{
			uint32_t	cp;

			if (r->end - r->p < 2)
				return fail(r, E_NOT_JSON);
			c = (unsigned char) r->p[1];
			r->p += 2;
			switch (c)
			{
				case '"':
				case '\\':
				case '/':
					put(dst, cap, &n, c);
					break;
				case 'b':
					put(dst, cap, &n, '\b');
					break;
				case 'f':
					put(dst, cap, &n, '\f');
					break;
				case 'n':
					put(dst, cap, &n, '\n');
					break;
				case 'r':
					put(dst, cap, &n, '\r');
					break;
				case 't':
					put(dst, cap, &n, '\t');
					break;
				case 'u':
					if (!read_unicode_escape(r, &cp))
						return false;
					put_utf8(dst, cap, &n, cp);
					break;
				default:
					return fail(r, E_NOT_JSON);
			}
			continue;
		}
		if (c < 0x80)
		{
			put(dst, cap, &n, c);
			r->p++;
			continue;
		}
		{
			int			k = utf8_length((const unsigned char *) r->p,
										(const unsigned char *) r->end);

			if (k == 0)
				return fail(r, E_NOT_JSON);
			for (int i = 0; i < k; i++)
				put(dst, cap, &n, (unsigned char) r->p[i]);
			r->p += k;
		}
	}
}

/* digits: past a run of ASCII digits at *p (before end); how many. */
static size_t
digits(const char **p, const char *end)
{
	size_t		n = 0;

	while (*p < end && **p >= '0' && **p <= '9')
	{
		(*p)++;
		n++;
	}
	return n;
}

/*
 * number_end: where the JSON number at s ends (RFC 8259's grammar:
 * -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?), or NULL when s does not
 * start with one.
 */
static const char *
number_end(const char *s, const char *end)
{
	const char *p = s;

	if (p < end && *p == '-')
		p++;
	if (p < end && *p == '0')
		p++;
	else if (digits(&p, end) == 0)
		return NULL;
	if (p < end && *p == '.')
	{
		p++;
		if (digits(&p, end) == 0)
			return NULL;
	}
	if (p < end && (*p == 'e' || *p == 'E'))
	{
		p++;
		if (p < end && (*p == '+' || *p == '-'))
			p++;
		if (digits(&p, end) == 0)
			return NULL;
	}
	return p;
}

/* read_literal: the literal word (true, false, null) at r->p. */
static bool
read_literal(JsonReader *r, const char *word)
{
	size_t		n = strlen(word);

	if ((size_t) (r->end - r->p) < n || memcmp(r->p, word, n) != 0)
		return fail(r, E_NOT_JSON);
	r->p += n;
	return true;
}

static bool skip_value(JsonReader *r, int depth);

/*
 * skip_container: past the object or array at r->p, at nesting depth
 * depth, its content checked and dropped.
 */
static bool
skip_container(JsonReader *r, int depth)
{
	char		close = (*r->p == '{') ? '}' : ']';
	bool		object = (close == '}');

	if (depth > OAUTH_JSON_DEPTH_MAX)
		return fail(r, E_TOO_DEEP);
	r->p++;
	skip_ws(r);
	if (r->p < r->end && *r->p == close)
	{
		r->p++;
		return true;
	}
	for (;;)
	{
		if (object)
		{
			size_t		len;

			if (r->p >= r->end || *r->p != '"' || !read_string(r, NULL, 0, &len))
				return fail(r, E_NOT_JSON);
			skip_ws(r);
			if (r->p >= r->end || *r->p != ':')
				return fail(r, E_NOT_JSON);
			r->p++;
			skip_ws(r);
		}
		if (!skip_value(r, depth + 1))
			return false;
		skip_ws(r);
		if (r->p < r->end && *r->p == ',')
		{
			r->p++;
			skip_ws(r);
			continue;
		}
		if (r->p < r->end && *r->p == close)
		{
			r->p++;
			return true;
		}
		return fail(r, E_NOT_JSON);
	}
}

/*
 * skip_value: past the value at r->p (white space before it already
 * skipped), checked and dropped; an object or array in it is at depth.
 */
static bool
skip_value(JsonReader *r, int depth)
{
	size_t		len;
	const char *e;

	if (r->p >= r->end)
		return fail(r, E_NOT_JSON);
	switch (*r->p)
	{
		case '{':
		case '[':
			return skip_container(r, depth);
		case '"':
			return read_string(r, NULL, 0, &len);
		case 't':
			return read_literal(r, "true");
		case 'f':
			return read_literal(r, "false");
		case 'n':
			return read_literal(r, "null");
		default:
			e = number_end(r->p, r->end);
			if (e == NULL)
				return fail(r, E_NOT_JSON);
			r->p = e;
			return true;
	}
}

/*
 * read_value: a member's value at r->p: a string decoded into dst (cap
 * bytes), a number's bytes noted, anything else checked and dropped.
 */
static bool
read_value(JsonReader *r, char *dst, size_t cap, JsonValue *v)
{
	if (r->p < r->end && *r->p == '"')
	{
		v->kind = VALUE_STRING;
		return read_string(r, dst, cap, &v->len);
	}
	if (r->p < r->end && (*r->p == '-' || (*r->p >= '0' && *r->p <= '9')))
	{
		const char *e = number_end(r->p, r->end);

		if (e == NULL)
			return fail(r, E_NOT_JSON);
		v->kind = VALUE_NUMBER;
		v->number = r->p;
		v->len = e - r->p;
		r->p = e;
		return true;
	}
	if (r->p < r->end && *r->p == 'n')
	{
		v->kind = VALUE_NULL;
		return read_literal(r, "null");
	}
	v->kind = VALUE_OTHER;
	return skip_value(r, 2);
}

/*
 * Called for each member of a response's object, with r->p at its value,
 * which it reads (read_value or skip_value): the caller's interest.
 */
typedef bool (*MemberFn) (JsonReader *r, const char *name, size_t len,
						  void *ctx);

/*
 * read_object: read body[0..len), which must be one JSON object and
 * nothing else but white space, calling member for each of its members;
 * NULL when it is one, else the first error.  Member names are kept
 * (decoded) to refuse a name seen twice.
 */
static const char *
read_object(const char *body, size_t len, MemberFn member, void *ctx)
{
	JsonReader	r = {body, body + len, NULL};
	char		names[OAUTH_MEMBER_NAMES_MAX];
	size_t		name_at[OAUTH_MEMBERS_MAX];
	size_t		name_len[OAUTH_MEMBERS_MAX];
	size_t		used = 0;
	int			count = 0;

	if (len > OAUTH_RESPONSE_MAX)
		return E_TOO_LONG;
	skip_ws(&r);
	if (r.p >= r.end)
		return E_NOT_JSON;
	if (*r.p != '{')
	{
		/* another JSON value, or no JSON at all */
		if (skip_value(&r, 1))
		{
			skip_ws(&r);
			if (r.p == r.end)
				return E_NOT_OBJECT;
		}
		return r.error ? r.error : E_NOT_JSON;
	}
	r.p++;
	skip_ws(&r);
	if (r.p < r.end && *r.p == '}')
		r.p++;
	else
		for (;;)
		{
			size_t		n;

			if (r.p >= r.end || *r.p != '"')
				return E_NOT_JSON;
			if (!read_string(&r, names + used, sizeof(names) - used, &n))
				return r.error;
			if (count == OAUTH_MEMBERS_MAX || n > sizeof(names) - used)
				return E_TOO_MANY;
			for (int i = 0; i < count; i++)
				if (name_len[i] == n && memcmp(names + name_at[i], names + used, n) == 0)
					return E_DUPLICATE;
			name_at[count] = used;
			name_len[count] = n;
			count++;
			used += n;
			skip_ws(&r);
			if (r.p >= r.end || *r.p != ':')
				return E_NOT_JSON;
			r.p++;
			skip_ws(&r);
			if (!member(&r, names + name_at[count - 1], n, ctx))
				return r.error ? r.error : E_NOT_JSON;
			skip_ws(&r);
			if (r.p < r.end && *r.p == ',')
			{
				r.p++;
				skip_ws(&r);
				continue;
			}
			if (r.p < r.end && *r.p == '}')
			{
				r.p++;
				break;
			}
			return E_NOT_JSON;
		}
	skip_ws(&r);
	if (r.p != r.end)
		return E_NOT_JSON;
	return NULL;
}

/* name_is: is the member name name[0..len) the C string s? */
static inline bool
name_is(const char *name, size_t len, const char *s)
{
	return strlen(s) == len && memcmp(name, s, len) == 0;
}

/* ---------------------------------------------------------------------
 * The token response
 * ---------------------------------------------------------------------
 */

/* Room for token_type and a string expires_in. */
#define SMALL_VALUE_MAX	64

/* What a token response's members said, checked once it was all read. */
typedef struct TokenMembers
{
	OAuthToken *token;
	JsonValue	access_token;
	JsonValue	token_type;
	char		type[SMALL_VALUE_MAX];
	JsonValue	expires_in;
	char		expires[SMALL_VALUE_MAX];
} TokenMembers;

/* token_member: one member of a token response (a MemberFn). */
static bool
token_member(JsonReader *r, const char *name, size_t len, void *ctx)
{
	TokenMembers *m = ctx;

	if (name_is(name, len, "access_token"))
		return read_value(r, m->token->access_token, OAUTH_TOKEN_MAX,
						  &m->access_token);
	if (name_is(name, len, "token_type"))
		return read_value(r, m->type, sizeof(m->type), &m->token_type);
	if (name_is(name, len, "expires_in"))
		return read_value(r, m->expires, sizeof(m->expires), &m->expires_in);
	return skip_value(r, 2);
}

/* header_safe: is every byte visible ASCII (0x21 to 0x7E)? */
static bool
header_safe(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((unsigned char) s[i] < 0x21 || (unsigned char) s[i] > 0x7E)
			return false;
	return true;
}

/* bearer: is s[0..len) "Bearer" in any letter case? */
static bool
bearer(const char *s, size_t len)
{
	static const char word[] = "bearer";

	if (len != sizeof(word) - 1)
		return false;
	for (size_t i = 0; i < len; i++)
	{
		char		c = s[i];

		if (c >= 'A' && c <= 'Z')
			c += 'a' - 'A';
		if (c != word[i])
			return false;
	}
	return true;
}

/*
 * oauth_number_ms: the JSON number s[0..len) (nothing else: no sign but
 * "-", no white space) of seconds, as whole milliseconds (the fraction of
 * a millisecond dropped, exactly, with no floating point); NULL when it is
 * from 1 ms to OAUTH_EXPIRES_MAX_MS, else the error (not a number, not
 * positive, out of range).
 */
const char *
oauth_number_ms(const char *s, size_t len, int64_t *ms)
{
	const char *p = s,
			   *end = s + len;
	char		sig[16];		/* the first significant digits */
	int			nsig = 0;
	long		pos10 = 0;		/* the value is 0.<sig> x 10^pos10 */
	long		exp10 = 0;
	bool		negative = false;
	long		places;
	int64_t		v = 0;

	if (number_end(s, end) != end)
		return E_EXP_NAN;
	if (*p == '-')
	{
		negative = true;
		p++;
	}
	for (; p < end && *p >= '0' && *p <= '9'; p++)
	{
		if (nsig == 0 && *p == '0')
			continue;
		if (nsig < (int) sizeof(sig))
			sig[nsig] = *p;
		nsig++;
		pos10++;
	}
	if (p < end && *p == '.')
		for (p++; p < end && *p >= '0' && *p <= '9'; p++)
		{
			if (nsig == 0 && *p == '0')
			{
				pos10--;
				continue;
			}
			if (nsig < (int) sizeof(sig))
				sig[nsig] = *p;
			nsig++;
		}
	if (p < end)
	{
		bool		eneg = false;

		p++;					/* e or E */
		if (*p == '+' || *p == '-')
			eneg = (*p++ == '-');
		for (; p < end; p++)
			if (exp10 < 1000000)
				exp10 = exp10 * 10 + (*p - '0');
		if (eneg)
			exp10 = -exp10;
	}
	if (nsig == 0 || negative)
		return E_EXP_SIGN;
	/* the whole milliseconds: the first pos10 + exp10 + 3 digits of sig */
	places = pos10 + exp10 + 3;
	if (places <= 0)
		return E_EXP_RANGE;
	if (places > 13)
		return E_EXP_RANGE;
	for (long i = 0; i < places; i++)
		v = v * 10 + (i < nsig && i < (long) sizeof(sig) ? sig[i] - '0' : 0);
	if (v < 1 || v > OAUTH_EXPIRES_MAX_MS)
		return E_EXP_RANGE;
	*ms = v;
	return NULL;
}

/* expires_ms: a token response's expires_in, when it has a usable one. */
static const char *
expires_ms(const TokenMembers *m, OAuthToken *token)
{
	const char *error;

	switch (m->expires_in.kind)
	{
		case VALUE_ABSENT:
		case VALUE_NULL:
			return NULL;
		case VALUE_NUMBER:
			error = oauth_number_ms(m->expires_in.number, m->expires_in.len,
									&token->expires_in_ms);
			break;
		case VALUE_STRING:
			if (m->expires_in.len > sizeof(m->expires))
				return E_EXP_NAN;
			error = oauth_number_ms(m->expires, m->expires_in.len,
									&token->expires_in_ms);
			break;
		default:
			return E_EXP_NAN;
	}
	if (error == NULL)
		token->has_expires_in = true;
	return error;
}

/* token_check: the members of a token response that was read whole. */
static const char *
token_check(TokenMembers *m)
{
	OAuthToken *token = m->token;

	if (m->access_token.kind == VALUE_ABSENT)
		return E_NO_TOKEN;
	if (m->access_token.kind != VALUE_STRING)
		return E_TOKEN_TYPE;
	if (m->access_token.len == 0)
		return E_TOKEN_EMPTY;
	if (m->access_token.len > OAUTH_TOKEN_MAX)
		return E_TOKEN_LONG;
	if (!header_safe(token->access_token, m->access_token.len))
		return E_TOKEN_BYTES;
	if (m->token_type.kind == VALUE_ABSENT)
		return E_NO_TYPE;
	if (m->token_type.kind != VALUE_STRING ||
		m->token_type.len > sizeof(m->type) ||
		!bearer(m->type, m->token_type.len))
		return E_NOT_BEARER;
	token->access_token_len = m->access_token.len;
	token->access_token[token->access_token_len] = '\0';
	return expires_ms(m, token);
}

/*
 * oauth_token_parse: read a successful token response (RFC 6749 section
 * 5.1), body[0..len), into *token: its access_token (NUL-terminated, byte
 * for byte as the JSON string decodes), and its expires_in in milliseconds
 * when it has one.  Returns NULL when the response is a JSON object with
 * an access_token that is a string of 1 to OAUTH_TOKEN_MAX visible ASCII
 * bytes (anything else could not go into a header, or would be split from
 * "Bearer" by a space), a token_type "Bearer" in any letter case, and an
 * expires_in that, when present and not null, is a positive number of
 * seconds or a string holding one, of at most ten years; other members are
 * ignored.  Otherwise returns a fixed error string, and *token is wiped.
 * The caller wipes token->access_token (oauth_wipe) when done with it.
 */
const char *
oauth_token_parse(const char *body, size_t len, OAuthToken *token)
{
	TokenMembers m;
	const char *error;

	memset(&m, 0, sizeof(m));
	m.token = token;
	token->access_token_len = 0;
	token->has_expires_in = false;
	token->expires_in_ms = 0;
	error = read_object(body, len, token_member, &m);
	if (error == NULL)
		error = token_check(&m);
	if (error != NULL)
	{
		oauth_wipe(token, sizeof(*token));
		token->has_expires_in = false;
	}
	return error;
}

/* ---------------------------------------------------------------------
 * The error response
 * ---------------------------------------------------------------------
 */

/* What an error response's "error" member was. */
typedef struct ErrorMembers
{
	JsonValue	error;
	char	   *code;
} ErrorMembers;

/* error_member: one member of an error response (a MemberFn). */
static bool
error_member(JsonReader *r, const char *name, size_t len, void *ctx)
{
	ErrorMembers *m = ctx;

	if (name_is(name, len, "error"))
		return read_value(r, m->code, OAUTH_ERROR_CODE_MAX, &m->error);
	return skip_value(r, 2);
}

/* code_char: a byte allowed in an error code given back (A-Z a-z 0-9 _ . -). */
static inline bool
code_char(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		(c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

/*
 * oauth_error_parse: the error code of an error response (RFC 6749 section
 * 5.2), body[0..len), into code (OAUTH_ERROR_CODE_SIZE bytes,
 * NUL-terminated).  True when the body is a JSON object (read as strictly
 * as a token response) whose "error" is a string of 1 to
 * OAUTH_ERROR_CODE_MAX bytes of A-Z a-z 0-9 "_" "." "-": every code of the
 * specification (invalid_request, invalid_client, invalid_grant,
 * unauthorized_client, unsupported_grant_type, invalid_scope) and the
 * short codes servers add, but never free text; error_description and
 * error_uri are not read.  Otherwise false, with code empty.
 */
bool
oauth_error_parse(const char *body, size_t len, char *code)
{
	ErrorMembers m;

	memset(&m, 0, sizeof(m));
	m.code = code;
	if (read_object(body, len, error_member, &m) == NULL &&
		m.error.kind == VALUE_STRING &&
		m.error.len >= 1 && m.error.len <= OAUTH_ERROR_CODE_MAX)
	{
		size_t		i;

		for (i = 0; i < m.error.len; i++)
			if (!code_char((unsigned char) code[i]))
				break;
		if (i == m.error.len)
		{
			code[i] = '\0';
			return true;
		}
	}
	memset(code, 0, OAUTH_ERROR_CODE_SIZE);
	return false;
}

/* ---------------------------------------------------------------------
 * The cache rule
 * ---------------------------------------------------------------------
 */

/* add_ms: a + b, b >= 0, saturated at INT64_MAX. */
static int64_t
add_ms(int64_t a, int64_t b)
{
	return (a > INT64_MAX - b) ? INT64_MAX : a + b;
}

/*
 * oauth_refresh_at: when (monotonic milliseconds) a token must be replaced
 * that was asked for at sent_ms (the moment its request was sent: the
 * server's clock of its lifetime started later, so this errs early).
 *
 * With an expires_in: before it expires, by a margin of a tenth of its life
 * but at most OAUTH_REFRESH_MARGIN_MS (one minute), and never before half
 * its life; so a one-hour token is replaced after 59 minutes, a 5-minute
 * one after 4:30, a 10-second one after 9 s.  Without one (or a
 * non-positive one, which oauth_token_parse never gives): after
 * OAUTH_DEFAULT_LIFETIME_MS (5 minutes).  RFC 6749 leaves that lifetime to
 * the server's documentation; many servers use an hour, some less.  Five
 * minutes costs one token request every five minutes per handler, and
 * bounds how long a token the server has expired can keep costing 401s and
 * retries; a wrong guess is caught by the refresh on a 401 either way.
 */
int64_t
oauth_refresh_at(int64_t sent_ms, bool has_expires_in, int64_t expires_in_ms)
{
	int64_t		life,
				margin,
				lead;

	if (!has_expires_in)
		return add_ms(sent_ms, OAUTH_DEFAULT_LIFETIME_MS);
	if (expires_in_ms <= 0)
		return sent_ms;
	life = (expires_in_ms > OAUTH_EXPIRES_MAX_MS) ? OAUTH_EXPIRES_MAX_MS : expires_in_ms;
	margin = life / 10;
	if (margin > OAUTH_REFRESH_MARGIN_MS)
		margin = OAUTH_REFRESH_MARGIN_MS;
	lead = life - margin;
	if (lead < life - life / 2)
		lead = life - life / 2;
	return add_ms(sent_ms, lead);
}
