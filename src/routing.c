/*-------------------------------------------------------------------------
 *
 * routing.c
 *	  Routing of new messages (1.1): a batch of them read and locked, each
 *	  matched against the handlers here in C, then routed and, where slots
 *	  allow, claimed in one write each.
 *
 * Routing is the first thing a relay does with a committed message.  Every
 * handler whose pattern matches the topic and whose filter the payload
 * contains (enabled or not) gets a delivery: none leaves the message
 * waiting for a handler, one makes it an inline delivery in its outbox row
 * (route 'single', as 1.0 kept every message), several make one
 * grelout.fanout row each (route 'fanout').
 *
 * A round of routing is three statements: the handlers (a few rows), the
 * oldest new messages (FOR UPDATE SKIP LOCKED, through outbox_route_idx),
 * and one statement that writes the routes, inserts the fan-out rows and
 * returns the claimed deliveries with their handlers' columns.  What lies
 * between, the matching, the claim limits, the cut and the routing
 * numbers, is decided here, in C, rather than in SQL with window functions
 * over the join of messages and handlers (bench/README.md, "Figures behind
 * the code", says what that cost).
 *
 * Every function here runs inside a transaction that the relay opened,
 * with SPI connected and a snapshot pushed.
 *
 *-------------------------------------------------------------------------
 */
#include "store.h"

#include "topic_pattern.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

PG_FUNCTION_INFO_V1(grelout_lock_routing_1_2);

/*
 * grelout_lock_routing_1_2: grelout._lock_routing() RETURNS void: the
 * routing lock (constants.h) in exclusive mode, until the transaction
 * ends.  The handler triggers of the 1.2 schema take it first; routing
 * takes it in shared mode, trying, never waiting (store_route).
 */
Datum
grelout_lock_routing_1_2(PG_FUNCTION_ARGS)
{
	(void) DirectFunctionCall2(pg_advisory_xact_lock_int4,
							   Int32GetDatum(ROUTING_LOCK_KEY1),
							   Int32GetDatum(ROUTING_LOCK_KEY2));
	PG_RETURN_VOID();
}

/* The handlers, in name order (the order fan-out deliveries are claimed). */
static const char *handlers_sql =
"SELECT h.name, h.topic, h.filter, h.enabled, h.ordered"
" FROM grelout.handlers h ORDER BY h.name";

/*
 * The oldest new messages from id $3 on, locked, skipping those another
 * relay routes, with their row addresses; "due" says a claim could take
 * the message now.  The payload is read only when some handler has a
 * filter ($2), the handler an operational event is about always (an event,
 * a topic of GRELOUT_EVENT_TOPIC_PREFIX, never goes to the handler it is
 * about).
 */
static const char *new_sql =
"SELECT o.id, o.topic, o.key IS NOT NULL AS keyed,"
" o.state = 'pending' AND o.available_at <= now() AS due,"
" CASE WHEN $2 THEN o.payload END AS payload,"
" CASE WHEN starts_with(o.topic, '" GRELOUT_EVENT_TOPIC_PREFIX "')"
"  THEN o.payload ->> 'handler' END"
"  AS event_handler, o.ctid"
" FROM grelout.outbox o WHERE o.route = 'new' AND o.id >= $3"
" ORDER BY o.id LIMIT $1"
" FOR UPDATE OF o SKIP LOCKED";

/*
 * The writes of a round: each routed message's route, handler (for one
 * match), routing number and, claimed, its claim ($1-$6, one element a
 * message, found by its row address: the rows are locked); the fan-out
 * rows ($9-$11, one a delivery), claimed or pending and due with their
 * message; then the claimed deliveries, inline and fan-out, in the columns
 * of the claim (store.h), with their handlers' ($13 names them, $12 is
 * grelout.max_attempts).  A round without fan-out rows runs the same
 * statement without their parts (route_inline_sql): a statement's start
 * prepares every table and index it may write, and most rounds of a
 * trickle of single-handler messages have none.
 */
