/*-------------------------------------------------------------------------
 *
 * launcher.c
 *	  The launcher: one background worker, registered at server start,
 *	  that decides which databases the relays serve and keeps
 *	  grelout.workers relays running in each, grelout.max_relays in all.
 *
 * The launcher connects to no database (it reads the shared catalog
 * pg_database only) and runs a reconciling loop, as pg_cron's launcher
 * and PostgreSQL's logical replication launcher do:
 *
 *	1. read what changed: a reload, the databases given the extension and
 *	   the commands in progress whose databases the relays must leave
 *	   (databases.c tells it through shared memory and its latch);
 *	2. when something may have changed, or every RESCAN_MS, read
 *	   pg_database in a short transaction, and work out the databases
 *	   wanted: those grelout.database lists (a missing one is logged once),
 *	   or with "*" every connectable, non-template database in which the
 *	   extension is installed;
 *	3. share the relays out: one a database first, then (with "*") one to
 *	   each database not known yet, which finds out whether the extension
 *	   is there (a relay that finds none leaves and says so), then the rest
 *	   in turn up to grelout.workers a database, then the extra relays of
 *	   elastic databases; a wanted database left without one is logged
 *	   once and shown in grelout.relays.  Elastic relays (elastic.h): a
 *	   database one of whose relays is saturated gets one more, up to
 *	   grelout.max_workers, and one whose relays have had room to spare
 *	   for a quiet spell retires its highest extra relay (which finishes
 *	   its requests and exits by itself: launcher_elastic.c);
 *	4. stop the relays no longer wanted (SIGTERM: the relay's own stop,
 *	   which hands back its claims), start the ones missing as dynamic
 *	   background workers (a relay that exited comes back after
 *	   RELAY_RESTART_MS), but none in a database a command is leaving;
 *	5. sleep on the latch until the next rescan or restart (every second
 *	   while a database has extra relays or a saturated one).
 *
 * A relay's slot (shmem.h) is its identity: database and number; the slot
 * keeps its counters across restarts of the relay.  Slots are the truth:
 * a launcher that restarts adopts the relays that run.
 *
 *-------------------------------------------------------------------------
 */
#include "grelout.h"

#include <signal.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "edge.h"
#include "launcher.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "shmem.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/acl.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

/* Read pg_database at least this often, even when told nothing. */
/* The library and entry point of a relay, as start_relay registers it. */
#define RELAY_LIBRARY			"grelout"
#define RELAY_FUNCTION			"grelout_relay_main"

#define RESCAN_MS				10000
/* A relay that exited is started again after this pause. */
#define RELAY_RESTART_MS		2000
/* A relay registered by an earlier launcher that never attached. */
#define ADOPTED_START_MS		30000
/* After a failed registration (max_worker_processes), try again. */
#define REGISTER_RETRY_MS		10000

/* The launcher's own memory: its view of the databases and slots. */
static LauncherDb *dbs = NULL;
static int	ndbs = 0;
static List *logged_missing = NIL;	/* listed names logged as missing */
static Oid	role_oid = InvalidOid;
static bool role_ok = true;
static bool logged_no_worker = false;
static BackgroundWorkerHandle **handles;	/* one a slot, NULL if adopted */
static TimestampTz *exited_at;	/* when the slot's relay exit was seen */
static TimestampTz *adopted_at; /* STARTING slots found at launcher start */
static bool *stop_sent;
static TimestampTz last_scan = 0;
static int	logged_unprobed = 0;	/* databases not looked at, last logged */
static TimestampTz register_retry_at = 0;
static bool elastic_adopted = false;	/* extra relays adopted at start */

/* True while the launcher reads pg_database: a cancel then cancels it. */
static volatile sig_atomic_t in_scan = false;
/* The last read of pg_database was cancelled: read again soon. */
static bool scan_cancelled = false;
/* After a cancelled read of pg_database, the next one this soon. */
#define SCAN_RETRY_MS			1000

/*
 * grelout_database_check: NULL if value is a valid grelout.database (one
 * name, a comma-separated list, or "*"), else what is wrong with it.
 */
const char *
grelout_database_check(const char *value)
{
	const char *error = NULL;

	if (edge_database_list(value ? value : "", NULL, 0, &error) < 0)
		return error;
	return NULL;
}

