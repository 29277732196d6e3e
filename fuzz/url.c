/*-------------------------------------------------------------------------
 *
 * url.c
 *	  libFuzzer target: edge_url_check(), the handler URL check.
 *
 * Invariants: an accepted URL is at most GRELOUT_URL_MAX bytes, starts
 * with http:// or https:// (any letter case), holds no byte <= 0x20 nor
 * DEL, and has a non-empty host (after any userinfo) before its port,
 * path, query or fragment; any refusal names a reason that is true of
 * the input.
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
	EdgeUrlError err = edge_url_check(url, size);
	size_t		start = 0;
	int			bad_char = 0;

	for (size_t i = 0; i < size; i++)
		if ((unsigned char) url[i] <= 0x20 || (unsigned char) url[i] == 0x7F)
			bad_char = 1;
	if (size >= 7 && strncasecmp(url, "http://", 7) == 0 && memchr(url, 0, 7) == NULL)
		start = 7;
	else if (size >= 8 && strncasecmp(url, "https://", 8) == 0 && memchr(url, 0, 8) == NULL)
		start = 8;

	switch (err)
	{
		case EDGE_URL_OK:
			{
				size_t		end = start,
							host = start;

				CHECK(size <= GRELOUT_URL_MAX);
				CHECK(!bad_char);
				CHECK(start != 0);
				while (end < size && url[end] != '/' && url[end] != '?' && url[end] != '#')
					end++;
				for (size_t i = start; i < end; i++)
					if (url[i] == '@')
						host = i + 1;
				CHECK(host < end);
				CHECK(url[host] != ':');
				break;
			}
		case EDGE_URL_TOO_LONG:
			CHECK(size > GRELOUT_URL_MAX);
			break;
		case EDGE_URL_BAD_CHAR:
			CHECK(bad_char);
			break;
		case EDGE_URL_BAD_SCHEME:
			CHECK(start == 0);
			break;
		case EDGE_URL_NO_HOST:
			CHECK(start != 0);
			break;
		default:
			CHECK(!"unknown verdict");
	}
	free(url);
	return 0;
}
