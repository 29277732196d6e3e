/*-------------------------------------------------------------------------
 *
 * databases.c
 *	  libFuzzer target: grelout.database parsing (edge_database_list).
 *
 * Invariants: "*" alone is the only text that means every database; a
 * refused text comes with a reason; an accepted list counts as many names
 * as its commas plus one, never stores more than its room, and each stored
 * name is a piece of the text between commas, 1 to 63 bytes, with no white
 * space around it, no comma in it, and not "*".
 *
 *-------------------------------------------------------------------------
 */
#include "edge.h"
#include "fuzz.h"

#define ROOM 8

/* is_space: white space as the parser trims it. */
static int
is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *cstr = dup_cstring(data, size);
	size_t		len = strlen(cstr);
	EdgeSpan	names[ROOM];
	const char *error = NULL;
	int			commas = 0;
	int			n;

	for (size_t i = 0; i < len; i++)
		commas += (cstr[i] == ',');
	n = edge_database_list(cstr, names, ROOM, &error);
	if (n < 0)
		CHECK(n == -1 && error != NULL);
	else if (n == 0)
	{
		size_t		stars = 0;

		for (size_t i = 0; i < len; i++)
		{
			CHECK(is_space(cstr[i]) || cstr[i] == '*');
			stars += (cstr[i] == '*');
		}
		CHECK(stars == 1);
	}
	else
	{
		CHECK(n == commas + 1 && n <= EDGE_DATABASES_MAX);
		for (int i = 0; i < n && i < ROOM; i++)
		{
			const EdgeSpan *s = &names[i];

			CHECK(s->start >= cstr && s->start + s->len <= cstr + len);
			CHECK(s->len >= 1 && s->len <= EDGE_DATABASE_NAME_MAX);
			CHECK(!is_space(s->start[0]) && !is_space(s->start[s->len - 1]));
			CHECK(memchr(s->start, ',', s->len) == NULL);
			CHECK(!(s->len == 1 && s->start[0] == '*'));
		}
	}
	free(cstr);
	return 0;
}
