/*-------------------------------------------------------------------------
 *
 * spans.c
 *	  The relay's span export (issue 33): with grelout.otlp_endpoint set,
 *	  one span of each finished delivery attempt, sent in batches to an
 *	  OpenTelemetry collector over OTLP/HTTP, as JSON (otlp.c encodes).
 *
 * A span is the attempt as the endpoint saw it: the trace and span ids of
 * the traceparent the attempt sent (webhook.c), the publisher's span as its
 * parent; a message published without a trace context gets a root span of
 * a new trace (no traceparent was sent with it).  A message whose trace is
 * not sampled (its traceparent's flags) gets no span, as a parent-based
 * sampler would decide.
 *
 * Exporting never delays a delivery:
 *
 *	- a finished attempt appends its span, encoded at once, to the pending
 *	  batch in the relay's memory, at most SPANS_PENDING_MAX spans and
 *	  SPANS_PENDING_BYTES of them; a span that finds the batch full is
 *	  dropped and counted;
 *	- the batch is sent once SPANS_BATCH spans wait, or its oldest has
 *	  waited SPANS_FLUSH_MS, as one POST through the relay's own HTTP engine
 *	  (its SSRF rules, TLS settings and wait loop), with a timeout of
 *	  SPANS_TIMEOUT_MS; at most one export is in flight, and the spans
 *	  finished meanwhile wait in the next batch;
 *	- an export the collector does not take (no answer, a timeout, an
 *	  answer other than 2xx) is dropped, not retried, and its spans counted
 *	  as dropped; its failure is logged once for an endpoint, and so is
 *	  the collector's return (not once a batch);
 *	- the export is not a request of the relay's deliveries: it takes no
 *	  request slot (jobs_running), and a stopping relay does not wait for
 *	  it (what is pending or in flight then is counted as dropped).
 *
 * The counts go to the relay's shared slot (grelout.metrics():
 * grelout_relay_spans_exported_total, grelout_relay_spans_dropped_total).
 *
 *-------------------------------------------------------------------------
 */
#include "relay.h"

#include <time.h>

#include "lib/stringinfo.h"
#include "otlp.h"
#include "utils/memutils.h"

/* Most spans waiting for export, and most bytes of them; more are dropped. */
#define SPANS_PENDING_MAX	2048
#define SPANS_PENDING_BYTES	(4 * 1024 * 1024)
/* A batch is sent once this many spans wait, */
#define SPANS_BATCH			512
/* or once its oldest span has waited this long (ms). */
#define SPANS_FLUSH_MS		1000
/* The timeout of one export (ms). */
#define SPANS_TIMEOUT_MS	5000

/* The export in flight. */
typedef struct SpanExport
{
	HttpRequest req;			/* first: the engine hands this back */
	char	   *url;
	char	   *body;
	struct curl_slist headers[3];
	int			nspans;
} SpanExport;

/* The relay's spans: the pending batch and the export in flight. */
static struct
{
	HttpEngine *engine;
	MemoryContext cxt;
	StringInfoData pending;		/* span objects, separated by commas */
	int			npending;
	MonoTime	first_at;		/* when the oldest pending span came */
	SpanExport *export;			/* in flight, or NULL */
	char	   *failing;		/* the endpoint whose last export failed (and
								 * was logged), or NULL */
} spans;

/* spans_init: the engine exports go through (the relay's, at its start). */
void
spans_init(HttpEngine *engine)
{
	spans.engine = engine;
	spans.cxt = AllocSetContextCreate(TopMemoryContext, "grelout spans",
									  ALLOCSET_DEFAULT_SIZES);
	spans.pending.data = NULL;
}

/* spans_exporting: how many exports are in flight (0 or 1). */
int
spans_exporting(void)
{
	return spans.export != NULL ? 1 : 0;
}

/* hex: bytes as lower-case hex digits, NUL-terminated, into out. */
static void
hex(const uint8 *bytes, int n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (int i = 0; i < n; i++)
	{
		out[2 * i] = digits[bytes[i] >> 4];
		out[2 * i + 1] = digits[bytes[i] & 15];
	}
	out[2 * n] = '\0';
}

/*
 * span_ids: the trace id, span id and parent span id of a job's span: those
 * of the traceparent it sent, or new random ones for a root span (parent
 * "").  False when the span is not to be exported: its trace is not
 * sampled, or no random bytes could be had.
 */
