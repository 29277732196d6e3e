/*-------------------------------------------------------------------------
 *
 * metrics.c
 *	  grelout.metrics(): the counters and gauges of every handler and relay
 *	  of the server, read from shared memory (no table is scanned), one row
 *	  a Prometheus sample: the series name (grelout_*), the database, the
 *	  handler or relay it is about, the "le" bound of a histogram bucket,
 *	  and the value.  contrib/prometheus/queries.yaml turns the rows into
 *	  the series of prometheus-postgres-exporter.
 *
 * Counters count from the server's start (Prometheus' rate() takes a
 * restart's reset in its stride); histogram buckets are cumulative, with
 * their _sum and _count, as Prometheus has them.  The handlers' counters
 * are kept in their health entries (health.c), the relays' in their slots
 * (shmem.c).  The handlers' backlog gauges (pending, the oldest pending's
 * age) are as a relay of their database last counted them (backlog.c, at
 * most a second or a poll interval old); the age is computed here, from
 * the oldest's publish time, so it grows between counts.
 *
 *-------------------------------------------------------------------------
 */
#include "health.h"
#include "shmem.h"

#include "commands/dbcommands.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"	/* get_database_name from 19 */
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(grelout_metrics);

/* The columns of grelout.metrics(). */
#define METRICS_COLUMNS 6

