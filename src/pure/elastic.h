/*-------------------------------------------------------------------------
 *
 * elastic.h
 *	  Elastic relays: when a database gets one more relay than it has
 *	  (its relays cannot keep up with its due messages) and when one of
 *	  its extra relays retires (they have had room to spare for a quiet
 *	  spell).  Plain C, no PostgreSQL header (test/unit/test_elastic.c).
 *
 * Two halves, one a process:
 *
 * - a relay, after each claim that could measure it, notes whether the
 *   claim was short of room (it took as many deliveries as it had room
 *   for, or left new messages behind for want of it) or took all there
 *   was (elastic_relay_note); short of room for ELASTIC_SATURATED_US in a
 *   row, it is saturated, and says so in its shared slot;
 * - the launcher, at each turn, gives each served database one relay
 *   more, or one less, or leaves it (elastic_move), from what its relays'
 *   slots say, between grelout.workers and grelout.max_workers.
 *
 * All times are microseconds on the monotonic clock (elastic_now), the
 * same in every process of the server, which a step of the wall clock
 * does not move; 0 is "never".
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_ELASTIC_H
#define GRELOUT_ELASTIC_H

#include <stdbool.h>
#include <stdint.h>

/* A relay short of room this long in a row is saturated. */
#define ELASTIC_SATURATED_US		(1000 * INT64_C(1000))
/* At most one relay added to a database this often. */
#define ELASTIC_ADD_EVERY_US		(1000 * INT64_C(1000))
/*
 * An extra relay retires once no relay of its database has been saturated
 * for this long (the quiet spell), and this long after the last relay
 * added; then one more every ELASTIC_RETIRE_EVERY_US while it stays quiet.
 */
#define ELASTIC_QUIET_US			(30 * 1000 * INT64_C(1000))
#define ELASTIC_RETIRE_EVERY_US		(5 * 1000 * INT64_C(1000))

/* A relay's own record of its room (elastic_relay_note). */
typedef struct ElasticRelay
{
	int64_t		short_since;	/* short of room since then, 0: it is not */
	bool		saturated;		/* short of room for ELASTIC_SATURATED_US */
} ElasticRelay;

/* What the launcher knows of one database's relays, for elastic_move. */
typedef struct ElasticDb
{
	int			minimum;		/* grelout.workers */
	int			maximum;		/* grelout.max_workers (the minimum if lower) */
	int			relays;			/* relays it has now */
	bool		settled;		/* each runs: none starting, restarting, retiring */
	bool		saturated;		/* one of them is saturated now */
	int64_t		saturated_at;	/* last time one was */
	int64_t		added_at;		/* last relay added */
	int64_t		retired_at;		/* last relay retired */
	bool		room;			/* grelout.max_relays leaves a relay for it */
} ElasticDb;

/* What the launcher does with a database's relays (elastic_move). */
typedef enum ElasticMove
{
	ELASTIC_HOLD,
	ELASTIC_ADD,
	ELASTIC_RETIRE
} ElasticMove;

extern int64_t elastic_now(void);
extern bool elastic_relay_note(ElasticRelay *r, bool short_of_room, int64_t now);
extern ElasticMove elastic_move(const ElasticDb *db, int64_t now);

#endif							/* GRELOUT_ELASTIC_H */
