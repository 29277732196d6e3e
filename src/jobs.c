/*-------------------------------------------------------------------------
 *
 * jobs.c
 *	  The relay's jobs in flight: the claimed requests waiting for their
 *	  claim to commit, their start, the collection of the finished ones and
 *	  the outcome of each (outcome.c), with what it tells the handler's
 *	  breaker; the settle queue that carries the outcomes and the breaker's
 *	  transitions to the next cycle, and writes them there; the logs and
 *	  events of retries and dead letters.
 *
 * Jobs live in a memory context of their own (each job in a child of it,
 * webhook.c), the settle queue in another, emptied once a cycle has
 * written it: both outlive the loop's turns, and the queue outlives a
 * failed cycle, whose outcomes are written by the next one.
 *
 *-------------------------------------------------------------------------
 */
#include "relay.h"

#include "common/pg_prng.h"
#include "datatype/timestamp.h"
#include "latency.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "outcome.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* The jobs, their HTTP engine and the queue of their outcomes. */
static struct
{
	HttpEngine *engine;
	MemoryContext jobs_cxt;		/* parent of every job's context */
	WebhookJob *to_start;		/* claimed, waiting for the claim's commit */
	dlist_head	in_flight;		/* started, not yet finished */
	MonoTime	last_finish_at; /* a request last finished then */

	/* the settle queue: outcomes and breaker transitions to write */
	MemoryContext settle_cxt;
	SettleItem *settles;
	int			nsettles;
	int			settles_cap;
	List	   *health_writes;	/* HealthWrite */
	int			count_delivered;
	int			count_retried;
	int			count_dead;
} jobs;

/* jobs_init: the engine the jobs are sent with, and their contexts. */
void
jobs_init(HttpEngine *engine)
{
	handler_auth_init(engine);
	jobs.engine = engine;
	jobs.jobs_cxt = AllocSetContextCreate(TopMemoryContext, "grelout jobs",
										  ALLOCSET_DEFAULT_SIZES);
	jobs.settle_cxt = AllocSetContextCreate(TopMemoryContext, "grelout settles",
											ALLOCSET_DEFAULT_SIZES);
	dlist_init(&jobs.in_flight);
}

/*
 * jobs_running: how many requests are in flight, those waiting for their
 * handler's OAuth2 token included; a span export (spans.c) is none of them.
 */
int
jobs_running(void)
{
	return http_engine_running(jobs.engine) - spans_exporting() +
		handler_auth_waiting();
}

/* responded: did a status line arrive (a cut body still counts)? */
static bool
responded(const HttpRequest *r)
{
	return (r->result == CURLE_OK ||
			(r->result == CURLE_WRITE_ERROR && r->body_cut)) &&
		r->status >= 100;
}

/*
 * delivery_latency_ms: from the message's publish (the time in its UUIDv7
 * id, latency.c) to now, in milliseconds; -1 when the id carries none.
 */
