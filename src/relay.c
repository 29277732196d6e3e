/*-------------------------------------------------------------------------
 *
 * relay.c
 *	  The relay: background workers that claim committed messages and POST
 *	  them to their handlers' URLs, at least once, with retries, backoff and
 *	  dead-lettering.
 *
 * One loop does everything, and never blocks outside its wait:
 *
 *	1. move HTTP requests along and collect the finished ones, deciding
 *	   each outcome (delivered, retry later, dead);
 *	2. in one short transaction, settle those outcomes and claim as many new
 *	   messages as there are free request slots; commit;
 *	3. start the claimed requests (only after the claim has committed: no
 *	   transaction is ever open across network I/O);
 *	4. wait on the latch, postmaster death and the HTTP sockets until the
 *	   earliest of libcurl's timers, the next due message and the poll
 *	   interval.
 *
 * A publisher's commit sets our latch through shared memory, so an idle
 * relay claims within milliseconds of a commit.  Signals set the latch too:
 * SIGHUP reloads settings, SIGTERM stops claiming and lets the requests in
 * flight finish for a short grace period, and the ProcSignalBarrier of
 * DROP DATABASE is absorbed by CHECK_FOR_INTERRUPTS at the top of the loop.
 *
 *-------------------------------------------------------------------------
 */
#include "grelout.h"

#include <time.h>

#include "access/xact.h"
#include "common/pg_prng.h"
#include "executor/spi.h"
#include "http.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "sign.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "store.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

/* How long in-flight requests may finish after SIGTERM. */
#define SHUTDOWN_GRACE_MS		2000
/* Pause after a failed database cycle. */
#define ERROR_BACKOFF_MS		1000
/* Retention purge: rows a batch, and pause when nothing is left. */
#define PURGE_BATCH				500
#define PURGE_IDLE_MS			10000

/* One claimed message on its way to its endpoint. */
typedef struct RelayJob
{
	HttpRequest req;			/* first: the engine hands this back */
	MemoryContext cxt;			/* owns the job and its strings */
	pg_uuid_t	id;
	char		id_str[UUID_LEN * 2 + 5];
	int64		lease;
	int			attempts;
	int			max_attempts;
	char	   *topic;
	struct RelayJob *next;		/* in the list of jobs to start */
} RelayJob;

/* Everything the loop carries from one turn to the next. */
typedef struct RelayState
{
	int			index;
	GreloutRelaySlot *slot;
	HttpEngine *engine;
	WaitEventSet *wes;
	MemoryContext jobs_cxt;
	MemoryContext settle_cxt;

	/* outcomes waiting to be written */
	SettleItem *settles;
	int			nsettles;
	int			settles_cap;
	int			count_delivered;
	int			count_retried;
	int			count_dead;

	/* claiming */
	bool		claim_wanted;	/* a wake-up came, or the last claim was full */
	TimestampTz next_claim_at;	/* next due message, or the poll */
	bool		extension_ready;
	RelayJob   *to_start;

	/* retention */
	TimestampTz next_purge_at;

	/* trouble and shutdown */
	TimestampTz retry_db_at;
	bool		stopping;
	TimestampTz stop_deadline;
	char		activity[64];
} RelayState;


/* Lease recovery states in GreloutShared.leases_recovered */
#define LEASES_TO_RECOVER		0
#define LEASES_RECOVERING		1
#define LEASES_RECOVERED		2

/* True while this relay owns the lease recovery. */
static bool recovering_leases = false;

/* abandon_lease_recovery: let another relay do it if we could not. */
static void
abandon_lease_recovery(int code, Datum arg)
{
	if (recovering_leases)
	{
		pg_atomic_write_u32(&grelout_shared->leases_recovered, LEASES_TO_RECOVER);
		recovering_leases = false;
	}
}

/*
 * may_claim_after_restart: true once the claims left over from before the
 * server started have been made due again.  The first relay to get here
 * does it, in the caller's transaction; the others wait for it.
 */
static bool
may_claim_after_restart(uint64 *released)
{
	uint32		expected = LEASES_TO_RECOVER;

	if (pg_atomic_read_u32(&grelout_shared->leases_recovered) == LEASES_RECOVERED)
		return true;
	if (!pg_atomic_compare_exchange_u32(&grelout_shared->leases_recovered,
										&expected, LEASES_RECOVERING))
		return false;
	recovering_leases = true;
	*released = store_release_stale_leases();
	return true;
}

