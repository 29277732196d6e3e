/*-------------------------------------------------------------------------
 *
 * tracectx.c
 *	  libFuzzer target: tracectx_from_sql(), the sqlcommenter reader of
 *	  any statement text, and tracectx_traceparent_valid(),
 *	  tracectx_tracestate_valid() and tracectx_child() on any bytes.
 *
 * Invariants: no read past the input (it is copied to a buffer of exactly
 * its size); a context found has a valid traceparent and an empty or valid
 * tracestate; a child of a valid traceparent is a valid version 00
 * traceparent with its trace id and flags.
 *
 * fuzz/run links this target with the pure files (src/pure/tracectx.c
 * among them), as it does every target.
 *
 *-------------------------------------------------------------------------
 */
#include "tracectx.h"
#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *text = dup_exact(data, size);
	TraceContext ctx;
	char		child[TRACECTX_CHILD_LEN + 1];
	const uint8_t span[8] = {1, 2, 3, 4, 5, 6, 7, 8};

	if (tracectx_from_sql(text, size, &ctx))
	{
		CHECK(tracectx_traceparent_valid(ctx.traceparent, strlen(ctx.traceparent)));
		CHECK(ctx.tracestate[0] == '\0' ||
			  tracectx_tracestate_valid(ctx.tracestate, strlen(ctx.tracestate)));
	}
	(void) tracectx_tracestate_valid(text, size);
	if (tracectx_traceparent_valid(text, size))
	{
		CHECK(tracectx_child(text, size, span, child) == TRACECTX_CHILD_LEN);
		CHECK(tracectx_traceparent_valid(child, TRACECTX_CHILD_LEN));
		CHECK(memcmp(child + 3, text + 3, 32) == 0);
		CHECK(memcmp(child + 53, text + 53, 2) == 0);
	}
	else
		CHECK(tracectx_child(text, size, span, child) == 0);
	free(text);
	return 0;
}
