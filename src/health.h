/*-------------------------------------------------------------------------
 *
 * health.h
 *	  The health of each handler, shared by every relay of the server: its
 *	  circuit breaker, its requests in flight over all relays, its request
 *	  rate budget and its Retry-After pause, in one shared hash table keyed
 *	  by (database, handler name) (health.c, no SQL); and the breaker's
 *	  stored form in grelout.handler_health, with the operational events
 *	  (handler_health.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_HEALTH_H
#define GRELOUT_HEALTH_H

#include "grelout.h"

#include "latency.h"
#include "nodes/pg_list.h"
#include "storage/spin.h"

/* Breaker states; health_breaker_names spells them as the SQL does. */
#define BREAKER_CLOSED		0
#define BREAKER_OPEN		1
#define BREAKER_HALF_OPEN	2

extern const char *const health_breaker_names[3];

/*
 * A handler's counters since the server started, for grelout.metrics()
 * (metrics.c): every finished attempt, what became of it, the pauses and
 * breaker openings, and the commit-to-delivery latency of its deliveries
 * (latency.h; buckets not cumulative here, latency_buckets[LATENCY_BOUNDS]
 * being +Inf).  Kept when the handler is deleted or renamed: a counter
 * never goes back.
 */
typedef struct HealthCounters
{
	uint64		attempts;		/* finished requests (a timeout included) */
	uint64		delivered;
	uint64		retried;
	uint64		dead;
	uint64		held;			/* handed back by its open breaker */
	uint64		pauses;			/* 429/503 with Retry-After */
	uint64		breaker_openings;	/* closed -> open, and failed probes */
	uint64		latency_count;
	uint64		latency_sum_ms;
	uint64		latency_buckets[LATENCY_BUCKETS];
} HealthCounters;

/* What a finished attempt became, for its handler's counters. */
typedef enum HealthCount
{
	HEALTH_COUNT_DELIVERED,
	HEALTH_COUNT_RETRIED,
	HEALTH_COUNT_DEAD,
	HEALTH_COUNT_HELD
} HealthCount;

/* Most handlers tracked over all databases of the server. */
#define GRELOUT_MAX_HEALTH_ENTRIES	2048

typedef struct HealthKey
{
	Oid			dboid;
	char		name[GRELOUT_HANDLER_NAME_MAX + 1];
} HealthKey;

/*
 * One handler's shared state, an entry of the shared hash table "grelout
 * handler health" (health.c; at most GRELOUT_MAX_HEALTH_ENTRIES over all
 * databases).  The rules of access:
 *
 * - the table is guarded by one LWLock (tranche "grelout_health"): a
 *   lookup or a scan holds it shared, an insert exclusive;
 * - an entry is never removed (a deleted handler's entry is reset:
 *   health_forget), so a pointer to it stays valid for the life of the
 *   server and a relay keeps one per handler it sends to;
 * - the fields after the key are read and written under the entry's
 *   mutex, a spinlock, which a scan takes with the LWLock held, never the
 *   other way around;
 * - version grows at every breaker transition, and the stored row
 *   (grelout.handler_health) takes a write only with a greater version,
 *   so two relays' writes land in order;
 * - the backlog (pending, oldest_ms, backlog_at) is written by the relay
 *   of the database that counted it (backlog.c), all of the database's
 *   entries in one call (health_set_backlog), and only over an older
 *   count: backlog_at never goes back.
 */
typedef struct HealthEntry
{
	HealthKey	key;
	slock_t		mutex;
	/* the breaker, as stored at version */
	int			breaker;
	int			consecutive_failures;
	TimestampTz opened_at;		/* when the breaker opened (disable_after) */
	TimestampTz probe_at;		/* open: when the next probe may go */
	int64		cooldown_ms;	/* the wait before the next probe */
	uint64		version;		/* bumped at each transition */
	int			probe_pid;		/* the relay whose probe is out; 0: none */
	bool		disable_tried;	/* auto-disable already ran for this opening */
	TimestampTz last_success_at;
	TimestampTz last_failure_at;
	char		last_error[GRELOUT_LAST_ERROR_MAX];
	/* limits */
	int			in_flight;		/* requests started or reserved, all relays */
	int			concurrency_limit;	/* the relays' adaptive limits, summed */
	TimestampTz paused_until;	/* Retry-After of a 429/503 */
	double		tokens;			/* max_per_second budget */
	TimestampTz tokens_at;
	/* grelout.metrics() */
	HealthCounters counters;
	/* its backlog, as a relay of the database last counted it (backlog.c) */
	int64		pending;		/* deliveries neither delivered nor dead */
	int64		oldest_ms;		/* the oldest one's publish, Unix ms; 0: none */
	TimestampTz backlog_at;		/* when counted; 0: never */
} HealthEntry;

