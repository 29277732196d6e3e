/*-------------------------------------------------------------------------
 *
 * topic_pattern.c
 *	  Topic patterns of handlers, in pure C (no PostgreSQL calls), unit
 *	  tested in test/unit/test_topic_pattern.c and fuzzed by fuzz/topic_pattern.c.
 *
 * A topic is split into segments at '.'.  In a pattern, a segment "*"
 * matches exactly one segment, a segment "#" matches zero or more
 * segments (the rules of an AMQP topic exchange) and any other segment
 * matches itself, byte for byte.  A pattern whose first segment is "*" or
 * "#" never matches a topic beginning with "grelout.": grelout's own
 * operational events are subscribed to by name ("grelout.#").
 *
 *-------------------------------------------------------------------------
 */
#include "topic_pattern.h"

#include "constants.h"

#include <string.h>

#define RESERVED	GRELOUT_RESERVED_TOPIC_SEGMENT

/* A segment of a topic or pattern: [start, start + len). */
typedef struct Segment
{
	const char *start;
	size_t		len;
} Segment;

/*
 * next_segment: the segment starting at *pos in s (of length len); moves
 * *pos past it and its '.'; sets *last when it was the last segment.
 */
static Segment
next_segment(const char *s, size_t len, size_t *pos, bool *last)
{
	Segment		seg;
	const char *dot;

	seg.start = s + *pos;
	dot = memchr(seg.start, '.', len - *pos);
	if (dot == NULL)
	{
		seg.len = len - *pos;
		*pos = len;
		*last = true;
	}
	else
	{
		seg.len = (size_t) (dot - seg.start);
		*pos += seg.len + 1;
		*last = false;
	}
	return seg;
}

/* is_word: the segment is exactly the one-byte word w ('*' or '#'). */
static inline bool
is_word(Segment seg, char w)
{
	return seg.len == 1 && seg.start[0] == w;
}

/*
 * edge_topic_pattern_valid: a pattern has no empty segment, and a '*' or
 * '#' only as a whole segment.  Its length and control characters are
 * checked as a topic's are, elsewhere.
 */
EdgeTopicPatternError
edge_topic_pattern_valid(const char *pattern, size_t len)
{
	size_t		pos = 0;
	bool		last = false;

	while (!last)
	{
		Segment		seg = next_segment(pattern, len, &pos, &last);

		if (seg.len == 0)
			return EDGE_TOPIC_PATTERN_EMPTY_SEGMENT;
		if (seg.len > 1 &&
			(memchr(seg.start, '*', seg.len) != NULL ||
			 memchr(seg.start, '#', seg.len) != NULL))
			return EDGE_TOPIC_PATTERN_BAD_WILDCARD;
	}
	return EDGE_TOPIC_PATTERN_OK;
}

/*
 * edge_topic_reserved: is the topic grelout's own: its first segment
 * "grelout" in any letter case, the bare topic "grelout" included?  Such
 * topics are where grelout publishes its operational events; no publisher
 * or capture may use them.
 */
bool
edge_topic_reserved(const char *topic, size_t len)
{
	static const char word[] = RESERVED;
	size_t		wlen = sizeof(word) - 1;

	if (len < wlen || (len > wlen && topic[wlen] != '.'))
		return false;
	for (size_t i = 0; i < wlen; i++)
	{
		unsigned char c = (unsigned char) topic[i];

		if (c >= 'A' && c <= 'Z')
			c += 'a' - 'A';
		if (c != (unsigned char) word[i])
			return false;
	}
	return true;
}

/*
 * edge_topic_match: does topic match pattern?  Greedy matching with one
 * backtracking point, as for glob's '*': on a mismatch after a '#', that
 * '#' takes one more topic segment and the match resumes after it.  This
 * is exact for sequence wildcards and costs at most (pattern segments) x
 * (topic segments) steps, whatever the number of '#'.  Any byte string is
 * taken: an invalid pattern just matches by the same rules.
 */
bool
edge_topic_match(const char *pattern, size_t plen,
				 const char *topic, size_t tlen)
{
	size_t		ppos = 0,
				tpos = 0;
	bool		pdone = false,
				tdone = false;

	/* where to resume after the latest '#': pattern and topic positions */
	bool		have_hash = false;
	size_t		hash_ppos = 0;
	bool		hash_pdone = false;
	size_t		hash_tpos = 0;
	bool		hash_tdone = false;

	/* the topic begins with "grelout." (sizeof counts the dot's place) */
	if (plen > 0 && tlen >= sizeof(RESERVED) &&
		memcmp(topic, RESERVED ".", sizeof(RESERVED)) == 0)
	{
		size_t		p = 0;
		bool		l;
		Segment		first = next_segment(pattern, plen, &p, &l);

		if (is_word(first, '*') || is_word(first, '#'))
			return false;
	}

	for (;;)
	{
		if (!pdone)
		{
			Segment		pseg = next_segment(pattern, plen, &ppos, &pdone);

			if (is_word(pseg, '#'))
			{
				/* first try: '#' takes no segment */
				have_hash = true;
				hash_ppos = ppos;
				hash_pdone = pdone;
				hash_tpos = tpos;
				hash_tdone = tdone;
				continue;
			}
			if (!tdone)
			{
				Segment		tseg = next_segment(topic, tlen, &tpos, &tdone);

				if (is_word(pseg, '*') ||
					(pseg.len == tseg.len &&
					 memcmp(pseg.start, tseg.start, pseg.len) == 0))
					continue;
			}
		}
		else if (tdone)
			return true;		/* both used up */

		/* mismatch: let the latest '#' take one more topic segment */
		if (!have_hash || hash_tdone)
			return false;
		(void) next_segment(topic, tlen, &hash_tpos, &hash_tdone);
		ppos = hash_ppos;
		pdone = hash_pdone;
		tpos = hash_tpos;
		tdone = hash_tdone;
	}
}
