/*-------------------------------------------------------------------------
 *
 * webhook.c
 *	  The webhook request of one claimed message, built from its claimed
 *	  row: the URL and body, the timeout (always shorter than the lease),
 *	  and the headers in the order the contract gives them: grelout's own
 *	  (content-type, user-agent, webhook-id, webhook-timestamp, the
 *	  Standard Webhooks signature, grelout-topic, grelout-handler (1.1),
 *	  grelout-attempt, grelout-key), then the handler's static headers, then the message's.
 *	  A message's traceparent is sent with a span id of the attempt's own
 *	  (child_traceparent), so that the endpoint's spans join its trace.
 *
 * The only signer of requests (sign.c).  Everything a request needs is
 * copied into the job's own memory context, so the job outlives the
 * claim's transaction; a job that fails half-built releases its memory.
 * The header list is built there too (HeaderLines), not with
 * curl_slist_append: one buffer for the lines and one array for the list's
 * nodes, no malloc a header.
 *
 *-------------------------------------------------------------------------
 */
#include "webhook.h"

#include <time.h>

#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "sign.h"
#include "store.h"
#include "tracectx.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/*
 * The header lines of one request while it is built: "name: value" lines,
 * each ended by a NUL, one after another in one buffer of the job's memory
 * context, and where each starts.  header_list turns them into the list
 * libcurl reads (and never changes or frees).
 */
typedef struct HeaderLines
{
	StringInfoData buf;
	int		   *starts;
	int			n;
	int			cap;
} HeaderLines;

/* header_line_start: a new line begins at the end of the buffer. */
static void
header_line_start(HeaderLines *h)
{
	if (h->n == h->cap)
	{
		h->cap = h->cap ? h->cap * 2 : 16;
		h->starts = h->starts ? repalloc(h->starts, h->cap * sizeof(int)) :
			palloc(h->cap * sizeof(int));
	}
	h->starts[h->n++] = h->buf.len;
}

/*
 * append_header: add "name: value"; a name or value that could break the
 * request is skipped (they are validated on write, so this only guards
 * against rows written around the checks).
 */
static void
append_header(HeaderLines *h, const char *name, int nlen,
			  const char *value, int vlen)
{
	if (!edge_header_name_valid(name, nlen) ||
		!edge_header_value_valid(value, vlen))
		return;
	header_line_start(h);
	appendBinaryStringInfo(&h->buf, name, nlen);
	appendBinaryStringInfo(&h->buf, ": ", 2);
	appendBinaryStringInfo(&h->buf, value, vlen);
	appendStringInfoChar(&h->buf, '\0');
}

/* append_raw: add one header line as is (no checks). */
static void
append_raw(HeaderLines *h, const char *line)
{
	header_line_start(h);
	appendBinaryStringInfo(&h->buf, line, strlen(line) + 1);
}

/*
 * header_list: the lines as a curl_slist whose nodes, like the lines, are
 * in the current memory context; NULL for none.
 */
static struct curl_slist *
header_list(HeaderLines *h)
{
	struct curl_slist *nodes;

	if (h->n == 0)
		return NULL;
	nodes = palloc(h->n * sizeof(struct curl_slist));
	for (int i = 0; i < h->n; i++)
	{
		nodes[i].data = h->buf.data + h->starts[i];
		nodes[i].next = (i + 1 < h->n) ? &nodes[i + 1] : NULL;
	}
	return nodes;
}

/*
 * names_count: how many keys of a headers object are this name, in any
 * letter case.
 */
static int
names_count(Jsonb *headers, const char *name, int nlen)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	int			n = 0;

	if (headers == NULL || !JB_ROOT_IS_OBJECT(headers) || JB_ROOT_IS_SCALAR(headers))
		return 0;
	it = JsonbIteratorInit(&headers->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY && v.val.string.len == nlen &&
			pg_strncasecmp(v.val.string.val, name, nlen) == 0)
			n++;
	}
	return n;
}

/* handler_sets: does the handler's headers object set this name (any case)? */
static bool
handler_sets(Jsonb *handler, const char *name, int nlen)
{
	return names_count(handler, name, nlen) > 0;
}

/*
 * child_traceparent: into out, the traceparent an attempt sends for a
 * message's stored one: its trace id and flags, and a new random span id
 * (pg_strong_random), one for each attempt; 0 if the stored value is not a
 * valid traceparent (a message stored before 1.2: sent as it is) or no
 * random bytes could be had.
 */