/* One row: the sample name of a series, its labels and value. */
static void
put_sample(ReturnSetInfo *rsinfo, const char *database, const char *handler,
		   int relay, const char *metric, const char *le, double value)
{
	Datum		values[METRICS_COLUMNS];
	bool		nulls[METRICS_COLUMNS] = {0};
	NameData	db;

	namestrcpy(&db, database);
	values[0] = NameGetDatum(&db);
	if (handler)
		values[1] = CStringGetTextDatum(handler);
	else
		nulls[1] = true;
	values[2] = Int32GetDatum(relay);
	nulls[2] = (relay <= 0);
	values[3] = CStringGetTextDatum(metric);
	if (le)
		values[4] = CStringGetTextDatum(le);
	else
		nulls[4] = true;
	values[5] = Float8GetDatum(value);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * handler_samples: one handler's counters, gauges and latency histogram
 * (the buckets summed into Prometheus' cumulative ones, bounds in seconds);
 * now_ms, the Unix time in milliseconds, ages the oldest pending delivery.
 */
static void
handler_samples(ReturnSetInfo *rsinfo, const char *database,
				const HealthMetrics *m, int64 now_ms)
{
	const HealthCounters *c = &m->counters;
	const char *h = m->key.name;
	uint64		cumulative = 0;
	double		oldest_age = 0;

	if (m->pending > 0 && m->oldest_ms > 0)
		oldest_age = Max(now_ms - m->oldest_ms, 0) / 1000.0;

	put_sample(rsinfo, database, h, 0, "grelout_handler_attempts_total", NULL, (double) c->attempts);
	put_sample(rsinfo, database, h, 0, "grelout_handler_delivered_total", NULL, (double) c->delivered);
	put_sample(rsinfo, database, h, 0, "grelout_handler_retried_total", NULL, (double) c->retried);
	put_sample(rsinfo, database, h, 0, "grelout_handler_dead_total", NULL, (double) c->dead);
	put_sample(rsinfo, database, h, 0, "grelout_handler_held_total", NULL, (double) c->held);
	put_sample(rsinfo, database, h, 0, "grelout_handler_pauses_total", NULL, (double) c->pauses);
	put_sample(rsinfo, database, h, 0, "grelout_handler_breaker_openings_total", NULL,
			   (double) c->breaker_openings);
	put_sample(rsinfo, database, h, 0, "grelout_handler_in_flight", NULL, (double) m->in_flight);
	put_sample(rsinfo, database, h, 0, "grelout_handler_breaker_state", NULL, (double) m->breaker);
	put_sample(rsinfo, database, h, 0, "grelout_handler_paused", NULL, m->paused ? 1.0 : 0.0);
	put_sample(rsinfo, database, h, 0, "grelout_handler_pending", NULL, (double) m->pending);
	put_sample(rsinfo, database, h, 0, "grelout_handler_oldest_pending_seconds", NULL, oldest_age);
	put_sample(rsinfo, database, h, 0, "grelout_handler_concurrency_limit", NULL,
			   (double) m->concurrency_limit);

	for (int i = 0; i < LATENCY_BUCKETS; i++)
	{
		char		le[32];

		cumulative += c->latency_buckets[i];
		if (i < LATENCY_BOUNDS)
			snprintf(le, sizeof(le), "%g", latency_bounds_ms[i] / 1000.0);
		else
			strlcpy(le, "+Inf", sizeof(le));
		put_sample(rsinfo, database, h, 0, "grelout_delivery_latency_seconds_bucket", le,
				   (double) cumulative);
	}
	put_sample(rsinfo, database, h, 0, "grelout_delivery_latency_seconds_sum", NULL,
			   c->latency_sum_ms / 1000.0);
	put_sample(rsinfo, database, h, 0, "grelout_delivery_latency_seconds_count", NULL,
			   (double) c->latency_count);
}

/*
 * relay_samples: each relay slot in use: its outcomes and database cycles
 * (their number, those rolled back, their time, and of it the time
 * writing outcomes and routing and claiming) and its attempt spans
 * (exported, dropped) since the slot went to its database, its requests
 * in flight, and whether it runs.
 */
static void
relay_samples(ReturnSetInfo *rsinfo)
{
	for (int i = 0; grelout_shared != NULL && i < grelout_shared->nslots; i++)
	{
		GreloutRelaySlot copy;
		char		database[NAMEDATALEN];
		const GreloutDbEntry *db;

		SpinLockAcquire(&grelout_shared->slots[i].mutex);
		memcpy(&copy, &grelout_shared->slots[i], sizeof(copy));
		SpinLockRelease(&grelout_shared->slots[i].mutex);
		if (copy.state == SLOT_FREE || copy.relay <= 0)
			continue;
		db = &grelout_shared->dbs[copy.db_entry];
		SpinLockAcquire(&grelout_shared->mutex);
		strlcpy(database, db->oid == copy.dboid ? db->name : "", sizeof(database));
		SpinLockRelease(&grelout_shared->mutex);
		if (database[0] == '\0')
			continue;
		put_sample(rsinfo, database, NULL, copy.relay, "grelout_relay_up", NULL,
				   copy.state == SLOT_RUNNING ? 1.0 : 0.0);
		put_sample(rsinfo, database, NULL, copy.relay, "grelout_relay_in_flight", NULL,
				   (double) copy.in_flight);
		put_sample(rsinfo, database, NULL, copy.relay, "grelout_relay_delivered_total", NULL,
				   (double) copy.delivered);
		put_sample(rsinfo, database, NULL, copy.relay, "grelout_relay_retried_total", NULL,
				   (double) copy.retried);
		put_sample(rsinfo, database, NULL, copy.relay, "grelout_relay_dead_total", NULL,
				   (double) copy.dead);
		put_sample(rsinfo, database, NULL, copy.relay, "grelout_relay_cycles_total", NULL,
				   (double) copy.cycles);
		put_sample(rsinfo, database, NULL, copy.relay, "grelout_relay_cycle_errors_total", NULL,
				   (double) copy.cycle_errors);
		put_sample(rsinfo, database, NULL, copy.relay, "grelout_relay_cycle_seconds_total", NULL,
				   copy.cycle_us / 1e6);
		put_sample(rsinfo, database, NULL, copy.relay, "grelout_relay_spans_exported_total", NULL,
				   (double) copy.spans_exported);
		put_sample(rsinfo, database, NULL, copy.relay, "grelout_relay_spans_dropped_total", NULL,
				   (double) copy.spans_dropped);
		put_sample(rsinfo, database, NULL, copy.relay, "grelout_relay_settle_seconds_total", NULL,
				   copy.settle_us / 1e6);
		put_sample(rsinfo, database, NULL, copy.relay, "grelout_relay_claim_seconds_total", NULL,
				   copy.claim_us / 1e6);
	}
}

/*
 * grelout_metrics: grelout.metrics() RETURNS SETOF record (database,
 * handler, relay, metric, le, value): every database's handlers and
 * relays, for one scraper connected to any database that has grelout.
 * No error text and no URL: names and numbers only (granted to
 * pg_monitor).  A handler of a database since dropped is left out.
 */
Datum
grelout_metrics(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	List	   *entries;
	ListCell   *lc;
	Oid			last_oid = InvalidOid;
	char	   *last_name = NULL;
	int64		now_ms;

	/* Unix milliseconds, as message ids carry them */
	now_ms = GetCurrentTimestamp() / 1000 +
		(int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * 1000;
	InitMaterializedSRF(fcinfo, 0);
	entries = health_metrics();
	foreach(lc, entries)
	{
		HealthMetrics *m = lfirst(lc);

		if (m->key.dboid != last_oid)
		{
			last_oid = m->key.dboid;
			last_name = get_database_name(last_oid);
		}
		if (last_name != NULL)
			handler_samples(rsinfo, last_name, m, now_ms);
	}
	relay_samples(rsinfo);
	PG_RETURN_VOID();
}
