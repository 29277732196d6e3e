/*-------------------------------------------------------------------------
 *
 * shmem.h
 *	  Shared memory of the relays: one slot a relay (its latch, its live
 *	  counters for grelout.relays), the lease recovery flag and the stamp
 *	  of the last message id.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_SHMEM_H
#define GRELOUT_SHMEM_H

#include "grelout.h"

#include "port/atomics.h"
#include "storage/spin.h"

/* One slot a relay, read by grelout.relays */
typedef struct GreloutRelaySlot
{
	slock_t		mutex;
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

typedef struct GreloutShared
{
	/*
	 * Claims made before the server last started are void: every relay that
	 * held them is gone.  The first relay to connect makes them due again
	 * at once, instead of waiting for their leases to lapse, and no relay
	 * claims before that is done.  LEASES_TO_RECOVER, _RECOVERING or
	 * _RECOVERED.
	 */
	pg_atomic_uint32 leases_recovered;

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
extern void grelout_slot_set_activity(GreloutRelaySlot *slot, const char *activity);
extern void grelout_slot_count(GreloutRelaySlot *slot, int delivered, int retried,
							   int dead, int in_flight);
extern void grelout_slot_error(GreloutRelaySlot *slot, const char *error);

#endif							/* GRELOUT_SHMEM_H */