/* grelout_database_all: is grelout.database "*"? */
bool
grelout_database_all(void)
{
	const char *error;

	return edge_database_list(grelout_database ? grelout_database : "",
							  NULL, 0, &error) == 0;
}

/* database_names: the names grelout.database lists, in order. */
static List *
database_names(void)
{
	EdgeSpan   *spans = palloc(sizeof(EdgeSpan) * EDGE_DATABASES_MAX);
	const char *error;
	List	   *names = NIL;
	int			n;

	n = edge_database_list(grelout_database ? grelout_database : "", spans,
						   EDGE_DATABASES_MAX, &error);
	for (int i = 0; i < n; i++)
		names = lappend(names, pnstrdup(spans[i].start, spans[i].len));
	pfree(spans);
	return names;
}

/*
 * grelout_register_launcher: at preload, register the launcher; it starts
 * the relays once recovery has finished.
 */
void
grelout_register_launcher(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "grelout");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "grelout_launcher_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "grelout launcher");
	snprintf(worker.bgw_type, BGW_MAXLEN, "grelout launcher");
	RegisterBackgroundWorker(&worker);
}

/* find_db: the scanned database with this oid, or NULL. */
static LauncherDb *
find_db(Oid oid)
{
	for (int i = 0; i < ndbs; i++)
		if (dbs[i].oid == oid)
			return &dbs[i];
	return NULL;
}

/*
 * scan_databases: read pg_database into dbs, keeping what was known of
 * each database by oid; resolve grelout.role.
 */
static void
scan_databases(void)
{
	LauncherDb *old = dbs;
	int			nold = ndbs;
	int			cap = Max(nold, 16);
	LauncherDb *fresh;
	int			n = 0;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;

	/* in the turn's memory until the read is complete (a cancel drops it) */
	fresh = palloc0(sizeof(LauncherDb) * cap);
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database f = (Form_pg_database) GETSTRUCT(tup);
		LauncherDb *d;

		if (n == cap)
		{
			cap *= 2;
			fresh = repalloc(fresh, sizeof(LauncherDb) * cap);
		}
		d = &fresh[n++];
		memset(d, 0, sizeof(LauncherDb));
		d->oid = f->oid;
		strlcpy(d->name, NameStr(f->datname), NAMEDATALEN);
		d->connectable = f->datallowconn && !database_is_invalid_form(f);
		d->is_template = f->datistemplate;
		d->ext = EXT_UNKNOWN;
		d->order = n;
		for (int i = 0; i < nold; i++)
			if (old[i].oid == d->oid)
			{
				d->ext = old[i].ext;
				d->reprobe = old[i].reprobe;
				d->logged_unserved = old[i].logged_unserved;
				d->want = old[i].want;
				d->added_at = old[i].added_at;
				d->retired_at = old[i].retired_at;
			}
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);

	role_oid = InvalidOid;
	if (grelout_role && grelout_role[0])
	{
		role_oid = get_role_oid(grelout_role, true);
		if (!OidIsValid(role_oid) && role_ok)
			ereport(LOG,
					(errmsg("grelout.role names role \"%s\", which does not exist: no relay starts",
							grelout_role),
					 errhint("Create the role, or change grelout.role and restart the server.")));
		role_ok = OidIsValid(role_oid);
	}
	else
		role_ok = true;
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);

	if (old)
		pfree(old);
	dbs = MemoryContextAlloc(TopMemoryContext, sizeof(LauncherDb) * Max(n, 1));
	memcpy(dbs, fresh, sizeof(LauncherDb) * n);
	pfree(fresh);
	ndbs = n;
	last_scan = GetCurrentTimestamp();
}

/*
 * scan_databases_cancellable: scan_databases, the launcher's only
 * statement, which pg_cancel_backend cancels as it cancels a backend's
 * (while it waits for a lock on pg_database, say): the read is abandoned,
 * logged, and done again in a later turn; the databases the last complete
 * read found stay in force meanwhile.  Any other error ends the launcher,
 * as before.  Returns whether the read completed.
 */