/*
 * grelout_register_relays: at preload, register grelout.workers relays.
 */
void
grelout_register_relays(void)
{
	for (int i = 0; i < grelout_workers; i++)
	{
		BackgroundWorker worker;

		memset(&worker, 0, sizeof(worker));
		worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
		worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
		worker.bgw_restart_time = 2;
		snprintf(worker.bgw_library_name, BGW_MAXLEN, "grelout");
		snprintf(worker.bgw_function_name, BGW_MAXLEN, "grelout_relay_main");
		snprintf(worker.bgw_name, BGW_MAXLEN, "grelout relay %d", i + 1);
		snprintf(worker.bgw_type, BGW_MAXLEN, "grelout relay");
		worker.bgw_main_arg = Int32GetDatum(i);
		RegisterBackgroundWorker(&worker);
	}
}

/* ms_after: a timestamp ms milliseconds from now. */
static TimestampTz
ms_after(int64 ms)
{
	return TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ms);
}

/* ms_until: milliseconds from now until t, at least 0. */
static long
ms_until(TimestampTz t)
{
	TimestampTz now = GetCurrentTimestamp();

	return (t <= now) ? 0 : (long) ((t - now + 999) / 1000);
}

/* set_activity: what grelout.relays and pg_stat_activity show. */
static void
set_activity(RelayState *st, const char *activity)
{
	if (strcmp(st->activity, activity) == 0)
		return;
	strlcpy(st->activity, activity, sizeof(st->activity));
	grelout_slot_set_activity(st->slot, activity);
	pgstat_report_activity(STATE_IDLE, activity);
}

/*
 * sanitize: copy at most max bytes of src into a palloc'd string that is
 * printable ASCII, so that any response body can go into last_error.
 */
static char *
sanitize(const char *src, size_t len, size_t max)
{
	char	   *out = palloc(Min(len, max) + 1);
	size_t		n = Min(len, max);

	for (size_t i = 0; i < n; i++)
	{
		unsigned char c = (unsigned char) src[i];

		out[i] = (c >= 0x20 && c < 0x7F) ? (char) c : (c == '\n' || c == '\r' || c == '\t') ? ' ' : '?';
	}
	/* a body's final line break is no part of the message */
	while (n > 0 && out[n - 1] == ' ')
		n--;
	out[n] = '\0';
	return out;
}

/*
 * backoff_ms: min(retry_max, retry_base * 2^(attempts-1)), with the
 * retry_jitter fraction of it drawn at random.
 */
static int64
backoff_ms(int attempts)
{
	double		delay = (double) grelout_retry_base;

	for (int i = 1; i < attempts && delay < grelout_retry_max; i++)
		delay *= 2;
	delay = Min(delay, (double) grelout_retry_max);
	delay = delay * (1.0 - grelout_retry_jitter) +
		delay * grelout_retry_jitter * pg_prng_double(&pg_global_prng_state);
	return (int64) delay;
}

/* add_settle: queue one outcome for the next database cycle. */
static void
add_settle(RelayState *st, const pg_uuid_t *id, int64 lease, SettleState state,
		   int64 delay_ms, const char *error)
{
	MemoryContext old = MemoryContextSwitchTo(st->settle_cxt);
	SettleItem *it;

	if (st->nsettles >= st->settles_cap)
	{
		st->settles_cap = Max(64, st->settles_cap * 2);
		st->settles = st->settles ?
			repalloc(st->settles, sizeof(SettleItem) * st->settles_cap) :
			palloc(sizeof(SettleItem) * st->settles_cap);
	}
	it = &st->settles[st->nsettles++];
	memcpy(&it->id, id, sizeof(pg_uuid_t));
	it->lease = lease;
	it->state = state;
	it->delay_ms = delay_ms;
	it->error = error ? pstrdup(error) : NULL;
	MemoryContextSwitchTo(old);

	if (state == SETTLE_DELIVERED)
		st->count_delivered++;
	else if (state == SETTLE_RETRY)
		st->count_retried++;
	else
		st->count_dead++;
}

/* free_job: release a job's curl headers and memory. */
static void
free_job(RelayJob *job)
{
	if (job->req.headers)
		curl_slist_free_all(job->req.headers);
	MemoryContextDelete(job->cxt);
}

