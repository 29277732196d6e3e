/*-------------------------------------------------------------------------
 *
 * shmem.h
 *	  Shared memory of the relays: one slot a relay (the database it serves,
 *	  its latch, its live counters for grelout.relays), one entry a served
 *	  database (its lease recovery flag), what the launcher is told:
 *	  databases whose relays must step aside for a DDL command, databases
 *	  given the extension, a rescan wanted; and the stamp of the last
 *	  message id (ids.c).  The layout and the rules of access are written
 *	  at GreloutShared below; shmem.c creates it, the handlers' health is
 *	  a shared hash table of its own (health.h).
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

/*
 * One slot a relay, read by grelout.relays.  Every field is read and
 * written under mutex, but for the unlocked reads GreloutShared lists.
 * Who writes what:
 *
 * - the launcher assigns a slot (state SLOT_STARTING, dboid, db_entry,
 *   relay, roleoid, the flags cleared) and frees it (SLOT_FREE, counters
 *   reset), only while no relay runs in it (SLOT_FREE or SLOT_EXITED); it
 *   sets stop_requested, and retire_requested for an extra relay of an
 *   elastic database that has had room to spare for a quiet spell (the
 *   relay then claims no more, finishes and settles what it has in flight,
 *   and exits: no hand-back, no request sent twice);
 * - the relay it starts attaches (pid, started_at, pgprocno, SLOT_RUNNING:
 *   grelout_slot_attach), keeps its activity, counters, last error,
 *   extension flags and saturated state (saturated, and saturated_at when
 *   it changes: elastic.h), and detaches at exit (pgprocno -1, pid 0,
 *   in_flight 0, saturated off, SLOT_EXITED: slot_detach), counters kept
 *   for grelout.relays;
 * - a backend reads a slot (grelout.relays, databases.c's step aside)
 *   and writes none of it.
 */
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
	bool		retire_requested;	/* the launcher retires it (elastic) */
	bool		saturated;		/* short of room for a while (elastic.h) */
	int64		saturated_at;	/* when saturated last changed (elastic_now) */
	int			pgprocno;		/* -1 when no relay runs in this slot */
	pg_atomic_uint32 wakes;		/* grelout_wake_relays' count (a commit
								 * that published), beside the latch */
	int			pid;
	TimestampTz started_at;
	char		activity[64];
	int			in_flight;
	uint64		delivered;
	uint64		retried;
	uint64		dead;
	uint64		cycles;			/* database cycles run (grelout.metrics()) */
	uint64		cycle_errors;	/* of them, rolled back */
	uint64		cycle_us;		/* their time: settle, claim, commit */
	uint64		spans_exported; /* attempt spans the OTLP collector took */
	uint64		spans_dropped;	/* attempt spans lost (spans.c) */
	uint64		settle_us;		/* of it, writing the outcomes */
	uint64		claim_us;		/* of it, routing and claiming */
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

	/*
	 * When the database's backlog is next to be counted (backlog.c), a
	 * TimestampTz: the relay that moves it forward counts.
	 */
	pg_atomic_uint64 backlog_due_at;
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

/*
 * GreloutShared: one block of shared memory, "grelout", made by
 * grelout_shmem_startup under AddinShmemInitLock and sized at preload from
 * grelout.max_relays (a restart setting):
 *
 *	[GreloutShared, the header][slots: nslots GreloutRelaySlot]
 *	(MAXALIGN)[dbs: ndbs GreloutDbEntry]
 *
 * nslots = grelout.max_relays, ndbs = nslots + 32; both, and the dbs
 * pointer, are set once at startup and never change, so anyone reads them
 * without a lock.  Every other field follows one of these rules:
 *
 * - mutex, a spinlock held for a few instructions (never across a call
 *   that can fail or wait), guards launcher_pgprocno, rescan and the pokes
 *   (backends write them, grelout_wake_launcher; the launcher takes and
 *   clears them, take_news), the asides (taken and cleared by the backend
 *   whose command needs its database free, cleared by the launcher when
 *   that backend is gone), and the oid, name and unserved flag of the
 *   database entries (written by the launcher only, so its own reads need
 *   no lock; relays and backends read them under mutex).
 *
 * - A slot's own mutex guards the slot (GreloutRelaySlot says who writes
 *   what).  Neither mutex is ever taken while holding the other.
 *
 * - Unlocked reads, each safe for the reason given: the launcher reads a
 *   slot's state and assignment without its mutex, being the only process
 *   that assigns or frees a slot (a relay's own transitions, RUNNING and
 *   EXITED, are caught on its next turn); grelout_wake_relays, run after
 *   every commit that published, reads a slot's dboid and then, after a
 *   read barrier, its pgprocno: dboid changes only while no relay runs in
 *   the slot, and a stale pgprocno at worst sets the latch of a relay that
 *   just left, or misses one that is starting, which claims as it starts.
 *
 * - Atomics, no lock: last_id_stamp, advanced by compare-and-exchange by
 *   any backend making a message id (ids.c); a database entry's
 *   leases_recovered, set LEASES_TO_RECOVER by the launcher when it takes
 *   the entry, moved to LEASES_RECOVERING by compare-and-exchange by the
 *   one relay that wins it, then to LEASES_RECOVERED after the commit that
 *   released the old leases, or back to LEASES_TO_RECOVER by that relay's
 *   exit if it could not (relay.c); and a database entry's
 *   backlog_due_at, set 0 by the launcher when it takes the entry, moved
 *   forward by compare-and-exchange by the relay that counts the backlog,
 *   which then sets when the next count is due (backlog.c).
 */
typedef struct GreloutShared
{
	/* guards the launcher's fields, the asides, the pokes, the dbs' names */
	slock_t		mutex;
	int			launcher_pgprocno;	/* -1 when no launcher runs */
	bool		rescan;			/* pg_database or a setting may have changed */
	int			npokes;			/* databases given the extension since */
	bool		pokes_overflowed;	/* too many: probe every database again */
	Oid			pokes[GRELOUT_MAX_POKES];
	GreloutAside asides[GRELOUT_MAX_ASIDE];

	int			ndbs;			/* set at startup */
	GreloutDbEntry *dbs;		/* ndbs entries, after the slots */

	/*
	 * The (milliseconds << 12 | counter) stamp of the last message id made
	 * by any backend of the server (ids.c): ids are monotonic server-wide.
	 */
	pg_atomic_uint64 last_id_stamp;
	int			nslots;			/* set at startup */
	GreloutRelaySlot slots[FLEXIBLE_ARRAY_MEMBER];
} GreloutShared;

extern GreloutShared *grelout_shared;
extern GreloutRelaySlot *grelout_slot_attach(int index);
extern void grelout_wake_launcher(bool rescan, Oid extension_in);
extern bool grelout_aside_pending(Oid dboid);
extern bool grelout_database_served(Oid dboid);
extern void grelout_slot_set_activity(GreloutRelaySlot *slot, const char *activity);
extern void grelout_slot_spans(GreloutRelaySlot *slot, int exported, int dropped);
extern void grelout_slot_count(GreloutRelaySlot *slot, int delivered, int retried,
							   int dead, int in_flight);
extern void grelout_slot_error(GreloutRelaySlot *slot, const char *error);
extern void grelout_slot_cycle(GreloutRelaySlot *slot, bool committed, int64 us,
							   int64 settle_us, int64 claim_us);
extern void grelout_slot_extension(GreloutRelaySlot *slot, bool found);
extern void grelout_slot_saturated(GreloutRelaySlot *slot, bool saturated);
extern bool grelout_slot_retiring(GreloutRelaySlot *slot);

#endif							/* GRELOUT_SHMEM_H */