#define ROUTE_UPDATE_SQL \
"WITH u AS (" \
" UPDATE grelout.outbox o SET" \
"  route = CASE WHEN s.matches = 0 THEN 'waiting'" \
"   WHEN s.matches = 1 THEN 'single' ELSE 'fanout' END," \
"  handler = s.handler," \
"  seq = s.seq," \
"  state = CASE WHEN s.claimed THEN 'processing' ELSE o.state END," \
"  attempts = o.attempts + CASE WHEN s.claimed THEN 1 ELSE 0 END," \
"  available_at = CASE WHEN s.claimed" \
"   THEN now() + $7 * interval '1 millisecond' ELSE o.available_at END," \
"  lease = CASE WHEN s.claimed THEN $8 ELSE o.lease END" \
" FROM unnest($1::tid[], $2::text[], $3::int4[], $4::int8[], $5::bool[]," \
"  $6::bool[]) AS s(ctid, handler, matches, seq, claimed, want)" \
" WHERE o.ctid = s.ctid" \
" RETURNING o.id, o.topic, o.key," \
"  CASE WHEN s.want THEN o.payload::text END AS payload, o.headers," \
"  o.attempts, o.last_error, o.handler, s.claimed, o.available_at," \
"  o.created_at, o.seq),"

#define ROUTE_FANOUT_SQL \
" fs AS (" \
" SELECT * FROM unnest($9::uuid[], $10::text[], $11::bool[])" \
"  AS fs(id, handler, claimed))," \
" f AS (" \
" INSERT INTO grelout.fanout (message_id, handler, state, attempts," \
"  available_at, lease, created_at, key, seq)" \
" SELECT fs.id, fs.handler," \
"  CASE WHEN fs.claimed THEN 'processing' ELSE 'pending' END," \
"  CASE WHEN fs.claimed THEN 1 ELSE 0 END," \
"  CASE WHEN fs.claimed" \
"   THEN now() + $7 * interval '1 millisecond' ELSE u.available_at END," \
"  CASE WHEN fs.claimed THEN $8 END, u.created_at, u.key, u.seq" \
" FROM fs JOIN u ON u.id = fs.id),"

#define ROUTE_CLAIMED_INLINE_SQL \
" h AS MATERIALIZED (" \
" SELECT hh.name, hh.url, hh.headers, hh.secret, hh.previous_secret," \
"  hh.timeout, hh.max_attempts" \
" FROM grelout.handlers hh WHERE hh.name = ANY ($13::text[]))," \
" ci AS (" \
" SELECT u.id, u.topic, u.key, u.payload, u.headers, u.attempts," \
"  false AS exhausted, coalesce(h.max_attempts, $12) AS max_attempts, h.url," \
"  h.headers AS handler_headers, h.secret, h.previous_secret, h.timeout," \
"  u.last_error, h.name AS handler, false AS fanout" \
" FROM u JOIN h ON h.name = u.handler" \
" WHERE u.claimed)"

static const char *route_sql =
ROUTE_UPDATE_SQL
ROUTE_FANOUT_SQL
ROUTE_CLAIMED_INLINE_SQL ","
" cf AS ("
" SELECT u.id, u.topic, u.key, u.payload, u.headers, 1 AS attempts,"
"  false AS exhausted, coalesce(h.max_attempts, $12) AS max_attempts, h.url,"
"  h.headers AS handler_headers, h.secret, h.previous_secret, h.timeout,"
"  NULL::text AS last_error, h.name AS handler, true AS fanout"
" FROM fs JOIN u ON u.id = fs.id JOIN h ON h.name = fs.handler"
" WHERE fs.claimed)"
" SELECT " CLAIM_COLUMNS " FROM ci"
" UNION ALL"
" SELECT " CLAIM_COLUMNS " FROM cf";

/* route_sql for a round without fan-out rows ($9-$11 unused). */
static const char *route_inline_sql =
ROUTE_UPDATE_SQL
ROUTE_CLAIMED_INLINE_SQL
" SELECT " CLAIM_COLUMNS " FROM ci";

