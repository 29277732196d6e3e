/*-------------------------------------------------------------------------
 *
 * health.c
 *	  The health of each handler, shared by every relay of the server: the
 *	  circuit breaker, the requests in flight over all relays (for
 *	  max_in_flight), the request budget (max_per_second) and the pause a
 *	  429 or 503 with Retry-After asks for.
 *
 * One shared hash table holds an entry per (database, handler name) that a
 * relay has sent to, or whose breaker is stored as not closed.  The hash is
 * guarded by one LWLock (lookups shared, inserts exclusive), an entry's
 * fields by its spinlock.  Entries are never removed, so a relay may keep
 * pointers to them: deleting a handler resets its entry instead.
 *
 * The breaker is also stored in grelout.handler_health, on its transitions
 * only, and loaded from it by a relay before its first claim (the
 * HealthWrite rows of handler_health.c, which reads and writes that table
 * and publishes the operational events); the limits and the counters live
 * in shared memory only: a restart voids every request in flight anyway.
 * Nothing here runs SQL.
 *
 *-------------------------------------------------------------------------
 */
#include "health.h"

#include <math.h>

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(grelout_handler_live);

static HTAB *health_hash = NULL;
static LWLock *health_lock = NULL;

const char *const health_breaker_names[3] = {"closed", "open", "half-open"};

/* health_shmem_size: bytes of the shared hash table. */
Size
health_shmem_size(void)
{
	return hash_estimate_size(GRELOUT_MAX_HEALTH_ENTRIES, sizeof(HealthEntry));
}

/* health_shmem_request: the LWLock of the table (shmem_request_hook). */
void
health_shmem_request(void)
{
	RequestNamedLWLockTranche("grelout_health", 1);
}

/* health_shmem_init: create or attach to the table (shmem_startup_hook). */
void
health_shmem_init(void)
{
	HASHCTL		info;

	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(HealthKey);
	info.entrysize = sizeof(HealthEntry);
	health_hash = grelout_shmem_init_hash("grelout handler health",
										  GRELOUT_MAX_HEALTH_ENTRIES,
										  &info, HASH_ELEM | HASH_BLOBS);
	health_lock = &(GetNamedLWLockTranche("grelout_health"))->lock;
}

/*
 * entry_reset: a closed breaker with no history (in_flight and the
 * relays' concurrency_limit are kept: relays count them).
 */
static void
entry_reset(HealthEntry *e)
{
	e->breaker = BREAKER_CLOSED;
	e->consecutive_failures = 0;
	e->opened_at = 0;
	e->probe_at = 0;
	e->cooldown_ms = 0;
	e->probe_pid = 0;
	e->disable_tried = false;
	e->last_success_at = 0;
	e->last_failure_at = 0;
	e->last_error[0] = '\0';
	e->paused_until = 0;
	e->tokens = 0;
	e->tokens_at = 0;
}

/*
 * health_entry: the entry of a handler of a database; with create, made
 * (closed, nothing in flight) when missing.  NULL when missing and not
 * created, or when the table is full (the handler then goes without
 * breaker and caps: logged once).
 */
HealthEntry *
health_entry(Oid dboid, const char *name, bool create)
{
	static bool full_logged = false;
	HealthKey	key;
	HealthEntry *e;
	bool		found;

	if (health_hash == NULL)
		return NULL;
	memset(&key, 0, sizeof(key));
	key.dboid = dboid;
	strlcpy(key.name, name, sizeof(key.name));

	LWLockAcquire(health_lock, LW_SHARED);
	e = hash_search(health_hash, &key, HASH_FIND, NULL);
	LWLockRelease(health_lock);
	if (e != NULL || !create)
		return e;

	LWLockAcquire(health_lock, LW_EXCLUSIVE);
	e = hash_search(health_hash, &key, HASH_ENTER_NULL, &found);
	if (e != NULL && !found)
	{
		SpinLockInit(&e->mutex);
		entry_reset(e);
		e->version = 0;
		e->in_flight = 0;
		e->concurrency_limit = 0;
		memset(&e->counters, 0, sizeof(e->counters));
		e->pending = 0;
		e->oldest_ms = 0;
		e->backlog_at = 0;
	}
	LWLockRelease(health_lock);
	if (e == NULL && !full_logged)
	{
		full_logged = true;
		ereport(WARNING,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("grelout tracks the health of at most %d handlers",
						GRELOUT_MAX_HEALTH_ENTRIES),
				 errdetail("Handler \"%s\" goes without circuit breaker and caps.", name)));
	}
	return e;
}

/*
 * health_load: a stored breaker state, read by a relay before its first
 * claim.  Only an entry this server has not made yet takes it: one that
 * exists is newer than anything stored.
 */
