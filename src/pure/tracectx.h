/*-------------------------------------------------------------------------
 *
 * tracectx.h
 *	  W3C Trace Context at the edge, in plain C: checking a traceparent
 *	  and a tracestate, finding them in a sqlcommenter comment of a SQL
 *	  statement, and the traceparent of a child span (a delivery attempt).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_TRACECTX_H
#define GRELOUT_TRACECTX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The longest traceparent kept: version 00 is 55 characters; a later
 * version may append fields, which are kept up to this length.
 */
#define TRACECTX_TRACEPARENT_MAX	256
/* The longest tracestate kept (W3C: at most 512 characters). */
#define TRACECTX_TRACESTATE_MAX		512
/* Length of a version 00 traceparent, as tracectx_child writes one. */
#define TRACECTX_CHILD_LEN			55

/* A trace context, as captured: both NUL-terminated; tracestate "" if none. */
typedef struct TraceContext
{
	char		traceparent[TRACECTX_TRACEPARENT_MAX + 1];
	char		tracestate[TRACECTX_TRACESTATE_MAX + 1];
} TraceContext;

extern bool tracectx_traceparent_valid(const char *s, size_t len);
extern bool tracectx_tracestate_valid(const char *s, size_t len);
extern bool tracectx_set(TraceContext *ctx, const char *tp, size_t tplen,
						 const char *ts, size_t tslen);
extern bool tracectx_from_sql(const char *sql, size_t len, TraceContext *ctx);
extern size_t tracectx_child(const char *traceparent, size_t len,
							 const uint8_t span_id[8], char *out);

#endif							/* GRELOUT_TRACECTX_H */
