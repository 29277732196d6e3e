/*-------------------------------------------------------------------------
 *
 * latency.c
 *	  The commit-to-delivery latency histogram's buckets, and the publish
 *	  time read back from a message id.
 *
 * A message id is a UUIDv7 made at publish (ids.c): its first 48 bits are
 * the Unix milliseconds at which the publishing statement made it, inside
 * the publishing transaction, so a delivery's latency is the time from
 * then to its success, without a column more in the claim.  An id that is
 * not a UUIDv7 (none is made so by grelout) gives no time.
 *
 *-------------------------------------------------------------------------
 */
#include "latency.h"

/*
 * The bounds, Prometheus' "le" values in milliseconds: from what a relay
 * woken at commit achieves to what a retried delivery takes.
 */
const int64_t latency_bounds_ms[LATENCY_BOUNDS] = {
	5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 60000
};

/*
 * latency_bucket: the index of the first bucket whose bound is at least
 * ms (a bucket counts latencies <= its bound), LATENCY_BOUNDS for +Inf.  A
 * negative latency (a clock stepped back) counts in the first.
 */
int
latency_bucket(int64_t ms)
{
	for (int i = 0; i < LATENCY_BOUNDS; i++)
		if (ms <= latency_bounds_ms[i])
			return i;
	return LATENCY_BOUNDS;
}

/*
 * latency_uuid7_ms: the Unix milliseconds of a UUIDv7 (version 7, variant
 * 0b10); false for any other UUID.
 */
bool
latency_uuid7_ms(const uint8_t id[16], int64_t *unix_ms)
{
	uint64_t	ms = 0;

	if ((id[6] & 0xF0) != 0x70 || (id[8] & 0xC0) != 0x80)
		return false;
	for (int i = 0; i < 6; i++)
		ms = ms << 8 | id[i];
	*unix_ms = (int64_t) ms;
	return true;
}