static int64
delivery_latency_ms(const WebhookJob *job)
{
	int64		published_ms;
	int64		now_ms;

	if (!latency_uuid7_ms(job->id.data, &published_ms))
		return -1;
	now_ms = GetCurrentTimestamp() / 1000 +
		(int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * 1000;
	return now_ms - published_ms;
}

/*
 * count_attempt: a finished attempt in its handler's counters, for
 * grelout.metrics() (1.1; none when the shared table had no room for it).
 */
static void
count_attempt(const WebhookJob *job, SettleState state)
{
	HealthEntry *e = job->local ? job->local->entry : NULL;

	if (e == NULL)
		return;
	switch (state)
	{
		case SETTLE_DELIVERED:
			health_count(e, HEALTH_COUNT_DELIVERED, delivery_latency_ms(job));
			break;
		case SETTLE_RETRY:
			health_count(e, HEALTH_COUNT_RETRIED, -1);
			break;
		case SETTLE_DEAD:
			health_count(e, HEALTH_COUNT_DEAD, -1);
			break;
		case SETTLE_HOLD:
			health_count(e, HEALTH_COUNT_HELD, -1);
			break;
		default:
			break;				/* released: not finished */
	}
}

/*
 * attempt_logged: does an attempt settled so go into grelout.attempts (a
 * 1.2 schema), as grelout.log_attempts says?  A released claim was no
 * finished attempt; a held one failed.
 */
static bool
attempt_logged(SettleState state)
{
	if (relay_schema < STORE_SCHEMA_1_2 || state == SETTLE_RELEASE)
		return false;
	if (grelout_log_attempts == GRELOUT_LOG_ATTEMPTS_ALL)
		return true;
	return grelout_log_attempts == GRELOUT_LOG_ATTEMPTS_FAILED &&
		state != SETTLE_DELIVERED;
}

/*
 * keep_body: give a job's request room for what grelout.attempts keeps of
 * its answer's body (grelout.attempt_body_max bytes), when attempts are
 * logged.  Allocated before the request starts: no palloc in libcurl's
 * callbacks.
 */
static void
keep_body(WebhookJob *job)
{
	if (relay_schema < STORE_SCHEMA_1_2 ||
		grelout_log_attempts == GRELOUT_LOG_ATTEMPTS_OFF ||
		grelout_attempt_body_max <= 0 || job->req.body_keep != NULL)
		return;
	job->req.body_keep_size = (size_t) grelout_attempt_body_max + 1;
	job->req.body_keep = MemoryContextAlloc(job->cxt, job->req.body_keep_size);
	job->req.body_keep[0] = '\0';
}

/*
 * attempt_row: what grelout.attempts keeps of a finished attempt besides
 * its outcome: when it started, and of an answer the body's first bytes
 * as text the database takes and the Content-Type.  In settle_cxt.
 */
static void
attempt_row(SettleItem *it, const WebhookJob *job)
{
	const HttpRequest *r = &job->req;

	it->started_at = GetCurrentTimestamp() -
		(TimestampTz) Max(it->duration_ms, 0) * 1000;
	it->response_body = NULL;
	it->content_type = NULL;
	if (!responded(r))
		return;
	if (r->body_keep != NULL)
	{
		size_t		cap = Min(r->body_keep_len, (size_t) grelout_attempt_body_max) + 1;

		it->response_body = palloc(cap);
		outcome_sanitize_text(r->body_keep, r->body_keep_len, it->response_body,
							  cap, GetDatabaseEncoding() == PG_UTF8);
	}
	if (r->content_type[0] != '\0')
	{
		it->content_type = palloc(HTTP_CONTENT_TYPE_MAX);
		outcome_sanitize(r->content_type, strlen(r->content_type),
						 it->content_type, HTTP_CONTENT_TYPE_MAX);
	}
}

/*
 * queue_settle: queue the outcome of a job's attempt for the next database
 * cycle, with the attempt's HTTP status and duration, and its row of
 * grelout.attempts when it is logged.
 */
static void
queue_settle(const WebhookJob *job, SettleState state, int64 delay_ms,
			 const char *error)
{
	MemoryContext old = MemoryContextSwitchTo(jobs.settle_cxt);
	SettleItem *it;

	if (jobs.nsettles >= jobs.settles_cap)
	{
		jobs.settles_cap = Max(64, jobs.settles_cap * 2);
		jobs.settles = jobs.settles ?
			repalloc(jobs.settles, sizeof(SettleItem) * jobs.settles_cap) :
			palloc(sizeof(SettleItem) * jobs.settles_cap);
	}
	it = &jobs.settles[jobs.nsettles++];
	memcpy(&it->id, &job->id, sizeof(pg_uuid_t));
	it->lease = job->lease;
	it->state = state;
	it->delay_ms = delay_ms;
	it->error = error ? pstrdup(error) : NULL;
	it->fanout = job->fanout;
	it->handler = job->handler ? pstrdup(job->handler) : NULL;
	it->status = responded(&job->req) ? (int) job->req.status : 0;
	it->topic = (state == SETTLE_DEAD && job->topic) ? pstrdup(job->topic) : NULL;
	it->attempts = job->attempts;
	it->duration_ms = -1;
	if (job->started_us > 0)
		it->duration_ms = (int) Min((relay_now() - job->started_us) / 1000, PG_INT32_MAX);
	it->log_attempt = attempt_logged(state);
	if (it->log_attempt)
		attempt_row(it, job);
	MemoryContextSwitchTo(old);

	count_attempt(job, state);
	if (state == SETTLE_DELIVERED)
		jobs.count_delivered++;
	else if (state == SETTLE_RETRY)
		jobs.count_retried++;
	else if (state == SETTLE_DEAD)
		jobs.count_dead++;
}

/*
 * jobs_forget_settles: empty the queue, with the error strings it holds
 * (keeping the array but not the strings leaked one string per failed
 * attempt).
 */
void
jobs_forget_settles(void)
{
	jobs.nsettles = 0;
	jobs.count_delivered = jobs.count_retried = jobs.count_dead = 0;
	MemoryContextReset(jobs.settle_cxt);
	jobs.settles = NULL;
	jobs.settles_cap = 0;
	jobs.health_writes = NIL;
}

/* jobs_settles_queued: how many outcomes wait to be written. */
int
jobs_settles_queued(void)
{
	return jobs.nsettles;
}

/*
 * jobs_write_settles: in the cycle's transaction, write the queued
 * outcomes (finalizing fan-out messages whose deliveries are all done).
 */
void
jobs_write_settles(void)
{
	if (jobs.nsettles > 0)
		store_settle(relay_schema, jobs.settles, jobs.nsettles,
					 grelout_keep_mode != GRELOUT_KEEP_OFF);
}

/*
 * jobs_earliest_retry: the earlier of due and the first retry the queued
 * outcomes schedule, counted from now.
 */
MonoTime
jobs_earliest_retry(MonoTime now, MonoTime due)
{
	for (int i = 0; i < jobs.nsettles; i++)
	{
		const SettleItem *it = &jobs.settles[i];

		if (it->state == SETTLE_RETRY && now + it->delay_ms * 1000 < due)
			due = now + it->delay_ms * 1000;
	}
	return due;
}

/*
 * jobs_settles_committed: the queue is written: count its outcomes (and
 * the claim's claim_dead dead letters) in the relay's slot, and empty it.
 */
void
jobs_settles_committed(int claim_dead)
{
	grelout_slot_count(MyRelay.slot, jobs.count_delivered, jobs.count_retried,
					   jobs.count_dead + claim_dead, jobs_running());
	jobs_forget_settles();
}

/*
 * named_handler: the handler's name when the log should give it: under 1.1,
 * when it is not the topic (as 1.0 named every handler by its topic).
 */
static const char *
named_handler(const char *handler, const char *topic)
{
	return (handler && strcmp(handler, topic) != 0) ? handler : NULL;
}

/* jobs_log_dead: the WARNING of a dead-lettered delivery. */
void
jobs_log_dead(const char *id, const char *topic, const char *handler,
			  int attempt, const char *error)
{
	if (named_handler(handler, topic))
		ereport(WARNING,
				(errmsg("grelout message %s of topic \"%s\" for handler \"%s\" is dead after attempt %d",
						id, topic, handler, attempt),
				 errdetail("%s", error),
				 errhint("Fix the endpoint, then call outbox_redrive().")));
	else
		ereport(WARNING,
				(errmsg("grelout message %s of topic \"%s\" is dead after attempt %d",
						id, topic, attempt),
				 errdetail("%s", error),
				 errhint("Fix the endpoint, then call outbox_redrive().")));
}

/* log_retry: the WARNING of a failed attempt to be retried. */
static void
log_retry(const WebhookJob *job, int64 delay_ms, const char *error)
{
	if (named_handler(job->handler, job->topic))
		ereport(WARNING,
				(errmsg("grelout message %s of topic \"%s\" for handler \"%s\" failed on attempt %d, retrying in %.1f s",
						job->id_str, job->topic, job->handler, job->attempts,
						delay_ms / 1000.0),
				 errdetail("%s", error)));
	else
		ereport(WARNING,
				(errmsg("grelout message %s of topic \"%s\" failed on attempt %d, retrying in %.1f s",
						job->id_str, job->topic, job->attempts, delay_ms / 1000.0),
				 errdetail("%s", error)));
}

/*
 * jobs_publish_dead: in the cycle's transaction, publish
 * grelout.delivery.dead about a delivery that went dead (none about an
 * event's own delivery); returns whether it published.
 */
bool
jobs_publish_dead(const char *id, const char *topic, const char *handler,
				  int attempts, const char *error)
{
	StringInfoData extra;

	if (topic == NULL || handler == NULL || strncmp(topic, "grelout.", 8) == 0)
		return false;
	initStringInfo(&extra);
	appendStringInfoString(&extra, "\"message_id\": ");
	escape_json(&extra, id);
	appendStringInfoString(&extra, ", \"topic\": ");
	escape_json(&extra, topic);
	appendStringInfoString(&extra, ", \"error\": ");
	escape_json(&extra, error ? error : "");
	appendStringInfo(&extra, ", \"attempts\": %d", attempts);
	return health_publish_event("grelout.delivery.dead", handler,
								health_event_json(handler, extra.data));
}

/*
 * publish_transition: the event of a stored breaker transition, with what
 * it is about: the failures and the probe time of an opening, the opening
 * time of a closing.  Returns whether it published.
 */
static bool
publish_transition(const HealthWrite *w)
{
	StringInfoData extra;

	initStringInfo(&extra);
	if (w->breaker == BREAKER_OPEN)
	{
		appendStringInfo(&extra, "\"consecutive_failures\": %d, \"error\": ",
						 w->consecutive_failures);
		escape_json(&extra, w->last_error);
		appendStringInfoString(&extra, ", \"probe_at\": ");
		escape_json(&extra, timestamptz_to_str(w->probe_at));
	}
	else
	{
		appendStringInfoString(&extra, "\"opened_at\": ");
		if (w->opened_at)
			escape_json(&extra, timestamptz_to_str(w->opened_at));
		else
			appendStringInfoString(&extra, "null");
	}
	return health_publish_event(w->event, w->name,
								health_event_json(w->name, extra.data));
}

/*
 * jobs_write_health: in the cycle's transaction (1.1), store the queued
 * breaker transitions with their events, and publish
 * grelout.delivery.dead for the dead outcomes being settled.  Returns
 * whether it published an event.
 */
bool
jobs_write_health(void)
{
	ListCell   *lc;
	bool		published = false;

	foreach(lc, jobs.health_writes)
	{
		HealthWrite *w = lfirst(lc);

		health_store(w);
		if (w->event != NULL && publish_transition(w))
			published = true;
	}
	for (int i = 0; i < jobs.nsettles; i++)
	{
		SettleItem *it = &jobs.settles[i];
		char	   *id;

		if (it->state != SETTLE_DEAD)
			continue;
		id = DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(&it->id)));
		if (jobs_publish_dead(id, it->topic, it->handler, it->attempts, it->error))
			published = true;
	}
	return published;
}

