/*-------------------------------------------------------------------------
 *
 * constants.h
 *	  The numbers and names that grelout's C and its SQL both depend on,
 *	  each defined once.  Plain C (no PostgreSQL header), so that the edge
 *	  files and their unit tests include it too.
 *
 * The SQL scripts of 1.2 and later never type these: a script that needs
 * one calls a C function that uses it (grelout._lock_routing() takes the
 * routing lock).  The scripts of 1.0 and 1.1, which describe released
 * schemas and are never edited, still carry their own literals:
 * grelout--1.0--1.1.sql and grelout--1.1.sql write the routing lock as
 * pg_advisory_xact_lock(1735552116, 1) in the 1.1 handler triggers, which
 * grelout--1.1--1.2.sql replaces.  Changing a value here is an
 * incompatible change for a database still on the 1.1 schema.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_CONSTANTS_H
#define GRELOUT_CONSTANTS_H

/*
 * Advisory locks: every grelout advisory lock is a transaction-level lock
 * on the two-int4 key (GRELOUT_LOCK_KEY1, its second key), so it shares no
 * key with a lock an application takes on one bigint.
 */
#define GRELOUT_LOCK_KEY1	1735552116	/* "grlt" */

/*
 * The routing lock: taken in exclusive mode by the handler triggers
 * (grelout._lock_routing()), in shared mode, tried, by routing.  So a relay
 * never routes with a view of the handlers that a change in progress is
 * about to make stale, and a trigger sees what a routing before it wrote.
 */
#define ROUTING_LOCK_KEY1	GRELOUT_LOCK_KEY1
#define ROUTING_LOCK_KEY2	1

/*
 * The router lock: routing takes it in exclusive mode, tried and never
 * waited for, so one relay routes at a time and the routing order
 * (grelout.route_seq) follows visibility (per-key ordering).
 */
#define ROUTER_LOCK_KEY2	2

/*
 * The redrive lock: a claim takes it in shared mode, tried, and claims
 * deliveries of ordered handlers only when it got it; outbox_redrive takes
 * it in exclusive mode.  So no claim decides with a view of the heads of
 * keys that a redrive in progress is changing.
 */
#define REDRIVE_LOCK_KEY2	3

/*
 * Reserved topics: those whose first segment is this word, in any letter
 * case (the bare word included), are grelout's own, where it publishes its
 * operational events (grelout.handler.disabled); no publisher or capture
 * may use them (edge_topic_reserved).
 */
#define GRELOUT_RESERVED_TOPIC_SEGMENT	"grelout"

/*
 * The prefix of the topics of the events grelout publishes itself
 * (grelout.handler.disabled, ...), as routing recognizes them.
 */
#define GRELOUT_EVENT_TOPIC_PREFIX	GRELOUT_RESERVED_TOPIC_SEGMENT "."

#endif							/* GRELOUT_CONSTANTS_H */
