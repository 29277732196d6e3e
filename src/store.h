/*-------------------------------------------------------------------------
 *
 * store.h
 *	  The relay's statements on grelout's tables, by table concern: the
 *	  installed schema and the cycle's lock (store.c), routing (routing.c),
 *	  the claim (claim.c, its columns in claim_columns.h), settle, finalize,
 *	  lease recovery, next due time and retention purge (settle.c), the
 *	  stored breakers and the auto-disable (handler_health.c); and, through
 *	  spi_helpers.h, what they all go through.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_STORE_H
#define GRELOUT_STORE_H

#include "grelout.h"
#include "claim_columns.h"
#include "constants.h"
#include "spi_helpers.h"

#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "nodes/pg_list.h"

/* the advisory lock keys: constants.h */

/* The installed grelout schema, as the relay's statements need it. */
typedef enum StoreSchema
{
	STORE_SCHEMA_NONE,			/* not installed */
	STORE_SCHEMA_1_0,			/* 1.0: a handler per topic, inline rows only */
	STORE_SCHEMA_1_1,			/* 1.1: routing, inline and fan-out deliveries */
	STORE_SCHEMA_1_2			/* 1.2: as 1.1, and grelout.attempts */
} StoreSchema;

/*
 * The schemas are ordered: a later one has every table of an earlier one,
 * so a statement of 1.1 runs wherever schema >= STORE_SCHEMA_1_1.
 */

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
	int			attempts;		/* the attempt's number */
	/* the attempt's row in grelout.attempts (1.2), when log_attempt */
	bool		log_attempt;
	TimestampTz started_at;
	char	   *response_body;	/* sanitized text, or NULL */
	char	   *content_type;	/* sanitized, or NULL */
} SettleItem;

/* store.c */
extern StoreSchema store_schema(void);
extern void store_lock_outbox(void);

/* routing.c */
extern SPITupleTable *store_route(StoreSchema schema, int limit, int claim_limit,
								  int claim_max, int lease_ms, int64 lease_token,
								  const ClaimLimits *lims, uint64 *nrows,
								  uint64 *nrouted, bool *cut, bool *blocked);

/* claim.c */
extern SPITupleTable *store_claim(StoreSchema schema, int limit, int lease_ms,
								  int64 lease_token, int default_max_attempts,
								  bool dead_letter, const ClaimLimits *lims,
								  uint64 *nrows);
extern bool store_any_ordered_handler(void);
extern bool store_claim_may_find(StoreSchema schema);
extern List *store_handler_caps(int default_max_in_flight);

/* settle.c */
extern void store_settle(StoreSchema schema, SettleItem *items, int n,
						 bool keep_delivered);
extern void store_finalize_fanout(List *ids, bool keep_delivered);
extern uint64 store_release_stale_leases(StoreSchema schema);
extern int64 store_next_due_ms(StoreSchema schema);
extern uint64 store_purge_delivered(StoreSchema schema, int64 window_ms, int limit);
extern uint64 store_purge_attempts(int64 window_ms, int limit);

/* handler_health.c (the rest of it: health.h) */
extern void store_load_health(Oid dboid);
extern bool store_disable_handler(const char *name);

#endif							/* GRELOUT_STORE_H */
