/*-------------------------------------------------------------------------
 *
 * store.h
 *	  The relay's statements on grelout.outbox and grelout.fanout: the
 *	  schema version, routing (routing.c), claim, settle and finalize, next
 *	  due time, lease recovery and retention purge (store.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_STORE_H
#define GRELOUT_STORE_H

#include "grelout.h"
#include "constants.h"

#include "executor/spi.h"
#include "nodes/pg_list.h"

/* Columns of a claimed row, in the order store_claim and store_route return them. */
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
	CLAIM_LAST_ERROR,
	CLAIM_HANDLER,				/* the handler's name; NULL on a 1.0 schema */
	CLAIM_FANOUT				/* a grelout.fanout row, not an inline one */
};

/* the advisory lock keys: constants.h */

/* The installed grelout schema, as the relay's statements need it. */
typedef enum StoreSchema
{
	STORE_SCHEMA_NONE,			/* not installed */
	STORE_SCHEMA_1_0,			/* 1.0: a handler per topic, inline rows only */
	STORE_SCHEMA_1_1			/* 1.1: routing, inline and fan-out deliveries */
} StoreSchema;

/* What a relay decided about one message. */
typedef enum SettleState
{
	SETTLE_DELIVERED,
	SETTLE_RETRY,
	SETTLE_DEAD,
	SETTLE_RELEASE,				/* unfinished at stop: pending again, attempt given back */
	SETTLE_HOLD					/* failed under an open breaker: pending, attempt given back */
} SettleState;

/*
 * What the claim may take of each handler (1.1): default_lim of any
 * handler, but those named in names (a text[]) take at most their entry in
 * lims (an int4[]), none when 0.
 */
typedef struct ClaimLimits
{
	int			default_lim;
	Datum		names;
	Datum		lims;
} ClaimLimits;

/* A handler's caps, as grelout.handlers and the settings give them. */
typedef struct HandlerCaps
{
	char	   *name;
	int			max_in_flight;	/* 0: none */
	int			max_per_second; /* 0: none */
} HandlerCaps;

typedef struct SettleItem
{
	pg_uuid_t	id;
	int64		lease;
	SettleState state;
	int64		delay_ms;		/* SETTLE_RETRY/RELEASE: when to try again */
	char	   *error;			/* NULL for SETTLE_DELIVERED and SETTLE_RELEASE */
	bool		fanout;			/* a grelout.fanout row (1.1) */
	char	   *handler;		/* its handler's name (fanout rows) */
	int			status;			/* HTTP status of the attempt, 0: none */
	int			duration_ms;	/* the attempt's duration, -1: unknown */
	char	   *topic;			/* SETTLE_DEAD: for grelout.delivery.dead */
	int			attempts;		/* SETTLE_DEAD: the attempt it died on */
} SettleItem;

extern StoreSchema store_schema(void);
extern void store_lock_outbox(void);
extern Oid	store_relid(const char *relname);

/* routing.c */
extern SPITupleTable *store_route(StoreSchema schema, int limit, int claim_limit,
								  int claim_max, int lease_ms, int64 lease_token,
								  const ClaimLimits *lims, uint64 *nrows,
								  uint64 *nrouted, bool *cut, bool *blocked);

/* store.c */
extern bool store_any_ordered_handler(void);
extern SPITupleTable *store_claim(StoreSchema schema, int limit, int lease_ms,
								  int64 lease_token, int default_max_attempts,
								  bool dead_letter, const ClaimLimits *lims,
								  uint64 *nrows);
extern List *store_handler_caps(int default_max_in_flight);
extern void store_load_health(Oid dboid);
extern bool store_disable_handler(const char *name);
extern Datum store_array(Datum *elems, bool *nulls, int n, Oid type);
extern Datum store_text_array(List *strings);
extern Datum store_int_array(int *values, int n);
extern void store_settle(StoreSchema schema, SettleItem *items, int n,
						 bool keep_delivered);
extern void store_finalize_fanout(List *ids, bool keep_delivered);
extern uint64 store_release_stale_leases(StoreSchema schema);
extern int64 store_next_due_ms(StoreSchema schema);
extern uint64 store_purge_delivered(StoreSchema schema, int64 window_ms, int limit);

#endif							/* GRELOUT_STORE_H */
