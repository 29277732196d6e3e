/*-------------------------------------------------------------------------
 *
 * headers.c
 *	  libFuzzer target: header name and value validation
 *	  (edge_header_name_valid, edge_header_name_reserved,
 *	  edge_header_value_valid, edge_header_name_message_reserved,
 *	  edge_header_value_blank), which
 *	  stand between users' JSON and the request the relay writes.
 *
 * The input is "name" NUL "value".  Each verdict is compared with a plain
 * restatement of the rule; and a name and value that pass both checks must
 * make exactly one header line, "name: value", with no CR, LF or NUL.
 *
 *-------------------------------------------------------------------------
 */
#include <ctype.h>
#include <stdbool.h>
#include <strings.h>

#include "edge.h"
#include "fuzz.h"

/* is_tchar: RFC 9110 token character. */
static bool
is_tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
		(c >= 'A' && c <= 'Z') || (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* reserved_model: the contract's reserved names, restated. */
static bool
reserved_model(const char *n, size_t len)
{
	static const char *const names[] = {
		"content-type", "content-length", "host", "connection",
		"transfer-encoding", "user-agent", "webhook-id", "webhook-timestamp",
		"webhook-signature", NULL
	};

	if (len >= 8 && strncasecmp(n, "grelout-", 8) == 0 && memchr(n, 0, 8) == NULL)
		return true;
	for (int i = 0; names[i]; i++)
		if (len == strlen(names[i]) && strncasecmp(n, names[i], len) == 0 &&
			memchr(n, 0, len) == NULL)
			return true;
	return false;
}

/* message_reserved_model: the 1.2 names only messages may not set, restated. */
static bool
message_reserved_model(const char *n, size_t len)
{
	static const char *const names[] = {
		"authorization", "proxy-authorization", "cookie", "keep-alive",
		"proxy-connection", "te", "trailer", "upgrade", "expect",
		"content-encoding", NULL
	};

	if (len >= 8 && strncasecmp(n, "webhook-", 8) == 0 && memchr(n, 0, 8) == NULL)
		return true;
	for (int i = 0; names[i]; i++)
		if (len == strlen(names[i]) && strncasecmp(n, names[i], len) == 0 &&
			memchr(n, 0, len) == NULL)
			return true;
	return false;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *sep = memchr(data, 0, size);
	size_t		nlen = sep ? (size_t) (sep - data) : size;
	size_t		vlen = sep ? size - nlen - 1 : 0;
	char	   *name = dup_exact(data, nlen);
	char	   *value = dup_exact(sep ? sep + 1 : data, vlen);
	bool		name_ok = edge_header_name_valid(name, nlen);
	bool		value_ok = edge_header_value_valid(value, vlen);
	bool		reserved = edge_header_name_reserved(name, nlen);
	bool		model;

	/*
	 * messages may not set what handlers may, nor the credentials, the
	 * webhook-* namespace, or the hop-by-hop and framing headers
	 */
	CHECK(edge_header_name_message_reserved(name, nlen) ==
		  (reserved || message_reserved_model(name, nlen)));
	/* blank: only spaces and tabs */
	model = true;
	for (size_t i = 0; i < vlen && model; i++)
		model = value[i] == ' ' || value[i] == '\t';
	CHECK(edge_header_value_blank(value, vlen) == model);

	/* name: 1..256 token characters */
	model = nlen >= 1 && nlen <= GRELOUT_HEADER_NAME_MAX;
	for (size_t i = 0; i < nlen && model; i++)
		model = is_tchar((unsigned char) name[i]);
	CHECK(name_ok == model);

	/*
	 * value: at most 8192 bytes, an RFC 9110 field value: no control but
	 * HTAB (no C0 byte but HTAB, no DEL, no C1 control in UTF-8: C2 80..9F)
	 */
	model = vlen <= GRELOUT_HEADER_VALUE_MAX;
	for (size_t i = 0; i < vlen && model; i++)
	{
		unsigned char c = (unsigned char) value[i];

		model = (c >= 0x20 || c == '\t') && c != 0x7F &&
			!(c == 0xC2 && i + 1 < vlen &&
			  (unsigned char) value[i + 1] >= 0x80 && (unsigned char) value[i + 1] <= 0x9F);
	}
	CHECK(value_ok == model);

	CHECK(reserved == reserved_model(name, nlen));

	if (name_ok && value_ok && !reserved)
	{
		/* the header line the relay would write is one line */
		size_t		len = nlen + 2 + vlen;
		char	   *line = malloc(len);

		memcpy(line, name, nlen);
		memcpy(line + nlen, ": ", 2);
		memcpy(line + nlen + 2, value, vlen);
		for (size_t i = 0; i < len; i++)
			CHECK(line[i] != '\r' && line[i] != '\n' && line[i] != '\0');
		CHECK(memchr(line, ':', len) == line + nlen);
		free(line);
	}
	free(name);
	free(value);
	return 0;
}
