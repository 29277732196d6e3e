/*-------------------------------------------------------------------------
 *
 * store.h
 *	  The relay's statements on grelout.outbox: claim, settle, next due
 *	  time and retention purge.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_STORE_H
#define GRELOUT_STORE_H

#include "grelout.h"

#include "executor/spi.h"

/* Columns of a claimed row, in the order store_claim returns them. */
enum
{
	CLAIM_ID = 1,
	CLAIM_TOPIC,
	CLAIM_KEY,
	CLAIM_PAYLOAD,
	CLAIM_HEADERS,
	CLAIM_ATTEMPTS,
	CLAIM_EXHAUSTED,
	CLAIM_MAX_ATTEMPTS,
	CLAIM_URL,
	CLAIM_HANDLER_HEADERS,
	CLAIM_SECRET,
	CLAIM_PREVIOUS_SECRET,
	CLAIM_TIMEOUT,				/* the handler's timeout, an interval */
	CLAIM_LAST_ERROR
};

/* What a relay decided about one message. */
typedef enum SettleState
{
	SETTLE_DELIVERED,
	SETTLE_RETRY,
	SETTLE_DEAD,
	SETTLE_RELEASE				/* unfinished at stop: pending again, attempt given back */
} SettleState;

typedef struct SettleItem
{
	pg_uuid_t	id;
	int64		lease;
	SettleState state;
	int64		delay_ms;		/* SETTLE_RETRY/RELEASE: when to try again */
	char	   *error;			/* NULL for SETTLE_DELIVERED and SETTLE_RELEASE */
} SettleItem;

extern bool store_extension_ready(void);
extern SPITupleTable *store_claim(int limit, int lease_ms, int64 lease_token,
								  int default_max_attempts, bool dead_letter,
								  uint64 *nrows);
extern void store_settle(SettleItem *items, int n, bool keep_delivered);
extern uint64 store_release_stale_leases(void);
extern int64 store_next_due_ms(void);
extern uint64 store_purge_delivered(int64 window_ms, int limit);

#endif							/* GRELOUT_STORE_H */
