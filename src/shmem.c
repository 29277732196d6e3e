/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  Shared memory of grelout: one slot a relay (grelout.max_relays of
 *	  them), holding the database it serves, the latch that a committing
 *	  publisher of that database sets to wake it and the live counters that
 *	  the grelout.relays view reads; one entry a served database; the
 *	  launcher's latch, which backends set to tell it what changed
 *	  (launcher.c, databases.c); and the stamp that keeps message ids
 *	  monotonic over the whole server (ids.c).
 *
 *-------------------------------------------------------------------------
 */
#include "shmem.h"

#include "elastic.h"
#include "fmgr.h"
#include "funcapi.h"
#include "health.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

GreloutShared *grelout_shared = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

PG_FUNCTION_INFO_V1(grelout_relay_stats);
PG_FUNCTION_INFO_V1(grelout_relay_stats_1_1);

/*
 * Database entries: one a relay at most is served at once; the rest show
 * databases left unserved for lack of relays.
 */
#define DB_ENTRIES()	(grelout_max_relays + 32)

/* slots_size: bytes of the header and the relays' slots. */
static Size
slots_size(void)
{
	return add_size(offsetof(GreloutShared, slots),
					mul_size(grelout_max_relays, sizeof(GreloutRelaySlot)));
}

/* shared_size: bytes needed for the slots and the database entries. */
static Size
shared_size(void)
{
	return add_size(MAXALIGN(slots_size()),
					mul_size(DB_ENTRIES(), sizeof(GreloutDbEntry)));
}

/* grelout_shmem_request: ask the postmaster for our share of memory. */
static void
grelout_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(shared_size());
	RequestAddinShmemSpace(health_shmem_size());
	health_shmem_request();
}

/* grelout_shmem_startup: create, or attach to, the relays' slots. */
static void
grelout_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	grelout_shared = ShmemInitStruct("grelout", shared_size(), &found);
	if (!found)
	{
		memset(grelout_shared, 0, offsetof(GreloutShared, slots));
		SpinLockInit(&grelout_shared->mutex);
		grelout_shared->launcher_pgprocno = -1;
		grelout_shared->nslots = grelout_max_relays;
		pg_atomic_init_u64(&grelout_shared->last_id_stamp, 0);
		for (int i = 0; i < grelout_shared->nslots; i++)
		{
			GreloutRelaySlot *slot = &grelout_shared->slots[i];

			memset(slot, 0, sizeof(GreloutRelaySlot));
			SpinLockInit(&slot->mutex);
			pg_atomic_init_u32(&slot->wakes, 0);
			slot->state = SLOT_FREE;
			slot->pgprocno = -1;
		}
		grelout_shared->ndbs = DB_ENTRIES();
		grelout_shared->dbs = (GreloutDbEntry *)
			((char *) grelout_shared + MAXALIGN(slots_size()));
		for (int i = 0; i < grelout_shared->ndbs; i++)
		{
			memset(&grelout_shared->dbs[i], 0, sizeof(GreloutDbEntry));
			pg_atomic_init_u32(&grelout_shared->dbs[i].leases_recovered,
							   LEASES_TO_RECOVER);
			pg_atomic_init_u64(&grelout_shared->dbs[i].backlog_due_at, 0);
		}
	}
	health_shmem_init();
	LWLockRelease(AddinShmemInitLock);
}

/* grelout_shmem_install_hooks: called from _PG_init at preload. */
void
grelout_shmem_install_hooks(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = grelout_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = grelout_shmem_startup;
}

/*
 * grelout_wake_relays: set the latch of every running relay of this
 * backend's database.  Called after a commit that published or redrove, so
 * a sleeping relay claims at once; the relays of other databases sleep on.
 * Not while grelout.relay is off: the relays are paused and would only wake
 * to go back to sleep, a signal and a context switch for every commit; they
 * claim at once when a reload turns them back on.
 */