/*
 * Through a backlog, routing starts after the last message it routed
 * rather than from the oldest new one: outbox_route_idx keeps the entry of
 * every message routed since the last vacuum, and a scan from the oldest
 * walks them all (autovacuum may not come by for the whole of a backlog's
 * drain; bench/README.md, "Figures behind the code").  A message committed late
 * with an earlier id is found by the scan from the oldest, which runs when
 * routing has caught up (a batch short of its limit), at least every
 * ROUTE_OLDEST_EVERY_MS, and always while some handler is ordered (so the
 * routing numbers follow visibility, store_route).
 */
#define ROUTE_OLDEST_EVERY_MS	100

static pg_uuid_t route_from;
static bool route_from_set = false;
static TimestampTz route_oldest_at = 0;

/*
 * The statements of routing, planned once, generic (their LIMIT and arrays
 * change at every call), and kept.
 */
static SPIPlanPtr handlers_plan = NULL;
static SPIPlanPtr new_plan = NULL;
static SPIPlanPtr route_plan = NULL;
static SPIPlanPtr route_inline_plan = NULL;

/* A handler as routing sees it. */
typedef struct RouteHandler
{
	char	   *name;
	text	   *topic;			/* its pattern */
	Datum		filter;			/* jsonb; 0 when it has none */
	bool		enabled;
	bool		ordered;
	int			lim;			/* deliveries routing may claim of it */
	int			eligible;		/* claimable deliveries seen so far */
	bool		claimed;		/* routing claims some of its deliveries */
} RouteHandler;

/* The columns of a round's writes, as arrays are built from them. */
typedef struct RouteWrites
{
	int			n;				/* routed messages */
	Datum	   *ctids;			/* where they are (locked: they stay there) */
	Datum	   *handlers;
	bool	   *handler_nulls;
	Datum	   *matches;
	Datum	   *seqs;
	bool	   *seq_nulls;
	Datum	   *claimed;
	Datum	   *want;
	int			nfan;			/* fan-out rows */
	int			maxfan;
	Datum	   *fan_ids;
	Datum	   *fan_handlers;
	Datum	   *fan_claimed;
} RouteWrites;

/*
 * load_handlers: every handler, in name order, with what the claim may
 * take of each (lims: names listed take their entry, the others the
 * default).  *nhandlers is how many; *any_filter says some has a filter,
 * *any_ordered that some is ordered.  The array and its strings live in
 * the caller's (SPI) memory.
 */
