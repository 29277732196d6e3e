/*-------------------------------------------------------------------------
 *
 * test_claim_columns.c
 *	  Unit test of src/claim_columns.h: the select list CLAIM_COLUMNS names
 *	  the columns of a claimed delivery in the order of their numbers
 *	  (CLAIM_*), which the relay reads them by, and names each once.
 *	  Prints TAP.
 *
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include "claim_columns.h"
#include "tap.h"

#define MAX_COLUMNS	32

/*
 * split: the names of a select list "a, b, c" into names[] (at most max);
 * returns how many, -1 when one is empty or has a space inside.
 */
static int
split(const char *list, char names[][64], int max)
{
	int			n = 0;
	const char *p = list;

	while (*p != '\0' && n < max)
	{
		const char *end = strchr(p, ',');
		size_t		len = end ? (size_t) (end - p) : strlen(p);

		while (len > 0 && *p == ' ')
		{
			p++;
			len--;
		}
		if (len == 0 || len >= 64 || memchr(p, ' ', len) != NULL)
			return -1;
		memcpy(names[n], p, len);
		names[n][len] = '\0';
		n++;
		if (end == NULL)
			break;
		p = end + 1;
	}
	return n;
}

int
main(void)
{
	static const struct
	{
		int			number;
		const char *name;
	}			expected[] = {
		{CLAIM_ID, "id"},
		{CLAIM_TOPIC, "topic"},
		{CLAIM_KEY, "key"},
		{CLAIM_PAYLOAD, "payload"},
		{CLAIM_HEADERS, "headers"},
		{CLAIM_ATTEMPTS, "attempts"},
		{CLAIM_EXHAUSTED, "exhausted"},
		{CLAIM_MAX_ATTEMPTS, "max_attempts"},
		{CLAIM_URL, "url"},
		{CLAIM_HANDLER_HEADERS, "handler_headers"},
		{CLAIM_SECRET, "secret"},
		{CLAIM_PREVIOUS_SECRET, "previous_secret"},
		{CLAIM_TIMEOUT, "timeout"},
		{CLAIM_LAST_ERROR, "last_error"},
		{CLAIM_HANDLER, "handler"},
		{CLAIM_FANOUT, "fanout"},
	};
	int			nexpected = (int) (sizeof(expected) / sizeof(expected[0]));
	char		names[MAX_COLUMNS][64];
	int			n = split(CLAIM_COLUMNS, names, MAX_COLUMNS);

	is_int(n, CLAIM_FANOUT, "CLAIM_COLUMNS has as many names as the last number");
	is_int(nexpected, CLAIM_FANOUT, "this test knows every column");
	for (int i = 0; i < nexpected; i++)
	{
		int			at = expected[i].number - 1;

		is_str(n > at && at >= 0 ? names[at] : NULL, expected[i].name,
			   "column %d is %s", expected[i].number, expected[i].name);
	}
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			if (strcmp(names[i], names[j]) == 0)
				ok(0, "column %s is named twice", names[i]);
	return done_testing();
}
