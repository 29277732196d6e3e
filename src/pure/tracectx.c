/*-------------------------------------------------------------------------
 *
 * tracectx.c
 *	  W3C Trace Context (https://www.w3.org/TR/trace-context/) at the
 *	  edge: whether a traceparent and a tracestate are well formed, the
 *	  trace context in a sqlcommenter comment of a statement
 *	  (https://google.github.io/sqlcommenter/spec/), and the traceparent
 *	  a delivery attempt sends: the publisher's trace id and flags with a
 *	  span id of its own.
 *
 * Nothing here allocates or knows PostgreSQL: publish.c captures with it,
 * webhook.c sends with it, and the unit tests and the fuzz target reach it
 * alone.  Every reader is bounded by the length it is given.
 *
 *-------------------------------------------------------------------------
 */
#include "tracectx.h"

#include <string.h>

/* lower_hex: is c one of 0-9a-f (W3C: lower case only)? */
static bool
lower_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/*
 * hex_field: n lower-case hex digits at s; with nonzero, not all of them
 * '0'.
 */
static bool
hex_field(const char *s, size_t n, bool nonzero)
{
	bool		any = false;

	for (size_t i = 0; i < n; i++)
	{
		if (!lower_hex(s[i]))
			return false;
		any = any || s[i] != '0';
	}
	return any || !nonzero;
}

/*
 * tracectx_traceparent_valid: "vv-<32 hex trace-id>-<16 hex parent-id>-
 * <2 hex flags>", lower-case hex, trace-id and parent-id not all zeros,
 * version ff invalid; version 00 is exactly 55 characters; a later version
 * may go on after a '-' (up to TRACECTX_TRACEPARENT_MAX).
 */
bool
tracectx_traceparent_valid(const char *s, size_t len)
{
	if (s == NULL || len < TRACECTX_CHILD_LEN || len > TRACECTX_TRACEPARENT_MAX)
		return false;
	if (!hex_field(s, 2, false) || (s[0] == 'f' && s[1] == 'f'))
		return false;
	if (s[2] != '-' || s[35] != '-' || s[52] != '-')
		return false;
	if (!hex_field(s + 3, 32, true) || !hex_field(s + 36, 16, true) ||
		!hex_field(s + 53, 2, false))
		return false;
	if (s[0] == '0' && s[1] == '0')
		return len == TRACECTX_CHILD_LEN;
	if (len == TRACECTX_CHILD_LEN)
		return true;
	/* a later version's further fields: after a '-', printable */
	if (s[TRACECTX_CHILD_LEN] != '-')
		return false;
	for (size_t i = TRACECTX_CHILD_LEN; i < len; i++)
		if (s[i] < 0x21 || s[i] > 0x7e)
			return false;
	return true;
}

/*
 * tracectx_tracestate_valid: 1 to TRACECTX_TRACESTATE_MAX printable ASCII
 * characters (space included, no control character), not all blank.  Its
 * list members are not parsed: it is passed on as received.
 */
