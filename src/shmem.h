/*-------------------------------------------------------------------------
 *
 * shmem.h
 *	  Shared memory of the relays: one slot a relay (the database it serves,
 *	  its latch, its live counters for grelout.relays), one entry a served
 *	  database (its lease recovery flag), what the launcher is told:
 *	  databases whose relays must step aside for a DDL command, databases
 *	  given the extension, a rescan wanted; and the stamp of the last
 *	  message id (ids.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_SHMEM_H
#define GRELOUT_SHMEM_H

#include "grelout.h"

#include "port/atomics.h"
#include "storage/spin.h"

/* States of a relay slot (GreloutRelaySlot.state) */
#define SLOT_FREE				0	/* serves no database */
#define SLOT_STARTING			1	/* the launcher registered a relay for it */
#define SLOT_RUNNING			2	/* the relay attached */
#define SLOT_EXITED				3	/* the relay exited; counters kept */

/* One slot a relay, read by grelout.relays */
typedef struct GreloutRelaySlot
{
	slock_t		mutex;
	int			state;			/* SLOT_*, set under mutex */
	Oid			dboid;			/* the database served; set by the launcher */
	int			db_entry;		/* its index in GreloutShared.dbs */
	int			relay;			/* 1-based number within the database */
	Oid			roleoid;		/* role to connect as, InvalidOid: bootstrap */
	bool		stop_requested; /* the launcher wants it gone */
	bool		no_extension;	/* '*': it found no extension and left */
	bool		extension_found;	/* it found the extension */
	int			pgprocno;		/* -1 when no relay runs in this slot */
	int			pid;
	TimestampTz started_at;
	char		activity[64];
	int			in_flight;
	uint64		delivered;
	uint64		retried;
	uint64		dead;
	TimestampTz last_error_at;
	char		last_error[GRELOUT_LAST_ERROR_MAX];
} GreloutRelaySlot;

/* Lease recovery states in GreloutShared.leases_recovered */
#define LEASES_TO_RECOVER		0
#define LEASES_RECOVERING		1
#define LEASES_RECOVERED		2

/*
 * One entry a database the launcher serves (or would, but has no relay
 * left for), kept while the database stays wanted.
 */
typedef struct GreloutDbEntry
{
	Oid			oid;			/* InvalidOid: entry free */
	char		name[NAMEDATALEN];
	bool		unserved;		/* wanted, but every relay is in use */

	/*
	 * Claims made before the database was first served by this server are
	 * void: every relay that held them is gone.  The first relay to connect
	 * makes them due again at once, instead of waiting for their leases to
	 * lapse, and no relay of the database claims before that is done.
	 * LEASES_TO_RECOVER, _RECOVERING or _RECOVERED.
	 */
	pg_atomic_uint32 leases_recovered;
} GreloutDbEntry;

/*
 * A database whose relays step aside while a backend's command runs
 * (databases.c).  Entries are taken and cleared under GreloutShared.mutex;
 * a backend clears its own at the end of its transaction, the launcher
 * those of a backend gone without clearing them.  They are few and shared
 * by every role, so that no role can use them up for the others:
 *
 * - a backend holds at most one entry a database, whatever number of
 *   commands on it its transaction runs (renaming it 100 times, say);
 * - a role that is not a superuser takes no entry for a database that the
 *   relays neither serve nor are starting in (nothing to step aside from),
 *   holds at most GRELOUT_ASIDE_PER_ROLE entries over all its backends,
 *   and never takes one of the last GRELOUT_ASIDE_RESERVED free entries:
 *   they are kept for superusers, so that an administrator's DROP
 *   DATABASE of a served database gets its relays out whatever other
 *   roles do.
 */
typedef struct GreloutAside
{
	Oid			dboid;			/* InvalidOid: entry free */
	Oid			roleid;			/* the role running the command */
	int			pid;			/* the backend running the command */
	int			pgprocno;
} GreloutAside;

#define GRELOUT_MAX_ASIDE		64
#define GRELOUT_ASIDE_RESERVED	8
#define GRELOUT_ASIDE_PER_ROLE	16
#define GRELOUT_MAX_POKES		64

typedef struct GreloutShared
{
	/* mutex guards the launcher's fields, the asides and the pokes */
	slock_t		mutex;
	int			launcher_pgprocno;	/* -1 when no launcher runs */
	bool		rescan;			/* pg_database or a setting may have changed */
	int			npokes;			/* databases given the extension since */
	bool		pokes_overflowed;	/* too many: probe every database again */
	Oid			pokes[GRELOUT_MAX_POKES];
	GreloutAside asides[GRELOUT_MAX_ASIDE];

	int			ndbs;
	GreloutDbEntry *dbs;		/* ndbs entries, after the slots */

	/*
	 * The (milliseconds << 12 | counter) stamp of the last message id made
	 * by any backend of the server (ids.c): ids are monotonic server-wide.
	 */
	pg_atomic_uint64 last_id_stamp;
	int			nslots;
	GreloutRelaySlot slots[FLEXIBLE_ARRAY_MEMBER];
} GreloutShared;

extern GreloutShared *grelout_shared;
extern GreloutRelaySlot *grelout_slot_attach(int index);
extern void grelout_wake_launcher(bool rescan, Oid extension_in);
extern bool grelout_aside_pending(Oid dboid);
extern bool grelout_database_served(Oid dboid);
extern void grelout_slot_set_activity(GreloutRelaySlot *slot, const char *activity);
extern void grelout_slot_count(GreloutRelaySlot *slot, int delivered, int retried,
							   int dead, int in_flight);
extern void grelout_slot_error(GreloutRelaySlot *slot, const char *error);
extern void grelout_slot_extension(GreloutRelaySlot *slot, bool found);

#endif							/* GRELOUT_SHMEM_H */
