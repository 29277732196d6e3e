/*-------------------------------------------------------------------------
 *
 * webhook.h
 *	  Building the webhook request of one claimed message: URL, body,
 *	  timeout, every header (grelout's, the signature, the handler's and
 *	  the message's).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_WEBHOOK_H
#define GRELOUT_WEBHOOK_H

#include "grelout.h"

#include "access/htup.h"
#include "access/tupdesc.h"
#include "http.h"
#include "lib/ilist.h"
#include "spi_helpers.h"
#include "tracectx.h"

#define GRELOUT_USER_AGENT		"grelout/" GRELOUT_VERSION

/* One claimed message on its way to its endpoint. */
typedef struct WebhookJob
{
	HttpRequest req;			/* first: the engine hands this back */
	MemoryContext cxt;			/* owns the job and its strings */
	pg_uuid_t	id;
	char		id_str[UUID_LEN * 2 + 5];
	int64		lease;
	int			attempts;
	int			max_attempts;
	char	   *topic;
	char	   *handler;		/* the handler's name; NULL on a 1.0 schema */
	bool		fanout;			/* a grelout.fanout delivery (1.1) */
	int64		started_us;		/* monotonic start of the request */
	long		budget_ms;		/* its whole timeout, waits and re-sends included */
	struct LocalHandler *local; /* the relay's record of its handler (1.1) */
	bool		counted;		/* counted in its handler's shared in_flight */
	bool		unsent;			/* ended before its request left (no token,
								 * no time left, libcurl refused it) */
	bool		probe;			/* its handler's breaker probe */
	struct curl_slist *bearer;	/* its OAuth2 Authorization line, or NULL */
	bool		token_retried;	/* sent again with a new token after a 401 */
	/* the traceparent the attempt sends (child_traceparent), or "" */
	char		trace_sent[TRACECTX_CHILD_LEN + 1];
	char		trace_parent_id[17];	/* the message's span id, or "" */
	struct WebhookJob *next;	/* in the list of jobs to start */
	dlist_node	in_flight;		/* in the relay's list of started jobs */
} WebhookJob;

extern WebhookJob *webhook_build(MemoryContext parent, HeapTuple tup,
								 TupleDesc desc, int64 lease);
extern void webhook_free(WebhookJob *job);

/*
 * webhook_text_column: a text column of a claimed row (CLAIM_*), copied, or
 * NULL: grelout_text_column, under the name the relay reads its claimed
 * rows with.
 */
static inline char *
webhook_text_column(HeapTuple tup, TupleDesc desc, int col)
{
	return grelout_text_column(tup, desc, col);
}

#endif							/* GRELOUT_WEBHOOK_H */