/* describe_failure: last_error of a failed attempt, printable ASCII. */
static void
describe_failure(const HttpRequest *r, char *errbuf, size_t len)
{
	if (responded(r))
	{
		char		body[201];

		outcome_sanitize(r->body_start, r->body_start_len, body, sizeof(body));
		snprintf(errbuf, len, "HTTP %ld%s%s%s", r->status,
				 (r->status >= 300 && r->status < 400) ? " (redirects are not followed)" : "",
				 body[0] ? ": " : "", body);
	}
	else
	{
		char		raw[GRELOUT_LAST_ERROR_MAX];

		http_request_describe_error(r, raw, sizeof(raw));
		outcome_sanitize(raw, strlen(raw), errbuf, len);
	}
}

/* decide: the outcome of a finished request under the current settings. */
static Outcome
decide(const WebhookJob *job)
{
	const HttpRequest *r = &job->req;
	OutcomeInput in;

	memset(&in, 0, sizeof(in));
	in.responded = responded(r);
	in.status = r->status;
	in.has_retry_after = r->has_retry_after;
	in.retry_after_ms = r->retry_after_ms;
	in.attempts = job->attempts;
	in.max_attempts = job->max_attempts;
	in.dead_letter = grelout_dead_letter;
	in.retry_base_ms = grelout_retry_base;
	in.retry_max_ms = grelout_retry_max;
	in.retry_jitter = grelout_retry_jitter;
	in.draw = pg_prng_double(&pg_global_prng_state);
	return outcome_decide(&in);
}