static bool
scan_databases_cancellable(void)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool done = false;

	in_scan = true;
	PG_TRY();
	{
		scan_databases();
		done = true;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		in_scan = false;
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_QUERY_CANCELED || ShutdownRequestPending)
			PG_RE_THROW();
		FlushErrorState();
		AbortCurrentTransaction();
		MemoryContextSwitchTo(cxt);
		ereport(LOG,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("grelout launcher: its read of pg_database was cancelled"),
				 errdetail("%s", edata->message),
				 errhint("It reads pg_database again within %d ms; the relays run on.",
						 SCAN_RETRY_MS)));
		FreeErrorData(edata);
	}
	PG_END_TRY();
	in_scan = false;
	/* a cancel that came too late for the read has nothing left to cancel */
	QueryCancelPending = false;
	MemoryContextSwitchTo(cxt);
	scan_cancelled = !done;
	return done;
}

/* forget_missing: a listed database exists: log again if it goes. */
static void
forget_missing(const char *name)
{
	ListCell   *lc;

	foreach(lc, logged_missing)
	{
		if (strcmp((char *) lfirst(lc), name) == 0)
		{
			logged_missing = foreach_delete_current(logged_missing, lc);
			return;
		}
	}
}

/* log_missing_once: a listed database that cannot be served, logged once. */
static void
log_missing_once(const char *name, bool exists)
{
	ListCell   *lc;
	MemoryContext old;

	foreach(lc, logged_missing)
		if (strcmp((char *) lfirst(lc), name) == 0)
			return;
	if (exists)
		ereport(LOG,
				(errmsg("grelout.database lists database \"%s\", which does not allow connections",
						name),
				 errhint("Its relays start once ALTER DATABASE ... ALLOW_CONNECTIONS true lets them in.")));
	else
		ereport(LOG,
				(errmsg("grelout.database lists database \"%s\", which does not exist",
						name),
				 errhint("Its relays start once it is created.")));
	old = MemoryContextSwitchTo(TopMemoryContext);
	logged_missing = lappend(logged_missing, pstrdup(name));
	MemoryContextSwitchTo(old);
}

/* cmp_order: sort the databases into the order they are served in. */
static int
cmp_order(const void *a, const void *b)
{
	const LauncherDb *x = a;
	const LauncherDb *y = b;

	if (x->order != y->order)
		return x->order < y->order ? -1 : 1;
	return 0;
}

/*
 * choose_wanted: mark the databases grelout.database wants, in the order
 * they are served in: the list's, or with "*" oid order (creation order).
 */
static void
choose_wanted(void)
{
	bool		all = grelout_database_all();

	for (int i = 0; i < ndbs; i++)
	{
		dbs[i].wanted = dbs[i].probe = false;
		dbs[i].target = 0;
	}
	if (all)
	{
		for (int i = 0; i < ndbs; i++)
		{
			LauncherDb *d = &dbs[i];

			d->order = (int) Min(d->oid, (Oid) PG_INT32_MAX);
			if (!d->connectable || d->is_template || d->ext == EXT_NO)
				continue;
			d->wanted = (d->ext == EXT_YES);
			d->probe = (d->ext == EXT_UNKNOWN);
		}
	}
	else
	{
		List	   *names = database_names();
		ListCell   *lc;
		int			pos = 0;

		for (int i = 0; i < ndbs; i++)
			dbs[i].order = PG_INT32_MAX;
		foreach(lc, names)
		{
			char	   *name = lfirst(lc);
			LauncherDb *d = NULL;

			pos++;
			for (int i = 0; i < ndbs; i++)
				if (strcmp(dbs[i].name, name) == 0)
					d = &dbs[i];
			if (d == NULL || !d->connectable)
			{
				log_missing_once(name, d != NULL);
				continue;
			}
			forget_missing(name);
			if (!d->wanted)
			{
				d->wanted = true;
				d->order = pos;
			}
		}
		list_free_deep(names);
	}
	qsort(dbs, ndbs, sizeof(LauncherDb), cmp_order);
}

/*
 * log_unserved: log, once, each wanted database left without a relay, and
 * with "*" how many databases no relay was left to look at.
 */
