/*-------------------------------------------------------------------------
 *
 * response.c
 *	  libFuzzer target: the response-header path of the relay's libcurl
 *	  header callback: edge_status_line() on every line, and for
 *	  "Retry-After:" lines edge_header_line() followed by
 *	  edge_retry_after(), exactly as src/pure/http.c chains them.
 *
 * The input is split into lines at LF (each line keeps its line ending),
 * as libcurl hands header lines over one at a time.
 *
 * Invariants: a status line starts with "HTTP/" and gives a code from 100
 * to 999 that is the three digits after the first space; a matched header
 * value lies inside its line, without surrounding white space or line
 * ending, and the name before the colon is the one asked for.
 *
 *-------------------------------------------------------------------------
 */
#include <ctype.h>
#include <strings.h>
#include <time.h>

#include "edge.h"
#include "fuzz.h"

/* one_line: what header_cb does with one line. */
static void
one_line(const char *line, size_t n)
{
	int			status = -1;
	const char *value = NULL;
	size_t		vlen = 0;
	static const char *const names[] = {"retry-after", "location", "x", NULL};

	if (edge_status_line(line, n, &status))
	{
		const char *sp;

		CHECK(n >= 9 && memcmp(line, "HTTP/", 5) == 0);
		CHECK(status >= 100 && status <= 999);
		sp = memchr(line, ' ', n);
		CHECK(sp != NULL && sp + 4 <= line + n);
		CHECK((sp[1] - '0') * 100 + (sp[2] - '0') * 10 + (sp[3] - '0') == status);
	}
	else
		CHECK(status == -1);

	for (int k = 0; names[k]; k++)
	{
		size_t		nlen = strlen(names[k]);

		if (!edge_header_line(line, n, names[k], &value, &vlen))
			continue;
		CHECK(n > nlen && line[nlen] == ':');
		CHECK(strncasecmp(line, names[k], nlen) == 0);
		CHECK(value >= line + nlen + 1 && value + vlen <= line + n);
		if (vlen > 0)
		{
			CHECK(value[0] != ' ' && value[0] != '\t');
			CHECK(value[vlen - 1] != ' ' && value[vlen - 1] != '\t' &&
				  value[vlen - 1] != '\r' && value[vlen - 1] != '\n');
		}
		if (k == 0)
		{
			/* the value is handed on in place, not NUL-terminated */
			char	   *copy = dup_exact((const uint8_t *) value, vlen);
			int64_t		delay;

			if (edge_retry_after(copy, vlen, time(NULL), &delay))
				CHECK(delay >= 0);
			free(copy);
		}
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t		start = 0;

	while (start < size)
	{
		const uint8_t *nl = memchr(data + start, '\n', size - start);
		size_t		end = nl ? (size_t) (nl - data) + 1 : size;
		char	   *line = dup_exact(data + start, end - start);

		one_line(line, end - start);
		free(line);
		start = end;
	}
	return 0;
}
