/*-------------------------------------------------------------------------
 *
 * test_topic_pattern.c
 *	  Unit tests of src/pure/topic_pattern.c, handlers' topic patterns: validation (no
 *	  empty segment, '*' and '#' only as whole segments) and matching ('*'
 *	  one segment, '#' zero or more, others literal; a leading wildcard
 *	  never matches a "grelout." topic), checked case by case and against
 *	  a simple reference matcher over every small pattern and topic.
 *	  Prints TAP.
 *
 *-------------------------------------------------------------------------
 */
#include <stdbool.h>
#include <string.h>

#include "topic_pattern.h"
#include "tap.h"

/* match: edge_topic_match on C strings. */
static bool
match(const char *pattern, const char *topic)
{
	return edge_topic_match(pattern, strlen(pattern), topic, strlen(topic));
}

/* valid: edge_topic_pattern_valid on a C string. */
static EdgeTopicPatternError
valid(const char *pattern)
{
	return edge_topic_pattern_valid(pattern, strlen(pattern));
}

/*
 * ref_match: reference matcher by plain recursion over one-byte segments
 * ("a.b" is spelled "ab", "" is no segment): exponential, fine for tiny
 * inputs.
 */
static bool
ref_match(const char *p, const char *t)
{
	if (*p == '\0')
		return *t == '\0';
	if (*p == '#')
		return ref_match(p + 1, t) || (*t != '\0' && ref_match(p, t + 1));
	if (*t == '\0')
		return false;
	if (*p == '*' || *p == *t)
		return ref_match(p + 1, t + 1);
	return false;
}

/* dotted: "abc" as "a.b.c" into buf. */
static void
dotted(const char *s, char *buf)
{
	size_t		n = 0;

	for (size_t i = 0; s[i] != '\0'; i++)
	{
		if (i > 0)
			buf[n++] = '.';
		buf[n++] = s[i];
	}
	buf[n] = '\0';
}

/* next_word: the next word over alphabet in lexicographic order; false at the end. */
static bool
next_word(char *w, int len, const char *alphabet)
{
	int			k = (int) strlen(alphabet);

	for (int i = len - 1; i >= 0; i--)
	{
		const char *at = strchr(alphabet, w[i]);
		int			idx = (int) (at - alphabet);

		if (idx + 1 < k)
		{
			w[i] = alphabet[idx + 1];
			return true;
		}
		w[i] = alphabet[0];
	}
	return false;
}