static void
log_unserved(void)
{
	int			unprobed = 0;

	for (int i = 0; i < ndbs; i++)
	{
		LauncherDb *d = &dbs[i];

		if (d->probe && d->target == 0 && grelout_workers > 0)
			unprobed++;
		if (d->wanted && d->target == 0 && grelout_workers > 0)
		{
			if (!d->logged_unserved)
				ereport(LOG,
						(errmsg("grelout leaves database \"%s\" unserved: all %d relays of grelout.max_relays are in use",
								d->name, grelout_max_relays),
						 errhint("Raise grelout.max_relays (a restart), lower grelout.workers, or serve fewer databases.")));
			d->logged_unserved = true;
		}
		else if (d->target > 0)
			d->logged_unserved = false;
	}
	if (unprobed > 0 && logged_unprobed == 0)
		ereport(LOG,
				(errmsg("grelout has no relay left to look for the extension in %d databases",
						unprobed),
				 errhint("Raise grelout.max_relays (a restart), or lower grelout.workers.")));
	logged_unprobed = unprobed;
}

/*
 * share_relays: how many relays each database gets: one each for the
 * wanted ones, then one each to find out about the unknown ones ("*"),
 * then one more each in turn up to grelout.workers, then the extra relays
 * of the elastic ones in turn, up to what each wants; what a database
 * wants beyond what it got is forgotten (it asks again if saturated).
 */
static void
share_relays(void)
{
	int			left = grelout_max_relays;
	bool		more = true;

	if (grelout_workers <= 0)
		left = 0;
	for (int i = 0; i < ndbs && left > 0; i++)
		if (dbs[i].wanted)
		{
			dbs[i].target = 1;
			left--;
		}
	for (int i = 0; i < ndbs && left > 0; i++)
		if (dbs[i].probe)
		{
			dbs[i].target = 1;
			left--;
		}
	while (more && left > 0)
	{
		more = false;
		for (int i = 0; i < ndbs && left > 0; i++)
			if (dbs[i].wanted && dbs[i].target < grelout_workers)
			{
				dbs[i].target++;
				left--;
				more = true;
			}
	}
	more = true;
	while (more && left > 0)
	{
		more = false;
		for (int i = 0; i < ndbs && left > 0; i++)
			if (dbs[i].wanted && dbs[i].target >= grelout_workers &&
				dbs[i].target < dbs[i].want)
			{
				dbs[i].target++;
				left--;
				more = true;
			}
	}
	for (int i = 0; i < ndbs; i++)
		dbs[i].want = (dbs[i].wanted && dbs[i].want > grelout_workers) ?
			Min(dbs[i].want, dbs[i].target) : 0;
	log_unserved();
}

/*
 * take_news: what backends told the launcher since its last turn: a
 * rescan wanted, databases given the extension.  Returns whether to
 * rescan.
 */
static bool
take_news(void)
{
	Oid			pokes[GRELOUT_MAX_POKES];
	int			npokes;
	bool		overflowed;
	bool		rescan;

	SpinLockAcquire(&grelout_shared->mutex);
	rescan = grelout_shared->rescan;
	grelout_shared->rescan = false;
	npokes = grelout_shared->npokes;
	memcpy(pokes, grelout_shared->pokes, sizeof(Oid) * npokes);
	grelout_shared->npokes = 0;
	overflowed = grelout_shared->pokes_overflowed;
	grelout_shared->pokes_overflowed = false;
	SpinLockRelease(&grelout_shared->mutex);

	for (int i = 0; i < ndbs; i++)
	{
		bool		poked = overflowed;

		for (int j = 0; j < npokes; j++)
			if (pokes[j] == dbs[i].oid)
				poked = true;
		if (!poked)
			continue;
		if (overflowed && dbs[i].ext == EXT_NO)
			dbs[i].ext = EXT_UNKNOWN;	/* not known which: look again */
		else if (!overflowed)
			dbs[i].ext = EXT_YES;
		/* a relay finding none now may have looked before the commit */
		dbs[i].reprobe = true;
	}
	/* a database the last scan did not see: scan again */
	for (int j = 0; j < npokes; j++)
		if (find_db(pokes[j]) == NULL)
			rescan = true;
	return rescan;
}

/*
 * asides_now: the databases that commands in progress want the relays out
 * of; an entry whose backend is gone without clearing it is cleared.
 */