/* One handler's state as grelout.metrics() reads it. */
typedef struct HealthMetrics
{
	HealthKey	key;
	int			breaker;
	int			in_flight;
	bool		paused;			/* a Retry-After pause runs now */
	int64		pending;
	int64		oldest_ms;
	int			concurrency_limit;
	HealthCounters counters;
} HealthMetrics;

/* One handler's backlog, counted by a relay (backlog.c). */
typedef struct HealthBacklog
{
	char		name[GRELOUT_HANDLER_NAME_MAX + 1];
	int64		pending;
	int64		oldest_ms;		/* Unix ms; 0: not known */
} HealthBacklog;

/* A breaker state to store, with the event to publish about it. */
typedef struct HealthWrite
{
	char		name[GRELOUT_HANDLER_NAME_MAX + 1];
	int			breaker;
	int			consecutive_failures;
	TimestampTz opened_at;
	TimestampTz probe_at;
	int64		cooldown_ms;
	uint64		version;
	TimestampTz last_success_at;
	TimestampTz last_failure_at;
	char		last_error[GRELOUT_LAST_ERROR_MAX];
	const char *event;			/* topic of the event to publish, or NULL */
} HealthWrite;

/* What an attempt's outcome means to its handler's breaker. */
typedef enum HealthOutcome
{
	HEALTH_SUCCESS,				/* 2xx */
	HEALTH_FAILURE,				/* the endpoint's fault (outcome_health) */
	HEALTH_NEUTRAL,				/* 429/503 with Retry-After, or handed back */
	HEALTH_MESSAGE				/* a 4xx the message can cause: not counted */
} HealthOutcome;

/* What an outcome changed. */
typedef enum HealthTransition
{
	HEALTH_NONE,
	HEALTH_OPENED,				/* closed -> open: WARNING, event */
	HEALTH_REOPENED,			/* failed probe: open again, longer cooldown */
	HEALTH_CLOSED				/* open or half-open -> closed: LOG, event */
} HealthTransition;

/* health.c */
extern Size health_shmem_size(void);
extern void health_shmem_request(void);
extern void health_shmem_init(void);

extern HealthEntry *health_entry(Oid dboid, const char *name, bool create);
extern void health_load(Oid dboid, const HealthWrite *row);
extern int	health_reserve(HealthEntry *e, int want, int cap, int rate,
						   TimestampTz now);
extern void health_unreserve(HealthEntry *e, int in_flight, int tokens);
extern int	health_gate(HealthEntry *e, int want, TimestampTz now, bool *probe,
						TimestampTz *wake_at);
extern void health_release_probe(HealthEntry *e);
extern void health_add_in_flight(HealthEntry *e, int n);
extern void health_add_limit(HealthEntry *e, int n);
extern HealthTransition health_outcome(HealthEntry *e, HealthOutcome kind,
									   bool probe, int64 pause_ms,
									   const char *error, TimestampTz now,
									   bool *hold, HealthWrite *w);
extern List *health_restricted(Oid dboid, TimestampTz now);
extern List *health_disable_due(Oid dboid, TimestampTz now);
extern void health_disable_undo(Oid dboid, const char *name);
extern void health_snapshot(HealthEntry *e, HealthWrite *w);
extern void health_count(HealthEntry *e, HealthCount what, int64 latency_ms);
extern List *health_metrics(void);
extern void health_set_backlog(Oid dboid, const HealthBacklog *b, int n,
							   TimestampTz at);
extern void health_forget(Oid dboid, const char *name);
extern bool health_reenabled(Oid dboid, const char *name, HealthWrite *w);

/* handler_health.c (store_load_health and store_disable_handler: store.h) */
extern void health_store(const HealthWrite *w);
extern char *health_event_json(const char *name, const char *extra);
extern bool health_publish_event(const char *topic, const char *about,
								 const char *payload_json);

#endif							/* GRELOUT_HEALTH_H */