/* log_dead: the WARNING of a dead-lettered message. */
static void
log_dead(const char *id, const char *topic, int attempt, const char *error)
{
	ereport(WARNING,
			(errmsg("grelout message %s of topic \"%s\" is dead after attempt %d",
					id, topic, attempt),
			 errdetail("%s", error),
			 errhint("Fix the endpoint, then call outbox_redrive().")));
}

/*
 * finish_job: turn a finished request into an outcome, log retries and
 * dead letters, and queue the settle.
 */
static void
finish_job(RelayState *st, RelayJob *job)
{
	HttpRequest *r = &job->req;
	bool		responded = (r->result == CURLE_OK ||
							 (r->result == CURLE_WRITE_ERROR && r->body_cut)) &&
		r->status >= 100;
	char		errbuf[GRELOUT_LAST_ERROR_MAX];
	int64		delay;

	if (responded && r->status >= 200 && r->status < 300)
	{
		add_settle(st, &job->id, job->lease, SETTLE_DELIVERED, 0, NULL);
		free_job(job);
		return;
	}

	if (responded)
	{
		char	   *body = sanitize(r->body_start, r->body_start_len, 200);

		snprintf(errbuf, sizeof(errbuf), "HTTP %ld%s%s%s", r->status,
				 (r->status >= 300 && r->status < 400) ? " (redirects are not followed)" : "",
				 body[0] ? ": " : "", body);
		pfree(body);
	}
	else
	{
		char		raw[GRELOUT_LAST_ERROR_MAX];
		char	   *clean;

		http_request_describe_error(r, raw, sizeof(raw));
		clean = sanitize(raw, strlen(raw), sizeof(errbuf) - 1);
		strlcpy(errbuf, clean, sizeof(errbuf));
		pfree(clean);
	}
	grelout_slot_error(st->slot, errbuf);

	if (responded && r->status == 410)
	{
		/* the receiver asked us to stop: dead even with dead_letter off */
		log_dead(job->id_str, job->topic, job->attempts, errbuf);
		add_settle(st, &job->id, job->lease, SETTLE_DEAD, 0, errbuf);
		free_job(job);
		return;
	}

	if (grelout_dead_letter && job->attempts >= job->max_attempts)
	{
		log_dead(job->id_str, job->topic, job->attempts, errbuf);
		add_settle(st, &job->id, job->lease, SETTLE_DEAD, 0, errbuf);
		free_job(job);
		return;
	}

	if (responded && (r->status == 429 || r->status == 503) && r->has_retry_after)
		delay = Min(r->retry_after_ms, (int64) grelout_retry_max);
	else
		delay = backoff_ms(job->attempts);

	ereport(WARNING,
			(errmsg("grelout message %s of topic \"%s\" failed on attempt %d, retrying in %.1f s",
					job->id_str, job->topic, job->attempts, delay / 1000.0),
			 errdetail("%s", errbuf)));
	add_settle(st, &job->id, job->lease, SETTLE_RETRY, delay, errbuf);
	free_job(job);
}

/*
 * append_header: add "name: value" to a curl header list; a name or value
 * that could break the request is skipped (they are validated on write, so
 * this only guards against rows written around the checks).
 */
static void
append_header(struct curl_slist **list, const char *name, int nlen,
			  const char *value, int vlen)
{
	StringInfoData buf;
	struct curl_slist *l;

	if (!edge_header_name_valid(name, nlen) ||
		!edge_header_value_valid(value, vlen))
		return;
	initStringInfo(&buf);
	appendBinaryStringInfo(&buf, name, nlen);
	appendStringInfoString(&buf, ": ");
	appendBinaryStringInfo(&buf, value, vlen);
	l = curl_slist_append(*list, buf.data);
	pfree(buf.data);
	if (l == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory building webhook headers")));
	*list = l;
}

/* append_json_headers: the string members of a jsonb object as headers. */
static void
append_json_headers(struct curl_slist **list, Jsonb *headers)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *name = NULL;
	int			nlen = 0;

	if (!JB_ROOT_IS_OBJECT(headers) || JB_ROOT_IS_SCALAR(headers))
		return;
	it = JsonbIteratorInit(&headers->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
		{
			name = v.val.string.val;
			nlen = v.val.string.len;
		}
		else if (tok == WJB_VALUE && v.type == jbvString && name != NULL &&
				 !edge_header_name_reserved(name, nlen))
			append_header(list, name, nlen, v.val.string.val, v.val.string.len);
	}
}

/*
 * signature_header: "v1,<sig>" for the secret, followed by " v1,<sig>" for
 * the previous secret during a rotation.
 */