static int
asides_now(Oid *out)
{
	int			n = 0;

	SpinLockAcquire(&grelout_shared->mutex);
	for (int i = 0; i < GRELOUT_MAX_ASIDE; i++)
	{
		GreloutAside *a = &grelout_shared->asides[i];

		if (!OidIsValid(a->dboid))
			continue;
		if (GetPGProcByNumber(a->pgprocno)->pid != a->pid)
		{
			a->dboid = InvalidOid;
			continue;
		}
		out[n++] = a->dboid;
	}
	SpinLockRelease(&grelout_shared->mutex);
	return n;
}

/*
 * db_entry_for: the shared entry of a wanted database, taken when free;
 * -1 when every entry is in use.
 */
static int
db_entry_for(const LauncherDb *d)
{
	int			free_entry = -1;
	int			found = -1;

	SpinLockAcquire(&grelout_shared->mutex);
	for (int i = 0; i < grelout_shared->ndbs; i++)
	{
		GreloutDbEntry *e = &grelout_shared->dbs[i];

		if (e->oid == d->oid)
			found = i;
		else if (!OidIsValid(e->oid) && free_entry < 0)
			free_entry = i;
	}
	if (found < 0 && free_entry >= 0)
	{
		found = free_entry;
		grelout_shared->dbs[found].oid = d->oid;
		pg_atomic_write_u32(&grelout_shared->dbs[found].leases_recovered,
							LEASES_TO_RECOVER);
		pg_atomic_write_u64(&grelout_shared->dbs[found].backlog_due_at, 0);
	}
	if (found >= 0)
	{
		strlcpy(grelout_shared->dbs[found].name, d->name, NAMEDATALEN);
		grelout_shared->dbs[found].unserved = (d->wanted && d->target == 0);
	}
	SpinLockRelease(&grelout_shared->mutex);
	return found;
}

/*
 * update_db_entries: name and unserved flag of every wanted database;
 * free the entries of databases no longer wanted and left by their relays.
 */
static void
update_db_entries(void)
{
	for (int i = 0; i < ndbs; i++)
		if (dbs[i].wanted || dbs[i].target > 0)
			(void) db_entry_for(&dbs[i]);

	for (int i = 0; i < grelout_shared->ndbs; i++)
	{
		GreloutDbEntry *e = &grelout_shared->dbs[i];
		LauncherDb *d = find_db(e->oid);
		bool		used = false;

		if (!OidIsValid(e->oid) || (d && (d->wanted || d->target > 0)))
			continue;
		for (int s = 0; s < grelout_shared->nslots; s++)
			if (grelout_shared->slots[s].state != SLOT_FREE &&
				grelout_shared->slots[s].db_entry == i &&
				grelout_shared->slots[s].dboid == e->oid)
				used = true;
		if (used)
			continue;
		SpinLockAcquire(&grelout_shared->mutex);
		e->oid = InvalidOid;
		e->unserved = false;
		e->name[0] = '\0';
		SpinLockRelease(&grelout_shared->mutex);
	}
}

/*
 * grelout_am_relay: whether this process is a relay (a background worker
 * that start_relay registered), for what a relay's statements fire: a
 * handler the relay disables is disabled for its breaker
 * (handler_health.c).
 */
bool
grelout_am_relay(void)
{
	return MyBgworkerEntry != NULL &&
		strcmp(MyBgworkerEntry->bgw_library_name, RELAY_LIBRARY) == 0 &&
		strcmp(MyBgworkerEntry->bgw_function_name, RELAY_FUNCTION) == 0;
}

/*
 * start_relay: register the relay of slot i, which the caller assigned;
 * on failure (no background worker slot) the slot is left exited and the
 * launcher tries again later.
 */
