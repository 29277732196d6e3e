/*-------------------------------------------------------------------------
 *
 * latency.h
 *	  The commit-to-delivery latency histogram of grelout.metrics(): its
 *	  fixed bucket bounds, the bucket of a latency, and the publish time a
 *	  message id (a UUIDv7, ids.c) carries.  Plain C, no PostgreSQL header
 *	  (test/unit/test_latency.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_LATENCY_H
#define GRELOUT_LATENCY_H

#include <stdbool.h>
#include <stdint.h>

/* Finite upper bounds, in milliseconds; one more bucket is +Inf. */
#define LATENCY_BOUNDS		12
#define LATENCY_BUCKETS		(LATENCY_BOUNDS + 1)

extern const int64_t latency_bounds_ms[LATENCY_BOUNDS];

extern int	latency_bucket(int64_t ms);
extern bool latency_uuid7_ms(const uint8_t id[16], int64_t *unix_ms);

#endif							/* GRELOUT_LATENCY_H */