void
health_load(Oid dboid, const HealthWrite *row)
{
	HealthEntry *e = health_entry(dboid, row->name, false);

	if (e != NULL)
		return;
	e = health_entry(dboid, row->name, true);
	if (e == NULL)
		return;
	SpinLockAcquire(&e->mutex);
	if (e->version == 0)
	{
		e->breaker = row->breaker;
		e->consecutive_failures = row->consecutive_failures;
		e->opened_at = row->opened_at;
		e->probe_at = row->probe_at;
		e->cooldown_ms = row->cooldown_ms;
		e->version = row->version;
		e->last_success_at = row->last_success_at;
		e->last_failure_at = row->last_failure_at;
		strlcpy(e->last_error, row->last_error, sizeof(e->last_error));
	}
	SpinLockRelease(&e->mutex);
}

/*
 * health_reserve: take up to want request slots of the handler, counted in
 * flight over all relays at once (so two relays never both take the last
 * slot under max_in_flight cap), and as many of its max_per_second budget
 * (rate; a budget of one second's worth, refilled continuously).  cap and
 * rate 0 mean none.  Returns how many were taken; the caller gives back
 * what it does not use (health_unreserve).
 */
int
health_reserve(HealthEntry *e, int want, int cap, int rate, TimestampTz now)
{
	int			n = Max(want, 0);

	SpinLockAcquire(&e->mutex);
	if (cap > 0)
		n = Min(n, Max(cap - e->in_flight, 0));
	if (rate > 0)
	{
		if (e->tokens_at == 0)
		{
			e->tokens = rate;
			e->tokens_at = now;
		}
		else if (now > e->tokens_at)
		{
			/* another relay's later now adds nothing: the bucket never refills backwards */
			e->tokens = Min((double) rate,
							e->tokens + rate * ((double) (now - e->tokens_at) / USECS_PER_SEC));
			e->tokens_at = now;
		}
		n = Min(n, (int) floor(e->tokens));
		e->tokens -= n;
	}
	e->in_flight += n;
	SpinLockRelease(&e->mutex);
	return n;
}

/* health_unreserve: give back slots and budget a reservation did not use. */
void
health_unreserve(HealthEntry *e, int in_flight, int tokens)
{
	SpinLockAcquire(&e->mutex);
	e->in_flight = Max(e->in_flight - in_flight, 0);
	e->tokens += tokens;
	SpinLockRelease(&e->mutex);
	/* (never above the burst: reserve took them from at most the rate) */
}

/* health_add_in_flight: a request started (n = 1) or finished (n = -1). */
void
health_add_in_flight(HealthEntry *e, int n)
{
	SpinLockAcquire(&e->mutex);
	e->in_flight = Max(e->in_flight + n, 0);
	SpinLockRelease(&e->mutex);
}

/*
 * health_add_limit: a relay's adaptive limit of the handler changed by n
 * (its first, a change, or its last at exit, negative).
 */
void
health_add_limit(HealthEntry *e, int n)
{
	SpinLockAcquire(&e->mutex);
	e->concurrency_limit = Max(e->concurrency_limit + n, 0);
	SpinLockRelease(&e->mutex);
}

/*
 * health_gate: how many of want requests the breaker and the pause let
 * through now: none while paused or open before the probe time (*wake_at
 * says until when), one probe when it is due and no other relay has one
 * out (*probe), want when closed.
 */
int
health_gate(HealthEntry *e, int want, TimestampTz now, bool *probe,
			TimestampTz *wake_at)
{
	int			n = want;

	*probe = false;
	SpinLockAcquire(&e->mutex);
	if (e->paused_until > now)
	{
		*wake_at = e->paused_until;
		n = 0;
	}
	else if (e->breaker == BREAKER_OPEN && now < e->probe_at)
	{
		*wake_at = e->probe_at;
		n = 0;
	}
	else if (e->breaker != BREAKER_CLOSED)
	{
		n = 0;
		if (want > 0 && e->probe_pid == 0)
		{
			e->probe_pid = MyProcPid;
			*probe = true;
			n = 1;
		}
	}
	SpinLockRelease(&e->mutex);
	return n;
}

/* health_release_probe: this relay's probe did not go, or is over. */
void
health_release_probe(HealthEntry *e)
{
	SpinLockAcquire(&e->mutex);
	if (e->probe_pid == MyProcPid)
		e->probe_pid = 0;
	SpinLockRelease(&e->mutex);
}