static size_t
child_traceparent(const char *value, int len, char *out)
{
	uint8		span[8];

	if (!pg_strong_random(span, sizeof(span)))
		return 0;
	/* an all-zero span id is invalid: one in 2^64, but never send it */
	if (memcmp(span, "\0\0\0\0\0\0\0\0", sizeof(span)) == 0)
		span[7] = 1;
	return tracectx_child(value, (size_t) len, span, out);
}

/*
 * append_json_headers: the string members of a jsonb object as headers.
 * For a message's headers (handler given), a header never replaces or
 * removes what the handler, its URL or the relay sets: names the
 * handler's headers set, every name edge_header_name_message_reserved
 * gives (credentials, which the URL's userinfo may also stand for;
 * webhook-*; hop-by-hop and framing headers), names the message sets more
 * than once in different letter cases, and blank values (libcurl would
 * drop its own header of that name with them) are not sent.  This holds
 * for messages stored before 1.2, or around the publish checks, too: they
 * are sent without those headers rather than refused.  A message's
 * traceparent goes out as child_traceparent makes it, kept in the job
 * (job, NULL for the handler's headers) with the message's span id, for
 * the attempt's span (spans.c).
 */
static void
append_json_headers(HeaderLines *list, Jsonb *headers, Jsonb *handler,
					WebhookJob *job)
{
	bool		from_message = (job != NULL);
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
			continue;
		}
		if (tok != WJB_VALUE || v.type != jbvString || name == NULL ||
			edge_header_name_reserved(name, nlen))
			continue;
		if (from_message &&
			(edge_header_value_blank(v.val.string.val, v.val.string.len) ||
			 edge_header_name_message_reserved(name, nlen) ||
			 handler_sets(handler, name, nlen) ||
			 names_count(headers, name, nlen) > 1))
			continue;
		if (from_message && nlen == 11 && pg_strncasecmp(name, "traceparent", 11) == 0)
		{
			char		child[TRACECTX_CHILD_LEN + 1];
			size_t		clen = child_traceparent(v.val.string.val, v.val.string.len, child);

			if (clen > 0)
			{
				append_header(list, name, nlen, child, (int) clen);
				memcpy(job->trace_sent, child, clen + 1);
				memcpy(job->trace_parent_id, v.val.string.val + 36, 16);
				job->trace_parent_id[16] = '\0';
				continue;
			}
		}
		append_header(list, name, nlen, v.val.string.val, v.val.string.len);
	}
}

/*
 * append_signature: the webhook-signature header for the handler's secret
 * and previous secret (grelout_signature_value: "v1,..." for a whsec_
 * secret, "v1a,..." for a whsk_ signing key, both during a rotation), or
 * none without a secret.
 */
static void
append_signature(HeaderLines *list, const char *id, int64 ts,
				 const char *body, size_t body_len,
				 const char *secret, const char *previous)
{
	char		value[2 * GRELOUT_SIGNATURE_MAX_LEN];
	int			len;

	len = grelout_signature_value(secret, previous, id, ts, body, body_len, value);
	if (len < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not compute webhook signature")));
	if (len > 0)
		append_header(list, "webhook-signature", 17, value, len);
}

/*
 * request_timeout_ms: the handler's timeout or the default, below the
 * lease.  The interval goes through the one overflow-checked conversion
 * (edge_interval_usecs, as grelout_interval_usecs does, but without an
 * ERROR: a row written around the checks must not fail every claim); one
 * that does not fit counts as longer than any lease.
 */
static long
request_timeout_ms(HeapTuple tup, TupleDesc desc)
{
	int64		cap = (int64) grelout_lease_duration * 3 / 4;
	int64		timeout_ms = grelout_request_timeout;
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, CLAIM_TIMEOUT, &isnull);

	if (!isnull)
	{
		Interval   *iv = DatumGetIntervalP(d);
		int64_t		usecs;

		if (edge_interval_usecs(iv->month, iv->day, iv->time, &usecs))
			timeout_ms = usecs / 1000;
		else
			timeout_ms = cap;
	}
	/* a request always ends well before its lease does */
	timeout_ms = Min(timeout_ms, cap);
	return (long) Max(timeout_ms, 1);
}

