/*-------------------------------------------------------------------------
 *
 * topic_pattern_sql.c
 *	  grelout._topic_matches(pattern, topic), the SQL wrapper of
 *	  edge_topic_match() (topic_pattern.c): does a message's topic match a
 *	  handler's topic pattern.  The handler triggers, the views and the
 *	  operational events (handler_health.c) call it; routing calls
 *	  edge_topic_match() itself (routing.c).
 *
 *-------------------------------------------------------------------------
 */
#include "grelout.h"

#include "fmgr.h"
#include "topic_pattern.h"
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
