/*-------------------------------------------------------------------------
 *
 * edge.c
 *	  Parsers and checks at grelout's network edge: header names and values,
 *	  handler URLs, base64, webhook secrets and signing keys, HTTP status
 *	  and header lines, Retry-After, and the classification of the
 *	  addresses an endpoint resolves to.
 *
 * Everything here works on (pointer, length) input that may hold any bytes,
 * never reads past the length, and uses the C library only, so that the
 * fuzz targets in fuzz/ link this file alone.
 *
 *-------------------------------------------------------------------------
 */
#include "edge.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <strings.h>

/* Headers that the relay sets itself: never taken from a handler or message. */
static const char *const reserved_headers[] = {
	"content-type", "content-length", "host", "connection",
	"transfer-encoding", "user-agent", "webhook-id", "webhook-timestamp",
	"webhook-signature", NULL
};

/* ascii_lower: lower-case an ASCII letter, leave other bytes alone. */
static inline unsigned char
ascii_lower(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c;
}

/* ieq_prefix: does s (of len bytes) start with the lower-case prefix p? */
static bool
ieq_prefix(const char *s, size_t len, const char *p)
{
	size_t		plen = strlen(p);

	if (len < plen)
		return false;
	for (size_t i = 0; i < plen; i++)
		if (ascii_lower((unsigned char) s[i]) != (unsigned char) p[i])
			return false;
	return true;
}

/*
 * edge_header_name_valid: an HTTP token (RFC 9110 tchar), 1 to
 * GRELOUT_HEADER_NAME_MAX bytes.
 */
bool
edge_header_name_valid(const char *name, size_t len)
{
	if (len == 0 || len > GRELOUT_HEADER_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) name[i];

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			(c >= '0' && c <= '9'))
			continue;
		if (strchr("!#$%&'*+-.^_`|~", c) != NULL && c != '\0')
			continue;
		return false;
	}
	return true;
}

/*
 * edge_control_free: no control character in s: no C0 byte (but HTAB when
 * allow_htab), no DEL, and no C1 control in its UTF-8 form (U+0080 to
 * U+009F, the bytes C2 80 to C2 9F), which a log line or a request header
 * would carry as it is.
 */
bool
edge_control_free(const char *s, size_t len, bool allow_htab)
{
	for (size_t i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c < 0x20 && !(c == '\t' && allow_htab))
			return false;
		if (c == 0x7F)
			return false;
		if (c == 0xC2 && i + 1 < len &&
			(unsigned char) s[i + 1] >= 0x80 && (unsigned char) s[i + 1] <= 0x9F)
			return false;
	}
	return true;
}

/*
 * edge_header_value_valid: an RFC 9110 field value: no control character
 * but HTAB, at most GRELOUT_HEADER_VALUE_MAX bytes.
 */
bool
edge_header_value_valid(const char *value, size_t len)
{
	if (len > GRELOUT_HEADER_VALUE_MAX)
		return false;
	return edge_control_free(value, len, true);
}

/*
 * edge_header_name_reserved: a header the relay sets itself, or any
 * grelout- header, whatever its letter case.
 */
bool
edge_header_name_reserved(const char *name, size_t len)
{
	if (ieq_prefix(name, len, "grelout-"))
		return true;
	for (int i = 0; reserved_headers[i] != NULL; i++)
		if (len == strlen(reserved_headers[i]) &&
			ieq_prefix(name, len, reserved_headers[i]))
			return true;
	return false;
}

/*
 * edge_header_name_message_reserved: a name a message may not set: every
 * reserved name; the credentials a handler (or its URL) may carry
 * (authorization, proxy-authorization, cookie); the whole webhook-*
 * namespace (Standard Webhooks); and the hop-by-hop and framing headers,
 * which would change how the request is carried rather than what it says.
 */
bool
edge_header_name_message_reserved(const char *name, size_t len)
{
	static const char *const names[] = {
		/* credentials */
		"authorization", "proxy-authorization", "cookie",
		/* hop-by-hop and framing (RFC 9110 7.6.1, 9112) */
		"keep-alive", "proxy-connection", "te", "trailer", "upgrade",
		"expect", "content-encoding",
		NULL
	};

	if (edge_header_name_reserved(name, len) || ieq_prefix(name, len, "webhook-"))
		return true;
	for (int i = 0; names[i] != NULL; i++)
		if (len == strlen(names[i]) && ieq_prefix(name, len, names[i]))
			return true;
	return false;
}