/*
 * queue_health_write: a breaker transition to store, with its event, in
 * the next cycle (kept, like the outcomes, until a cycle commits it).
 */
static void
queue_health_write(const HealthWrite *w)
{
	MemoryContext old = MemoryContextSwitchTo(jobs.settle_cxt);
	HealthWrite *copy = palloc(sizeof(HealthWrite));

	memcpy(copy, w, sizeof(HealthWrite));
	jobs.health_writes = lappend(jobs.health_writes, copy);
	MemoryContextSwitchTo(old);
}

/* health_kind: what an answer (or its absence) means to the breaker. */
static HealthOutcome
health_kind(const HttpRequest *r, int64 *pause_ms)
{
	*pause_ms = 0;
	switch (outcome_health(responded(r), r->status, r->has_retry_after))
	{
		case OUTCOME_HEALTH_SUCCESS:
			return HEALTH_SUCCESS;
		case OUTCOME_HEALTH_PAUSE:
			*pause_ms = Min(Max(r->retry_after_ms, 0), (int64) grelout_retry_max);
			return HEALTH_NEUTRAL;
		case OUTCOME_HEALTH_MESSAGE:
			return HEALTH_MESSAGE;
		case OUTCOME_HEALTH_FAILURE:
		default:
			return HEALTH_FAILURE;
	}
}

