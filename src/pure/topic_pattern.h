/*-------------------------------------------------------------------------
 *
 * topic_pattern.h
 *	  Topic patterns of handlers (pure C, no PostgreSQL): their validation
 *	  and the matching of a message's topic against one.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_TOPIC_PATTERN_H
#define GRELOUT_TOPIC_PATTERN_H

#include <stdbool.h>
#include <stddef.h>

/* Why a handler's topic pattern is refused. */
typedef enum EdgeTopicPatternError
{
	EDGE_TOPIC_PATTERN_OK,
	EDGE_TOPIC_PATTERN_EMPTY_SEGMENT,	/* "", ".a", "a.", "a..b" */
	EDGE_TOPIC_PATTERN_BAD_WILDCARD /* "*" or "#" inside a longer segment */
} EdgeTopicPatternError;

extern EdgeTopicPatternError edge_topic_pattern_valid(const char *pattern,
													  size_t len);
extern bool edge_topic_reserved(const char *topic, size_t len);
extern bool edge_topic_match(const char *pattern, size_t plen,
							 const char *topic, size_t tlen);

#endif							/* GRELOUT_TOPIC_PATTERN_H */
