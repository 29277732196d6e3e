/*-------------------------------------------------------------------------
 *
 * topic_pattern.c
 *	  libFuzzer target: edge_topic_pattern_valid() and edge_topic_match(),
 *	  the handlers' topic patterns, and edge_topic_reserved().  The input is a pattern and a topic
 *	  separated by the first newline (no newline: the input is both).
 *
 * Invariants: matching agrees with a reference matcher (dynamic
 * programming over segments); a valid pattern without wildcards matches
 * exactly the topic equal to it; "#" matches every topic but "grelout."
 * ones; a valid pattern has no empty segment and no '*' or '#' inside a
 * longer segment.
 *
 *-------------------------------------------------------------------------
 */
#include <stdbool.h>
#include <strings.h>

#include "fuzz.h"
#include "topic_pattern.h"

#define MAX_SEGMENTS 600

/* split: the segments of s at '.', as offsets and lengths; returns how many. */
static size_t
split(const char *s, size_t len, size_t *off, size_t *seglen)
{
	size_t		n = 0,
				start = 0;

	for (size_t i = 0; i <= len; i++)
	{
		if (i == len || s[i] == '.')
		{
			off[n] = start;
			seglen[n] = i - start;
			n++;
			start = i + 1;
		}
	}
	return n;
}

/* ref_match: dynamic programming over segments, the plain reading of the rules. */
static bool
ref_match(const char *p, size_t plen, const char *t, size_t tlen)
{
	static size_t po[MAX_SEGMENTS],
				pl[MAX_SEGMENTS],
				to[MAX_SEGMENTS],
				tl[MAX_SEGMENTS];
	static bool m[MAX_SEGMENTS + 1][MAX_SEGMENTS + 1];
	size_t		np = split(p, plen, po, pl);
	size_t		nt = split(t, tlen, to, tl);

	if (tlen >= 8 && memcmp(t, "grelout.", 8) == 0 && plen > 0 &&
		pl[0] == 1 && (p[0] == '*' || p[0] == '#'))
		return false;

	/* m[i][j]: pattern segments i.. match topic segments j.. */
	for (size_t i = np + 1; i-- > 0;)
		for (size_t j = nt + 1; j-- > 0;)
		{
			if (i == np)
				m[i][j] = (j == nt);
			else if (pl[i] == 1 && p[po[i]] == '#')
				m[i][j] = m[i + 1][j] || (j < nt && m[i][j + 1]);
			else if (j == nt)
				m[i][j] = false;
			else if (pl[i] == 1 && p[po[i]] == '*')
				m[i][j] = m[i + 1][j + 1];
			else
				m[i][j] = pl[i] == tl[j] &&
					memcmp(p + po[i], t + to[j], pl[i]) == 0 && m[i + 1][j + 1];
		}
	return m[0][0];
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *nl = memchr(data, '\n', size);
	size_t		plen = nl ? (size_t) (nl - (const char *) data) : size;
	char	   *pattern = dup_exact(data, plen);
	size_t		tlen = nl ? size - plen - 1 : size;
	char	   *topic = dup_exact(nl ? (const uint8_t *) nl + 1 : data, tlen);
	EdgeTopicPatternError err = edge_topic_pattern_valid(pattern, plen);
	bool		got = edge_topic_match(pattern, plen, topic, tlen);
	bool		grelout_topic = tlen >= 8 && memcmp(topic, "grelout.", 8) == 0;

	/* dots in both bound the segments: keep the reference's tables small */
	if (size < MAX_SEGMENTS)
		CHECK(got == ref_match(pattern, plen, topic, tlen));

	if (err == EDGE_TOPIC_PATTERN_OK)
	{
		bool		wild = memchr(pattern, '*', plen) || memchr(pattern, '#', plen);

		CHECK(plen > 0 && pattern[0] != '.' && pattern[plen - 1] != '.');
		for (size_t i = 0; i + 1 < plen; i++)
		{
			CHECK(!(pattern[i] == '.' && pattern[i + 1] == '.'));
			if (pattern[i] == '*' || pattern[i] == '#')
				CHECK(pattern[i + 1] == '.');
			if (pattern[i + 1] == '*' || pattern[i + 1] == '#')
				CHECK(pattern[i] == '.');
		}
		if (!wild)
			CHECK(got == (plen == tlen && memcmp(pattern, topic, plen) == 0));
		CHECK(edge_topic_match(pattern, plen, pattern, plen) || wild);
	}
	CHECK(edge_topic_match("#", 1, topic, tlen) == !grelout_topic);

	/* reserved for grelout: first segment "grelout", any letter case */
	CHECK(edge_topic_reserved(topic, tlen) ==
		  (tlen >= 7 && strncasecmp(topic, "grelout", 7) == 0 &&
		   memchr(topic, 0, 7) == NULL && (tlen == 7 || topic[7] == '.')));
	if (grelout_topic)
		CHECK(edge_topic_reserved(topic, tlen));

	free(topic);
	free(pattern);
	return 0;
}