/*
 * edge_header_value_blank: the value is empty or only spaces and HTABs.
 * libcurl sends no header for such a value, and drops its own header of
 * that name with it.
 */
bool
edge_header_value_blank(const char *value, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (value[i] != ' ' && value[i] != '\t')
			return false;
	return true;
}

/*
 * edge_url_check: an absolute http:// or https:// URL with a host, no
 * white space or control character, at most GRELOUT_URL_MAX bytes.
 */
EdgeUrlError
edge_url_check(const char *url, size_t len)
{
	size_t		start;
	size_t		end;
	size_t		host;

	if (len > GRELOUT_URL_MAX)
		return EDGE_URL_TOO_LONG;
	for (size_t i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) url[i];

		if (c <= 0x20 || c == 0x7F)
			return EDGE_URL_BAD_CHAR;
	}
	if (ieq_prefix(url, len, "http://"))
		start = 7;
	else if (ieq_prefix(url, len, "https://"))
		start = 8;
	else
		return EDGE_URL_BAD_SCHEME;

	/* the authority runs to the first '/', '?' or '#' */
	end = start;
	while (end < len && url[end] != '/' && url[end] != '?' && url[end] != '#')
		end++;
	/* skip any userinfo */
	host = start;
	for (size_t i = start; i < end; i++)
		if (url[i] == '@')
			host = i + 1;
	if (host >= end || url[host] == ':')
		return EDGE_URL_NO_HOST;
	if (url[host] == '[')
	{
		/* an IPv6 literal needs its closing bracket and something in it */
		size_t		i = host + 1;

		while (i < end && url[i] != ']')
			i++;
		if (i >= end || i == host + 1)
			return EDGE_URL_NO_HOST;
	}
	return EDGE_URL_OK;
}

/* put: append n bytes of src at out[*o]. */
static void
put(char *out, size_t *o, const char *src, size_t n)
{
	memcpy(out + *o, src, n);
	*o += n;
}

/*
 * edge_url_mask: url with its secrets masked, for showing to operators.
 * The userinfo of an http or https URL becomes three asterisks (so
 * "https://alice:pw@host/" reads "https://" + "***" + "@host/"), so does the
 * value of every query parameter ("?token=abc&x" reads "?token=***&***":
 * a parameter without '=' is masked whole), and so does a fragment.
 * Scheme, host, port and path are kept.  Anything that is not such a URL
 * is masked whole.  out must hold
 * EDGE_URL_MASK_SIZE(len) bytes; the result is not NUL-terminated and its
 * length is returned.
 */
size_t
edge_url_mask(const char *url, size_t len, char *out)
{
	size_t		start;
	size_t		end;
	size_t		host;
	size_t		i;
	size_t		o = 0;

	if (ieq_prefix(url, len, "http://"))
		start = 7;
	else if (ieq_prefix(url, len, "https://"))
		start = 8;
	else
	{
		put(out, &o, "***", 3);
		return o;
	}

	/* scheme, then the authority with any userinfo masked */
	put(out, &o, url, start);
	end = start;
	while (end < len && url[end] != '/' && url[end] != '?' && url[end] != '#')
		end++;
	host = start;
	for (i = start; i < end; i++)
		if (url[i] == '@')
			host = i + 1;
	if (host > start)
		put(out, &o, "***@", 4);
	put(out, &o, url + host, end - host);

	/* the path, as it is */
	i = end;
	while (i < len && url[i] != '?' && url[i] != '#')
		i++;
	put(out, &o, url + end, i - end);

	/* the query: every parameter's value masked */
	if (i < len && url[i] == '?')
	{
		put(out, &o, "?", 1);
		i++;
		while (i < len && url[i] != '#')
		{
			size_t		p = i;
			size_t		eq = 0;
			bool		has_eq = false;

			while (p < len && url[p] != '&' && url[p] != ';' && url[p] != '#')
			{
				if (url[p] == '=' && !has_eq)
				{
					has_eq = true;
					eq = p;
				}
				p++;
			}
			if (has_eq)
			{
				put(out, &o, url + i, eq + 1 - i);
				if (p > eq + 1)
					put(out, &o, "***", 3);
			}
			else if (p > i)
				put(out, &o, "***", 3);
			if (p < len && url[p] != '#')
			{
				put(out, &o, url + p, 1);
				p++;
			}
			i = p;
		}
	}

	/* the fragment, masked whole */
	if (i < len && url[i] == '#')
		put(out, &o, i + 1 < len ? "#***" : "#", i + 1 < len ? 4 : 1);
	return o;
}

