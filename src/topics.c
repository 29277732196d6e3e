/*-------------------------------------------------------------------------
 *
 * topics.c
 *	  grelout._topic_matches(pattern, topic), the SQL face of
 *	  edge_topic_match() (src/route.c): does a message's topic match a
 *	  handler's topic pattern.  The router and the handler triggers use it.
 *
 *-------------------------------------------------------------------------
 */
#include "grelout.h"

#include "fmgr.h"
#include "route.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(grelout_topic_matches);

/*
 * grelout_topic_matches: _topic_matches(pattern text, topic text) RETURNS
 * boolean, strict, immutable.
 */
Datum
grelout_topic_matches(PG_FUNCTION_ARGS)
{
	text	   *pattern = PG_GETARG_TEXT_PP(0);
	text	   *topic = PG_GETARG_TEXT_PP(1);

	PG_RETURN_BOOL(edge_topic_match(VARDATA_ANY(pattern), VARSIZE_ANY_EXHDR(pattern),
									VARDATA_ANY(topic), VARSIZE_ANY_EXHDR(topic)));
}
