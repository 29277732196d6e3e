/*-------------------------------------------------------------------------
 *
 * url_mask.c
 *	  libFuzzer target: edge_url_mask(), the masking of handler URLs shown
 *	  by grelout.handlers_masked.
 *
 * Invariants: the result fits EDGE_URL_MASK_SIZE(len); masking twice gives
 * the same result as masking once; an http(s) URL keeps its scheme and host
 * and port, and its authority holds at most one '@', only as "***@"; a
 * query value or fragment is only ever shown as "***"; anything else is
 * masked whole.
 *
 *-------------------------------------------------------------------------
 */
#include <strings.h>

#include "edge.h"
#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *url = dup_exact(data, size);
	size_t		cap = EDGE_URL_MASK_SIZE(size);
	char	   *out = malloc(cap);
	size_t		n = edge_url_mask(url, size, out);
	char	   *again = malloc(EDGE_URL_MASK_SIZE(n));
	size_t		n2;
	size_t		start = 0;

	CHECK(n <= cap);
	n2 = edge_url_mask(out, n, again);
	CHECK(n2 == n && memcmp(again, out, n) == 0);

	if (size >= 7 && strncasecmp(url, "http://", 7) == 0 && memchr(url, 0, 7) == NULL)
		start = 7;
	else if (size >= 8 && strncasecmp(url, "https://", 8) == 0 && memchr(url, 0, 8) == NULL)
		start = 8;

	if (start == 0)
		CHECK(n == 3 && memcmp(out, "***", 3) == 0);
	else
	{
		size_t		end = start,
					at = 0,
					i;
		int			ats = 0;

		CHECK(memcmp(out, url, start) == 0);
		while (end < n && out[end] != '/' && out[end] != '?' && out[end] != '#')
		{
			if (out[end] == '@')
			{
				ats++;
				at = end;
			}
			end++;
		}
		CHECK(ats <= 1);
		if (ats == 1)
			CHECK(at == start + 3 && memcmp(out + start, "***@", 4) == 0);

		/* after the path: only masked values */
		i = end;
		while (i < n && out[i] != '?' && out[i] != '#')
			i++;
		for (; i < n; i++)
		{
			if (out[i] == '=' || out[i] == '#')
			{
				/* what follows, up to a separator, is empty or "***" */
				size_t		v = i + 1,
							e = v;

				while (e < n && out[e] != '&' && out[e] != ';' && out[e] != '#')
					e++;
				if (out[i] == '#')
					e = n;
				CHECK(e == v || (e - v == 3 && memcmp(out + v, "***", 3) == 0));
				i = e - 1;
			}
		}
	}
	free(again);
	free(out);
	free(url);
	return 0;
}