/*
 * judge_health: what the finished request tells its handler's breaker
 * (1.1).  Only what outcome_health calls the endpoint's fault counts
 * (1.2): a 4xx that a message can provoke fails that delivery alone, and
 * is never held.  Logs the breaker's opening (WARNING) and closing (LOG),
 * queues the transitions to store; returns whether the delivery is to be
 * held: handed back with its attempt, because the breaker, not the
 * message, failed it (a failed probe, or a request in flight when it
 * opened).
 */
static bool
judge_health(WebhookJob *job, const char *error)
{
	LocalHandler *lh = job->local;
	HealthOutcome kind;
	HealthTransition t;
	HealthWrite w;
	bool		hold;
	int64		pause_ms;

	if (lh == NULL || lh->entry == NULL || relay_schema < STORE_SCHEMA_1_1)
		return false;
	kind = health_kind(&job->req, &pause_ms);
	t = health_outcome(lh->entry, kind, job->probe, pause_ms, error,
					   GetCurrentTimestamp(), &hold, &w);
	if (t == HEALTH_OPENED)
		ereport(WARNING,
				(errmsg("grelout handler \"%s\" breaker opened after %d consecutive failures",
						job->handler, w.consecutive_failures),
				 errdetail("%s", error ? error : ""),
				 errhint("Nothing is sent to it for %.1f s, then one probe; its messages wait without using attempts.",
						 w.cooldown_ms / 1000.0)));
	else if (t == HEALTH_CLOSED)
		ereport(LOG,
				(errmsg("grelout handler \"%s\" breaker closed", job->handler)));
	if (t != HEALTH_NONE)
		queue_health_write(&w);
	return hold;
}

/*
 * finish_failed: a failed attempt: held by the handler's open breaker,
 * dead, or to be retried; logged, and its outcome queued.
 */
static void
finish_failed(WebhookJob *job, const Outcome *o)
{
	char		errbuf[GRELOUT_LAST_ERROR_MAX];

	describe_failure(&job->req, errbuf, sizeof(errbuf));
	grelout_slot_error(MyRelay.slot, errbuf);

	/*
	 * Never a 410 (the receiver's word about the message: dead, breaker or
	 * not) nor any 4xx a message can cause: those are not the breaker's.
	 */
	if (judge_health(job, errbuf))
	{
		ereport(DEBUG1,
				(errmsg("grelout message %s for handler \"%s\" is held by the handler's open breaker",
						job->id_str, job->handler),
				 errdetail("%s", errbuf)));
		queue_settle(job, SETTLE_HOLD, 0, errbuf);
	}
	else if (o->kind == OUTCOME_DEAD)
	{
		jobs_log_dead(job->id_str, job->topic, job->handler, job->attempts, errbuf);
		queue_settle(job, SETTLE_DEAD, 0, errbuf);
	}
	else
	{
		log_retry(job, o->delay_ms, errbuf);
		queue_settle(job, SETTLE_RETRY, o->delay_ms, errbuf);
	}
}

/*
 * finish_job: turn a finished request into an outcome, tell its handler's
 * record and health, record its span, log retries and dead letters, queue
 * the settle, and free the job.
 */
static void
finish_job(WebhookJob *job)
{
	Outcome		o = decide(job);

	local_handler_finished(job, responded(&job->req), job->req.status);
	spans_record(job, responded(&job->req) ? (int) job->req.status : 0,
				 o.kind == OUTCOME_DELIVERED);
	if (o.kind == OUTCOME_DELIVERED)
	{
		(void) judge_health(job, NULL);
		queue_settle(job, SETTLE_DELIVERED, 0, NULL);
	}
	else
		finish_failed(job, &o);
	webhook_free(job);
}

/*
 * jobs_queue: build a claimed row's request, to start once the claim
 * commits; under 1.1 it counts as claimed of its handler's budget.
 */
void
jobs_queue(HeapTuple tup, TupleDesc desc, int64 lease)
{
	WebhookJob *job = webhook_build(jobs.jobs_cxt, tup, desc, lease);

	if (job->handler != NULL && relay_schema >= STORE_SCHEMA_1_1)
	{
		job->local = local_handler(job->handler);
		job->local->budget.claimed++;
	}
	job->next = jobs.to_start;
	jobs.to_start = job;
}