int
main(void)
{
	int			mismatches = 0,
				compared = 0;

	/* validation */
	is_int(valid("orders.created"), EDGE_TOPIC_PATTERN_OK, "a literal topic is a pattern");
	is_int(valid("#"), EDGE_TOPIC_PATTERN_OK, "# alone is a pattern");
	is_int(valid("*.created.#"), EDGE_TOPIC_PATTERN_OK, "* and # as whole segments");
	is_int(valid("a.#.#.*"), EDGE_TOPIC_PATTERN_OK, "several wildcards");
	is_int(valid(""), EDGE_TOPIC_PATTERN_EMPTY_SEGMENT, "empty pattern refused");
	is_int(valid(".a"), EDGE_TOPIC_PATTERN_EMPTY_SEGMENT, "leading dot refused");
	is_int(valid("a."), EDGE_TOPIC_PATTERN_EMPTY_SEGMENT, "trailing dot refused");
	is_int(valid("a..b"), EDGE_TOPIC_PATTERN_EMPTY_SEGMENT, "double dot refused");
	is_int(valid("."), EDGE_TOPIC_PATTERN_EMPTY_SEGMENT, "a lone dot refused");
	is_int(valid("order*"), EDGE_TOPIC_PATTERN_BAD_WILDCARD, "* inside a segment refused");
	is_int(valid("a.#b"), EDGE_TOPIC_PATTERN_BAD_WILDCARD, "# inside a segment refused");
	is_int(valid("**"), EDGE_TOPIC_PATTERN_BAD_WILDCARD, "** refused");
	is_int(valid("a.*#.b"), EDGE_TOPIC_PATTERN_BAD_WILDCARD, "*# refused");
	is_int(edge_topic_pattern_valid("a\0b", 3), EDGE_TOPIC_PATTERN_OK,
		   "a NUL byte is no wildcard (control characters are refused elsewhere)");

	/* matching */
	ok(match("orders.created", "orders.created"), "exact match");
	ok(!match("orders.created", "orders.created.eu"), "exact: a longer topic does not match");
	ok(!match("orders.created", "orders"), "exact: a shorter topic does not match");
	ok(!match("orders.created", "Orders.created"), "exact: case matters");
	ok(match("orders.*", "orders.created"), "* takes one segment");
	ok(!match("orders.*", "orders"), "* takes exactly one segment, not zero");
	ok(!match("orders.*", "orders.created.eu"), "* takes exactly one segment, not two");
	ok(match("*.created", "orders.created"), "leading *");
	ok(match("orders.#", "orders"), "# takes zero segments");
	ok(match("orders.#", "orders.created"), "# takes one segment");
	ok(match("orders.#", "orders.created.eu.x"), "# takes several segments");
	ok(!match("orders.#", "ordersx.created"), "# after a literal needs the literal");
	ok(match("#", "a"), "# alone matches one segment");
	ok(match("#", "a.b.c"), "# alone matches every topic");
	ok(match("#.created", "created"), "leading # with zero segments");
	ok(match("#.created", "a.b.created"), "leading # with two segments");
	ok(!match("#.created", "a.created.b"), "# then a literal must end the topic");
	ok(match("a.#.b.#.c", "a.b.x.b.c"), "two # with backtracking");
	ok(match("a.#.*", "a.x"), "# then *: * takes the last segment");
	ok(!match("a.#.*", "a"), "# then * needs one segment");
	ok(match("#.#", "a"), "# # over one segment");
	ok(match("a.*.#", "a.b"), "* then # with zero");
	ok(match("a.*", "a."), "* matches an empty last segment of a topic");
	ok(!match("a", "a."), "a literal does not match a topic with a trailing dot");

	/* operational events */
	ok(!match("#", "grelout.handler.disabled"), "# never matches a grelout. topic");
	ok(!match("*.handler.disabled", "grelout.handler.disabled"), "leading * never matches a grelout. topic");
	ok(!match("#.disabled", "grelout.handler.disabled"), "leading # never matches a grelout. topic");
	is_str(match("grelout.#", "grelout.handler.disabled") ? "match" : "no match", "match",
		   "grelout.# matches operational events");
	ok(match("grelout.handler.disabled", "grelout.handler.disabled"), "an operational event by its name");
	ok(match("#", "grelout"), "a topic \"grelout\" alone is no operational event");
	ok(match("#", "greloutx.a"), "nor is \"greloutx.a\"");

	/* issue 29: topics reserved for grelout, whatever their letter case */
	{
		static const char *const reserved[] = {
			"grelout", "GRELOUT", "Grelout", "grelout.x", "GreLout.handler.disabled",
			"grelout.", "GRELOUT.a.b", NULL
		};
		static const char *const free_topics[] = {
			"greloutx", "greloutx.a", "x.grelout", "grelou", "grelout_x", "a.grelout.b",
			"orders.created", "", "grel", NULL
		};

		for (int i = 0; reserved[i]; i++)
			ok(edge_topic_reserved(reserved[i], strlen(reserved[i])),
			   "topic \"%s\" is reserved", reserved[i]);
		for (int i = 0; free_topics[i]; i++)
			ok(!edge_topic_reserved(free_topics[i], strlen(free_topics[i])),
			   "topic \"%s\" is not reserved", free_topics[i]);
		ok(edge_topic_reserved("grelout.x", 7), "only the given length counts");
		ok(!edge_topic_reserved("grelout\0x", 9), "a NUL ends no segment");
	}

	/*
	 * Every pattern of up to 5 segments over {a, b, *, #} against every
	 * topic of up to 5 segments over {a, b}, compared with the reference.
	 */
	for (int plen = 1; plen <= 5; plen++)
	{
		char		p[8];

		memset(p, 'a', (size_t) plen);
		p[plen] = '\0';
		do
		{
			for (int tlen = 1; tlen <= 5; tlen++)
			{
				char		t[8];

				memset(t, 'a', (size_t) tlen);
				t[tlen] = '\0';
				do
				{
					char		pd[16],
								td[16];

					dotted(p, pd);
					dotted(t, td);
					compared++;
					if (match(pd, td) != ref_match(p, t))
					{
						if (mismatches++ < 5)
							printf("# %s against %s: got %d\n", pd, td, match(pd, td));
					}
				} while (next_word(t, tlen, "ab"));
			}
		} while (next_word(p, plen, "ab*#"));
	}
	is_int(mismatches, 0, "%d small patterns and topics match as the reference says", compared);

	return done_testing();
}
