/*-------------------------------------------------------------------------
 *
 * test_elastic.c
 *	  Unit tests of src/pure/elastic.c: a relay is saturated only after
 *	  ELASTIC_SATURATED_US short of room in a row; the launcher adds a
 *	  relay to a saturated database up to its maximum, one at a time and
 *	  within grelout.max_relays, and retires the extra ones after a quiet
 *	  spell, one at a time, never below the minimum.  Prints TAP.
 *
 *-------------------------------------------------------------------------
 */
#include "elastic.h"
#include "tap.h"

#define S	(1000 * INT64_C(1000))

/* busy: a database of relays relays, one saturated now, all running. */
static ElasticDb
busy(int relays)
{
	ElasticDb	db = {0};

	db.minimum = 1;
	db.maximum = 3;
	db.relays = relays;
	db.settled = true;
	db.saturated = true;
	db.saturated_at = 100 * S;
	db.room = true;
	return db;
}

/* relay_side: the relay's record of its room. */
static void
relay_side(void)
{
	ElasticRelay r = {0};

	ok(!elastic_relay_note(&r, true, 10 * S) && !r.saturated,
	   "one claim short of room: not saturated yet");
	ok(!elastic_relay_note(&r, true, 10 * S + S / 2) && !r.saturated,
	   "short of room for half a second: not yet");
	ok(elastic_relay_note(&r, true, 11 * S) && r.saturated,
	   "short of room for ELASTIC_SATURATED_US: saturated, a change");
	ok(!elastic_relay_note(&r, true, 12 * S) && r.saturated,
	   "still short: saturated, no change to tell");
	ok(elastic_relay_note(&r, false, 12 * S + 1) && !r.saturated,
	   "a claim that took all there was: no longer saturated");
	ok(!elastic_relay_note(&r, true, 13 * S) && !r.saturated,
	   "short again: the second starts over");
	ok(!elastic_relay_note(&r, false, 13 * S + S / 2) &&
	   !elastic_relay_note(&r, true, 14 * S) && !r.saturated,
	   "room between two short claims resets the count");
}

/* adding: one relay more for a saturated database. */
static void
adding(void)
{
	ElasticDb	db = busy(1);

	is_int(elastic_move(&db, 100 * S), ELASTIC_ADD, "saturated, below the maximum: add");
	db.added_at = 100 * S;
	db.relays = 2;
	is_int(elastic_move(&db, 100 * S + S / 2), ELASTIC_HOLD,
		   "not again within ELASTIC_ADD_EVERY_US");
	is_int(elastic_move(&db, 101 * S), ELASTIC_ADD, "then again");
	db.relays = 3;
	is_int(elastic_move(&db, 105 * S), ELASTIC_HOLD, "never beyond the maximum");
	db = busy(1);
	db.settled = false;
	is_int(elastic_move(&db, 100 * S), ELASTIC_HOLD, "not while a relay starts");
	db = busy(1);
	db.room = false;
	is_int(elastic_move(&db, 100 * S), ELASTIC_HOLD, "not beyond grelout.max_relays");
	db = busy(2);
	db.maximum = 1;
	db.minimum = 2;
	is_int(elastic_move(&db, 100 * S), ELASTIC_HOLD,
		   "a maximum below the minimum is the minimum");
	db = busy(1);
	db.saturated = false;
	is_int(elastic_move(&db, 100 * S), ELASTIC_HOLD, "not saturated: nothing to add");
}

/* retiring: one extra relay less after a quiet spell. */
static void
retiring(void)
{
	ElasticDb	db = busy(3);

	db.saturated = false;
	db.added_at = 90 * S;
	is_int(elastic_move(&db, 120 * S), ELASTIC_HOLD, "quiet for 20 s: they stay");
	is_int(elastic_move(&db, 130 * S), ELASTIC_RETIRE, "quiet for the spell: one retires");
	db.relays = 2;
	db.retired_at = 130 * S;
	is_int(elastic_move(&db, 132 * S), ELASTIC_HOLD, "the next not at once");
	is_int(elastic_move(&db, 135 * S), ELASTIC_RETIRE, "then the next");
	db.relays = 1;
	db.retired_at = 135 * S;
	is_int(elastic_move(&db, 500 * S), ELASTIC_HOLD, "never below the minimum");

	db = busy(2);
	db.saturated = false;
	db.saturated_at = 0;
	db.added_at = 125 * S;
	is_int(elastic_move(&db, 130 * S), ELASTIC_HOLD,
		   "a relay just added is not retired before the spell");
	db = busy(2);
	db.settled = false;
	db.saturated = false;
	is_int(elastic_move(&db, 500 * S), ELASTIC_HOLD, "one retirement at a time");
	db = busy(3);
	db.maximum = 2;
	is_int(elastic_move(&db, 100 * S), ELASTIC_RETIRE,
		   "above a lowered maximum: one retires, saturated or not");
}

int
main(void)
{
	relay_side();
	adding();
	retiring();
	return done_testing();
}