/* snapshot_locked: the entry as it is to be stored (under its mutex). */
static void
snapshot_locked(HealthEntry *e, HealthWrite *w)
{
	strlcpy(w->name, e->key.name, sizeof(w->name));
	w->breaker = e->breaker;
	w->consecutive_failures = e->consecutive_failures;
	w->opened_at = e->opened_at;
	w->probe_at = e->probe_at;
	w->cooldown_ms = e->cooldown_ms;
	w->version = e->version;
	w->last_success_at = e->last_success_at;
	w->last_failure_at = e->last_failure_at;
	strlcpy(w->last_error, e->last_error, sizeof(w->last_error));
	w->event = NULL;
}

/* health_snapshot: the entry as it is now. */
void
health_snapshot(HealthEntry *e, HealthWrite *w)
{
	SpinLockAcquire(&e->mutex);
	snapshot_locked(e, w);
	SpinLockRelease(&e->mutex);
}

/*
 * health_outcome: what one finished attempt of the handler does to its
 * breaker and pause.
 *
 *	- a 2xx resets the failures and closes a breaker that was not closed;
 *	- a failure while closed counts; the threshold-th in a row opens the
 *	  breaker for breaker_cooldown;
 *	- a failed probe opens it again with twice the cooldown (up to
 *	  retry_max), and its delivery is held: its attempt is given back;
 *	- a failure of a request that was in flight when the breaker opened is
 *	  held too: the breaker, not the message, decided its fate;
 *	- a 429 or 503 with Retry-After pauses the whole handler (pause_ms);
 *	- a 4xx that the message can cause (HEALTH_MESSAGE) changes nothing
 *	  but the last error and its time: it neither counts nor resets the
 *	  failures, and its delivery is never held.  A probe answered so has consumed its attempt; the breaker
 *	  stays as it was, with the probe given back (above), so the next
 *	  delivery goes as the probe at once: its probe time has passed.
 *
 * *hold says the delivery is to be handed back rather than retried; *w,
 * on a transition, what to store and which event to publish.
 */
HealthTransition
health_outcome(HealthEntry *e, HealthOutcome kind, bool probe, int64 pause_ms,
			   const char *error, TimestampTz now, bool *hold, HealthWrite *w)
{
	HealthTransition t = HEALTH_NONE;

	*hold = false;
	SpinLockAcquire(&e->mutex);
	if (probe && e->probe_pid == MyProcPid)
		e->probe_pid = 0;
	switch (kind)
	{
		case HEALTH_SUCCESS:
			e->consecutive_failures = 0;
			e->last_success_at = now;
			if (e->breaker != BREAKER_CLOSED)
			{
				e->breaker = BREAKER_CLOSED;
				e->probe_pid = 0;
				e->disable_tried = false;
				e->version++;
				t = HEALTH_CLOSED;
			}
			break;
		case HEALTH_FAILURE:
			e->consecutive_failures++;
			e->last_failure_at = now;
			strlcpy(e->last_error, error ? error : "", sizeof(e->last_error));
			if (grelout_breaker_threshold <= 0 && e->breaker == BREAKER_CLOSED)
				break;
			if (probe && e->breaker != BREAKER_CLOSED)
			{
				int64		cooldown = Max(e->cooldown_ms, 1) * 2;

				if (e->breaker == BREAKER_HALF_OPEN)
					cooldown = grelout_breaker_cooldown;
				e->cooldown_ms = Min(cooldown, (int64) grelout_retry_max);
				e->cooldown_ms = Max(e->cooldown_ms, 1);
				e->breaker = BREAKER_OPEN;
				if (e->opened_at == 0)
					e->opened_at = now;
				e->probe_at = now + e->cooldown_ms * 1000;
				e->version++;
				t = HEALTH_REOPENED;
				*hold = true;
			}
			else if (e->breaker == BREAKER_CLOSED)
			{
				if (e->consecutive_failures >= grelout_breaker_threshold)
				{
					e->breaker = BREAKER_OPEN;
					e->opened_at = now;
					e->cooldown_ms = Min((int64) grelout_breaker_cooldown,
										 (int64) grelout_retry_max);
					e->probe_at = now + e->cooldown_ms * 1000;
					e->disable_tried = false;
					e->version++;
					t = HEALTH_OPENED;
				}
			}
			else
				*hold = true;
			break;
		case HEALTH_NEUTRAL:
			if (pause_ms > 0)
			{
				e->counters.pauses++;
				e->paused_until = Max(e->paused_until, now + pause_ms * 1000);
			}
			break;
		case HEALTH_MESSAGE:
			/* the message's fault: shown, neither counted nor a reset */
			e->last_failure_at = now;
			strlcpy(e->last_error, error ? error : "", sizeof(e->last_error));
			break;
	}
	if (t == HEALTH_OPENED || t == HEALTH_REOPENED)
		e->counters.breaker_openings++;
	if (t != HEALTH_NONE)
	{
		snapshot_locked(e, w);
		w->event = (t == HEALTH_OPENED) ? "grelout.breaker.opened" :
			(t == HEALTH_CLOSED) ? "grelout.breaker.closed" : NULL;
	}
	SpinLockRelease(&e->mutex);
	return t;
}

