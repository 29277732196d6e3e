/*-------------------------------------------------------------------------
 *
 * elastic.c
 *	  Elastic relays: whether a relay is saturated, and whether the
 *	  launcher adds a relay to a database or retires one (elastic.h says
 *	  the policy).  Plain C, no PostgreSQL.
 *
 *-------------------------------------------------------------------------
 */
#include "elastic.h"

#include <time.h>

/* elastic_now: the monotonic clock, in microseconds. */
int64_t
elastic_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* since: whether at least span has passed from t (0: never) to now. */
static bool
since(int64_t t, int64_t now, int64_t span)
{
	return t == 0 || now - t >= span;
}

/*
 * elastic_relay_note: a claim was short of room, or took all there was:
 * update the relay's record; returns whether its saturated state changed
 * (the relay then tells its slot).
 */
bool
elastic_relay_note(ElasticRelay *r, bool short_of_room, int64_t now)
{
	bool		was = r->saturated;

	if (!short_of_room)
	{
		r->short_since = 0;
		r->saturated = false;
	}
	else
	{
		if (r->short_since == 0)
			r->short_since = now;
		r->saturated = (now - r->short_since >= ELASTIC_SATURATED_US);
	}
	return r->saturated != was;
}

/*
 * elastic_move: one relay more for the database while one of its relays
 * is saturated, all of them run, it has fewer than its maximum,
 * grelout.max_relays leaves room and none was added in the last
 * ELASTIC_ADD_EVERY_US; one relay less while it has more than its maximum
 * (lowered by a reload), or more than its minimum after a quiet spell;
 * else none.  A database whose relays are not settled (one starting,
 * restarting or retiring) waits: one change at a time.
 */
ElasticMove
elastic_move(const ElasticDb *db, int64_t now)
{
	int			maximum = db->maximum > db->minimum ? db->maximum : db->minimum;

	if (!db->settled || db->relays < db->minimum)
		return ELASTIC_HOLD;
	if (db->relays > maximum && since(db->retired_at, now, ELASTIC_RETIRE_EVERY_US))
		return ELASTIC_RETIRE;
	if (db->saturated)
	{
		if (db->relays < maximum && db->room &&
			since(db->added_at, now, ELASTIC_ADD_EVERY_US))
			return ELASTIC_ADD;
		return ELASTIC_HOLD;
	}
	if (db->relays > db->minimum &&
		since(db->saturated_at, now, ELASTIC_QUIET_US) &&
		since(db->added_at, now, ELASTIC_QUIET_US) &&
		since(db->retired_at, now, ELASTIC_RETIRE_EVERY_US))
		return ELASTIC_RETIRE;
	return ELASTIC_HOLD;
}