/* add_headers: every header of the request, in the contract's order. */
static void
add_headers(WebhookJob *job, HeapTuple tup, TupleDesc desc)
{
	HeaderLines lines = {0};
	HeaderLines *h = &lines;
	char	   *key = grelout_text_column(tup, desc, CLAIM_KEY);
	char	   *secret = grelout_text_column(tup, desc, CLAIM_SECRET);
	char	   *previous = grelout_text_column(tup, desc, CLAIM_PREVIOUS_SECRET);
	int64		now_s = (int64) time(NULL);
	char		buf[64];
	bool		isnull;
	Datum		d;
	Jsonb	   *handler;

	initStringInfo(&lines.buf);
	append_header(h, "Content-Type", 12, "application/json", 16);
	append_header(h, "User-Agent", 10, GRELOUT_USER_AGENT,
				  strlen(GRELOUT_USER_AGENT));
	/* no "Expect: 100-continue" round trip for large bodies */
	append_raw(h, "Expect:");
	append_header(h, "webhook-id", 10, job->id_str, strlen(job->id_str));
	snprintf(buf, sizeof(buf), INT64_FORMAT, now_s);
	append_header(h, "webhook-timestamp", 17, buf, strlen(buf));
	append_signature(h, job->id_str, now_s, job->req.body, job->req.body_len,
					 secret, previous);
	if (secret)
		explicit_bzero(secret, strlen(secret));
	if (previous)
		explicit_bzero(previous, strlen(previous));
	append_header(h, "grelout-topic", 13, job->topic, strlen(job->topic));
	if (job->handler)
		append_header(h, "grelout-handler", 15, job->handler, strlen(job->handler));
	snprintf(buf, sizeof(buf), "%d", job->attempts);
	append_header(h, "grelout-attempt", 15, buf, strlen(buf));
	if (key)
		append_header(h, "grelout-key", 11, key, strlen(key));

	d = SPI_getbinval(tup, desc, CLAIM_HANDLER_HEADERS, &isnull);
	handler = isnull ? NULL : DatumGetJsonbP(d);
	if (handler)
		append_json_headers(h, handler, NULL, NULL);
	d = SPI_getbinval(tup, desc, CLAIM_HEADERS, &isnull);
	if (!isnull)
		append_json_headers(h, DatumGetJsonbP(d), handler, job);
	job->req.headers = header_list(h);
}

/* fill_job: everything of a job but its memory context. */
static void
fill_job(WebhookJob *job, HeapTuple tup, TupleDesc desc)
{
	bool		isnull;
	Datum		d;

	d = SPI_getbinval(tup, desc, CLAIM_ID, &isnull);
	memcpy(&job->id, DatumGetUUIDP(d), sizeof(pg_uuid_t));
	strlcpy(job->id_str, DatumGetCString(DirectFunctionCall1(uuid_out, d)),
			sizeof(job->id_str));
	job->topic = grelout_text_column(tup, desc, CLAIM_TOPIC);
	job->handler = grelout_text_column(tup, desc, CLAIM_HANDLER);
	d = SPI_getbinval(tup, desc, CLAIM_FANOUT, &isnull);
	job->fanout = !isnull && DatumGetBool(d);
	job->attempts = DatumGetInt32(SPI_getbinval(tup, desc, CLAIM_ATTEMPTS, &isnull));
	job->max_attempts = DatumGetInt32(SPI_getbinval(tup, desc, CLAIM_MAX_ATTEMPTS, &isnull));
	job->req.url = grelout_text_column(tup, desc, CLAIM_URL);
	job->req.body = grelout_text_column(tup, desc, CLAIM_PAYLOAD);
	job->req.body_len = strlen(job->req.body);
	job->req.timeout_ms = request_timeout_ms(tup, desc);
	job->budget_ms = job->req.timeout_ms;
	add_headers(job, tup, desc);
}

/*
 * webhook_build: the request of one claimed row, in a memory context of
 * its own under parent, ready to start once the claim commits.  On error
 * nothing of it is left behind.
 */
WebhookJob *
webhook_build(MemoryContext parent, HeapTuple tup, TupleDesc desc, int64 lease)
{
	MemoryContext cxt = AllocSetContextCreate(parent, "grelout job",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	WebhookJob *volatile job = palloc0(sizeof(WebhookJob));

	job->cxt = cxt;
	job->lease = lease;
	PG_TRY();
	{
		fill_job(job, tup, desc);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(old);
		webhook_free(job);
		PG_RE_THROW();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(old);
	return job;
}

/*
 * webhook_free: release a job's memory, its header list included (its
 * OAuth2 token wiped first).
 */
void
webhook_free(WebhookJob *job)
{
	if (job->bearer)
		explicit_bzero(job->bearer->data, strlen(job->bearer->data));
	MemoryContextDelete(job->cxt);
}
