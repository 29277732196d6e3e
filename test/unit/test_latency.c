/*-------------------------------------------------------------------------
 *
 * test_latency.c
 *	  Unit tests of src/pure/latency.c: which bucket of the latency
 *	  histogram a latency falls in (bounds inclusive, as Prometheus' "le"),
 *	  and the publish time read back from a UUIDv7 message id, refused
 *	  for other versions and variants.  Prints TAP.
 *
 *-------------------------------------------------------------------------
 */
#include "latency.h"
#include "tap.h"

int
main(void)
{
	uint8_t		id[16] = {0x01, 0x8f, 0x3c, 0x2a, 0x10, 0x05, 0x71, 0x23,
	0x9a, 1, 2, 3, 4, 5, 6, 7};
	int64_t		ms = 0;

	is_int(latency_bucket(0), 0, "0 ms: first bucket");
	is_int(latency_bucket(-20), 0, "a negative latency (clock stepped back): first bucket");
	is_int(latency_bucket(5), 0, "5 ms: le 5 (bounds inclusive)");
	is_int(latency_bucket(6), 1, "6 ms: le 10");
	is_int(latency_bucket(1000), 7, "1000 ms: le 1000");
	is_int(latency_bucket(1001), 8, "1001 ms: le 2500");
	is_int(latency_bucket(60000), LATENCY_BOUNDS - 1, "60 s: the last finite bucket");
	is_int(latency_bucket(60001), LATENCY_BOUNDS, "over 60 s: +Inf");
	for (int i = 1; i < LATENCY_BOUNDS; i++)
		if (latency_bounds_ms[i] <= latency_bounds_ms[i - 1])
			ok(0, "bounds increase at %d", i);
	ok(1, "bounds increase");

	ok(latency_uuid7_ms(id, &ms), "a UUIDv7 gives its time");
	ok(ms == INT64_C(0x018f3c2a1005), "its first 48 bits, big-endian");
	id[6] = 0x41;
	ok(!latency_uuid7_ms(id, &ms), "a UUIDv4 gives none");
	id[6] = 0x71;
	id[8] = 0xda;
	ok(!latency_uuid7_ms(id, &ms), "another variant gives none");
	return done_testing();
}