static const char b64chars[] =
"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/*
 * edge_base64_encode: standard base64 with padding; dst must hold
 * 4 * ((len + 2) / 3) + 1 bytes.  Returns the length written, without
 * the terminating NUL.
 */
size_t
edge_base64_encode(const unsigned char *src, size_t len, char *dst)
{
	size_t		o = 0;
	size_t		i = 0;

	while (i + 2 < len)
	{
		uint32_t	v = (uint32_t) src[i] << 16 | (uint32_t) src[i + 1] << 8 | src[i + 2];

		dst[o++] = b64chars[(v >> 18) & 63];
		dst[o++] = b64chars[(v >> 12) & 63];
		dst[o++] = b64chars[(v >> 6) & 63];
		dst[o++] = b64chars[v & 63];
		i += 3;
	}
	if (i < len)
	{
		uint32_t	v = (uint32_t) src[i] << 16;

		if (i + 1 < len)
			v |= (uint32_t) src[i + 1] << 8;
		dst[o++] = b64chars[(v >> 18) & 63];
		dst[o++] = b64chars[(v >> 12) & 63];
		dst[o++] = (i + 1 < len) ? b64chars[(v >> 6) & 63] : '=';
		dst[o++] = '=';
	}
	dst[o] = '\0';
	return o;
}

/* b64value: the 6-bit value of a base64 character, or -1. */
static int
b64value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

/*
 * edge_base64_decode: decode standard base64, padding optional.  Returns
 * the number of bytes written to dst, or -1 when the input is not base64
 * or does not fit in dstcap bytes.
 */
long
edge_base64_decode(const char *src, size_t len, unsigned char *dst, size_t dstcap)
{
	uint32_t	acc = 0;
	int			bits = 0;
	size_t		o = 0;
	size_t		pad = 0;

	/* padding is allowed only at the end, at most two, completing a quad */
	while (len > 0 && src[len - 1] == '=' && pad < 2)
	{
		len--;
		pad++;
	}
	if (pad > 0 && (len + pad) % 4 != 0)
		return -1;
	if (len % 4 == 1)
		return -1;

	for (size_t i = 0; i < len; i++)
	{
		int			v = b64value((unsigned char) src[i]);

		if (v < 0)
			return -1;
		acc = (acc << 6) | (uint32_t) v;
		bits += 6;
		if (bits >= 8)
		{
			bits -= 8;
			if (o >= dstcap)
				return -1;
			dst[o++] = (unsigned char) (acc >> bits);
		}
	}
	/* leftover bits must be zero, as a canonical encoder leaves them */
	if (bits > 0 && (acc & ((1u << bits) - 1)) != 0)
		return -1;
	return (long) o;
}

/*
 * wipe: clear key material, with a memset the compiler may not drop as a
 * dead store (explicit_bzero is not in every C library).
 */
static void
wipe(void *p, size_t n)
{
	static void *(*const volatile memset_v) (void *, int, size_t) = memset;

	memset_v(p, 0, n);
}

/*
 * decode_key_part: the base64 part of a secret or signing key into dst
 * (dstcap bytes), its length in *n.  A valid base64 text too long to fit
 * is a length problem (EDGE_SECRET_BAD_LENGTH), not a base64 one.
 */
static EdgeSecretError
decode_key_part(const char *b64, size_t len, unsigned char *dst, size_t dstcap,
				long *n)
{
	*n = edge_base64_decode(b64, len, dst, dstcap);
	if (*n < 0)
	{
		unsigned char big[3 * 1024];
		bool		fits_big = len < 4 * sizeof(big) / 3 &&
			edge_base64_decode(b64, len, big, sizeof(big)) > 0;

		wipe(big, sizeof(big));
		return fits_big ? EDGE_SECRET_BAD_LENGTH : EDGE_SECRET_BAD_BASE64;
	}
	return EDGE_SECRET_OK;
}

