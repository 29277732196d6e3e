/*-------------------------------------------------------------------------
 *
 * launcher.h
 *	  What the launcher's files share: its view of a database
 *	  (LauncherDb, in the launcher's own memory) and the elastic relays'
 *	  turn (launcher_elastic.c), which launcher.c calls once the relays are
 *	  shared out.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_LAUNCHER_H
#define GRELOUT_LAUNCHER_H

#include "grelout.h"

/* What the launcher knows of the extension in a database ("*" only). */
typedef enum ExtState
{
	EXT_UNKNOWN,				/* a relay must connect to find out */
	EXT_YES,
	EXT_NO
} ExtState;

/* A database in pg_database, as the last scan found it. */
typedef struct LauncherDb
{
	Oid			oid;
	char		name[NAMEDATALEN];
	bool		connectable;	/* datallowconn, and not half dropped */
	bool		is_template;
	ExtState	ext;
	bool		reprobe;		/* given the extension while probed */
	bool		wanted;
	bool		probe;			/* wanted to find out about the extension */
	int			target;			/* relays it gets this turn */
	bool		logged_unserved;
	int			order;			/* list position, or scan order */
	int			want;			/* relays wanted while elastic, 0: workers */
	int64		added_at;		/* last extra relay added (elastic_now) */
	int64		retired_at;		/* last extra relay retired */
} LauncherDb;

/* launcher_in_oids: is oid among the n of oids? */
static inline bool
launcher_in_oids(Oid oid, const Oid *oids, int n)
{
	for (int i = 0; i < n; i++)
		if (oids[i] == oid)
			return true;
	return false;
}

/* launcher_elastic.c */
extern void elastic_adopt(LauncherDb *dbs, int ndbs);
extern bool elastic_turn(LauncherDb *dbs, int ndbs, const Oid *asides,
						 int nasides, long *timeout);

#endif							/* GRELOUT_LAUNCHER_H */