bool
tracectx_tracestate_valid(const char *s, size_t len)
{
	bool		any = false;

	if (s == NULL || len == 0 || len > TRACECTX_TRACESTATE_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
	{
		if (s[i] < 0x20 || s[i] > 0x7e)
			return false;
		any = any || (s[i] != ' ');
	}
	return any;
}

/*
 * tracectx_set: ctx from a traceparent and a tracestate (ts may be NULL);
 * false, ctx untouched, when the traceparent is not valid.  An invalid
 * tracestate is dropped (ctx->tracestate "").
 */
bool
tracectx_set(TraceContext *ctx, const char *tp, size_t tplen,
			 const char *ts, size_t tslen)
{
	if (!tracectx_traceparent_valid(tp, tplen))
		return false;
	memcpy(ctx->traceparent, tp, tplen);
	ctx->traceparent[tplen] = '\0';
	if (ts != NULL && tracectx_tracestate_valid(ts, tslen))
	{
		memcpy(ctx->tracestate, ts, tslen);
		ctx->tracestate[tslen] = '\0';
	}
	else
		ctx->tracestate[0] = '\0';
	return true;
}

/* hex_value: the value of a hex digit in either case, or -1. */
static int
hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * url_decode: percent-decode s[0..len) into out (cap bytes, NUL-terminated);
 * the decoded length, or -1 when a '%' is not followed by two hex digits,
 * the result holds a NUL, or it does not fit.  '+' stays '+' (sqlcommenter
 * encodes as RFC 3986 does, not as forms do).
 */
static long
url_decode(const char *s, size_t len, char *out, size_t cap)
{
	size_t		n = 0;

	for (size_t i = 0; i < len; i++)
	{
		char		c = s[i];

		if (c == '%')
		{
			int			hi,
						lo;

			if (i + 2 >= len)
				return -1;
			hi = hex_value(s[i + 1]);
			lo = hex_value(s[i + 2]);
			if (hi < 0 || lo < 0)
				return -1;
			c = (char) (hi * 16 + lo);
			i += 2;
		}
		if (c == '\0' || n + 1 >= cap)
			return -1;
		out[n++] = c;
	}
	out[n] = '\0';
	return (long) n;
}

/* is_space: SQL white space in a comment. */
static bool
is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/*
 * One key='value' pair of a sqlcommenter comment: where the key and the
 * value (still escaped and encoded) are in the comment.
 */
typedef struct CommentPair
{
	const char *key;
	size_t		key_len;
	const char *value;
	size_t		value_len;
} CommentPair;

/*
 * next_pair: read the pair at *pos of body[0..len) and the comma after it;
 * false at the end of the body (*pos == len after white space) or on a
 * syntax error (*pos set past len then).
 */
static bool
next_pair(const char *body, size_t len, size_t *pos, CommentPair *pair)
{
	size_t		i = *pos;

	while (i < len && is_space(body[i]))
		i++;
	if (i >= len)
	{
		*pos = len;
		return false;
	}
	pair->key = body + i;
	while (i < len && body[i] != '=' && body[i] != ',' && body[i] != '\'' &&
		   !is_space(body[i]))
		i++;
	pair->key_len = (size_t) (body + i - pair->key);
	while (i < len && is_space(body[i]))
		i++;
	if (pair->key_len == 0 || i >= len || body[i] != '=')
		goto bad;
	i++;
	while (i < len && is_space(body[i]))
		i++;
	if (i >= len || body[i] != '\'')
		goto bad;
	i++;
	pair->value = body + i;
	/* the value ends at a quote not escaped by a backslash */
	while (i < len && body[i] != '\'')
		i += (body[i] == '\\' && i + 1 < len) ? 2 : 1;
	if (i >= len)
		goto bad;
	pair->value_len = (size_t) (body + i - pair->value);
	i++;
	while (i < len && is_space(body[i]))
		i++;
	if (i < len && body[i] != ',')
		goto bad;
	*pos = i < len ? i + 1 : len;
	return true;
bad:
	*pos = len + 1;
	return false;
}

/*
 * pair_value: a pair's value unescaped (\' and \\ as one character) and
 * URL-decoded into out (cap bytes); its length, or -1 if it is malformed
 * or too long.
 */
static long
pair_value(const CommentPair *pair, char *out, size_t cap)
{
	char		raw[3 * TRACECTX_TRACESTATE_MAX + 1];
	size_t		n = 0;

	for (size_t i = 0; i < pair->value_len; i++)
	{
		char		c = pair->value[i];

		if (c == '\\' && i + 1 < pair->value_len)
			c = pair->value[++i];
		if (n + 1 >= sizeof(raw))
			return -1;
		raw[n++] = c;
	}
	return url_decode(raw, n, out, cap);
}

/* key_is: is the pair's key, URL-decoded, name (any letter case)? */
static bool
key_is(const CommentPair *pair, const char *name)
{
	char		key[32];
	long		n = pair->key_len < sizeof(key) * 3 ?
		url_decode(pair->key, pair->key_len, key, sizeof(key)) : -1;
	size_t		nlen = strlen(name);

	if (n != (long) nlen)
		return false;
	for (size_t i = 0; i < nlen; i++)
	{
		char		c = key[i];

		if (c >= 'A' && c <= 'Z')
			c = (char) (c - 'A' + 'a');
		if (c != name[i])
			return false;
	}
	return true;
}

/*
 * comment_context: the trace context of one comment's body, if it is a
 * sqlcommenter list (key='value' pairs separated by commas) with a valid
 * traceparent; its tracestate goes with it when valid.
 */
static bool
comment_context(const char *body, size_t len, TraceContext *ctx)
{
	CommentPair pair;
	size_t		pos = 0;
	char		tp[TRACECTX_TRACEPARENT_MAX + 1];
	char		ts[TRACECTX_TRACESTATE_MAX + 1];
	long		tplen = -1;
	long		tslen = -1;

	while (next_pair(body, len, &pos, &pair))
	{
		if (key_is(&pair, "traceparent"))
			tplen = pair_value(&pair, tp, sizeof(tp));
		else if (key_is(&pair, "tracestate"))
			tslen = pair_value(&pair, ts, sizeof(ts));
	}
	if (pos > len || tplen < 0)
		return false;
	return tracectx_set(ctx, tp, (size_t) tplen,
						tslen >= 0 ? ts : NULL, tslen >= 0 ? (size_t) tslen : 0);
}

/* ident_char: can c be part of a SQL identifier (so a '$' in it is not a quote)? */
static bool
ident_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		(c >= '0' && c <= '9') || c == '_' || c == '$' || (unsigned char) c >= 0x80;
}

