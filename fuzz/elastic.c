/*-------------------------------------------------------------------------
 *
 * elastic.c
 *	  libFuzzer target: elastic relays (src/pure/elastic.c) driven by a
 *	  database simulated from the input: time passes, relays note claims
 *	  short of room or not, relays start, settle and retire, the settings
 *	  change, grelout.max_relays runs out, and the launcher moves.
 *
 * The input is one operation per byte pair (the first byte picks the
 * operation, the second is its argument).
 *
 * Invariants: a relay is saturated exactly when it has been short of room
 * for ELASTIC_SATURATED_US, and says it changed exactly when it did; the
 * launcher adds a relay only to a settled database with a saturated relay,
 * below its maximum, with room under grelout.max_relays and no other added
 * within ELASTIC_ADD_EVERY_US; it retires one only from a settled database
 * above its minimum, not within ELASTIC_RETIRE_EVERY_US of the last, and,
 * unless it is above its maximum, only with no relay saturated for the
 * quiet spell and none added within it; following its moves, a database
 * never goes above its maximum or below its minimum by them.
 *
 *-------------------------------------------------------------------------
 */
#include "elastic.h"
#include "fuzz.h"

#define MAX_RELAYS	8

/* check_relay: the relay's record after a note at now. */
static void
check_relay(const ElasticRelay *r, bool was, bool changed, bool short_of_room,
			int64_t now)
{
	CHECK(changed == (r->saturated != was));
	if (!short_of_room)
		CHECK(!r->saturated && r->short_since == 0);
	else
		CHECK(r->short_since > 0 && r->short_since <= now &&
			  r->saturated == (now - r->short_since >= ELASTIC_SATURATED_US));
}

/* check_move: what elastic_move may say of db at now. */
static void
check_move(const ElasticDb *db, ElasticMove m, int64_t now)
{
	int			maximum = db->maximum > db->minimum ? db->maximum : db->minimum;

	if (m == ELASTIC_ADD)
	{
		CHECK(db->settled && db->saturated && db->room);
		CHECK(db->relays >= db->minimum && db->relays < maximum);
		CHECK(db->added_at == 0 || now - db->added_at >= ELASTIC_ADD_EVERY_US);
	}
	if (m == ELASTIC_RETIRE)
	{
		CHECK(db->settled && db->relays > db->minimum);
		CHECK(db->retired_at == 0 || now - db->retired_at >= ELASTIC_RETIRE_EVERY_US);
		if (db->relays <= maximum)
		{
			CHECK(!db->saturated);
			CHECK(db->saturated_at == 0 || now - db->saturated_at >= ELASTIC_QUIET_US);
			CHECK(db->added_at == 0 || now - db->added_at >= ELASTIC_QUIET_US);
		}
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	ElasticRelay relay[MAX_RELAYS] = {{0}};
	ElasticDb	db = {0};
	int64_t		now = 1;

	db.minimum = 1;
	db.maximum = 4;
	db.relays = 1;
	db.settled = true;
	db.room = true;
	for (size_t i = 0; i + 1 < size; i += 2)
	{
		int			op = data[i] % 8;
		int			arg = data[i + 1];
		int			k = arg % MAX_RELAYS;
		ElasticMove m;

		switch (op)
		{
			case 0:				/* time passes: up to about 65 s */
				now += (int64_t) arg * arg * 1000;
				break;
			case 1:				/* a claim of relay k, short of room or not */
			case 2:
				{
					bool		was = relay[k].saturated;
					bool		changed = elastic_relay_note(&relay[k], op == 1, now);

					check_relay(&relay[k], was, changed, op == 1, now);
					break;
				}
			case 3:				/* a reload: workers, max_workers */
				db.minimum = arg % 4;
				db.maximum = 1 + (arg / 4) % 8;
				break;
			case 4:				/* relays start, stop, retire */
				db.settled = arg & 1;
				break;
			case 5:				/* grelout.max_relays used up or not */
				db.room = arg & 1;
				break;
			default:			/* the launcher's turn */
				db.saturated = false;
				for (int r = 0; r < db.relays && r < MAX_RELAYS; r++)
					if (relay[r].saturated)
						db.saturated = true;
				if (db.saturated)
					db.saturated_at = now;
				m = elastic_move(&db, now);
				check_move(&db, m, now);
				if (m == ELASTIC_ADD)
				{
					db.relays++;
					db.added_at = now;
				}
				else if (m == ELASTIC_RETIRE)
				{
					db.relays--;
					db.retired_at = now;
					relay[db.relays < MAX_RELAYS ? db.relays : 0].saturated = false;
				}
				CHECK(db.relays >= 0);
				break;
		}
	}
	return 0;
}
