/*-------------------------------------------------------------------------
 *
 * relay.h
 *	  What the files of a relay worker share.  A relay is one background
 *	  worker process; each file keeps its own state, in statics, and the
 *	  others reach it through the functions declared here:
 *
 *	relay.c			the worker's life: start, signals, waits, the loop, stop
 *	cycle.c			one database cycle's transaction (settle, health,
 *					route and claim, purge, lease recovery), and when the
 *					next one is due
 *	claim_step.c	a cycle's route and claim statements, and when to
 *					claim again
 *	claim_budget.c	the relay's record of each handler and the claim's
 *					budget over them (the arithmetic is budget.c's)
 *	jobs.c			the jobs in flight: start, collect, finish; the settle
 *					queue of their outcomes; their logs and events
 *	handler_auth.c	the relay's copy of its handlers' endpoint
 *					authentication (mutual TLS, a CA of their own, OAuth2
 *					tokens)
 *	spans.c			the span of each finished attempt, exported in
 *					batches to an OpenTelemetry collector (OTLP/HTTP)
 *
 * The loop (relay.c) calls down: jobs to collect, a cycle when due, jobs to
 * start.  A cycle calls the settle queue (jobs.c) and the claim step, which
 * calls the budget and queues jobs; nothing calls back up into relay.c but
 * for what it publishes here: the clock, the relay's identity, its bound
 * on requests in flight, the loop's memory context, the in-cycle flag its signal handlers read, and its
 * activity shown again after a cycle.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_RELAY_H
#define GRELOUT_RELAY_H

#include "grelout.h"

#include <signal.h>

#include "budget.h"
#include "health.h"
#include "http.h"
#include "limiter.h"
#include "shmem.h"
#include "store.h"
#include "webhook.h"

/* A time on the monotonic clock, in microseconds. */
typedef int64 MonoTime;

/* Who this relay is: set by relay.c at start, read by the other files. */
typedef struct RelayIdentity
{
	int			relay;			/* number within the database */
	char		dbname[NAMEDATALEN];
	GreloutDbEntry *db;			/* the database's shared entry */
	GreloutRelaySlot *slot;		/* the relay's shared slot */
} RelayIdentity;

/*
 * The relay's record of one handler (1.1): its budget (its requests in
 * flight here, its window, this claim's share), its adaptive limit, its
 * shared health entry, and what the current claim reserved there.
 */
typedef struct LocalHandler
{
	char		name[GRELOUT_HANDLER_NAME_MAX + 1];	/* hash key */
	HealthEntry *entry;			/* NULL when the shared table is full */
	BudgetHandler budget;		/* its requests here, window, claim budget */
	Limiter		limiter;		/* its adaptive limit of requests in flight */
	int			shown_limit;	/* of it, counted in entry->concurrency_limit */
	int			max_in_flight;	/* its cap over all relays; 0: none */
	int			counted;		/* of its requests, counted in entry->in_flight */
	int			reserved;		/* slots reserved in entry by the claim (caps) */
	int			tokens;			/* of them, max_per_second budget */
	bool		probe;			/* its limit is the breaker's one probe */
} LocalHandler;

/* What a claim step tells the cycle. */
typedef struct ClaimResult
{
	bool		keyed;			/* the claim statement took a message with a key */
	bool		events;			/* it published events: route them soon */
	bool		again;			/* claim again at once: more may be new or due */
	bool		short_of_room;	/* it took all it had room for, or routing
								 * left new messages for want of room */
	bool		deferred;		/* the claim statement was left to the next
								 * cycle: this claim says nothing of room */
	MonoTime	next_at;		/* otherwise, claim by then */
} ClaimResult;