static void
append_signature(struct curl_slist **list, const char *id, int64 ts,
				 const char *body, size_t body_len,
				 const char *secret, const char *previous)
{
	const char *secrets[2] = {secret, previous};
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < 2; i++)
	{
		unsigned char key[GRELOUT_SECRET_MAX_BYTES];
		size_t		keylen;
		char		sig[GRELOUT_SIGNATURE_LEN];

		if (secrets[i] == NULL ||
			edge_secret_decode(secrets[i], strlen(secrets[i]), key, &keylen) != EDGE_SECRET_OK)
			continue;
		if (grelout_sign(key, keylen, id, ts, body, body_len, sig) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not compute webhook signature")));
		explicit_bzero(key, sizeof(key));
		if (buf.len > 0)
			appendStringInfoChar(&buf, ' ');
		appendStringInfoString(&buf, sig);
	}
	if (buf.len > 0)
		append_header(list, "webhook-signature", 17, buf.data, buf.len);
	pfree(buf.data);
}

/* text_column: a text column of a claimed row, copied, or NULL. */
static char *
text_column(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

/*
 * make_job: turn one claimed row into a request, ready to start after the
 * claim commits.  Returns NULL for a row dead-lettered by the claim.
 */
static RelayJob *
make_job(RelayState *st, HeapTuple tup, TupleDesc desc, int64 lease)
{
	MemoryContext cxt = AllocSetContextCreate(st->jobs_cxt, "grelout job",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	RelayJob   *job = palloc0(sizeof(RelayJob));
	bool		isnull;
	Datum		d;
	char	   *key;
	char	   *secret;
	char	   *previous;
	int64		timeout_ms;
	int64		now_s = (int64) time(NULL);
	char		buf[64];

	job->cxt = cxt;
	job->lease = lease;
	d = SPI_getbinval(tup, desc, CLAIM_ID, &isnull);
	memcpy(&job->id, DatumGetUUIDP(d), sizeof(pg_uuid_t));
	strlcpy(job->id_str, DatumGetCString(DirectFunctionCall1(uuid_out, d)),
			sizeof(job->id_str));
	job->topic = text_column(tup, desc, CLAIM_TOPIC);
	job->attempts = DatumGetInt32(SPI_getbinval(tup, desc, CLAIM_ATTEMPTS, &isnull));
	job->max_attempts = DatumGetInt32(SPI_getbinval(tup, desc, CLAIM_MAX_ATTEMPTS, &isnull));

	if (DatumGetBool(SPI_getbinval(tup, desc, CLAIM_EXHAUSTED, &isnull)))
	{
		char	   *err = text_column(tup, desc, CLAIM_LAST_ERROR);

		log_dead(job->id_str, job->topic, job->attempts, err ? err : "no attempts left");
		st->count_dead++;
		MemoryContextSwitchTo(old);
		MemoryContextDelete(cxt);
		return NULL;
	}

	key = text_column(tup, desc, CLAIM_KEY);
	secret = text_column(tup, desc, CLAIM_SECRET);
	previous = text_column(tup, desc, CLAIM_PREVIOUS_SECRET);
	job->req.url = text_column(tup, desc, CLAIM_URL);
	job->req.body = text_column(tup, desc, CLAIM_PAYLOAD);
	job->req.body_len = strlen(job->req.body);

	d = SPI_getbinval(tup, desc, CLAIM_TIMEOUT_MS, &isnull);
	timeout_ms = isnull ? grelout_request_timeout : DatumGetInt64(d);
	/* a request always ends well before its lease does */
	timeout_ms = Min(timeout_ms, (int64) grelout_lease_duration * 3 / 4);
	job->req.timeout_ms = (long) Max(timeout_ms, 1);

	append_header(&job->req.headers, "Content-Type", 12, "application/json", 16);
	append_header(&job->req.headers, "User-Agent", 10, GRELOUT_USER_AGENT,
				  strlen(GRELOUT_USER_AGENT));
	/* no "Expect: 100-continue" round trip for large bodies */
	{
		struct curl_slist *l = curl_slist_append(job->req.headers, "Expect:");

		if (l == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory building webhook headers")));
		job->req.headers = l;
	}
	append_header(&job->req.headers, "webhook-id", 10, job->id_str, strlen(job->id_str));
	snprintf(buf, sizeof(buf), INT64_FORMAT, now_s);
	append_header(&job->req.headers, "webhook-timestamp", 17, buf, strlen(buf));
	append_signature(&job->req.headers, job->id_str, now_s,
					 job->req.body, job->req.body_len, secret, previous);
	append_header(&job->req.headers, "grelout-topic", 13, job->topic, strlen(job->topic));
	snprintf(buf, sizeof(buf), "%d", job->attempts);
	append_header(&job->req.headers, "grelout-attempt", 15, buf, strlen(buf));
	if (key)
		append_header(&job->req.headers, "grelout-key", 11, key, strlen(key));

	d = SPI_getbinval(tup, desc, CLAIM_HANDLER_HEADERS, &isnull);
	if (!isnull)
		append_json_headers(&job->req.headers, DatumGetJsonbP(d));
	d = SPI_getbinval(tup, desc, CLAIM_HEADERS, &isnull);
	if (!isnull)
		append_json_headers(&job->req.headers, DatumGetJsonbP(d));

	if (secret)
		explicit_bzero(secret, strlen(secret));
	if (previous)
		explicit_bzero(previous, strlen(previous));
	MemoryContextSwitchTo(old);
	return job;
}

/* drop_unstarted: forget jobs whose claim did not commit. */
static void
drop_unstarted(RelayState *st)
{
	while (st->to_start)
	{
		RelayJob   *job = st->to_start;

		st->to_start = job->next;
		free_job(job);
	}
}

/*
 * db_cycle: one transaction that settles the queued outcomes and, when
 * wanted, claims up to the free request slots.  On error the transaction
 * is rolled back, the outcomes stay queued and nothing claimed is started.
 */
static void
db_cycle(RelayState *st, bool claim)
{
	MemoryContext loop_cxt = CurrentMemoryContext;
	int			free_slots = grelout_concurrency - http_engine_running(st->engine);

	uint64		released = 0;

	PG_TRY();
	{
		bool		ready;

		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		pgstat_report_activity(STATE_RUNNING, "grelout: settling and claiming");

		ready = store_extension_ready();
		if (!ready)
		{
			/* DROP EXTENSION: what was in flight has no row to settle */
			st->nsettles = 0;
			st->count_delivered = st->count_retried = st->count_dead = 0;
			MemoryContextReset(st->settle_cxt);
			st->settles = NULL;
			st->settles_cap = 0;
		}
		if (ready && st->nsettles > 0)
			store_settle(st->settles, st->nsettles,
						 grelout_keep_mode != GRELOUT_KEEP_OFF);

		if (ready && claim && free_slots > 0 &&
			!may_claim_after_restart(&released))
		{
			/* another relay is releasing the old leases: come back soon */
			claim = false;
			st->claim_wanted = false;
			st->next_claim_at = ms_after(100);
		}

		if (ready && claim && free_slots > 0)
		{
			int			limit = Min(grelout_batch_size, free_slots);
			int64		lease;
			uint64		nrows;
			SPITupleTable *tt;

			if (!pg_strong_random(&lease, sizeof(lease)))
				lease = (int64) pg_prng_uint64(&pg_global_prng_state);
			tt = store_claim(limit, grelout_lease_duration, lease,
							 grelout_max_attempts, grelout_dead_letter, &nrows);
			for (uint64 i = 0; i < nrows; i++)
			{
				RelayJob   *job = make_job(st, tt->vals[i], tt->tupdesc, lease);

				if (job)
				{
					job->next = st->to_start;
					st->to_start = job;
				}
			}

			/*
			 * A full batch means more may be due; otherwise sleep until the
			 * next due message (or lease), or the poll interval.
			 */
			st->claim_wanted = (nrows >= (uint64) limit);
			st->next_claim_at = ms_after(grelout_poll_interval);
			if (!st->claim_wanted)
			{
				int64		due = store_next_due_ms();

				if (due >= 0 && due < grelout_poll_interval)
					st->next_claim_at = ms_after(due);
			}
		}

		if (ready && grelout_keep_mode == GRELOUT_KEEP_WINDOW &&
			GetCurrentTimestamp() >= st->next_purge_at)
		{
			uint64		n = store_purge_delivered(grelout_keep_window_ms, PURGE_BATCH);

			st->next_purge_at = (n >= PURGE_BATCH) ? 0 : ms_after(PURGE_IDLE_MS);
		}

		SPI_finish();
		PopActiveSnapshot();
		CommitTransactionCommand();
		pgstat_report_activity(STATE_IDLE, st->activity);

		if (recovering_leases)
		{
			pg_atomic_write_u32(&grelout_shared->leases_recovered, LEASES_RECOVERED);
			recovering_leases = false;
			if (released > 0)
				ereport(LOG,
						(errmsg("grelout relay %d made " UINT64_FORMAT " messages claimed before the server started due again",
								st->index + 1, released)));
		}

		if (ready != st->extension_ready)
		{
			ereport(LOG,
					(errmsg(ready ? "grelout relay %d found the grelout extension in database \"%s\", delivering" :
							"grelout relay %d is waiting for CREATE EXTENSION grelout in database \"%s\"",
							st->index + 1, grelout_database)));
			st->extension_ready = ready;
		}
		if (!ready)
		{
			st->claim_wanted = false;
			st->next_claim_at = ms_after(grelout_poll_interval);
		}

		/* the outcomes are written: count them and forget them */
		grelout_slot_count(st->slot, st->count_delivered, st->count_retried,
						   st->count_dead, http_engine_running(st->engine));
		st->count_delivered = st->count_retried = st->count_dead = 0;

		/*
		 * Free the queue with the error strings it holds: keeping the array
		 * but not the strings leaked one string per failed attempt.
		 */
		st->nsettles = 0;
		MemoryContextReset(st->settle_cxt);
		st->settles = NULL;
		st->settles_cap = 0;
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(loop_cxt);
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		pgstat_report_activity(STATE_IDLE, st->activity);
		abandon_lease_recovery(0, 0);
		drop_unstarted(st);
		st->retry_db_at = ms_after(ERROR_BACKOFF_MS);
	}
	PG_END_TRY();
}

/* start_claimed: send the requests whose claim has committed. */
static void
start_claimed(RelayState *st)
{
	while (st->to_start)
	{
		RelayJob   *job = st->to_start;

		st->to_start = job->next;
		if (!http_engine_start(st->engine, &job->req))
		{
			job->req.result = CURLE_FAILED_INIT;
			finish_job(st, job);
		}
	}
}

/* collect_finished: decide the outcome of every finished request. */
static void
collect_finished(RelayState *st)
{
	HttpRequest *req;

	http_engine_perform(st->engine);
	while ((req = http_engine_next_done(st->engine)) != NULL)
		finish_job(st, (RelayJob *) req);
}

/* reload_settings: SIGHUP, and once at start. */
static void
reload_settings(RelayState *st, bool initial)
{
	if (!initial)
		ProcessConfigFile(PGC_SIGHUP);
	http_engine_configure(st->engine, grelout_ca_file,
						  grelout_block_private_networks, grelout_allowed_networks);
	st->claim_wanted = true;
}

/*
 * wait_timeout: how long the loop may sleep: until libcurl's next timer,
 * the next claim, the shutdown deadline or the next retry of the database.
 */
static long
wait_timeout(RelayState *st, bool may_claim)
{
	long		timeout = grelout_poll_interval;
	long		t;

	t = http_engine_timeout(st->engine);
	if (t >= 0)
		timeout = Min(timeout, t);
	if (st->nsettles > 0)
		timeout = Min(timeout, ms_until(st->retry_db_at));
	if (may_claim)
	{
		if (st->claim_wanted)
			timeout = Min(timeout, ms_until(st->retry_db_at));
		else
			timeout = Min(timeout, Max(ms_until(st->next_claim_at),
									   ms_until(st->retry_db_at)));
	}
	if (grelout_keep_mode == GRELOUT_KEEP_WINDOW && !st->stopping)
		timeout = Min(timeout, ms_until(st->next_purge_at));
	if (st->stopping)
		timeout = Min(timeout, ms_until(st->stop_deadline));
	return Max(timeout, 0);
}

/*
 * grelout_relay_main: entry point of a relay worker; never returns.
 */
void
grelout_relay_main(Datum arg)
{
	RelayState	st;

	memset(&st, 0, sizeof(st));
	st.index = DatumGetInt32(arg);

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();

	st.slot = grelout_slot_attach(st.index);
	before_shmem_exit(abandon_lease_recovery, 0);
	BackgroundWorkerInitializeConnection(grelout_database,
										 (grelout_role && grelout_role[0]) ? grelout_role : NULL,
										 0);

	/*
	 * The relay's own commits need not wait for the WAL flush: a lost claim
	 * or settle only means a redelivery, which at-least-once allows.  The
	 * publishers' commits stay as durable as they configure them.
	 */
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);

	/*
	 * Every relay statement has an index made for it, and the claim's plan
	 * is kept (store.c): planned while the outbox looked empty (just
	 * truncated or vacuumed), it would otherwise be a sequential scan and a
	 * sort that stays in use, growing with the table, until the next ANALYZE.
	 */
	SetConfigOption("enable_seqscan", "off", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("search_path", "pg_catalog", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("application_name", "grelout relay", PGC_SUSET, PGC_S_OVERRIDE);
	pgstat_report_appname("grelout relay");

	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		ereport(FATAL,
				(errcode(ERRCODE_SYSTEM_ERROR),
				 errmsg("could not initialize libcurl")));
	st.engine = http_engine_create();
	if (st.engine == NULL)
		ereport(FATAL,
				(errcode(ERRCODE_SYSTEM_ERROR),
				 errmsg("could not create the HTTP engine: %m")));

	st.jobs_cxt = AllocSetContextCreate(TopMemoryContext, "grelout jobs",
										ALLOCSET_DEFAULT_SIZES);
	st.settle_cxt = AllocSetContextCreate(TopMemoryContext, "grelout settles",
										  ALLOCSET_DEFAULT_SIZES);
	st.wes = CreateWaitEventSet(TopMemoryContext, 3);
	AddWaitEventToSet(st.wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(st.wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	AddWaitEventToSet(st.wes, WL_SOCKET_READABLE, http_engine_fd(st.engine),
					  NULL, NULL);

	st.extension_ready = true;
	st.claim_wanted = true;
	reload_settings(&st, true);
	set_activity(&st, "idle");
	ereport(LOG,
			(errmsg("grelout relay %d started in database \"%s\"",
					st.index + 1, grelout_database)));

	for (;;)
	{
		WaitEvent	events[3];
		int			nevents;
		bool		may_claim;
		bool		db_due;

		CHECK_FOR_INTERRUPTS();

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			reload_settings(&st, false);
		}
		if (ShutdownRequestPending && !st.stopping)
		{
			st.stopping = true;
			st.stop_deadline = ms_after(SHUTDOWN_GRACE_MS);
			set_activity(&st, "stopping");
		}

		collect_finished(&st);

		may_claim = !st.stopping && grelout_relay_enabled &&
			http_engine_running(st.engine) < grelout_concurrency;
		db_due = GetCurrentTimestamp() >= st.retry_db_at &&
			(st.nsettles > 0 ||
			 (may_claim && (st.claim_wanted ||
							GetCurrentTimestamp() >= st.next_claim_at)) ||
			 (grelout_keep_mode == GRELOUT_KEEP_WINDOW && !st.stopping &&
			  GetCurrentTimestamp() >= st.next_purge_at));
		if (db_due)
		{
			db_cycle(&st, may_claim);
			start_claimed(&st);
		}

		if (st.stopping &&
			(http_engine_running(st.engine) == 0 ||
			 GetCurrentTimestamp() >= st.stop_deadline))
		{
			collect_finished(&st);
			if (st.nsettles > 0)
				db_cycle(&st, false);
			ereport(LOG,
					(errmsg("grelout relay %d stopping with %d requests unfinished",
							st.index + 1, http_engine_running(st.engine)),
					 http_engine_running(st.engine) > 0 ?
					 errdetail("Their messages are delivered again once their lease expires.") : 0));
			proc_exit(1);
		}

		if (!st.stopping)
		{
			int			running = http_engine_running(st.engine);

			if (!grelout_relay_enabled)
				set_activity(&st, "paused (grelout.relay is off)");
			else if (!st.extension_ready)
				set_activity(&st, "waiting for CREATE EXTENSION grelout");
			else if (running > 0)
				set_activity(&st, "delivering");
			else
				set_activity(&st, "idle");
		}
		grelout_slot_count(st.slot, 0, 0, 0, http_engine_running(st.engine));

		may_claim = !st.stopping && grelout_relay_enabled &&
			http_engine_running(st.engine) < grelout_concurrency;
		nevents = WaitEventSetWait(st.wes, wait_timeout(&st, may_claim),
								   events, lengthof(events), PG_WAIT_EXTENSION);
		for (int i = 0; i < nevents; i++)
		{
			if (events[i].events & WL_LATCH_SET)
			{
				ResetLatch(MyLatch);
				st.claim_wanted = true;
			}
		}
	}
}