/* jobs_unstarted: the first of the jobs waiting for their claim's commit. */
WebhookJob *
jobs_unstarted(void)
{
	return jobs.to_start;
}

/* jobs_drop_unstarted: forget jobs whose claim did not commit. */
void
jobs_drop_unstarted(void)
{
	while (jobs.to_start)
	{
		WebhookJob *job = jobs.to_start;

		jobs.to_start = job->next;
		webhook_free(job);
	}
}

/*
 * jobs_start_claimed: send the requests whose claim has committed; those
 * of a handler whose OAuth2 token is being fetched wait for it
 * (handler_auth.c sends them, or fails them).  A waiting request is in
 * flight as a sent one is: counted by its handler, released at stop.
 */
void
jobs_start_claimed(void)
{
	while (jobs.to_start)
	{
		WebhookJob *job = jobs.to_start;

		jobs.to_start = job->next;
		job->next = NULL;
		job->started_us = relay_now();
		keep_body(job);
		local_handler_started(job);
		dlist_push_tail(&jobs.in_flight, &job->in_flight);
		if (handler_auth_apply(job))
			jobs_send(job);
	}
}

/*
 * jobs_send: start the request of a job in flight, with what is left of its
 * timeout (a job that waited for its handler's token, or is sent again
 * after a 401, must still end inside its lease).
 */
void
jobs_send(WebhookJob *job)
{
	int64		left_ms = job->budget_ms - (relay_now() - job->started_us) / 1000;

	if (left_ms < 1)
	{
		job->unsent = true;
		job->req.result = CURLE_OPERATION_TIMEDOUT;
		job->req.status = 0;
		job->req.refused[0] = '\0';
		job->req.errbuf[0] = '\0';
		dlist_delete(&job->in_flight);
		finish_job(job);
		return;
	}
	job->req.timeout_ms = (long) Min(left_ms, (int64) job->budget_ms);
	handler_auth_tls(job);
	if (!http_engine_start(jobs.engine, &job->req))
	{
		job->unsent = true;
		job->req.result = CURLE_FAILED_INIT;
		dlist_delete(&job->in_flight);
		finish_job(job);
	}
}

/*
 * jobs_fail_unsent: a job in flight whose request cannot be sent (its
 * handler's OAuth2 token could not be had): a transport failure, why its
 * error.
 */
void
jobs_fail_unsent(WebhookJob *job, const char *why)
{
	job->unsent = true;
	job->req.result = CURLE_COULDNT_CONNECT;
	job->req.status = 0;
	job->req.os_errno = 0;
	job->req.errbuf[0] = '\0';
	strlcpy(job->req.refused, why, sizeof(job->req.refused));
	dlist_delete(&job->in_flight);
	finish_job(job);
}

/*
 * jobs_collect: move the requests along and decide the outcome of every
 * finished one.  A token request goes to handler_auth.c, a span export to
 * spans.c; a request whose token was refused (401) may be sent again with
 * a new one.
 */
void
jobs_collect(void)
{
	HttpRequest *req;

	http_engine_perform(jobs.engine);
	while ((req = http_engine_next_done(jobs.engine)) != NULL)
	{
		WebhookJob *job = (WebhookJob *) req;

		if (req->purpose == HTTP_PURPOSE_TOKEN)
		{
			handler_auth_token_done(req);
			continue;
		}
		if (req->purpose == HTTP_PURPOSE_SPANS)
		{
			spans_export_done(req);
			continue;
		}
		if (handler_auth_unauthorized(job))
			continue;
		dlist_delete(&job->in_flight);
		finish_job(job);
		jobs.last_finish_at = relay_now();
	}
}

/* jobs_last_finish: when a request last finished (0: none yet). */
MonoTime
jobs_last_finish(void)
{
	return jobs.last_finish_at;
}

/*
 * jobs_release_unfinished: queue the claims whose requests are still in
 * flight as released: pending again, due now, their attempt given back
 * (the endpoint may or may not have received them; they are sent again).
 * Returns how many.
 */
int
jobs_release_unfinished(void)
{
	dlist_iter	iter;
	int			n = 0;

	dlist_foreach(iter, &jobs.in_flight)
	{
		WebhookJob *job = dlist_container(WebhookJob, in_flight, iter.cur);

		queue_settle(job, SETTLE_RELEASE, 0, NULL);
		n++;
	}
	return n;
}