/*
 * edge_secret_decode: a Standard Webhooks secret, "whsec_" followed by the
 * base64 of 24 to 64 bytes.  key must hold GRELOUT_SECRET_MAX_BYTES bytes.
 */
EdgeSecretError
edge_secret_decode(const char *secret, size_t len, unsigned char *key,
				   size_t *keylen)
{
	long		n;
	EdgeSecretError err;

	if (len < 6 || memcmp(secret, "whsec_", 6) != 0)
		return EDGE_SECRET_NO_PREFIX;
	err = decode_key_part(secret + 6, len - 6, key, GRELOUT_SECRET_MAX_BYTES, &n);
	if (err != EDGE_SECRET_OK)
		return err;
	if (n < GRELOUT_SECRET_MIN_BYTES || n > GRELOUT_SECRET_MAX_BYTES)
		return EDGE_SECRET_BAD_LENGTH;
	*keylen = (size_t) n;
	return EDGE_SECRET_OK;
}

/*
 * edge_signing_key_decode: a Standard Webhooks asymmetric signing key,
 * "whsk_" followed by the base64 of an ed25519 key: its 32-byte seed, or
 * the 64 bytes of seed and public key (libsodium's secret key form).  seed
 * gets the seed (GRELOUT_ED25519_SEED_BYTES); with the 64-byte form,
 * public_key gets the public half (GRELOUT_ED25519_PUBLIC_BYTES) and
 * *has_public is set.  Whether that public half belongs to the seed takes
 * the curve arithmetic this file does not do: sign.c checks it
 * (grelout_signing_key_check).
 */
EdgeSecretError
edge_signing_key_decode(const char *key, size_t len, unsigned char *seed,
						unsigned char *public_key, bool *has_public)
{
	unsigned char raw[GRELOUT_ED25519_SEED_BYTES + GRELOUT_ED25519_PUBLIC_BYTES];
	long		n;
	EdgeSecretError err;

	*has_public = false;
	if (len < 5 || memcmp(key, "whsk_", 5) != 0)
		return EDGE_SECRET_NO_PREFIX;
	err = decode_key_part(key + 5, len - 5, raw, sizeof(raw), &n);
	if (err == EDGE_SECRET_OK &&
		n != GRELOUT_ED25519_SEED_BYTES &&
		n != GRELOUT_ED25519_SEED_BYTES + GRELOUT_ED25519_PUBLIC_BYTES)
		err = EDGE_SECRET_BAD_LENGTH;
	if (err == EDGE_SECRET_OK)
	{
		memcpy(seed, raw, GRELOUT_ED25519_SEED_BYTES);
		if (n > GRELOUT_ED25519_SEED_BYTES)
		{
			memcpy(public_key, raw + GRELOUT_ED25519_SEED_BYTES,
				   GRELOUT_ED25519_PUBLIC_BYTES);
			*has_public = true;
		}
	}
	wipe(raw, sizeof(raw));
	return err;
}

/*
 * edge_status_line: parse "HTTP/x[.y] NNN ..." and return the status code.
 */
bool
edge_status_line(const char *line, size_t len, int *status)
{
	size_t		i = 5;
	int			code = 0;

	if (len < 5 || memcmp(line, "HTTP/", 5) != 0)
		return false;
	while (i < len && line[i] != ' ')
		i++;
	if (i + 4 > len)
		return false;
	i++;
	for (int k = 0; k < 3; k++)
	{
		unsigned char c = (unsigned char) line[i + k];

		if (c < '0' || c > '9')
			return false;
		code = code * 10 + (c - '0');
	}
	if (i + 3 < len && line[i + 3] != ' ' && line[i + 3] != '\r' &&
		line[i + 3] != '\n')
		return false;
	if (code < 100)
		return false;
	*status = code;
	return true;
}

/*
 * edge_header_line: when line is "Name: value" for the given lower-case
 * name, point *value at the value without surrounding white space or the
 * line ending.
 */