void
grelout_wake_relays(void)
{
	if (grelout_shared == NULL || !grelout_relay_enabled)
		return;

	for (int i = 0; i < grelout_shared->nslots; i++)
	{
		GreloutRelaySlot *slot = &grelout_shared->slots[i];
		int			procno;

		/* dboid changes only while no relay runs in the slot */
		if (slot->dboid != MyDatabaseId)
			continue;
		procno = slot->pgprocno;
		pg_read_barrier();
		if (procno >= 0)
		{
			/* before the latch: the relay reads it once its latch is reset */
			pg_atomic_fetch_add_u32(&slot->wakes, 1);
			SetLatch(&GetPGProcByNumber(procno)->procLatch);
		}
	}
}

/*
 * grelout_wake_launcher: tell the launcher to look again: at pg_database
 * and the settings (rescan), and at a database in which the extension was
 * just created (extension_in, when valid).
 */
void
grelout_wake_launcher(bool rescan, Oid extension_in)
{
	int			procno;

	if (grelout_shared == NULL)
		return;
	SpinLockAcquire(&grelout_shared->mutex);
	if (rescan)
		grelout_shared->rescan = true;
	if (OidIsValid(extension_in))
	{
		if (grelout_shared->npokes < GRELOUT_MAX_POKES)
			grelout_shared->pokes[grelout_shared->npokes++] = extension_in;
		else
			grelout_shared->pokes_overflowed = true;
	}
	procno = grelout_shared->launcher_pgprocno;
	SpinLockRelease(&grelout_shared->mutex);
	if (procno >= 0)
		SetLatch(&GetPGProcByNumber(procno)->procLatch);
}

/*
 * grelout_aside_pending: does a backend's command want the relays out of
 * this database (databases.c)?
 */
bool
grelout_aside_pending(Oid dboid)
{
	bool		pending = false;

	if (grelout_shared == NULL)
		return false;
	SpinLockAcquire(&grelout_shared->mutex);
	for (int i = 0; i < GRELOUT_MAX_ASIDE; i++)
		if (grelout_shared->asides[i].dboid == dboid)
			pending = true;
	SpinLockRelease(&grelout_shared->mutex);
	return pending;
}

/*
 * grelout_database_served: do the relays serve this database, or is one of
 * them starting or running in it?  (The launcher keeps a database's entry
 * while it wants it served, and takes it before a relay starts there.)
 */
bool
grelout_database_served(Oid dboid)
{
	bool		served = false;

	if (grelout_shared == NULL)
		return false;
	SpinLockAcquire(&grelout_shared->mutex);
	for (int i = 0; i < grelout_shared->ndbs; i++)
		if (grelout_shared->dbs[i].oid == dboid)
			served = true;
	SpinLockRelease(&grelout_shared->mutex);
	for (int i = 0; i < grelout_shared->nslots && !served; i++)
	{
		GreloutRelaySlot *slot = &grelout_shared->slots[i];

		SpinLockAcquire(&slot->mutex);
		served = slot->dboid == dboid &&
			(slot->state == SLOT_STARTING || slot->state == SLOT_RUNNING);
		SpinLockRelease(&slot->mutex);
	}
	return served;
}

/*
 * slot_detach: on relay exit, the slot no longer names a process; the
 * launcher is told, to start another or free the slot.
 */
static void
slot_detach(int code, Datum arg)
{
	GreloutRelaySlot *slot = (GreloutRelaySlot *) DatumGetPointer(arg);

	SpinLockAcquire(&slot->mutex);
	slot->pgprocno = -1;
	slot->pid = 0;
	slot->in_flight = 0;
	if (slot->saturated)
		slot->saturated_at = elastic_now();
	slot->saturated = false;
	slot->state = SLOT_EXITED;
	strlcpy(slot->activity, "stopped", sizeof(slot->activity));
	SpinLockRelease(&slot->mutex);
	grelout_wake_launcher(false, InvalidOid);
}

/*
 * grelout_slot_attach: a starting relay takes the slot the launcher gave
 * it.  Counters are kept across restarts of the relay; they reset when the
 * server restarts or the slot goes to another database.
 */