static bool
start_relay(int i, const LauncherDb *d)
{
	GreloutRelaySlot *slot = &grelout_shared->slots[i];
	BackgroundWorker worker;
	MemoryContext old;
	bool		registered;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, RELAY_LIBRARY);
	snprintf(worker.bgw_function_name, BGW_MAXLEN, RELAY_FUNCTION);
	snprintf(worker.bgw_name, BGW_MAXLEN, "grelout relay %d of database %s",
			 slot->relay, d->name);
	snprintf(worker.bgw_type, BGW_MAXLEN, "grelout relay");
	worker.bgw_main_arg = Int32GetDatum(i);
	worker.bgw_notify_pid = MyProcPid;

	if (handles[i])
	{
		pfree(handles[i]);
		handles[i] = NULL;
	}
	/* the handle outlives the turn */
	old = MemoryContextSwitchTo(TopMemoryContext);
	registered = RegisterDynamicBackgroundWorker(&worker, &handles[i]);
	MemoryContextSwitchTo(old);
	if (!registered)
	{
		SpinLockAcquire(&slot->mutex);
		slot->state = SLOT_EXITED;
		SpinLockRelease(&slot->mutex);
		exited_at[i] = GetCurrentTimestamp();
		register_retry_at = TimestampTzPlusMilliseconds(exited_at[i], REGISTER_RETRY_MS);
		if (!logged_no_worker)
			ereport(WARNING,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("grelout could not start a relay for database \"%s\": no background worker slot is free",
							d->name),
					 errhint("Raise max_worker_processes (a restart): it must leave room for the relays and their launcher, besides parallel workers.")));
		logged_no_worker = true;
		return false;
	}
	logged_no_worker = false;
	stop_sent[i] = false;
	adopted_at[i] = 0;
	return true;
}

/*
 * look_at_slot: note a relay's exit (and what it found of the extension),
 * a registered relay that never started, and stop a relay no longer
 * wanted.  Returns the slot's state after that.
 */
static int
look_at_slot(int i, const Oid *asides, int nasides, TimestampTz now)
{
	GreloutRelaySlot *slot = &grelout_shared->slots[i];
	int			state;
	Oid			dboid;
	int			relay;
	int			pid;
	bool		no_extension;
	bool		found;
	bool		retiring;
	LauncherDb *d;
	pid_t		bgpid;
	bool		never_started;

	/* a relay registered that the postmaster could not start, or gone */
	never_started = handles[i] ?
		(GetBackgroundWorkerPid(handles[i], &bgpid) == BGWH_STOPPED) :
		(adopted_at[i] != 0 &&
		 TimestampDifferenceExceeds(adopted_at[i], now, ADOPTED_START_MS));

	SpinLockAcquire(&slot->mutex);
	if (slot->state == SLOT_STARTING && never_started)
		slot->state = SLOT_EXITED;
	state = slot->state;
	dboid = slot->dboid;
	relay = slot->relay;
	pid = slot->pid;
	no_extension = slot->no_extension;
	found = slot->extension_found;
	retiring = slot->retire_requested;
	SpinLockRelease(&slot->mutex);

	if (state == SLOT_FREE)
		return state;
	d = find_db(dboid);
	if (d && found && state == SLOT_RUNNING && grelout_database_all())
		d->ext = EXT_YES;
	if (state == SLOT_EXITED && exited_at[i] == 0)
	{
		exited_at[i] = now;
		if (d && no_extension && grelout_database_all())
		{
			/* told of a CREATE EXTENSION since: it looked too early */
			if (!d->reprobe)
				d->ext = EXT_NO;
			else
				exited_at[i] = TimestampTzPlusMilliseconds(now, -RELAY_RESTART_MS);
			d->reprobe = false;
		}
	}
	if (state == SLOT_EXITED)
		return state;
	exited_at[i] = 0;

	if (d && relay <= d->target && !launcher_in_oids(dboid, asides, nasides))
		return state;
	/* an extra relay retiring finishes its requests and exits by itself */
	if (d && d->wanted && retiring && !launcher_in_oids(dboid, asides, nasides))
		return state;
	/* no longer wanted here: its own stop hands back its claims */
	SpinLockAcquire(&slot->mutex);
	slot->stop_requested = true;
	pid = slot->pid;
	SpinLockRelease(&slot->mutex);

	/*
	 * The backend that wants the database free signals its relays itself;
	 * a second SIGTERM would cancel the settle that hands the claims back.
	 */
	if (launcher_in_oids(dboid, asides, nasides))
		return state;
	if (pid != 0 && !stop_sent[i])
	{
		kill(pid, SIGTERM);
		stop_sent[i] = true;
	}
	return state;
}