static bool
span_ids(const WebhookJob *job, char *trace_id, char *span_id, char *parent)
{
	const char *tp = job->trace_sent;
	uint8		random[24];

	if (tp[0] != '\0')
	{
		char		flags = tp[54];
		int			low = (flags >= 'a') ? flags - 'a' + 10 : flags - '0';

		if ((low & 1) == 0)
			return false;
		memcpy(trace_id, tp + 3, 32);
		trace_id[32] = '\0';
		memcpy(span_id, tp + 36, 16);
		span_id[16] = '\0';
		strlcpy(parent, job->trace_parent_id, 17);
		return true;
	}
	if (!pg_strong_random(random, sizeof(random)))
		return false;
	/* ids of all zeros are invalid: one in 2^64 or more, never send them */
	random[15] |= 1;
	random[23] |= 1;
	hex(random, 16, trace_id);
	hex(random + 16, 8, span_id);
	parent[0] = '\0';
	return true;
}

/* unix_now_ns: the wall clock, in nanoseconds since the Unix epoch. */
static uint64
unix_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64) ts.tv_sec * 1000000000 + (uint64) ts.tv_nsec;
}

/* append_span: a span's JSON at the end of the pending batch. */
static void
append_span(const OtlpSpan *s)
{
	size_t		n = otlp_span_json(s, NULL, 0);

	if (spans.pending.data == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(spans.cxt);

		initStringInfo(&spans.pending);
		MemoryContextSwitchTo(old);
	}
	if (spans.npending > 0)
		appendStringInfoChar(&spans.pending, ',');
	enlargeStringInfo(&spans.pending, (int) n + 1);
	otlp_span_json(s, spans.pending.data + spans.pending.len, n + 1);
	spans.pending.len += (int) n;
	if (spans.npending++ == 0)
		spans.first_at = relay_now();
}

/*
 * spans_record: a job's attempt finished, answered with status (0: no
 * answer), delivered or not: its span joins the pending batch, when spans
 * are exported and the trace is sampled; dropped and counted when the
 * batch is full.
 */
void
spans_record(const WebhookJob *job, int status, bool delivered)
{
	OtlpSpan	s;
	char		trace_id[33];
	char		span_id[17];
	char		parent[17];
	char		url[OTLP_URL_MAX];
	char		host[OTLP_HOST_MAX];
	char		error_type[OTLP_ERROR_TYPE_MAX];
	int			port = 0;
	uint64		took_ns;

	if (grelout_otlp_endpoint == NULL || grelout_otlp_endpoint[0] == '\0' ||
		!span_ids(job, trace_id, span_id, parent))
		return;
	if (spans.npending >= SPANS_PENDING_MAX ||
		(spans.pending.data != NULL && spans.pending.len >= SPANS_PENDING_BYTES))
	{
		grelout_slot_spans(MyRelay.slot, 0, 1);
		return;
	}

	memset(&s, 0, sizeof(s));
	s.trace_id = trace_id;
	s.span_id = span_id;
	s.parent_span_id = parent;
	took_ns = (uint64) Max(relay_now() - job->started_us, 0) * 1000;
	s.end_ns = unix_now_ns();
	s.start_ns = s.end_ns > took_ns ? s.end_ns - took_ns : 0;
	otlp_url_full(job->req.url, strlen(job->req.url), url, sizeof(url));
	s.url_full = url;
	if (otlp_server(job->req.url, strlen(job->req.url), host, sizeof(host), &port))
	{
		s.server_address = host;
		s.server_port = port;
	}
	s.message_id = job->id_str;
	s.topic = job->topic;
	s.handler = job->handler;
	s.attempt = job->attempts;
	s.status_code = status;
	if (!delivered)
	{
		otlp_error_type(status > 0, status, job->req.result,
						job->req.refused[0] != '\0', error_type);
		s.error_type = error_type;
	}
	append_span(&s);
}

/* drop_pending: the pending batch dropped and counted. */
static void
drop_pending(void)
{
	if (spans.npending > 0)
		grelout_slot_spans(MyRelay.slot, 0, spans.npending);
	spans.npending = 0;
	if (spans.pending.data != NULL)
		resetStringInfo(&spans.pending);
}

/* export_free: an export's memory. */
static void
export_free(SpanExport *e)
{
	pfree(e->url);
	pfree(e->body);
	pfree(e);
}

/*
 * start_export: the pending batch as one ExportTraceServiceRequest, sent
 * to grelout.otlp_endpoint; dropped and counted when it cannot start.
 */
