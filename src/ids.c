/*-------------------------------------------------------------------------
 *
 * ids.c
 *	  Message ids: time-ordered UUIDv7 (RFC 9562), monotonic within one
 *	  backend.
 *
 * Layout: 48 bits of Unix milliseconds, the version (7), 12 bits of
 * sub-millisecond counter (rand_a), the variant (0b10) and 62 random bits.
 * The counter starts at a random value below 2048 in each new millisecond
 * and is incremented for ids made within the same millisecond; if it
 * overflows, or the clock steps back, the timestamp is advanced by one
 * millisecond, so successive ids of a backend always sort in creation order.
 *
 *-------------------------------------------------------------------------
 */
#include "grelout.h"

#include <sys/time.h>

#include "port.h"

/* Random bytes drawn in bulk, to avoid a system call per id. */
#define RANDOM_POOL_SIZE	1024

static uint8 random_pool[RANDOM_POOL_SIZE];
static int	random_pool_used = RANDOM_POOL_SIZE;

static uint64 last_ms = 0;
static uint16 last_counter = 0;

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
 * grelout_uuid7: fill *uuid with a new UUIDv7 greater than any this backend
 * made before.
 */
void
grelout_uuid7(pg_uuid_t *uuid)
{
	struct timeval tv;
	uint64		ms;
	uint16		counter;
	uint8		rnd[10];

	gettimeofday(&tv, NULL);
	ms = (uint64) tv.tv_sec * 1000 + tv.tv_usec / 1000;
	take_random(rnd, sizeof(rnd));

	if (ms > last_ms)
		counter = ((uint16) rnd[8] << 8 | rnd[9]) & 0x07FF;
	else
	{
		/* same millisecond, or the clock stepped back: keep order */
		ms = last_ms;
		counter = last_counter + 1;
		if (counter > 0x0FFF)
		{
			ms++;
			counter = 0;
		}
	}
	last_ms = ms;
	last_counter = counter;

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