/*
 * slot_for: the slot of relay n of database d (running, starting or
 * exited), else a free one, else -1.
 */
static int
slot_for(const LauncherDb *d, int n, bool *is_new)
{
	int			free_slot = -1;

	for (int i = 0; i < grelout_shared->nslots; i++)
	{
		GreloutRelaySlot *slot = &grelout_shared->slots[i];

		if (slot->state == SLOT_FREE)
		{
			if (free_slot < 0)
				free_slot = i;
		}
		else if (slot->dboid == d->oid && slot->relay == n)
		{
			*is_new = false;
			return i;
		}
	}
	*is_new = true;
	return free_slot;
}

/*
 * reconcile: stop what is not wanted, free the slots of relays gone for
 * good, start the relays missing (none in the databases of asides);
 * returns ms until a relay is due to start again (or -1).
 */
static long
reconcile(const Oid *asides, int nasides)
{
	TimestampTz now = GetCurrentTimestamp();
	long		next = -1;

	for (int i = 0; i < grelout_shared->nslots; i++)
	{
		GreloutRelaySlot *slot = &grelout_shared->slots[i];
		LauncherDb *d;

		if (look_at_slot(i, asides, nasides, now) != SLOT_EXITED)
			continue;
		d = find_db(slot->dboid);
		if (d && slot->relay <= d->target)
			continue;
		/* its database is no longer served by this relay: reset the slot */
		SpinLockAcquire(&slot->mutex);
		slot->state = SLOT_FREE;
		slot->dboid = InvalidOid;
		slot->relay = 0;
		slot->delivered = slot->retried = slot->dead = 0;
		slot->cycles = slot->cycle_errors = slot->cycle_us = 0;
		slot->spans_exported = slot->spans_dropped = 0;
		slot->settle_us = slot->claim_us = 0;
		slot->last_error_at = 0;
		slot->last_error[0] = '\0';
		slot->started_at = 0;
		slot->activity[0] = '\0';
		slot->retire_requested = false;
		slot->saturated = false;
		slot->saturated_at = 0;
		SpinLockRelease(&slot->mutex);
		exited_at[i] = 0;
	}

	update_db_entries();
	if (!role_ok)
		return -1;

	for (int k = 0; k < ndbs; k++)
	{
		LauncherDb *d = &dbs[k];

		if (d->target == 0 || launcher_in_oids(d->oid, asides, nasides))
			continue;
		for (int n = 1; n <= d->target; n++)
		{
			bool		is_new;
			int			i = slot_for(d, n, &is_new);
			GreloutRelaySlot *slot;
			int			entry;

			if (i < 0)
				break;			/* a stopping relay still holds its slot */
			slot = &grelout_shared->slots[i];
			if (!is_new && slot->state != SLOT_EXITED)
				continue;
			if (!is_new)
			{
				TimestampTz due = TimestampTzPlusMilliseconds(exited_at[i], RELAY_RESTART_MS);

				if (now < due)
				{
					long		ms = (long) ((due - now) / 1000) + 1;

					next = (next < 0) ? ms : Min(next, ms);
					continue;
				}
			}
			if (now < register_retry_at)
			{
				long		ms = (long) ((register_retry_at - now) / 1000) + 1;

				next = (next < 0) ? ms : Min(next, ms);
				continue;
			}
			entry = db_entry_for(d);
			if (entry < 0)
				break;
			SpinLockAcquire(&slot->mutex);
			slot->state = SLOT_STARTING;
			slot->dboid = d->oid;
			slot->db_entry = entry;
			slot->relay = n;
			slot->roleoid = role_oid;
			slot->stop_requested = false;
			slot->no_extension = false;
			slot->extension_found = false;
			slot->retire_requested = false;
			slot->saturated = false;
			SpinLockRelease(&slot->mutex);
			if (!start_relay(i, d))
			{
				/* an extra relay is given up: the database goes on without */
				if (n > grelout_workers)
					d->want = n - 1;
				return REGISTER_RETRY_MS;
			}
		}
	}
	return next;
}