static void
start_export(void)
{
	MemoryContext old = MemoryContextSwitchTo(spans.cxt);
	SpanExport *e = palloc0(sizeof(SpanExport));
	const char *tail = otlp_request_tail();
	size_t		head = otlp_request_head(GRELOUT_VERSION, NULL, 0);
	size_t		len = head + spans.pending.len + strlen(tail);

	e->url = pstrdup(grelout_otlp_endpoint);
	e->body = palloc(len + 1);
	otlp_request_head(GRELOUT_VERSION, e->body, head + 1);
	memcpy(e->body + head, spans.pending.data, spans.pending.len);
	strcpy(e->body + head + spans.pending.len, tail);
	e->nspans = spans.npending;
	MemoryContextSwitchTo(old);

	e->headers[0].data = "Content-Type: application/json";
	e->headers[1].data = "User-Agent: " GRELOUT_USER_AGENT;
	/* no "Expect: 100-continue" round trip for a large batch */
	e->headers[2].data = "Expect:";
	e->headers[0].next = &e->headers[1];
	e->headers[1].next = &e->headers[2];
	e->headers[2].next = NULL;
	e->req.url = e->url;
	e->req.headers = e->headers;
	e->req.body = e->body;
	e->req.body_len = len;
	e->req.timeout_ms = SPANS_TIMEOUT_MS;
	e->req.purpose = HTTP_PURPOSE_SPANS;

	spans.npending = 0;
	resetStringInfo(&spans.pending);
	if (!http_engine_start(spans.engine, &e->req))
	{
		grelout_slot_spans(MyRelay.slot, 0, e->nspans);
		export_free(e);
		return;
	}
	spans.export = e;
}

/*
 * spans_flush: send the pending batch if it is due (full enough, or old
 * enough) and no export is in flight.  With grelout.otlp_endpoint turned
 * off meanwhile, the batch is dropped.
 */
void
spans_flush(void)
{
	if (spans.export != NULL || spans.npending == 0)
		return;
	if (grelout_otlp_endpoint == NULL || grelout_otlp_endpoint[0] == '\0')
	{
		drop_pending();
		return;
	}
	if (spans.npending < SPANS_BATCH &&
		relay_now() < spans.first_at + (MonoTime) SPANS_FLUSH_MS * 1000)
		return;
	start_export();
}

/*
 * spans_drained: for a relay that retires: sends the pending batch at once
 * (no waiting for it to fill) and says whether nothing is left, pending or
 * in flight.  An export in flight ends within its timeout.
 */
bool
spans_drained(void)
{
	if (spans.export == NULL && spans.npending > 0)
	{
		if (grelout_otlp_endpoint == NULL || grelout_otlp_endpoint[0] == '\0')
			drop_pending();
		else
			start_export();
	}
	return spans.export == NULL && spans.npending == 0;
}

/* spans_timeout: timeout, or less, to wake when the pending batch is due. */
long
spans_timeout(long timeout)
{
	if (spans.export != NULL || spans.npending == 0)
		return timeout;
	return Min(timeout, relay_ms_until(spans.first_at +
									   (MonoTime) SPANS_FLUSH_MS * 1000));
}

/*
 * spans_export_done: the export in flight finished: its spans counted as
 * exported (a 2xx answer) or dropped; a failure logged once until an
 * export succeeds again or the endpoint changes.
 */
void
spans_export_done(HttpRequest *req)
{
	SpanExport *e = (SpanExport *) req;

	if (spans.export == e)
		spans.export = NULL;
	if (req->result == CURLE_OK && req->status >= 200 && req->status < 300)
	{
		grelout_slot_spans(MyRelay.slot, e->nspans, 0);
		if (spans.failing != NULL)
		{
			ereport(LOG,
					(errmsg("grelout relay %d exports spans to the OTLP collector again",
							MyRelay.relay)));
			pfree(spans.failing);
			spans.failing = NULL;
		}
	}
	else
	{
		char		why[HTTP_REFUSED_MAX];

		if (req->result == CURLE_OK && req->status > 0)
			snprintf(why, sizeof(why), "HTTP %ld", req->status);
		else
			http_request_describe_error(req, why, sizeof(why));
		grelout_slot_spans(MyRelay.slot, 0, e->nspans);
		if (spans.failing == NULL || strcmp(spans.failing, e->url) != 0)
			ereport(LOG,
					(errmsg("grelout relay %d could not export %d spans to the OTLP collector: %s",
							MyRelay.relay, e->nspans, why),
					 errdetail("Spans are dropped and counted in grelout_relay_spans_dropped_total until an export succeeds; deliveries are not affected."),
					 errhint("Check grelout.otlp_endpoint and the collector.")));
		if (spans.failing != NULL)
			pfree(spans.failing);
		spans.failing = MemoryContextStrdup(spans.cxt, e->url);
	}
	export_free(e);
}

/*
 * spans_stop: the relay stops: the pending batch, and the export in flight
 * (whose answer it will not wait for), counted as dropped.
 */
void
spans_stop(void)
{
	drop_pending();
	if (spans.export != NULL)
		grelout_slot_spans(MyRelay.slot, 0, spans.export->nspans);
}