bool
edge_header_line(const char *line, size_t len, const char *name,
				 const char **value, size_t *vlen)
{
	size_t		nlen = strlen(name);
	size_t		s;
	size_t		e;

	if (len <= nlen || line[nlen] != ':' || !ieq_prefix(line, len, name))
		return false;
	s = nlen + 1;
	e = len;
	while (s < e && (line[s] == ' ' || line[s] == '\t'))
		s++;
	while (e > s && (line[e - 1] == '\r' || line[e - 1] == '\n' ||
					 line[e - 1] == ' ' || line[e - 1] == '\t'))
		e--;
	*value = line + s;
	*vlen = e - s;
	return true;
}

/* days_from_civil: days since 1970-01-01 of a proleptic Gregorian date. */
static int64_t
days_from_civil(int64_t y, int m, int d)
{
	int64_t		era;
	int64_t		yoe;
	int64_t		doy;
	int64_t		doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

/* digits: parse exactly n decimal digits at s. */
static bool
digits(const char *s, int n, int *out)
{
	int			v = 0;

	for (int i = 0; i < n; i++)
	{
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return true;
}

/*
 * edge_retry_after: a Retry-After value, either delay-seconds or an
 * IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), as a delay in ms from
 * now; a date in the past means no delay.
 */
bool
edge_retry_after(const char *value, size_t len, time_t now, int64_t *delay_ms)
{
	static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
	int			day,
				year,
				hh,
				mi,
				ss,
				month = -1;
	int64_t		t;

	while (len > 0 && (*value == ' ' || *value == '\t'))
	{
		value++;
		len--;
	}
	while (len > 0 && (value[len - 1] == ' ' || value[len - 1] == '\t'))
		len--;
	if (len == 0)
		return false;

	if (value[0] >= '0' && value[0] <= '9')
	{
		int64_t		secs = 0;

		for (size_t i = 0; i < len; i++)
		{
			if (value[i] < '0' || value[i] > '9')
				return false;
			if (secs < INT64_C(1000000000000))
				secs = secs * 10 + (value[i] - '0');
		}
		*delay_ms = secs * 1000;
		return true;
	}

	/* IMF-fixdate is exactly 29 bytes */
	if (len != 29 || value[3] != ',' || value[4] != ' ' || value[7] != ' ' ||
		value[11] != ' ' || value[16] != ' ' || value[19] != ':' ||
		value[22] != ':' || value[25] != ' ' || memcmp(value + 26, "GMT", 3) != 0)
		return false;
	for (int i = 0; i < 12; i++)
		if (memcmp(value + 8, months + 3 * i, 3) == 0)
			month = i + 1;
	if (month < 0 ||
		!digits(value + 5, 2, &day) || !digits(value + 12, 4, &year) ||
		!digits(value + 17, 2, &hh) || !digits(value + 20, 2, &mi) ||
		!digits(value + 23, 2, &ss))
		return false;
	if (day < 1 || day > 31 || hh > 23 || mi > 59 || ss > 60)
		return false;
	t = days_from_civil(year, month, day) * 86400 + hh * 3600 + mi * 60 + ss;
	*delay_ms = (t > (int64_t) now) ? (t - (int64_t) now) * 1000 : 0;
	return true;
}

/*
 * edge_interval_usecs: an interval's parts (months, days, microseconds) as
 * one number of microseconds, the way PostgreSQL's extract(epoch FROM ...)
 * counts them: a year of months is 365.25 days, each remaining month 30
 * days, a day 24 hours.  Returns false, leaving *total alone, when the sum
 * does not fit in 64 bits: a huge interval is never mistaken for a small
 * or negative one.
 */
bool
edge_interval_usecs(int32_t months, int32_t days, int64_t usecs, int64_t *total)
{
	const int64_t usecs_per_day = INT64_C(86400000000);
	/* 365.25 days a year: exact in microseconds */
	const int64_t usecs_per_year = INT64_C(31557600000000);
	int64_t		years = months / 12;
	int64_t		rest_days = (int64_t) (months % 12) * 30 + days;
	int64_t		part;
	int64_t		sum;

	if (__builtin_mul_overflow(years, usecs_per_year, &sum))
		return false;
	if (__builtin_mul_overflow(rest_days, usecs_per_day, &part) ||
		__builtin_add_overflow(sum, part, &sum) ||
		__builtin_add_overflow(sum, usecs, &sum))
		return false;
	*total = sum;
	return true;
}

/*
 * A block of addresses and the class of the addresses in it.  The tables
 * below follow the IANA IPv4 and IPv6 Special-Purpose Address Registries
 * (and the multicast and address-space registries): a block that the
 * registry does not mark globally reachable is refused, and so is the
 * whole of 192.0.0.0/24 and 2001::/23, whose few globally reachable
 * entries are anycast services (PCP, TURN, AMT, DNS-SD SRP) that answer
 * from the nearest such server, often one inside the local network, or
 * identifiers that are no endpoint (ORCHIDv2, drone remote ID).  The
 * first block that holds an address decides; README lists the same rows.
 */
typedef struct AddrBlock
{
	unsigned char prefix[16];
	int			bits;
	EdgeAddrClass cls;
} AddrBlock;

static const AddrBlock v4_blocks[] = {
	{{0}, 8, EDGE_ADDR_UNSPECIFIED},	/* "this network" */
	{{10}, 8, EDGE_ADDR_PRIVATE},
	{{100, 64}, 10, EDGE_ADDR_PRIVATE}, /* shared address space (CGN) */
	{{127}, 8, EDGE_ADDR_LOOPBACK},
	{{169, 254}, 16, EDGE_ADDR_LINK_LOCAL},
	{{172, 16}, 12, EDGE_ADDR_PRIVATE},
	{{192, 0, 0}, 24, EDGE_ADDR_RESERVED},	/* IETF protocol assignments */
	{{192, 0, 2}, 24, EDGE_ADDR_RESERVED},	/* documentation */
	{{192, 88, 99}, 24, EDGE_ADDR_RESERVED},	/* deprecated 6to4 relay anycast */
	{{192, 168}, 16, EDGE_ADDR_PRIVATE},
	{{198, 18}, 15, EDGE_ADDR_RESERVED},	/* benchmarking */
	{{198, 51, 100}, 24, EDGE_ADDR_RESERVED},	/* documentation */
	{{203, 0, 113}, 24, EDGE_ADDR_RESERVED},	/* documentation */
	{{224}, 4, EDGE_ADDR_MULTICAST},
	{{240}, 4, EDGE_ADDR_RESERVED}, /* reserved, and 255.255.255.255 */
};

/*
 * IPv6 blocks checked after the unspecified and loopback addresses and the
 * three forms that carry an IPv4 address (::ffff:0:0/96, 64:ff9b::/96,
 * 2002::/16), which are judged by that address.
 */
static const AddrBlock v6_blocks[] = {
	{{0x00, 0x64, 0xFF, 0x9B, 0x00, 0x01}, 48, EDGE_ADDR_PRIVATE},	/* local-use NAT64 */
	{{0xFC}, 7, EDGE_ADDR_PRIVATE}, /* unique local */
	{{0xFE, 0xC0}, 10, EDGE_ADDR_PRIVATE},	/* site-local (deprecated) */
	{{0xFE, 0x80}, 10, EDGE_ADDR_LINK_LOCAL},
	{{0xFF}, 8, EDGE_ADDR_MULTICAST},
	{{0x20, 0x01, 0x00, 0x00}, 23, EDGE_ADDR_RESERVED},	/* IETF protocol assignments, Teredo */
	{{0x20, 0x01, 0x0D, 0xB8}, 32, EDGE_ADDR_RESERVED},	/* documentation */
	{{0x3F, 0xFF}, 20, EDGE_ADDR_RESERVED}, /* documentation */
	/* outside 2000::/3, global unicast, nothing is assigned to a host */
	{{0x00}, 3, EDGE_ADDR_RESERVED},
	{{0x40}, 2, EDGE_ADDR_RESERVED},
	{{0x80}, 1, EDGE_ADDR_RESERVED},
};

/* prefix_match: do the first bits bits of a and b agree? */
static bool
prefix_match(const unsigned char *a, const unsigned char *b, int bits)
{
	int			full = bits / 8;
	int			rest = bits % 8;

	if (memcmp(a, b, full) != 0)
		return false;
	if (rest == 0)
		return true;
	return ((a[full] ^ b[full]) & (0xFF << (8 - rest))) == 0;
}

/* block_class: the class of the first block holding a, or public. */
static EdgeAddrClass
block_class(const AddrBlock *blocks, size_t n, const unsigned char *a)
{
	for (size_t i = 0; i < n; i++)
		if (prefix_match(blocks[i].prefix, a, blocks[i].bits))
			return blocks[i].cls;
	return EDGE_ADDR_PUBLIC;
}

/* v4_class: the class of an IPv4 address given as 4 bytes. */
static EdgeAddrClass
v4_class(const unsigned char *a)
{
	return block_class(v4_blocks, sizeof(v4_blocks) / sizeof(v4_blocks[0]), a);
}

/*
 * edge_addr_class: where an address points.  IPv4-mapped (::ffff:0:0/96),
 * NAT64 (64:ff9b::/96) and 6to4 (2002::/16) IPv6 addresses are judged by
 * the IPv4 address they carry; the deprecated IPv4-compatible form
 * (::/96) is reserved, as is all of IPv6 outside 2000::/3 but the blocks
 * the tables name.
 */
EdgeAddrClass
edge_addr_class(const struct sockaddr *sa)
{
	static const unsigned char zero[16] = {0};

	if (sa->sa_family == AF_INET)
	{
		const struct sockaddr_in *s4 = (const struct sockaddr_in *) sa;

		return v4_class((const unsigned char *) &s4->sin_addr);
	}
	if (sa->sa_family == AF_INET6)
	{
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *) sa;
		const unsigned char *a = s6->sin6_addr.s6_addr;
		static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
		static const unsigned char nat64[12] = {0, 0x64, 0xFF, 0x9B, 0, 0, 0, 0, 0, 0, 0, 0};

		if (memcmp(a, zero, 16) == 0)
			return EDGE_ADDR_UNSPECIFIED;
		if (memcmp(a, zero, 15) == 0 && a[15] == 1)
			return EDGE_ADDR_LOOPBACK;
		if (memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0)
			return v4_class(a + 12);
		if (a[0] == 0x20 && a[1] == 0x02)
			return v4_class(a + 2);
		return block_class(v6_blocks, sizeof(v6_blocks) / sizeof(v6_blocks[0]), a);
	}
	return EDGE_ADDR_RESERVED;
}

/* edge_addr_class_name: words for a log line or last_error. */
const char *
edge_addr_class_name(EdgeAddrClass cls)
{
	switch (cls)
	{
		case EDGE_ADDR_PUBLIC:
			return "public";
		case EDGE_ADDR_LOOPBACK:
			return "loopback";
		case EDGE_ADDR_PRIVATE:
			return "private";
		case EDGE_ADDR_LINK_LOCAL:
			return "link-local";
		case EDGE_ADDR_MULTICAST:
			return "multicast";
		case EDGE_ADDR_UNSPECIFIED:
			return "unspecified";
		case EDGE_ADDR_RESERVED:
			return "reserved";
	}
	return "unknown";
}

/*
 * edge_cidr_parse: "address[/prefix]", IPv4 or IPv6; without a prefix the
 * CIDR is the single address.
 */
bool
edge_cidr_parse(const char *text, size_t len, EdgeCidr *cidr)
{
	char		buf[64];
	size_t		slash = len;
	int			prefix = -1;
	int			maxprefix;

	for (size_t i = 0; i < len; i++)
		if (text[i] == '/')
		{
			slash = i;
			break;
		}
	/* inet_pton() would stop at a NUL and accept what comes before it */
	if (slash == 0 || slash >= sizeof(buf) || memchr(text, '\0', slash) != NULL)
		return false;
	memcpy(buf, text, slash);
	buf[slash] = '\0';

	memset(cidr, 0, sizeof(*cidr));
	if (inet_pton(AF_INET, buf, cidr->addr) == 1)
	{
		cidr->family = AF_INET;
		maxprefix = 32;
	}
	else if (inet_pton(AF_INET6, buf, cidr->addr) == 1)
	{
		cidr->family = AF_INET6;
		maxprefix = 128;
	}
	else
		return false;

	if (slash < len)
	{
		size_t		n = len - slash - 1;

		if (n < 1 || n > 3)
			return false;
		prefix = 0;
		for (size_t i = slash + 1; i < len; i++)
		{
			if (text[i] < '0' || text[i] > '9')
				return false;
			prefix = prefix * 10 + (text[i] - '0');
		}
		if (prefix > maxprefix)
			return false;
	}
	cidr->prefix = (prefix < 0) ? maxprefix : prefix;
	return true;
}

/*
 * edge_cidr_contains: is the address in the CIDR?  An IPv4-mapped IPv6
 * address matches an IPv4 CIDR.
 */
bool
edge_cidr_contains(const EdgeCidr *cidr, const struct sockaddr *sa)
{
	static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};

	if (sa->sa_family == AF_INET)
	{
		const struct sockaddr_in *s4 = (const struct sockaddr_in *) sa;

		return cidr->family == AF_INET &&
			prefix_match(cidr->addr, (const unsigned char *) &s4->sin_addr,
						 cidr->prefix);
	}
	if (sa->sa_family == AF_INET6)
	{
		const unsigned char *a = ((const struct sockaddr_in6 *) sa)->sin6_addr.s6_addr;

		if (cidr->family == AF_INET6)
			return prefix_match(cidr->addr, a, cidr->prefix);
		if (memcmp(a, mapped, 12) == 0)
			return prefix_match(cidr->addr, a + 12, cidr->prefix);
	}
	return false;
}