GreloutRelaySlot *
grelout_slot_attach(int index)
{
	GreloutRelaySlot *slot;

	if (grelout_shared == NULL || index < 0 || index >= grelout_shared->nslots)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("grelout relay slot %d does not exist", index)));

	slot = &grelout_shared->slots[index];
	SpinLockAcquire(&slot->mutex);
	slot->pid = MyProcPid;
	slot->started_at = GetCurrentTimestamp();
	slot->in_flight = 0;
	strlcpy(slot->activity, "starting", sizeof(slot->activity));
	slot->pgprocno = grelout_procno(MyProc);
	slot->state = SLOT_RUNNING;
	SpinLockRelease(&slot->mutex);
	on_shmem_exit(slot_detach, PointerGetDatum(slot));
	return slot;
}

/* grelout_slot_set_activity: what the relay is doing, for grelout.relays. */
void
grelout_slot_set_activity(GreloutRelaySlot *slot, const char *activity)
{
	SpinLockAcquire(&slot->mutex);
	strlcpy(slot->activity, activity, sizeof(slot->activity));
	SpinLockRelease(&slot->mutex);
}

/* grelout_slot_count: add outcomes and set the number in flight. */
void
grelout_slot_count(GreloutRelaySlot *slot, int delivered, int retried,
				   int dead, int in_flight)
{
	SpinLockAcquire(&slot->mutex);
	slot->delivered += delivered;
	slot->retried += retried;
	slot->dead += dead;
	slot->in_flight = in_flight;
	SpinLockRelease(&slot->mutex);
}

/*
 * grelout_slot_spans: count attempt spans the OTLP collector took, and
 * those dropped (spans.c).
 */
void
grelout_slot_spans(GreloutRelaySlot *slot, int exported, int dropped)
{
	SpinLockAcquire(&slot->mutex);
	slot->spans_exported += (uint64) Max(exported, 0);
	slot->spans_dropped += (uint64) Max(dropped, 0);
	SpinLockRelease(&slot->mutex);
}

/*
 * grelout_slot_cycle: count a database cycle, whether it committed, and
 * its time in microseconds: in all, writing the outcomes (settle_us),
 * routing and claiming (claim_us).
 */
void
grelout_slot_cycle(GreloutRelaySlot *slot, bool committed, int64 us,
				   int64 settle_us, int64 claim_us)
{
	SpinLockAcquire(&slot->mutex);
	slot->cycles++;
	if (!committed)
		slot->cycle_errors++;
	slot->cycle_us += (uint64) Max(us, 0);
	slot->settle_us += (uint64) Max(settle_us, 0);
	slot->claim_us += (uint64) Max(claim_us, 0);
	SpinLockRelease(&slot->mutex);
}

/*
 * grelout_slot_extension: whether the relay found the extension in its
 * database, for the launcher ('*' serves only databases with it).
 */
void
grelout_slot_extension(GreloutRelaySlot *slot, bool found)
{
	SpinLockAcquire(&slot->mutex);
	slot->extension_found = found;
	slot->no_extension = !found;
	SpinLockRelease(&slot->mutex);
	grelout_wake_launcher(false, InvalidOid);
}

/*
 * grelout_slot_saturated: the relay became saturated, or no longer is
 * (elastic.h); the launcher is told when it becomes saturated, to add a
 * relay to its database.
 */
void
grelout_slot_saturated(GreloutRelaySlot *slot, bool saturated)
{
	int64		now = elastic_now();

	SpinLockAcquire(&slot->mutex);
	slot->saturated = saturated;
	slot->saturated_at = now;
	SpinLockRelease(&slot->mutex);
	if (saturated)
		grelout_wake_launcher(false, InvalidOid);
}

/* grelout_slot_retiring: has the launcher asked this relay to retire? */
bool
grelout_slot_retiring(GreloutRelaySlot *slot)
{
	bool		retiring;

	SpinLockAcquire(&slot->mutex);
	retiring = slot->retire_requested;
	SpinLockRelease(&slot->mutex);
	return retiring;
}

/* grelout_slot_error: remember the last delivery error and its time. */
void
grelout_slot_error(GreloutRelaySlot *slot, const char *error)
{
	TimestampTz now = GetCurrentTimestamp();

	SpinLockAcquire(&slot->mutex);
	strlcpy(slot->last_error, error, sizeof(slot->last_error));
	slot->last_error_at = now;
	SpinLockRelease(&slot->mutex);
}

/*
 * relay_row: the columns of grelout.relays for one slot copy (values[0..9]),
 * with the database's name as values[10] when with_database.
 */
