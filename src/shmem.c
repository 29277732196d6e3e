/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  Shared memory of grelout: one slot a relay, holding the latch that a
 *	  committing publisher sets to wake it and the live counters that the
 *	  grelout.relays view reads, and the stamp that keeps message ids
 *	  monotonic over the whole server (ids.c).
 *
 *-------------------------------------------------------------------------
 */
#include "shmem.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

GreloutShared *grelout_shared = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

PG_FUNCTION_INFO_V1(grelout_relay_stats);

/* shared_size: bytes needed for the relays' slots. */
static Size
shared_size(void)
{
	return add_size(offsetof(GreloutShared, slots),
					mul_size(Max(grelout_workers, 1), sizeof(GreloutRelaySlot)));
}

/* grelout_shmem_request: ask the postmaster for our share of memory. */
static void
grelout_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(shared_size());
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
		grelout_shared->nslots = Max(grelout_workers, 1);
		pg_atomic_init_u32(&grelout_shared->leases_recovered, 0);
		pg_atomic_init_u64(&grelout_shared->last_id_stamp, 0);
		for (int i = 0; i < grelout_shared->nslots; i++)
		{
			GreloutRelaySlot *slot = &grelout_shared->slots[i];

			memset(slot, 0, sizeof(GreloutRelaySlot));
			SpinLockInit(&slot->mutex);
			slot->pgprocno = -1;
		}
	}
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
 * grelout_wake_relays: set the latch of every running relay.  Called after a
 * commit that published or redrove, so a sleeping relay claims at once.
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
		int			procno = grelout_shared->slots[i].pgprocno;

		pg_read_barrier();
		if (procno >= 0)
			SetLatch(&ProcGlobal->allProcs[procno].procLatch);
	}
}

/* slot_detach: on relay exit, the slot no longer names a process. */
static void
slot_detach(int code, Datum arg)
{
	GreloutRelaySlot *slot = (GreloutRelaySlot *) DatumGetPointer(arg);

	SpinLockAcquire(&slot->mutex);
	slot->pgprocno = -1;
	slot->pid = 0;
	slot->in_flight = 0;
	strlcpy(slot->activity, "stopped", sizeof(slot->activity));
	SpinLockRelease(&slot->mutex);
}

/*
 * grelout_slot_attach: a starting relay takes its slot.  Counters are kept
 * across restarts of the relay; they reset when the server restarts.
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
	slot->pgprocno = MyProc->pgprocno;
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
 * grelout_relay_stats: one row a relay slot, copied under its spinlock.
 */
Datum
grelout_relay_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	if (grelout_shared == NULL)
		PG_RETURN_VOID();

	for (int i = 0; i < grelout_shared->nslots; i++)
	{
		GreloutRelaySlot copy;
		Datum		values[10];
		bool		nulls[10] = {0};

		SpinLockAcquire(&grelout_shared->slots[i].mutex);
		memcpy(&copy, &grelout_shared->slots[i], sizeof(copy));
		SpinLockRelease(&grelout_shared->slots[i].mutex);

		if (i >= grelout_workers)
			continue;

		values[0] = Int32GetDatum(i + 1);
		if (copy.pid != 0)
			values[1] = Int32GetDatum(copy.pid);
		else
			nulls[1] = true;
		values[2] = CStringGetTextDatum(copy.activity[0] ? copy.activity : "not started");
		values[3] = Int32GetDatum(copy.in_flight);
		values[4] = Int64GetDatum((int64) copy.delivered);
		values[5] = Int64GetDatum((int64) copy.retried);
		values[6] = Int64GetDatum((int64) copy.dead);
		if (copy.last_error_at != 0)
		{
			values[7] = CStringGetTextDatum(copy.last_error);
			values[8] = TimestampTzGetDatum(copy.last_error_at);
		}
		else
			nulls[7] = nulls[8] = true;
		if (copy.started_at != 0)
			values[9] = TimestampTzGetDatum(copy.started_at);
		else
			nulls[9] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	PG_RETURN_VOID();
}