/*
 * edge_cidr_list_parse: a list of CIDRs separated by commas or white
 * space.  Returns how many were stored, or -1 with *bad pointing at the
 * first entry that is not a CIDR (or that does not fit in max).
 */
int
edge_cidr_list_parse(const char *text, EdgeCidr *cidrs, int max,
					 const char **bad, size_t *badlen)
{
	size_t		len = strlen(text);
	size_t		i = 0;
	int			n = 0;

	while (i < len)
	{
		size_t		s;

		while (i < len && (text[i] == ',' || text[i] == ' ' || text[i] == '\t'))
			i++;
		if (i >= len)
			break;
		s = i;
		while (i < len && text[i] != ',' && text[i] != ' ' && text[i] != '\t')
			i++;
		if (n >= max || !edge_cidr_parse(text + s, i - s, &cidrs[n]))
		{
			*bad = text + s;
			*badlen = i - s;
			return -1;
		}
		n++;
	}
	return n;
}

/* db_space: the white space trimmed around a database name. */
static bool
db_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* db_trim: the span without the white space around it. */
static EdgeSpan
db_trim(const char *start, size_t len)
{
	EdgeSpan	span;

	while (len > 0 && db_space(start[0]))
	{
		start++;
		len--;
	}
	while (len > 0 && db_space(start[len - 1]))
		len--;
	span.start = start;
	span.len = len;
	return span;
}

