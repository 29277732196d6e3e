/*-------------------------------------------------------------------------
 *
 * ids.c
 *	  Message ids: time-ordered UUIDv7 (RFC 9562), monotonic over the whole
 *	  server (all backends), without a lock.
 *
 * Layout: 48 bits of Unix milliseconds, the version (7), 12 bits of
 * sub-millisecond counter (rand_a), the variant (0b10) and 62 random bits.
 * The counter starts at a random value below 2048 in each new millisecond
 * and is incremented for ids made within the same millisecond, by any
 * backend: the last (milliseconds, counter) stamp is shared (shmem.c) and
 * advanced by compare-and-swap.  If the counter overflows, or the clock
 * steps back, the timestamp is advanced by one millisecond, so ids made on
 * the server always sort in the order they were made (from the server's
 * start; a clock stepped back across a restart can break that).  Per-key
 * ordering relies on it: a message published after another one's commit
 * was visible has the greater id.
 *
 *-------------------------------------------------------------------------
 */
#include "grelout.h"

#include <sys/time.h>

#include "port.h"
#include "shmem.h"

/* Random bytes drawn in bulk, to avoid a system call per id. */
#define RANDOM_POOL_SIZE	1024

static uint8 random_pool[RANDOM_POOL_SIZE];
static int	random_pool_used = RANDOM_POOL_SIZE;

/* The last stamp this backend made, when there is no shared memory. */
static uint64 local_last_stamp = 0;

/* take_random: copy n fresh random bytes out of the pool. */
static void
take_random(uint8 *dst, int n)
{
	Assert(n <= RANDOM_POOL_SIZE);
	if (random_pool_used + n > RANDOM_POOL_SIZE)
	{
		if (!pg_strong_random(random_pool, RANDOM_POOL_SIZE))
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not generate random bytes for a message id")));
		random_pool_used = 0;
	}
	memcpy(dst, random_pool + random_pool_used, n);
	random_pool_used += n;
}

/*
 * next_stamp: the stamp (milliseconds << 12 | counter) of a new id: the
 * proposed one, or one more than the last stamp of the server if that is
 * not below it.  A compare-and-swap on the shared stamp, so no publisher
 * ever waits for another: two backends racing for the same millisecond
 * get consecutive stamps.  A counter overflow carries into the
 * milliseconds.
 */
static uint64
next_stamp(uint64 proposed)
{
	uint64		old;
	uint64		next;

	if (grelout_shared == NULL)
	{
		/* not preloaded (no publisher can get here then): this backend's */
		next = proposed > local_last_stamp ? proposed : local_last_stamp + 1;
		local_last_stamp = next;
		return next;
	}
	old = pg_atomic_read_u64(&grelout_shared->last_id_stamp);
	for (;;)
	{
		next = proposed > old ? proposed : old + 1;
		if (pg_atomic_compare_exchange_u64(&grelout_shared->last_id_stamp,
										   &old, next))
			return next;
	}
}

/*
 * grelout_uuid7: fill *uuid with a new UUIDv7 greater than any made before
 * on this server since it started.
 */
void
grelout_uuid7(pg_uuid_t *uuid)
{
	struct timeval tv;
	uint64		ms;
	uint64		stamp;
	uint16		counter;
	uint8		rnd[10];

	gettimeofday(&tv, NULL);
	ms = (uint64) tv.tv_sec * 1000 + tv.tv_usec / 1000;
	take_random(rnd, sizeof(rnd));

	/* a new millisecond starts its counter at a random value below 2048 */
	stamp = next_stamp(ms << 12 | (((uint16) rnd[8] << 8 | rnd[9]) & 0x07FF));
	ms = stamp >> 12;
	counter = (uint16) (stamp & 0x0FFF);

	uuid->data[0] = (uint8) (ms >> 40);
	uuid->data[1] = (uint8) (ms >> 32);
	uuid->data[2] = (uint8) (ms >> 24);
	uuid->data[3] = (uint8) (ms >> 16);
	uuid->data[4] = (uint8) (ms >> 8);
	uuid->data[5] = (uint8) ms;
	uuid->data[6] = 0x70 | (uint8) (counter >> 8);
	uuid->data[7] = (uint8) counter;
	uuid->data[8] = 0x80 | (rnd[0] & 0x3F);
	memcpy(&uuid->data[9], &rnd[1], 7);
}