/* relay.c */
extern RelayIdentity MyRelay;
extern MemoryContext RelayLoopContext;
extern volatile sig_atomic_t relay_in_cycle;
/* grelout.concurrency, or fewer when the open-file limit holds fewer */
extern int	relay_concurrency;
extern MonoTime relay_now(void);
extern int64 relay_unseen_us(void);
extern MonoTime relay_ms_after(int64 ms);
extern long relay_ms_until(MonoTime t);
extern void relay_report_idle(void);

/* cycle.c */
extern StoreSchema relay_schema;
extern void cycle_init(void);
extern bool cycle_run(bool claim);
extern bool cycle_due(bool may_claim, bool purge);
extern long cycle_timeout(long timeout, bool may_claim, bool purge);
extern bool cycle_purge_backlog(void);
extern void cycle_want_claim(void);
extern void cycle_wake(void);
extern bool cycle_extension_ready(void);
extern bool cycle_short_of_room(bool *measured);
extern void cycle_flush_stats(void);

/* backlog.c */
extern void backlog_count(void);
extern void backlog_committed(void);
extern void backlog_forget(void);

/* claim_step.c */
extern void claim_step(int limit, bool extra, ClaimResult *r);
extern void claim_step_woken(void);
extern int	claim_step_committed(void);
extern void claim_step_failed(void);

/* claim_budget.c */
extern void claim_budget_init(void);
extern LocalHandler *local_handler(const char *name);
extern void local_handler_started(WebhookJob *job);
extern void local_handler_finished(WebhookJob *job, bool answered, long status);
extern void claim_budget_make(int limit, bool extra, ClaimLimits *cl);
extern void claim_budget_left(ClaimLimits *cl);
extern TimestampTz claim_budget_wake_at(void);
extern void claim_budget_close(WebhookJob *claimed, bool committed);

/* What a request of the relay's HTTP engine is for (HttpRequest.purpose). */
#define HTTP_PURPOSE_WEBHOOK	0	/* a WebhookJob's */
#define HTTP_PURPOSE_TOKEN		1	/* an OAuth2 token request (handler_auth.c) */
#define HTTP_PURPOSE_SPANS		2	/* a batch of spans to the OTLP collector */

/* handler_auth.c */
extern void handler_auth_init(HttpEngine *engine);
extern void handler_auth_refresh(void);
extern bool handler_auth_apply(WebhookJob *job);
extern void handler_auth_tls(WebhookJob *job);
extern int	handler_auth_waiting(void);
extern bool handler_auth_unauthorized(WebhookJob *job);
extern void handler_auth_token_done(HttpRequest *req);

/* spans.c */
extern void spans_init(HttpEngine *engine);
extern int	spans_exporting(void);
extern void spans_record(const WebhookJob *job, int status, bool delivered);
extern void spans_flush(void);
extern bool spans_drained(void);
extern long spans_timeout(long timeout);
extern void spans_export_done(HttpRequest *req);
extern void spans_stop(void);

/* jobs.c */
extern void jobs_init(HttpEngine *engine);
extern int	jobs_running(void);
extern void jobs_queue(HeapTuple tup, TupleDesc desc, int64 lease);
extern WebhookJob *jobs_unstarted(void);
extern void jobs_drop_unstarted(void);
extern void jobs_start_claimed(void);
extern void jobs_send(WebhookJob *job);
extern void jobs_fail_unsent(WebhookJob *job, const char *why);
extern void jobs_collect(void);
extern MonoTime jobs_last_finish(void);
extern int	jobs_release_unfinished(void);
extern int	jobs_settles_queued(void);
extern void jobs_write_settles(void);
extern bool jobs_write_health(void);
extern MonoTime jobs_earliest_retry(MonoTime now, MonoTime due);
extern void jobs_settles_committed(int claim_dead);
extern void jobs_forget_settles(void);
extern void jobs_log_dead(const char *id, const char *topic,
						  const char *handler, int attempt, const char *error);
extern bool jobs_publish_dead(const char *id, const char *topic,
							  const char *handler, int attempts,
							  const char *error);

#endif							/* GRELOUT_RELAY_H */