static RouteHandler *
load_handlers(const ClaimLimits *lims, int *nhandlers, bool *any_filter,
			  bool *any_ordered)
{
	int			ret;
	RouteHandler *hs;
	Datum	   *names;
	Datum	   *limits;
	int			nnames;
	int			nlimits;
	char	  **listed;

	grelout_keep_plan(&handlers_plan, handlers_sql, 0, NULL,
					  CURSOR_OPT_GENERIC_PLAN);
	ret = SPI_execute_plan(handlers_plan, NULL, NULL, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not read the handlers: %s", SPI_result_code_string(ret));

	deconstruct_array(DatumGetArrayTypeP(lims->names), TEXTOID, -1, false,
					  TYPALIGN_INT, &names, NULL, &nnames);
	deconstruct_array(DatumGetArrayTypeP(lims->lims), INT4OID, sizeof(int32),
					  true, TYPALIGN_INT, &limits, NULL, &nlimits);

	nnames = Min(nnames, nlimits);
	listed = palloc(sizeof(char *) * Max(nnames, 1));
	for (int j = 0; j < nnames; j++)
		listed[j] = TextDatumGetCString(names[j]);

	*nhandlers = (int) SPI_processed;
	*any_filter = *any_ordered = false;
	hs = palloc0(sizeof(RouteHandler) * Max(*nhandlers, 1));
	for (int i = 0; i < *nhandlers; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		RouteHandler *h = &hs[i];
		bool		isnull;
		Datum		filter;

		h->name = grelout_text_column(tup, desc, 1);
		h->topic = DatumGetTextPP(SPI_getbinval(tup, desc, 2, &isnull));
		filter = SPI_getbinval(tup, desc, 3, &isnull);
		h->filter = isnull ? (Datum) 0 : filter;
		h->enabled = DatumGetBool(SPI_getbinval(tup, desc, 4, &isnull));
		h->ordered = DatumGetBool(SPI_getbinval(tup, desc, 5, &isnull));
		*any_filter |= (h->filter != (Datum) 0);
		*any_ordered |= h->ordered;
		h->lim = lims->default_lim;
		for (int j = 0; j < nnames; j++)
		{
			if (strcmp(listed[j], h->name) == 0)
			{
				h->lim = DatumGetInt32(limits[j]);
				break;
			}
		}
	}
	return hs;
}

/*
 * handler_matches: whether handler h gets a delivery of a message with
 * this topic and payload (NULL when not read), which is an operational
 * event about event_handler (NULL when it is not one).
 */
static bool
handler_matches(const RouteHandler *h, const char *topic, size_t topic_len,
				Datum payload, const char *event_handler)
{
	if (!edge_topic_match(VARDATA_ANY(h->topic), VARSIZE_ANY_EXHDR(h->topic),
						  topic, topic_len))
		return false;
	if (h->filter != (Datum) 0 &&
		!DatumGetBool(DirectFunctionCall2(jsonb_contains, payload, h->filter)))
		return false;
	return event_handler == NULL || strcmp(event_handler, h->name) != 0;
}

/* writes_init: room for n messages and their fan-out rows. */
static void
writes_init(RouteWrites *w, int n)
{
	n = Max(n, 1);
	w->n = 0;
	w->ctids = palloc(sizeof(Datum) * n);
	w->handlers = palloc(sizeof(Datum) * n);
	w->handler_nulls = palloc(sizeof(bool) * n);
	w->matches = palloc(sizeof(Datum) * n);
	w->seqs = palloc(sizeof(Datum) * n);
	w->seq_nulls = palloc(sizeof(bool) * n);
	w->claimed = palloc(sizeof(Datum) * n);
	w->want = palloc(sizeof(Datum) * n);
	w->nfan = 0;
	w->maxfan = n;
	w->fan_ids = palloc(sizeof(Datum) * n);
	w->fan_handlers = palloc(sizeof(Datum) * n);
	w->fan_claimed = palloc(sizeof(Datum) * n);
}

/* add_fanout: one fan-out row of message id for handler h. */
static void
add_fanout(RouteWrites *w, Datum id, RouteHandler *h, bool claimed)
{
	if (w->nfan == w->maxfan)
	{
		w->maxfan *= 2;
		w->fan_ids = repalloc(w->fan_ids, sizeof(Datum) * w->maxfan);
		w->fan_handlers = repalloc(w->fan_handlers, sizeof(Datum) * w->maxfan);
		w->fan_claimed = repalloc(w->fan_claimed, sizeof(Datum) * w->maxfan);
	}
	w->fan_ids[w->nfan] = id;
	w->fan_handlers[w->nfan] = CStringGetTextDatum(h->name);
	w->fan_claimed[w->nfan] = BoolGetDatum(claimed);
	w->nfan++;
	h->claimed |= claimed;
}

/*
 * decide_routes: decide the routes of the new messages in tt (id order)
 * into w, as store_route describes; returns how many of them are routed
 * (the rest, cut, stay new).
 */
static int
decide_routes(SPITupleTable *tt, uint64 nnew, RouteHandler *hs, int nhandlers,
			int claim_limit, int claim_max, RouteWrites *w)
{
	TupleDesc	desc = tt->tupdesc;
	int		   *match = palloc(sizeof(int) * Max(nhandlers, 1));
	bool	   *claimable = palloc(sizeof(bool) * Max(nhandlers, 1));
	int			upto = 0;
	Oid			seq = InvalidOid;

	for (uint64 i = 0; i < nnew; i++)
	{
		HeapTuple	tup = tt->vals[i];
		bool		isnull;
		Datum		id = SPI_getbinval(tup, desc, 1, &isnull);
		text	   *topic = DatumGetTextPP(SPI_getbinval(tup, desc, 2, &isnull));
		bool		keyed = DatumGetBool(SPI_getbinval(tup, desc, 3, &isnull));
		bool		due = DatumGetBool(SPI_getbinval(tup, desc, 4, &isnull));
		Datum		payload = SPI_getbinval(tup, desc, 5, &isnull);
		Datum		event = SPI_getbinval(tup, desc, 6, &isnull);
		char	   *event_handler = isnull ? NULL : TextDatumGetCString(event);
		int			nmatch = 0;
		int			nclaimable = 0;
		int			before = upto;
		int			k;

		/* its deliveries; the first lim eligible ones of a handler claimable */
		for (int j = 0; j < nhandlers; j++)
		{
			RouteHandler *h = &hs[j];

			if (!handler_matches(h, VARDATA_ANY(topic), VARSIZE_ANY_EXHDR(topic),
								 payload, event_handler))
				continue;
			claimable[nmatch] = false;
			if (h->enabled && due && !(h->ordered && keyed) && claim_limit > 0)
				claimable[nmatch] = (++h->eligible <= h->lim);
			nclaimable += claimable[nmatch] ? 1 : 0;
			match[nmatch++] = j;
		}

		/*
		 * The cut: in id order, the first message whose claimable deliveries
		 * no longer fit in claim_limit stays new, with every one after it;
		 * the first of all is routed whatever it needs when claim_limit is
		 * as many as a claim can ever take.
		 */
		upto += nclaimable;
		if (upto > claim_limit && !(i == 0 && claim_limit >= claim_max))
			break;

		k = w->n++;
		w->ctids[k] = SPI_getbinval(tup, desc, 7, &isnull);
		w->matches[k] = Int32GetDatum(nmatch);
		w->handler_nulls[k] = (nmatch != 1);
		w->handlers[k] = (nmatch == 1) ? CStringGetTextDatum(hs[match[0]].name) : (Datum) 0;
		w->claimed[k] = BoolGetDatum(nmatch == 1 && nclaimable == 1);
		if (nmatch == 1)
			hs[match[0]].claimed |= (nclaimable == 1);
		w->want[k] = BoolGetDatum(nmatch >= 1 && nclaimable > 0 &&
								  (nmatch == 1 || before < claim_limit));
		w->seq_nulls[k] = !keyed;
		w->seqs[k] = (Datum) 0;
		if (keyed)
		{
			if (!OidIsValid(seq))
				seq = store_relid("route_seq");
			w->seqs[k] = Int64GetDatum(nextval_internal(seq, true));
		}

		/* several: a fan-out row each, the claimable claimed while they fit */
		if (nmatch > 1)
		{
			int			taken = 0;

			for (int m = 0; m < nmatch; m++)
				if (claimable[m])
				{
					taken++;
					add_fanout(w, id, &hs[match[m]], before + taken <= claim_limit);
				}
			for (int m = 0; m < nmatch; m++)
				if (!claimable[m])
					add_fanout(w, id, &hs[match[m]], false);
		}
	}
	return w->n;
}

/*
 * read_new_messages: up to limit messages not yet routed, in id order (the
 * new_sql statement), with the payloads when some handler has a filter.
 * Unless a handler is ordered (whose routing must see every message), the
 * scan starts where the last full batch stopped, and from the oldest
 * unrouted message every ROUTE_OLDEST_EVERY_MS.  Returns the rows (in
 * SPI_tuptable) and sets *nnew.
 */
static SPITupleTable *
read_new_messages(int limit, bool any_filter, bool any_ordered, uint64 *nnew)
{
	Oid			types[3] = {INT4OID, BOOLOID, UUIDOID};
	Datum		values[3];
	pg_uuid_t	oldest;
	TimestampTz now = GetCurrentTimestamp();
	bool		from_last;
	int			ret;

	from_last = route_from_set && !any_ordered && now < route_oldest_at;
	if (!from_last)
	{
		memset(&oldest, 0, sizeof(oldest));
		route_oldest_at = TimestampTzPlusMilliseconds(now, ROUTE_OLDEST_EVERY_MS);
	}
	grelout_keep_plan(&new_plan, new_sql, 3, types,
					  CURSOR_OPT_GENERIC_PLAN);
	values[0] = Int32GetDatum(limit);
	values[1] = BoolGetDatum(any_filter);
	values[2] = UUIDPGetDatum(from_last ? &route_from : &oldest);
	ret = SPI_execute_plan(new_plan, values, NULL, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not read new messages: %s", SPI_result_code_string(ret));
	*nnew = SPI_processed;
	route_from_set = false;
	return SPI_tuptable;
}

/*
 * write_routes: run the route_sql statement over what decide_routes
 * chose: each message's handler (or none), its fan-out rows, the
 * deliveries claimed at once under this lease, and the claimed handlers'
 * counts.  Returns the claimed rows (in SPI_tuptable) and sets *nrows.
 */
static SPITupleTable *
write_routes(const RouteWrites *w, const RouteHandler *hs, int nhandlers,
			 int lease_ms, int64 lease_token, uint64 *nrows)
{
	Oid			types[13] = {TIDARRAYOID, TEXTARRAYOID, INT4ARRAYOID, INT8ARRAYOID,
		BOOLARRAYOID, BOOLARRAYOID, FLOAT8OID, INT8OID,
	UUIDARRAYOID, TEXTARRAYOID, BOOLARRAYOID, INT4OID, TEXTARRAYOID};
	Datum		values[13];
	List	   *claimed_handlers = NIL;
	SPIPlanPtr	plan;
	int			ret;

	for (int j = 0; j < nhandlers; j++)
		if (hs[j].claimed)
			claimed_handlers = lappend(claimed_handlers, hs[j].name);

	if (w->nfan > 0)
		plan = grelout_keep_plan(&route_plan, route_sql, 13, types,
								 CURSOR_OPT_GENERIC_PLAN);
	else
		plan = grelout_keep_plan(&route_inline_plan, route_inline_sql, 13,
								 types, CURSOR_OPT_GENERIC_PLAN);
	values[0] = store_array(w->ctids, NULL, w->n, TIDOID);
	values[1] = store_array(w->handlers, w->handler_nulls, w->n, TEXTOID);
	values[2] = store_array(w->matches, NULL, w->n, INT4OID);
	values[3] = store_array(w->seqs, w->seq_nulls, w->n, INT8OID);
	values[4] = store_array(w->claimed, NULL, w->n, BOOLOID);
	values[5] = store_array(w->want, NULL, w->n, BOOLOID);
	values[6] = Float8GetDatum((double) lease_ms);
	values[7] = Int64GetDatum(lease_token);
	values[8] = store_array(w->fan_ids, NULL, w->nfan, UUIDOID);
	values[9] = store_array(w->fan_handlers, NULL, w->nfan, TEXTOID);
	values[10] = store_array(w->fan_claimed, NULL, w->nfan, BOOLOID);
	values[11] = Int32GetDatum(grelout_max_attempts);
	values[12] = store_text_array(claimed_handlers);
	ret = SPI_execute_plan(plan, values, NULL, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "routing failed: %s", SPI_result_code_string(ret));
	*nrows = SPI_processed;
	return SPI_tuptable;
}

/*
 * store_route: route up to limit new messages (1.1), the oldest first, and
 * claim up to claim_limit of their deliveries as they are routed, under a
 * lease of lease_ms with fencing token lease_token; claim_max is as many
 * as a claim can ever take.  Returns the claimed deliveries in the columns
 * of the claim (store.h: inline ones with CLAIM_FANOUT false, fan-out rows
 * with it true); *nrows is how many, *nrouted how many messages were
 * routed, *cut whether new messages were left for want of claim slots and
 * *blocked whether a handler change in progress held routing back.
 *
 * The deliveries of a pending message due now to enabled handlers are
 * claimed as they are routed, so that a delivery costs one write, as in
 * 1.0: an inline one is claimed in the update that routes it, a fan-out
 * row is inserted claimed ('processing', attempt 1, under the lease).
 * Routing stops, in id order, at the first message whose claimable
 * deliveries no longer fit in claim_limit, so that no fan-out row is left
 * pending for a later claim to find among the dead index entries of the
 * rows claimed before it.  Only when claim_limit is claim_max is the first
 * message routed whatever it needs, its deliveries beyond claim_limit
 * inserted pending: one that matches more handlers than that would
 * otherwise never be routed.  The handlers the claim limits (fair share,
 * breaker, caps: lims, as for the claim) get no more than their limit
 * claimed here, the oldest first; the rest are routed pending, for a later
 * claim.  A fan-out message's claimable deliveries are claimed in handler
 * name order.  A delivery of an ordered handler with a key is never
 * claimed here: the claim that follows in the same transaction takes it
 * if it is the head of its key.
 *
 * Per-key ordering (issue 12): every routed message with a key takes the
 * next number of grelout.route_seq ("seq", copied to its fan-out rows), in
 * id order; a message left by the cut takes a greater one when it is
 * routed.
 *
 * Routing runs under the routing lock in shared mode, tried and never
 * waited for: a handler's insert, update or delete holds it in exclusive
 * mode until it commits (its triggers take it), so the relay never routes
 * with a view of the handlers that a change in progress is about to make
 * stale (a message routed to wait, say, just as a handler that matches it
 * is created), and the change sees what routing before it wrote.  The
 * lock is the transaction's: it goes with the cycle's commit.
 *
 * Then, while some handler is ordered, the router lock, exclusive, also
 * tried: one relay routes at a time, from the lock to its cycle's commit
 * (without an ordered handler the relays route side by side: serializing
 * them made two relays drain no faster than one).  A handler made ordered
 * orders the messages routed from then on.  The next routing's snapshot
 * is taken after that commit, so it sees every message the previous one
 * routed and gives the messages it routes greater routing numbers: the
 * numbers follow the order in which commits became visible (README,
 * "Per-key ordering").  A relay that finds another routing comes back
 * soon, as after a handler change (*blocked).
 */
SPITupleTable *
store_route(StoreSchema schema, int limit, int claim_limit, int claim_max,
			int lease_ms, int64 lease_token, const ClaimLimits *lims,
			uint64 *nrows, uint64 *nrouted, bool *cut, bool *blocked)
{
	RouteHandler *hs;
	int			nhandlers;
	bool		any_filter;
	bool		any_ordered;
	uint64		nnew;
	SPITupleTable *new_tt;
	RouteWrites w;

	*nrows = *nrouted = 0;
	*cut = *blocked = false;
	if (schema < STORE_SCHEMA_1_1)
		return NULL;
	if (!DatumGetBool(DirectFunctionCall2(pg_try_advisory_xact_lock_shared_int4,
										  Int32GetDatum(ROUTING_LOCK_KEY1),
										  Int32GetDatum(ROUTING_LOCK_KEY2))))
	{
		*blocked = true;
		return NULL;
	}
	hs = load_handlers(lims, &nhandlers, &any_filter, &any_ordered);
	if (any_ordered &&
		!DatumGetBool(DirectFunctionCall2(pg_try_advisory_xact_lock_int4,
										  Int32GetDatum(ROUTING_LOCK_KEY1),
										  Int32GetDatum(ROUTER_LOCK_KEY2))))
	{
		*blocked = true;
		return NULL;
	}

	new_tt = read_new_messages(limit, any_filter, any_ordered, &nnew);
	if (nnew == 0)
		return NULL;

	writes_init(&w, (int) nnew);
	*nrouted = decide_routes(new_tt, nnew, hs, nhandlers, claim_limit,
						   claim_max, &w);
	*cut = (*nrouted < nnew);
	if (*nrouted == 0)
		return NULL;
	if (nnew >= (uint64) limit)
	{
		bool		isnull;

		route_from = *DatumGetUUIDP(SPI_getbinval(new_tt->vals[*nrouted - 1],
												   new_tt->tupdesc, 1, &isnull));
		route_from_set = true;
	}

	return write_routes(&w, hs, nhandlers, lease_ms, lease_token, nrows);
}