/*
 * health_count: count a finished attempt of the handler and what became of
 * it; a delivery's commit-to-delivery latency (latency_ms, -1: unknown)
 * goes into the histogram.
 */
void
health_count(HealthEntry *e, HealthCount what, int64 latency_ms)
{
	HealthCounters *c = &e->counters;

	SpinLockAcquire(&e->mutex);
	c->attempts++;
	switch (what)
	{
		case HEALTH_COUNT_DELIVERED:
			c->delivered++;
			if (latency_ms >= 0)
			{
				c->latency_count++;
				c->latency_sum_ms += (uint64) latency_ms;
				c->latency_buckets[latency_bucket(latency_ms)]++;
			}
			break;
		case HEALTH_COUNT_RETRIED:
			c->retried++;
			break;
		case HEALTH_COUNT_DEAD:
			c->dead++;
			break;
		case HEALTH_COUNT_HELD:
			c->held++;
			break;
	}
	SpinLockRelease(&e->mutex);
}

/*
 * health_metrics: a copy (palloc'd HealthMetrics) of every entry of the
 * server, all databases, taken entry by entry under its spinlock.
 */
List *
health_metrics(void)
{
	HASH_SEQ_STATUS seq;
	HealthEntry *e;
	List	   *copies = NIL;
	TimestampTz now = GetCurrentTimestamp();

	if (health_hash == NULL)
		return NIL;
	LWLockAcquire(health_lock, LW_SHARED);
	hash_seq_init(&seq, health_hash);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		HealthMetrics *m = palloc(sizeof(HealthMetrics));

		m->key = e->key;
		SpinLockAcquire(&e->mutex);
		m->breaker = e->breaker;
		m->in_flight = e->in_flight;
		m->paused = (e->paused_until > now);
		m->pending = e->pending;
		m->oldest_ms = e->oldest_ms;
		m->concurrency_limit = e->concurrency_limit;
		m->counters = e->counters;
		SpinLockRelease(&e->mutex);
		copies = lappend(copies, m);
	}
	LWLockRelease(health_lock);
	return copies;
}

/*
 * health_set_backlog: the database's backlog as counted at "at": the n
 * handlers of b (entries made for those that have none yet), and nothing
 * pending for the database's other handlers.  An entry that holds a later
 * count (another relay's, made meanwhile) keeps it.
 */
void
health_set_backlog(Oid dboid, const HealthBacklog *b, int n, TimestampTz at)
{
	HASH_SEQ_STATUS seq;
	HealthEntry *e;

	for (int i = 0; i < n; i++)
	{
		e = health_entry(dboid, b[i].name, true);
		if (e == NULL)
			continue;
		SpinLockAcquire(&e->mutex);
		if (e->backlog_at <= at)
		{
			e->pending = b[i].pending;
			e->oldest_ms = b[i].oldest_ms;
			e->backlog_at = at;
		}
		SpinLockRelease(&e->mutex);
	}
	if (health_hash == NULL)
		return;
	LWLockAcquire(health_lock, LW_SHARED);
	hash_seq_init(&seq, health_hash);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		if (e->key.dboid != dboid)
			continue;
		SpinLockAcquire(&e->mutex);
		if (e->backlog_at < at)
		{
			e->pending = 0;
			e->oldest_ms = 0;
			e->backlog_at = at;
		}
		SpinLockRelease(&e->mutex);
	}
	LWLockRelease(health_lock);
}

/*
 * health_restricted: the names (palloc'd) of the database's handlers whose
 * breaker is not closed or that are paused: the claim asks health_gate
 * about each.
 */
List *
health_restricted(Oid dboid, TimestampTz now)
{
	HASH_SEQ_STATUS seq;
	HealthEntry *e;
	List	   *names = NIL;

	if (health_hash == NULL)
		return NIL;
	LWLockAcquire(health_lock, LW_SHARED);
	hash_seq_init(&seq, health_hash);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		bool		restricted;

		if (e->key.dboid != dboid)
			continue;
		SpinLockAcquire(&e->mutex);
		restricted = e->breaker != BREAKER_CLOSED || e->paused_until > now;
		SpinLockRelease(&e->mutex);
		if (restricted)
			names = lappend(names, pstrdup(e->key.name));
	}
	LWLockRelease(health_lock);
	return names;
}