/*
 * edge_database_list: parse grelout.database.  Returns 0 for "*" (every
 * database with the extension); else the number of names, each a span of
 * text (stored in names, up to max, when names is not NULL); or -1 with
 * *error saying what is wrong: nothing named, an empty name, "*" among
 * names, a name longer than EDGE_DATABASE_NAME_MAX bytes, more than
 * EDGE_DATABASES_MAX names.  Names are taken as written: no case folding,
 * no quoting (a name with a comma cannot be listed).
 */
int
edge_database_list(const char *text, EdgeSpan *names, int max,
				   const char **error)
{
	EdgeSpan	all = db_trim(text, strlen(text));
	const char *p = text;
	int			n = 0;

	if (all.len == 0)
	{
		*error = "it names no database";
		return -1;
	}
	if (all.len == 1 && all.start[0] == '*')
		return 0;
	for (;;)
	{
		const char *comma = strchr(p, ',');
		EdgeSpan	name = db_trim(p, comma ? (size_t) (comma - p) : strlen(p));

		if (name.len == 0)
			*error = "a name in the list is empty";
		else if (name.len == 1 && name.start[0] == '*')
			*error = "* must stand alone";
		else if (name.len > EDGE_DATABASE_NAME_MAX)
			*error = "a name is longer than 63 bytes";
		else if (n >= EDGE_DATABASES_MAX)
			*error = "it lists too many databases";
		else
			*error = NULL;
		if (*error != NULL)
			return -1;
		if (names != NULL && n < max)
			names[n] = name;
		n++;
		if (comma == NULL)
			return n;
		p = comma + 1;
	}
}