/*
 * launcher_sigint: pg_cancel_backend().  While the launcher reads
 * pg_database it cancels that read, as a backend's statement is cancelled;
 * at any other time there is no statement to cancel, and the launcher only
 * wakes.  (PostgreSQL's handler for a background worker with a database
 * connection would raise the cancel at the next CHECK_FOR_INTERRUPTS,
 * wherever it is, and the launcher would exit.)
 */
static void
launcher_sigint(SIGNAL_ARGS)
{
	int			save_errno = errno;

	if (in_scan)
	{
		InterruptPending = true;
		QueryCancelPending = true;
	}
	SetLatch(MyLatch);
	errno = save_errno;
}

/* launcher_detach: the launcher exits: backends stop setting its latch. */
static void
launcher_detach(int code, Datum arg)
{
	SpinLockAcquire(&grelout_shared->mutex);
	grelout_shared->launcher_pgprocno = -1;
	SpinLockRelease(&grelout_shared->mutex);
}

/*
 * launcher_attach: take the launcher's place in shared memory and adopt
 * the relays an earlier launcher started.
 */
static void
launcher_attach(void)
{
	int			n = grelout_shared->nslots;
	TimestampTz now = GetCurrentTimestamp();

	handles = MemoryContextAllocZero(TopMemoryContext, sizeof(void *) * n);
	exited_at = MemoryContextAllocZero(TopMemoryContext, sizeof(TimestampTz) * n);
	adopted_at = MemoryContextAllocZero(TopMemoryContext, sizeof(TimestampTz) * n);
	stop_sent = MemoryContextAllocZero(TopMemoryContext, sizeof(bool) * n);
	for (int i = 0; i < n; i++)
		if (grelout_shared->slots[i].state == SLOT_STARTING)
			adopted_at[i] = now;

	SpinLockAcquire(&grelout_shared->mutex);
	grelout_shared->launcher_pgprocno = grelout_procno(MyProc);
	grelout_shared->rescan = true;
	SpinLockRelease(&grelout_shared->mutex);
	on_shmem_exit(launcher_detach, 0);
}

/*
 * grelout_launcher_main: entry point of the launcher; never returns.  A
 * SIGTERM (shutdown, pg_terminate_backend) ends it quietly, with exit code
 * 1: the postmaster starts it again unless the server is shutting down.
 * The relays run on meanwhile; the next launcher adopts them.  A SIGINT
 * (pg_cancel_backend) cancels at most its read of pg_database
 * (launcher_sigint).
 */
void
grelout_launcher_main(Datum arg)
{
	MemoryContext turn_cxt;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGINT, launcher_sigint);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("grelout launcher");
	launcher_attach();
	turn_cxt = AllocSetContextCreate(TopMemoryContext, "grelout launcher turn",
									 ALLOCSET_DEFAULT_SIZES);

	for (;;)
	{
		long		timeout = RESCAN_MS;
		long		restart_in;
		bool		rescan;
		Oid			asides[GRELOUT_MAX_ASIDE];
		int			nasides;

		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ShutdownRequestPending)
			proc_exit(1);
		MemoryContextSwitchTo(turn_cxt);
		MemoryContextReset(turn_cxt);

		/*
		 * The asides first: a backend asks for a rescan before it clears
		 * its entry, so a database the entry kept out is either still kept
		 * out or read again (dropped, say) in this turn's scan.
		 */
		nasides = asides_now(asides);
		rescan = take_news();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			rescan = true;
		}
		if (rescan || dbs == NULL || scan_cancelled ||
			TimestampDifferenceExceeds(last_scan, GetCurrentTimestamp(), RESCAN_MS))
			(void) scan_databases_cancellable();
		if (scan_cancelled)
			timeout = SCAN_RETRY_MS;

		/* with no complete read yet, adopted relays are left as they are */
		if (dbs != NULL)
		{
			choose_wanted();
			if (!elastic_adopted)
				elastic_adopt(dbs, ndbs);
			elastic_adopted = true;
			share_relays();
			if (elastic_turn(dbs, ndbs, asides, nasides, &timeout))
				share_relays();
			restart_in = reconcile(asides, nasides);
			if (restart_in >= 0)
				timeout = Min(timeout, restart_in);
		}

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout, PG_WAIT_EXTENSION);
	}
}