/*
 * health_disable_due: the names of the database's handlers whose breaker
 * has been open for grelout.disable_after, each returned once per opening
 * (health_disable_undo if the disable could not be committed).
 */
List *
health_disable_due(Oid dboid, TimestampTz now)
{
	HASH_SEQ_STATUS seq;
	HealthEntry *e;
	List	   *names = NIL;

	if (health_hash == NULL || grelout_disable_after <= 0)
		return NIL;
	LWLockAcquire(health_lock, LW_SHARED);
	hash_seq_init(&seq, health_hash);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		bool		due = false;

		if (e->key.dboid != dboid)
			continue;
		SpinLockAcquire(&e->mutex);
		if (e->breaker == BREAKER_OPEN && !e->disable_tried && e->opened_at > 0 &&
			now - e->opened_at >= (int64) grelout_disable_after * USECS_PER_SEC)
		{
			e->disable_tried = true;
			due = true;
		}
		SpinLockRelease(&e->mutex);
		if (due)
			names = lappend(names, pstrdup(e->key.name));
	}
	LWLockRelease(health_lock);
	return names;
}

/* health_disable_undo: the disable did not commit; try again later. */
void
health_disable_undo(Oid dboid, const char *name)
{
	HealthEntry *e = health_entry(dboid, name, false);

	if (e == NULL)
		return;
	SpinLockAcquire(&e->mutex);
	e->disable_tried = false;
	SpinLockRelease(&e->mutex);
}

/*
 * health_forget: the handler was deleted or renamed: its shared entry, if
 * any, starts anew (closed, no history; a new version, so that a write of
 * the old history that is still on its way stores nothing).
 */
void
health_forget(Oid dboid, const char *name)
{
	HealthEntry *e = health_entry(dboid, name, false);

	if (e == NULL)
		return;
	SpinLockAcquire(&e->mutex);
	entry_reset(e);
	e->version++;
	SpinLockRelease(&e->mutex);
}

/*
 * health_reenabled: the handler was enabled again: a breaker that was not
 * closed is half-open, its probe due now.  Returns whether it changed, *w
 * then the state to store.
 */
bool
health_reenabled(Oid dboid, const char *name, HealthWrite *w)
{
	HealthEntry *e = health_entry(dboid, name, false);
	bool		changed = false;

	if (e == NULL)
		return false;
	SpinLockAcquire(&e->mutex);
	if (e->breaker != BREAKER_CLOSED)
	{
		e->breaker = BREAKER_HALF_OPEN;
		e->probe_at = GetCurrentTimestamp();
		e->probe_pid = 0;
		e->disable_tried = false;
		e->version++;
		snapshot_locked(e, w);
		changed = true;
	}
	SpinLockRelease(&e->mutex);
	return changed;
}

/*
 * grelout_handler_live: grelout._handler_live() RETURNS SETOF record, the
 * shared state of this database's handlers that grelout.handler_status
 * shows: breaker, failures in a row, last success, failure and error,
 * requests in flight over all relays.
 */
Datum
grelout_handler_live(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HASH_SEQ_STATUS seq;
	HealthEntry *e;
	List	   *copies = NIL;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);
	if (health_hash == NULL)
		return (Datum) 0;
	LWLockAcquire(health_lock, LW_SHARED);
	hash_seq_init(&seq, health_hash);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		HealthEntry *copy;

		if (e->key.dboid != MyDatabaseId)
			continue;
		copy = palloc(sizeof(HealthEntry));
		SpinLockAcquire(&e->mutex);
		memcpy(copy, e, sizeof(HealthEntry));
		SpinLockRelease(&e->mutex);
		copies = lappend(copies, copy);
	}
	LWLockRelease(health_lock);

	foreach(lc, copies)
	{
		HealthEntry *c = lfirst(lc);
		Datum		values[7];
		bool		nulls[7] = {false, false, false, false, false, false, false};

		values[0] = CStringGetTextDatum(c->key.name);
		values[1] = CStringGetTextDatum(health_breaker_names[c->breaker]);
		values[2] = Int32GetDatum(c->consecutive_failures);
		values[3] = TimestampTzGetDatum(c->last_success_at);
		nulls[3] = (c->last_success_at == 0);
		values[4] = TimestampTzGetDatum(c->last_failure_at);
		nulls[4] = (c->last_failure_at == 0);
		values[5] = CStringGetTextDatum(c->last_error);
		nulls[5] = (c->last_error[0] == '\0');
		values[6] = Int32GetDatum(c->in_flight);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