static void
relay_row(ReturnSetInfo *rsinfo, const GreloutRelaySlot *copy,
		  bool with_database)
{
	Datum		values[11];
	bool		nulls[11] = {0};

	values[0] = Int32GetDatum(copy->relay);
	if (copy->pid != 0)
		values[1] = Int32GetDatum(copy->pid);
	else
		nulls[1] = true;
	values[2] = CStringGetTextDatum(copy->activity[0] ? copy->activity : "not started");
	values[3] = Int32GetDatum(copy->in_flight);
	values[4] = Int64GetDatum((int64) copy->delivered);
	values[5] = Int64GetDatum((int64) copy->retried);
	values[6] = Int64GetDatum((int64) copy->dead);
	if (copy->last_error_at != 0)
	{
		values[7] = CStringGetTextDatum(copy->last_error);
		values[8] = TimestampTzGetDatum(copy->last_error_at);
	}
	else
		nulls[7] = nulls[8] = true;
	if (copy->started_at != 0)
		values[9] = TimestampTzGetDatum(copy->started_at);
	else
		nulls[9] = true;
	if (with_database)
	{
		NameData	name;
		const GreloutDbEntry *db = &grelout_shared->dbs[copy->db_entry];

		SpinLockAcquire(&grelout_shared->mutex);
		namestrcpy(&name, db->oid == copy->dboid ? db->name : "");
		SpinLockRelease(&grelout_shared->mutex);
		values[10] = NameGetDatum(&name);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		return;
	}
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * relay_rows: one row a relay slot in use, copied under its spinlock, in
 * slot order; every database's, or only this database's.  A relay's last
 * error (and its time) is shown only in the database it serves: with a
 * database per tenant, an error may quote one tenant's endpoint or its
 * answer, which another tenant must not read.
 */
static void
relay_rows(ReturnSetInfo *rsinfo, bool all_databases)
{
	for (int i = 0; i < grelout_shared->nslots; i++)
	{
		GreloutRelaySlot copy;

		SpinLockAcquire(&grelout_shared->slots[i].mutex);
		memcpy(&copy, &grelout_shared->slots[i], sizeof(copy));
		SpinLockRelease(&grelout_shared->slots[i].mutex);

		if (copy.state == SLOT_FREE ||
			(!all_databases && copy.dboid != MyDatabaseId))
			continue;
		if (copy.dboid != MyDatabaseId)
		{
			copy.last_error[0] = '\0';
			copy.last_error_at = 0;
		}
		relay_row(rsinfo, &copy, all_databases);
	}
}

/*
 * grelout_relay_stats: grelout.relay_stats() of the 1.0 schema: one row a
 * relay of this database, as 1.0 showed its relays.
 */
Datum
grelout_relay_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	if (grelout_shared != NULL)
		relay_rows(rsinfo, false);
	PG_RETURN_VOID();
}

/*
 * grelout_relay_stats_1_1: grelout.relay_stats_by_database(): one row a
 * relay of every served database, with the database, then one row (relay
 * and pid null) a database left unserved for lack of relays.
 */
Datum
grelout_relay_stats_1_1(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	if (grelout_shared == NULL)
		PG_RETURN_VOID();
	relay_rows(rsinfo, true);
	for (int i = 0; i < grelout_shared->ndbs; i++)
	{
		GreloutDbEntry *db = &grelout_shared->dbs[i];
		Datum		values[11] = {0};
		bool		nulls[11] = {0};
		NameData	name;
		bool		unserved;

		SpinLockAcquire(&grelout_shared->mutex);
		unserved = OidIsValid(db->oid) && db->unserved;
		namestrcpy(&name, db->name);
		SpinLockRelease(&grelout_shared->mutex);
		if (!unserved)
			continue;
		nulls[0] = nulls[1] = true;
		values[2] = CStringGetTextDatum("unserved: every relay of grelout.max_relays is in use");
		for (int c = 3; c <= 6; c++)
			values[c] = Int64GetDatum(0);
		values[3] = Int32GetDatum(0);
		nulls[7] = nulls[8] = nulls[9] = true;
		values[10] = NameGetDatum(&name);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	PG_RETURN_VOID();
}
