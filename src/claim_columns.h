/*-------------------------------------------------------------------------
 *
 * claim_columns.h
 *	  The columns of a claimed delivery, defined once: their numbers
 *	  (CLAIM_*, which the relay and webhook.c read them by) and their
 *	  names in that order (CLAIM_COLUMNS, the select list with which every
 *	  statement that claims returns its rows: the claims of claim.c and
 *	  the routing of routing.c).  A statement names its columns AS these
 *	  names, in any order, and ends with SELECT CLAIM_COLUMNS.
 *
 * Plain C (no PostgreSQL header): test/unit/test_claim_columns.c checks
 * that the names stand at the positions the numbers say.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_CLAIM_COLUMNS_H
#define GRELOUT_CLAIM_COLUMNS_H

enum
{
	CLAIM_ID = 1,				/* id: the message's id, uuid */
	CLAIM_TOPIC,				/* topic */
	CLAIM_KEY,					/* key */
	CLAIM_PAYLOAD,				/* payload, as text (NULL: not needed) */
	CLAIM_HEADERS,				/* headers: the message's, jsonb */
	CLAIM_ATTEMPTS,				/* attempts, this one counted */
	CLAIM_EXHAUSTED,			/* exhausted: dead-lettered by the claim */
	CLAIM_MAX_ATTEMPTS,			/* max_attempts */
	CLAIM_URL,					/* url: the handler's */
	CLAIM_HANDLER_HEADERS,		/* handler_headers */
	CLAIM_SECRET,				/* secret */
	CLAIM_PREVIOUS_SECRET,		/* previous_secret */
	CLAIM_TIMEOUT,				/* timeout: the handler's, an interval */
	CLAIM_LAST_ERROR,			/* last_error */
	CLAIM_HANDLER,				/* handler: its name; NULL on a 1.0 schema */
	CLAIM_FANOUT				/* fanout: a grelout.fanout row, not an inline one */
};

#define CLAIM_COLUMNS \
	"id, topic, key, payload, headers, attempts, exhausted, max_attempts," \
	" url, handler_headers, secret, previous_secret, timeout, last_error," \
	" handler, fanout"

#endif							/* GRELOUT_CLAIM_COLUMNS_H */