/*
 * skip_quoted: the position after the quoted text starting at sql[i]
 * (quote q; a doubled quote stands for one; with backslashes, a backslash
 * escapes the next character, as in E'...'), or len if it is not closed.
 */
static size_t
skip_quoted(const char *sql, size_t len, size_t i, char q, bool backslashes)
{
	for (i++; i < len; i++)
	{
		if (backslashes && sql[i] == '\\')
			i++;
		else if (sql[i] == q)
		{
			if (i + 1 < len && sql[i + 1] == q)
				i++;
			else
				return i + 1;
		}
	}
	return len;
}

/*
 * skip_dollar: at a '$' of sql[i] that opens a dollar quote ($$ or $tag$),
 * the position after its closing tag (len if not closed); i + 1 if it
 * opens none (a parameter such as $1).
 */
static size_t
skip_dollar(const char *sql, size_t len, size_t i)
{
	size_t		j = i + 1;
	size_t		tag_len;

	if (j < len && !(sql[j] >= '0' && sql[j] <= '9'))
		while (j < len && sql[j] != '$' && ident_char(sql[j]))
			j++;
	if (j >= len || sql[j] != '$')
		return i + 1;
	tag_len = j - i + 1;
	for (size_t k = j + 1; k + tag_len <= len; k++)
		if (sql[k] == '$' && memcmp(sql + k, sql + i, tag_len) == 0)
			return k + tag_len;
	return len;
}

/*
 * tracectx_from_sql: the trace context of the first sqlcommenter comment
 * of a statement that carries a valid traceparent (a block comment
 * holding traceparent='00-...',tracestate='...', keys and values
 * URL-encoded, \' for a quote in a value), as OpenTelemetry's SQL
 * instrumentations append.  Comments are found as PostgreSQL's lexer finds them: not inside string literals
 * ('...', E'...', "...", dollar quotes) nor after "--"; nested block
 * comments end where the outermost one does.  False if there is none.
 */
bool
tracectx_from_sql(const char *sql, size_t len, TraceContext *ctx)
{
	size_t		i = 0;

	if (sql == NULL)
		return false;
	while (i < len)
	{
		char		c = sql[i];

		if (c == '-' && i + 1 < len && sql[i + 1] == '-')
		{
			while (i < len && sql[i] != '\n')
				i++;
		}
		else if (c == '/' && i + 1 < len && sql[i + 1] == '*')
		{
			size_t		start = i + 2;
			int			depth = 1;

			for (i = start; i < len && depth > 0; i++)
			{
				if (sql[i] == '/' && i + 1 < len && sql[i + 1] == '*')
					depth++, i++;
				else if (sql[i] == '*' && i + 1 < len && sql[i + 1] == '/')
					depth--, i++;
			}
			if (depth == 0 && comment_context(sql + start, i - 2 - start, ctx))
				return true;
		}
		else if (c == '\'')
		{
			bool		e = i > 0 && (sql[i - 1] == 'e' || sql[i - 1] == 'E') &&
				(i < 2 || !ident_char(sql[i - 2]));

			i = skip_quoted(sql, len, i, '\'', e);
		}
		else if (c == '"')
			i = skip_quoted(sql, len, i, '"', false);
		else if (c == '$' && (i == 0 || !ident_char(sql[i - 1])))
			i = skip_dollar(sql, len, i);
		else
			i++;
	}
	return false;
}

/*
 * tracectx_child: into out (TRACECTX_CHILD_LEN + 1 bytes), the version 00
 * traceparent of a child of the given one: its trace id and flags, span_id
 * as parent-id.  Its length, or 0 if the traceparent is not valid or the
 * span id is all zeros.
 */
size_t
tracectx_child(const char *traceparent, size_t len, const uint8_t span_id[8],
			   char *out)
{
	static const char digits[] = "0123456789abcdef";
	bool		any = false;

	if (!tracectx_traceparent_valid(traceparent, len))
		return 0;
	for (int i = 0; i < 8; i++)
		any = any || span_id[i] != 0;
	if (!any)
		return 0;
	memcpy(out, "00-", 3);
	memcpy(out + 3, traceparent + 3, 32);
	out[35] = '-';
	for (int i = 0; i < 8; i++)
	{
		out[36 + 2 * i] = digits[span_id[i] >> 4];
		out[37 + 2 * i] = digits[span_id[i] & 15];
	}
	out[52] = '-';
	memcpy(out + 53, traceparent + 53, 2);
	out[TRACECTX_CHILD_LEN] = '\0';
	return TRACECTX_CHILD_LEN;
}
